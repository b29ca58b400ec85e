// Custom environments run in workers, so that one which loops forever, even synchronously, can be
// stopped: a call that overruns the time limit terminates its worker and fails with an EnvError.
// This part is the same in Node and the browser; load-node.ts and load-browser.ts provide the
// workers (worker_threads, module Web Workers), and workers/env-host-core.js is the other side.
//
// One worker per Env instance: instances are stepped side by side (a GRPO group, parallel
// rollouts), and one instance's timeout must not take the others down with it. Workers are reused
// through a small pool: when an Env is closed its worker goes back to the pool, already holding the
// loaded module, and the next make() takes it. After a timeout or a crash the instance's worker is
// gone; its next reset() starts on a fresh worker, so the run goes on with the next episode.
import { wrap, type Endpoint } from 'comlink';
import type { EnvCallMethod, EnvHostApi, FieldSummary, HostReply, ModuleRequest, ModuleSummary, WireError } from './env-host-protocol.ts';
import {
  ENFORCES_TIME_LIMITS,
  EnvError,
  EnvHostFailure,
  describeThrown,
  guardEnvModule,
  resolveStepTimeout,
  validateEnvMethods,
  validateEnvModule,
  type EnvErrorKind,
} from './guard.ts';
import type { Env, EnvModule, ResetResult, StepResult } from './types.ts';

/** A started worker, however the platform makes one. */
export interface WorkerHandle {
  endpoint: Endpoint;
  terminate(): void;
  /** Registers the callback for a worker that dies on its own (an uncaught error, out of memory). */
  onDeath(listener: (reason: string) => void): void;
  /** Node: keep the process alive while a call is in flight (an idle worker does not). */
  hold?(): void;
  release?(): void;
  /** Where replies measure the worker's memory (Node): the most it may hold after a call, and the option that sets it. */
  memoryLimit?: { bytes: number; option: string };
}

export type SpawnWorker = () => WorkerHandle;

export interface WorkerEnvOptions {
  /** Limit for each make, reset, step, validActions and close call, in ms (0 or Infinity: none). Default 5000. */
  stepTimeoutMs?: number;
  /** Limit for importing the module in a new worker, in ms. Default max(10000, stepTimeoutMs). */
  loadTimeoutMs?: number;
  /** Idle workers (module loaded, no instance) kept for later make() calls. Default 8. */
  maxIdleWorkers?: number;
}

/** A custom environment module whose instances live in workers. */
export interface WorkerEnvModule extends EnvModule {
  /** Where it came from: the file path or the label of the source text. */
  readonly source: string;
  /** Terminates every worker of this module; instances still open fail with an EnvError. */
  dispose(): Promise<void>;
}

/** What went wrong while loading, for the EnvError: the platform may explain a syntax error better. */
export interface LoadProblem {
  problem: string;
  fix: string;
}

export type ExplainLoadError = (error: WireError) => Promise<LoadProblem | null>;

const DEFAULT_MAX_IDLE_WORKERS = 8;

/** An Error as the environment threw it inside the worker: its name, message and stack. */
export function rebuildError(wire: WireError): Error {
  const error = new Error(wire.message);
  error.name = wire.name;
  // No stack is better than this function's: the frames must point into the environment's code.
  error.stack = wire.stack ?? `${wire.name}: ${wire.message}`;
  if (wire.nonError) Object.assign(error, { nonError: true });
  if (wire.code !== undefined) Object.assign(error, { code: wire.code });
  return error;
}

function unwrapReply<T>(reply: HostReply<T>): T {
  if (reply.ok) return reply.value;
  switch (reply.kind) {
    case 'threw':
      throw rebuildError(reply.error);
    case 'uncloneable':
      throw new EnvHostFailure('uncloneable', `${reply.error.name}: ${reply.error.message}`);
    default:
      throw new EnvHostFailure('stopped', reply.error.message);
  }
}

/** One worker and the calls in flight to it; killing it rejects them at once. */
class HostWorker {
  /** Every method of EnvHostApi already returns a promise, so comlink's Remote<EnvHostApi> is EnvHostApi. */
  readonly api: EnvHostApi;
  private death: EnvHostFailure | null = null;
  private readonly pending = new Set<(failure: EnvHostFailure) => void>();

  constructor(private readonly handle: WorkerHandle) {
    this.api = wrap<EnvHostApi>(handle.endpoint) as unknown as EnvHostApi;
    handle.onDeath((reason) => this.kill(new EnvHostFailure('crashed', reason)));
  }

  get alive(): boolean {
    return this.death === null;
  }

  kill(failure: EnvHostFailure): void {
    if (this.death) return;
    this.death = failure;
    this.handle.terminate();
    for (const reject of this.pending) reject(failure);
    this.pending.clear();
  }

  /**
   * Runs one call, failing with EnvHostFailure('timeout') (and terminating the worker) after
   * `timeoutMs`, or with EnvHostFailure('crashed') (terminating it too) when its reply says the
   * worker holds more memory than its limit.
   */
  run<T extends HostReply<unknown>>(call: (api: EnvHostApi) => Promise<T>, timeoutMs: number): Promise<T> {
    if (this.death) return Promise.reject(new EnvHostFailure('stopped', `its worker was stopped earlier: ${this.death.message}`));
    return new Promise<T>((resolve, reject) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const finish = () => {
        if (timer !== undefined) clearTimeout(timer);
        if (this.pending.delete(reject)) this.handle.release?.();
      };
      this.pending.add(reject);
      this.handle.hold?.();
      if (timeoutMs !== Infinity) {
        timer = setTimeout(() => this.kill(new EnvHostFailure('timeout', `did not finish within ${timeoutMs} ms`, timeoutMs)), timeoutMs);
      }
      call(this.api).then(
        (value) => {
          finish();
          const overLimit = this.overMemoryLimit(value);
          if (!overLimit) return resolve(value);
          this.kill(overLimit);
          reject(overLimit);
        },
        (error: unknown) => { finish(); reject(error); },
      );
    });
  }

  private overMemoryLimit(reply: HostReply<unknown>): EnvHostFailure | null {
    const limit = this.handle.memoryLimit;
    if (!limit || reply.memoryBytes === undefined || reply.memoryBytes <= limit.bytes) return null;
    const mib = (bytes: number) => (bytes / (1 << 20)).toFixed(1).replace(/\.0$/, '');
    return new EnvHostFailure('crashed', `it held ${mib(reply.memoryBytes)} MiB after the call, over its memory limit of ${mib(limit.bytes)} MiB (${limit.option}), which counts its heap, ArrayBuffers and WebAssembly memory`);
  }
}

/** Workers with the module loaded and no instance, ready for make(). */
class WorkerPool {
  private readonly idle: HostWorker[] = [];
  private readonly all = new Set<HostWorker>();
  disposed = false;

  constructor(
    private readonly spawn: SpawnWorker,
    private readonly request: ModuleRequest,
    private readonly loadTimeoutMs: number,
    private readonly maxIdle: number,
    private readonly moduleId: () => string | null,
  ) {}

  /** A new worker, the module loaded in it: the summary, or the failed reply (the worker then killed). */
  async start(): Promise<{ worker: HostWorker; reply: HostReply<ModuleSummary> }> {
    if (this.disposed) throw new EnvHostFailure('stopped', 'the environment module was disposed');
    const worker = new HostWorker(this.spawn());
    this.all.add(worker);
    try {
      const reply = await worker.run((api) => api.load(this.request), this.loadTimeoutMs);
      if (!reply.ok) this.discard(worker);
      return { worker, reply };
    } catch (error) {
      this.discard(worker);
      throw error;
    }
  }

  async acquire(): Promise<HostWorker> {
    while (this.idle.length > 0) {
      const worker = this.idle.pop()!;
      if (worker.alive) return worker;
      this.all.delete(worker);
    }
    let started: Awaited<ReturnType<WorkerPool['start']>>;
    try {
      started = await this.start();
    } catch (error) {
      if (error instanceof EnvHostFailure && error.reason === 'timeout') throw new EnvHostFailure('load', `the module did not finish loading within ${error.timeoutMs} ms`);
      if (error instanceof EnvHostFailure && error.reason === 'crashed') throw new EnvHostFailure('load', `the worker stopped while loading the module (${error.message})`);
      throw error;
    }
    const { worker, reply } = started;
    if (!reply.ok) throw new EnvHostFailure('load', `the module no longer loads: ${describeThrown(rebuildError(reply.error))}`);
    const id = reply.value.fields.id.value;
    if (id !== this.moduleId()) {
      this.discard(worker);
      throw new EnvHostFailure('load', `the module changed since it was loaded: its id is now ${JSON.stringify(id)}`);
    }
    return worker;
  }

  /** Gives back a worker whose instance is disposed: kept while the pool has room, else terminated. */
  release(worker: HostWorker): void {
    if (!this.disposed && worker.alive && this.idle.length < this.maxIdle) this.idle.push(worker);
    else this.discard(worker);
  }

  discard(worker: HostWorker): void {
    worker.kill(new EnvHostFailure('stopped', 'its worker was shut down'));
    this.all.delete(worker);
  }

  dispose(): void {
    this.disposed = true;
    for (const worker of this.all) worker.kill(new EnvHostFailure('stopped', 'the environment module was disposed'));
    this.all.clear();
    this.idle.length = 0;
  }
}

/** An Env whose calls run in a worker; the guard (guard.ts) validates what comes back. */
class WorkerEnv implements Env {
  validActions?: () => Promise<string[]>;
  expertAction?: () => Promise<string>;

  constructor(
    private readonly pool: WorkerPool,
    private worker: HostWorker | null,
    private readonly makeOptions: Record<string, unknown> | undefined,
    private readonly methods: Record<string, string>,
    private readonly timeoutMs: number,
    private readonly make: (worker: HostWorker, options: Record<string, unknown> | undefined) => Promise<Record<string, string>>,
  ) {
    if (methods.validActions === 'function') this.validActions = () => this.invoke('validActions') as Promise<string[]>;
    if (methods.expertAction === 'function') this.expertAction = () => this.invoke('expertAction') as Promise<string>;
  }

  async reset(args: { seed: number; options?: Record<string, unknown> }): Promise<ResetResult> {
    if (this.worker && !this.worker.alive) this.worker = null;
    if (!this.worker) {
      // The previous worker was stopped (a timeout, a crash) or the Env was closed: start afresh.
      const worker = await this.pool.acquire();
      try {
        await this.make(worker, this.makeOptions);
      } catch (error) {
        if (worker.alive) this.pool.release(worker);
        throw error;
      }
      this.worker = worker;
    }
    return this.invoke('reset', args) as Promise<ResetResult>;
  }

  step(action: string): Promise<StepResult> {
    return this.invoke('step', action) as Promise<StepResult>;
  }

  private async invoke(method: EnvCallMethod, argument?: unknown): Promise<unknown> {
    const worker = this.worker;
    if (!worker) throw new EnvHostFailure('stopped', 'the instance has no worker: it was closed, or its worker was stopped');
    return unwrapReply(await worker.run((api) => api.call(method, argument), this.timeoutMs));
  }

  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = null;
    if (!worker?.alive) return;
    try {
      if (this.methods.close === 'function') unwrapReply(await worker.run((api) => api.call('close'), this.timeoutMs));
    } finally {
      if (worker.alive) {
        await worker.run((api) => api.dispose(), this.timeoutMs).then(
          () => this.pool.release(worker),
          () => this.pool.discard(worker),
        );
      }
    }
  }
}

/** A value of the summarised type, for validateEnvModule's messages. */
function standIn(field: FieldSummary): unknown {
  if ('value' in field) return field.value;
  switch (field.type) {
    case 'function': return () => {};
    case 'array': return [];
    case 'null': return null;
    case 'bigint': return 0n;
    case 'symbol': return Symbol('value');
    case 'undefined': return undefined;
    default: return {};
  }
}

function loadError(label: string, problem: string, fix: string, kind: EnvErrorKind = 'load', cause?: unknown): EnvError {
  return new EnvError({ env: label, method: 'load', kind, problem, fix, cause });
}

/** The usual explanation of an import that failed; the platform's `explain` may do better. */
function defaultLoadProblem(error: WireError): LoadProblem {
  if (error.name === 'SyntaxError' || error.name === 'TransformError') {
    return { problem: `has a syntax error: ${error.message}`, fix: 'correct the syntax; the module must be plain JavaScript (an ES module)' };
  }
  if (error.code === 'ERR_MODULE_NOT_FOUND' || /Failed to fetch dynamically imported module|Cannot find (module|package)/i.test(error.message)) {
    return { problem: `could not load one of its imports: ${error.message}`, fix: 'an environment module runs in a worker: import only packages installed next to it, or inline what it needs' };
  }
  return { problem: `threw while loading: ${describeThrown(rebuildError(error))}`, fix: 'fix the error in the top-level code of the module' };
}

/**
 * Loads an environment module into a worker and returns it as a guarded EnvModule (guard.ts):
 * every call is validated, and a call that overruns `stepTimeoutMs` terminates the instance's worker
 * and fails with an EnvError. Load failures (an import error, a syntax error, no default export,
 * a wrong shape) reject with an EnvError naming `request.label`.
 */
export async function loadWorkerEnvModule(spawn: SpawnWorker, request: ModuleRequest, options: WorkerEnvOptions = {}, explain?: ExplainLoadError): Promise<WorkerEnvModule> {
  const label = request.label;
  const timeoutMs = resolveStepTimeout(options.stepTimeoutMs);
  const loadTimeoutMs = options.loadTimeoutMs ?? Math.max(10_000, Number.isFinite(timeoutMs) ? timeoutMs : 0);
  const maxIdle = options.maxIdleWorkers ?? DEFAULT_MAX_IDLE_WORKERS;
  let moduleId: string | null = null;
  const pool = new WorkerPool(spawn, request, loadTimeoutMs, maxIdle, () => moduleId);

  let started: Awaited<ReturnType<WorkerPool['start']>>;
  try {
    started = await pool.start();
  } catch (error) {
    pool.dispose();
    if (error instanceof EnvHostFailure && error.reason === 'timeout') {
      throw loadError(label, `did not finish loading within ${loadTimeoutMs} ms; its worker was stopped`, 'look for an infinite loop or a long computation at the top level of the module (outside make, reset and step)', 'timeout', error);
    }
    if (error instanceof EnvHostFailure) {
      throw loadError(label, `could not be loaded: its worker stopped (${error.message})`, 'look for an uncaught error or runaway memory use at the top level of the module', 'crashed', error);
    }
    throw loadError(label, `could not be loaded: the environment worker did not start (${describeThrown(error)})`, 'check that workers/env-host-core.js is present and this platform can start workers', 'load', error);
  }
  const { worker, reply } = started;
  if (!reply.ok) {
    pool.dispose();
    const explained = (await explain?.(reply.error)) ?? defaultLoadProblem(reply.error);
    throw loadError(label, explained.problem, explained.fix, 'load', rebuildError(reply.error));
  }

  const summary = reply.value;
  try {
    if (!summary.hasDefault) {
      const exported = summary.exportNames.length > 0 ? ` (it exports ${summary.exportNames.map((name) => `\`${name}\``).join(', ')})` : '';
      const hint = summary.moduleLikeExports.length > 0
        ? `make it the default export: \`export default ${summary.moduleLikeExports[0]};\``
        : 'end the module with `export default { id, description, maxEpisodeSteps, make }` (see docs/environments.md)';
      throw loadError(label, `has no default export${exported}`, hint, 'shape');
    }
    const exported = summary.defaultType === 'object' && !summary.defaultIsArray
      ? Object.fromEntries(Object.entries(summary.fields).map(([name, field]) => [name, standIn(field)]))
      : standIn({ type: summary.defaultIsArray ? 'array' : summary.defaultType });
    validateEnvModule(exported, label);
  } catch (error) {
    pool.dispose();
    throw error;
  }
  moduleId = summary.fields.id.value as string;
  pool.release(worker);

  const id = JSON.stringify(moduleId);
  const make = async (worker: HostWorker, makeOptions: Record<string, unknown> | undefined): Promise<Record<string, string>> => {
    const made = unwrapReply(await worker.run((api) => api.make(makeOptions), timeoutMs));
    validateEnvMethods(`${id} (${label})`, made.methods, made.made);
    return made.methods!;
  };

  const raw = {
    id: moduleId,
    description: summary.fields.description.value as string,
    maxEpisodeSteps: summary.fields.maxEpisodeSteps.value as number,
    [ENFORCES_TIME_LIMITS]: true,
    async make(makeOptions?: Record<string, unknown>): Promise<Env> {
      if (pool.disposed) {
        throw new EnvError({ env: `${id} (${label})`, method: 'make', kind: 'stopped', problem: 'make() was called after the module was disposed', fix: 'load the environment again to make new instances' });
      }
      const worker = await pool.acquire();
      let methods: Record<string, string>;
      try {
        methods = await make(worker, makeOptions);
      } catch (error) {
        if (worker.alive) pool.release(worker);
        throw error;
      }
      return new WorkerEnv(pool, worker, makeOptions, methods, timeoutMs, make);
    },
  };
  const guarded = guardEnvModule(raw, { stepTimeoutMs: options.stepTimeoutMs, label });
  return Object.assign(guarded, {
    source: label,
    async dispose() {
      pool.dispose();
    },
  });
}
