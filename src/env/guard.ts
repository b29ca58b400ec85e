// Validation of everything an environment gives back, built-in or custom: the module's shape, and
// every reset, step and validActions result. A failure is an EnvError whose message names the
// environment, the method, the step when known, what was wrong and how to fix it, so a run can end
// the episode, log one clear line and go on. guardEnvModule wraps any EnvModule so that every call
// is checked and an async call that does not settle within the time limit fails instead of hanging.
//
// A time limit cannot stop synchronous code running on the same thread: an environment that may
// loop forever must run in a worker (worker-env.ts), which is terminated when a call overruns.
import type { BuiltinEnvModule, Env, EnvModule, ResetResult, StepResult } from './types.ts';

/** Default per-call limit (reset, step, validActions, make, close), in milliseconds. */
export const DEFAULT_STEP_TIMEOUT_MS = 5000;

export const ENV_ID_PATTERN = /^[a-z][a-z0-9-]*$/;

/** Where an error happened: loading the module, or one of its calls. */
export type EnvMethod = 'load' | 'make' | 'reset' | 'step' | 'validActions' | 'close' | 'expertAction';

/**
 * - `load`: the module could not be loaded (missing file, syntax error, import failure).
 * - `shape`: the module or the env object does not have the contract's fields and methods.
 * - `threw`: the environment's own code threw.
 * - `malformed`: a call returned something outside the contract (a NaN reward, a missing field).
 * - `timeout`: a call did not finish within the time limit.
 * - `crashed`: the environment's worker died (an uncaught error, out of memory).
 * - `stopped`: a call on an instance stopped by an earlier timeout or crash, before reset().
 */
export type EnvErrorKind = 'load' | 'shape' | 'threw' | 'malformed' | 'timeout' | 'crashed' | 'stopped';

export interface EnvErrorInit {
  /** The environment's id, or the file (or label) it comes from when the id is not known. */
  env: string;
  method: EnvMethod;
  kind: EnvErrorKind;
  /** What went wrong, e.g. `step() returned reward NaN at step 3; rewards must be finite numbers`. */
  problem: string;
  /** What to do about it. */
  fix: string;
  /** 1-based number of the step (step() calls since reset) the error belongs to, when known. */
  step?: number;
  cause?: unknown;
}

/** An environment broke the contract or failed; the message says which, where, and the fix. */
export class EnvError extends Error {
  override readonly name = 'EnvError';
  readonly env: string;
  readonly method: EnvMethod;
  readonly kind: EnvErrorKind;
  readonly step: number | undefined;
  readonly problem: string;
  readonly fix: string;

  constructor(init: EnvErrorInit) {
    super(`environment ${init.env}: ${init.problem}. Fix: ${init.fix}`, init.cause === undefined ? undefined : { cause: init.cause });
    this.env = init.env;
    this.method = init.method;
    this.kind = init.kind;
    this.step = init.step;
    this.problem = init.problem;
    this.fix = init.fix;
  }
}

/**
 * How a worker-backed environment reports failures of the worker itself (not of the environment's
 * code): guardEnvModule turns them into EnvErrors with the method and step.
 */
export class EnvHostFailure extends Error {
  override readonly name = 'EnvHostFailure';
  constructor(
    readonly reason: 'timeout' | 'crashed' | 'stopped' | 'uncloneable' | 'load',
    message: string,
    /** For a timeout: the limit that was exceeded. */
    readonly timeoutMs?: number,
  ) {
    super(message);
  }
}

/**
 * Set on an EnvModule that enforces time limits itself (by terminating its worker); guardEnvModule
 * then adds no timers of its own and only translates the EnvHostFailures it gets.
 */
export const ENFORCES_TIME_LIMITS: unique symbol = Symbol.for('rlplay.env.enforcesTimeLimits');

export interface GuardOptions {
  /** Per-call limit in milliseconds; 0 or Infinity for none. Default DEFAULT_STEP_TIMEOUT_MS. */
  stepTimeoutMs?: number;
  /** How to name the environment in errors before its id is known (a file path). Default: the id. */
  label?: string;
}

/** The limit to use: the option, checked, or the default; Infinity for none. */
export function resolveStepTimeout(stepTimeoutMs: number | undefined): number {
  if (stepTimeoutMs === undefined) return DEFAULT_STEP_TIMEOUT_MS;
  if (stepTimeoutMs === 0 || stepTimeoutMs === Infinity) return Infinity;
  if (!(typeof stepTimeoutMs === 'number' && Number.isFinite(stepTimeoutMs) && stepTimeoutMs > 0)) {
    throw new RangeError(`stepTimeoutMs is ${String(stepTimeoutMs)}; it must be a positive number of milliseconds (0 or Infinity for no limit)`);
  }
  return stepTimeoutMs;
}

// ---------------------------------------------------------------------------------------------
// Describing values in messages

/** A short, safe rendering of any value for an error message: `NaN`, `"1"` (a string), an array... */
export function describeValue(value: unknown): string {
  if (value === undefined) return 'undefined';
  if (value === null) return 'null';
  switch (typeof value) {
    case 'number':
      return String(value);
    case 'string': {
      const text = value.length > 40 ? `${value.slice(0, 40)}…` : value;
      return `${JSON.stringify(text)} (a string)`;
    }
    case 'boolean':
      return String(value);
    case 'bigint':
      return `${value}n (a bigint)`;
    case 'function':
      return 'a function';
    case 'symbol':
      return 'a symbol';
    default:
      if (Array.isArray(value)) return `an array of ${value.length}`;
      if (value instanceof Promise) return 'a promise';
      return 'an object';
  }
}

/** `Error: message (at file:3:7)` from anything thrown. */
export function describeThrown(error: unknown): string {
  if (!(error instanceof Error)) {
    if (typeof error === 'string') return `${JSON.stringify(error)} (a string, not an Error)`;
    return `${describeValue(error)} (not an Error)`;
  }
  // A non-Error thrown inside a worker arrives as an Error flagged nonError, its message describing the value.
  if ((error as { nonError?: boolean }).nonError) return error.message;
  const head = `${error.name || 'Error'}: ${error.message}`;
  const frame = firstStackFrame(error.stack);
  return frame ? `${head} (at ${frame})` : head;
}

function firstStackFrame(stack: string | undefined): string | null {
  if (!stack) return null;
  for (const line of stack.split('\n')) {
    const match = /^\s+at (?:.*? \((.+)\)|(.+))$/.exec(line);
    if (!match) continue;
    const where = match[1] ?? match[2];
    if (where.startsWith('node:') || where.includes('/guard.ts') || where.includes('/env-host-core.js')) continue;
    return where;
  }
  return null;
}

// ---------------------------------------------------------------------------------------------
// Module shape

interface Problem {
  /** e.g. `reward NaN`, `no terminated`. */
  what: string;
  /** e.g. `rewards must be finite numbers`. */
  rule: string;
  fix: string;
}

const MODULE_EXAMPLE = 'export default { id, description, maxEpisodeSteps, make } (see docs/environments.md)';

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function got(field: string, value: unknown): string {
  return value === undefined ? `no ${field}` : `${field} ${describeValue(value)}`;
}

function moduleProblems(module: Record<string, unknown>): Problem[] {
  const problems: Problem[] = [];
  if (!(typeof module.id === 'string' && ENV_ID_PATTERN.test(module.id))) {
    problems.push({ what: got('id', module.id), rule: 'the id must be a string matching [a-z][a-z0-9-]*', fix: "give it an id like 'my-env' (lower-case letters, digits and dashes, starting with a letter)" });
  }
  if (typeof module.description !== 'string') {
    problems.push({ what: got('description', module.description), rule: 'the description must be a string', fix: 'add a one-sentence description' });
  }
  if (!(typeof module.maxEpisodeSteps === 'number' && Number.isInteger(module.maxEpisodeSteps) && module.maxEpisodeSteps > 0)) {
    problems.push({ what: got('maxEpisodeSteps', module.maxEpisodeSteps), rule: 'maxEpisodeSteps must be a positive integer', fix: 'set maxEpisodeSteps to the step limit of an episode, e.g. 10' });
  }
  if (typeof module.make !== 'function') {
    problems.push({ what: module.make === undefined ? 'no make()' : `make ${describeValue(module.make)}`, rule: 'make must be a function that returns an Env', fix: 'add make(options) { return { reset, step, validActions, close }; }' });
  }
  return problems;
}

function joinProblems(problems: Problem[]): { problem: string; fix: string } {
  if (problems.length === 1) return { problem: `${problems[0].what}; ${problems[0].rule}`, fix: problems[0].fix };
  return {
    problem: problems.map((p) => `${p.what} (${p.rule})`).join('; '),
    fix: problems.map((p) => p.fix).join('; '),
  };
}

/**
 * Checks an environment module (the default export): id, description, maxEpisodeSteps, make.
 * `label` names it in errors when its id is not usable (the file it came from).
 */
export function validateEnvModule(module: unknown, label?: string): asserts module is EnvModule {
  if (!isPlainObject(module)) {
    throw new EnvError({
      env: label ?? 'module', method: 'load', kind: 'shape',
      problem: `the default export is ${describeValue(module)}, not an environment module`,
      fix: MODULE_EXAMPLE,
    });
  }
  const problems = moduleProblems(module);
  if (problems.length === 0) return;
  const { problem, fix } = joinProblems(problems);
  const env = label ?? (typeof module.id === 'string' && ENV_ID_PATTERN.test(module.id) ? JSON.stringify(module.id) : 'module');
  throw new EnvError({ env, method: 'load', kind: 'shape', problem: `the default export is not a valid environment module: ${problem}`, fix: `${fix}; the module must be ${MODULE_EXAMPLE}` });
}

/**
 * Checks what make() gave: an object with reset and step functions, and validActions and close,
 * when present, functions too. `methods` maps each name to its `typeof` (so the check also works on
 * an Env that lives in a worker).
 */
export function validateEnvMethods(env: string, methods: Record<string, string> | null, made: string): void {
  if (methods === null) {
    throw new EnvError({ env, method: 'make', kind: 'shape', problem: `make() returned ${made}, not an Env object`, fix: 'return an object with reset({ seed, options }) and step(action) methods (and optionally validActions() and close())' });
  }
  const problems: string[] = [];
  for (const name of ['reset', 'step']) if (methods[name] !== 'function') problems.push(methods[name] === 'undefined' ? `it has no ${name}()` : `its ${name} is ${methods[name]}, not a function`);
  for (const name of ['validActions', 'close']) if (methods[name] !== 'undefined' && methods[name] !== 'function') problems.push(`its ${name} is ${methods[name]}, not a function`);
  if (problems.length > 0) {
    throw new EnvError({ env, method: 'make', kind: 'shape', problem: `make() returned an Env that breaks the contract: ${problems.join('; ')}`, fix: 'return an object with reset({ seed, options }) and step(action) methods (and optionally validActions() and close())' });
  }
}

/** typeof each contract method of an object, or null when it is not an object. */
export function envMethodTypes(value: unknown): Record<string, string> | null {
  if (typeof value !== 'object' || value === null) return null;
  const env = value as Record<string, unknown>;
  return Object.fromEntries(['reset', 'step', 'validActions', 'close', 'expertAction'].map((name) => [name, typeof env[name]]));
}

// ---------------------------------------------------------------------------------------------
// Results

export interface CallPlace {
  env: string;
  /** 1-based step number for step(); the next step for validActions(). */
  step?: number;
}

function at(method: EnvMethod, step: number | undefined): string {
  if (step === undefined) return '';
  return method === 'step' ? ` at step ${step}` : method === 'reset' ? '' : ` before step ${step}`;
}

function malformed(method: EnvMethod, place: CallPlace, problems: Problem[], shapeHint: string): never {
  const where = at(method, place.step);
  if (problems.length === 1) {
    const [p] = problems;
    throw new EnvError({ env: place.env, method, kind: 'malformed', step: place.step, problem: `${method}() returned ${p.what}${where}; ${p.rule}`, fix: p.fix });
  }
  const { problem, fix } = joinProblems(problems);
  throw new EnvError({ env: place.env, method, kind: 'malformed', step: place.step, problem: `${method}() returned a malformed result${where}: ${problem}`, fix: `${fix}; ${method}() must return ${shapeHint}` });
}

function notAnObject(method: EnvMethod, place: CallPlace, value: unknown, shapeHint: string): never {
  throw new EnvError({
    env: place.env, method, kind: 'malformed', step: place.step,
    problem: `${method}() returned ${describeValue(value)}${at(method, place.step)}, not an object`,
    fix: `return ${shapeHint}`,
  });
}

const OBSERVATION: (value: unknown) => Problem = (value) => ({ what: got('observation', value), rule: 'the observation must be a string', fix: 'return the observation as text (a string; String(x) or JSON.stringify(x) for other values)' });
const INFO: (value: unknown) => Problem = (value) => ({ what: got('info', value), rule: 'info must be an object', fix: 'return info: {} when there is nothing to report' });

function infoProblems(info: unknown): Problem[] {
  if (!isPlainObject(info)) return [INFO(info)];
  if (info.success !== undefined && typeof info.success !== 'boolean') {
    return [{ what: `info.success ${describeValue(info.success)}`, rule: 'info.success must be a boolean when set', fix: 'set info.success to true or false (task success) on the step that ends the episode' }];
  }
  return [];
}

const RESET_SHAPE = '{ observation: string, info: object }';
const STEP_SHAPE = '{ observation: string, reward: number, terminated: boolean, truncated: boolean, info: object }';

export function validateResetResult(value: unknown, place: CallPlace): ResetResult {
  if (!isPlainObject(value)) notAnObject('reset', place, value, RESET_SHAPE);
  const problems: Problem[] = [];
  if (typeof value.observation !== 'string') problems.push(OBSERVATION(value.observation));
  problems.push(...infoProblems(value.info));
  if (problems.length > 0) malformed('reset', place, problems, RESET_SHAPE);
  return value as unknown as ResetResult;
}

export function validateStepResult(value: unknown, place: CallPlace): StepResult {
  if (!isPlainObject(value)) notAnObject('step', place, value, STEP_SHAPE);
  const problems: Problem[] = [];
  if (typeof value.observation !== 'string') problems.push(OBSERVATION(value.observation));
  if (!(typeof value.reward === 'number' && Number.isFinite(value.reward))) {
    problems.push({ what: got('reward', value.reward), rule: 'rewards must be finite numbers', fix: 'return a finite number as reward (look for a division by zero, an undefined value or a string)' });
  }
  for (const flag of ['terminated', 'truncated'] as const) {
    if (typeof value[flag] !== 'boolean') {
      problems.push({ what: got(flag, value[flag]), rule: `${flag} must be a boolean`, fix: `return ${flag}: true or false (a boolean, not a truthy value)` });
    }
  }
  problems.push(...infoProblems(value.info));
  if (problems.length > 0) malformed('step', place, problems, STEP_SHAPE);
  return value as unknown as StepResult;
}

export function validateExpertAction(value: unknown, place: CallPlace): string {
  if (typeof value !== 'string') {
    throw new EnvError({ env: place.env, method: 'expertAction', kind: 'malformed', step: place.step, problem: `expertAction() returned ${describeValue(value)}${at('expertAction', place.step)}; it must return an action string`, fix: 'return the action the expert takes now, as a string' });
  }
  return value;
}

export function validateValidActions(value: unknown, place: CallPlace): string[] {
  const fix = 'return a non-empty array of action strings, the actions that make sense now';
  if (!Array.isArray(value)) {
    throw new EnvError({ env: place.env, method: 'validActions', kind: 'malformed', step: place.step, problem: `validActions() returned ${describeValue(value)}${at('validActions', place.step)}; it must return an array of strings`, fix });
  }
  if (value.length === 0) {
    throw new EnvError({ env: place.env, method: 'validActions', kind: 'malformed', step: place.step, problem: `validActions() returned an empty array${at('validActions', place.step)}; an action-level policy needs at least one action`, fix: `${fix} (while the episode runs there is always something to do)` });
  }
  const bad = value.findIndex((action) => typeof action !== 'string' || action.trim() === '');
  if (bad >= 0) {
    throw new EnvError({ env: place.env, method: 'validActions', kind: 'malformed', step: place.step, problem: `validActions() returned ${describeValue(value[bad])} at index ${bad}${at('validActions', place.step)}; every action must be a non-empty string`, fix });
  }
  return value as string[];
}

// ---------------------------------------------------------------------------------------------
// The wrapper

function isPromiseLike(value: unknown): value is PromiseLike<unknown> {
  return (typeof value === 'object' || typeof value === 'function') && value !== null && typeof (value as { then?: unknown }).then === 'function';
}

class TimedOut {
  constructor(readonly ms: number) {}
}

/** Resolves like `value`, or rejects with TimedOut after `ms` (the late outcome is ignored). */
function withTimeout<T>(value: T | PromiseLike<T>, ms: number): Promise<T> {
  if (!isPromiseLike(value)) return Promise.resolve(value);
  if (ms === Infinity) return Promise.resolve(value);
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new TimedOut(ms)), ms);
    value.then(
      (result) => { clearTimeout(timer); resolve(result); },
      (error: unknown) => { clearTimeout(timer); reject(error); },
    );
  });
}

const THREW_FIX: Record<EnvMethod, string> = {
  load: 'fix the error in the module',
  make: 'fix the error in make()',
  reset: 'fix the error in reset(); the same seed and options must always give the same episode',
  step: 'fix the error in step(); a malformed action must never throw: answer it with an explanatory observation and a small negative reward',
  validActions: 'fix the error in validActions()',
  close: 'fix the error in close()',
  expertAction: 'fix the error in expertAction()',
};

/** Turns whatever a call failed with into an EnvError for `method` at `step`. */
function toEnvError(error: unknown, method: EnvMethod, place: CallPlace, inWorker: boolean): EnvError {
  if (error instanceof EnvError) return error;
  const where = at(method, place.step);
  const base = { env: place.env, method, step: place.step, cause: error };
  if (error instanceof TimedOut || (error instanceof EnvHostFailure && error.reason === 'timeout')) {
    const ms = error instanceof TimedOut ? error.ms : error.timeoutMs;
    const stopped = inWorker ? '; its worker was stopped' : '; it still runs in the background (this environment runs in-process, where a call cannot be stopped)';
    return new EnvError({
      ...base, kind: 'timeout',
      problem: `${method}() did not finish within ${ms} ms${where}${stopped}`,
      fix: `look for an infinite loop or a wait that never ends in ${method}(), or raise the limit (stepTimeoutMs)${inWorker && method !== 'close' ? '; reset() starts the next episode on a fresh worker' : ''}`,
    });
  }
  if (error instanceof EnvHostFailure) {
    switch (error.reason) {
      case 'crashed':
        return new EnvError({ ...base, kind: 'crashed', problem: `${method}() failed${where}: the environment's worker stopped (${error.message})`, fix: 'look for an uncaught error in a callback or timer, or for runaway memory use; reset() starts the next episode on a fresh worker' });
      case 'stopped':
        return new EnvError({ ...base, kind: 'stopped', problem: `${method}() was called${where} on an instance stopped by an earlier failure (${error.message})`, fix: 'call reset() to start a new episode (it starts a fresh worker)' });
      case 'uncloneable':
        return new EnvError({ ...base, kind: 'malformed', problem: `${method}() returned a value that cannot leave the environment's worker${where} (${error.message})`, fix: 'return plain data only (strings, numbers, booleans, arrays, plain objects): no functions or class instances with methods, in info neither' });
      case 'load':
        return new EnvError({ ...base, kind: 'load', problem: `${method}() could not start a worker for the environment: ${error.message}`, fix: 'check that the environment file still exists and loads' });
    }
  }
  return new EnvError({ ...base, kind: 'threw', problem: `${method}() threw${where}: ${describeThrown(error)}`, fix: THREW_FIX[method] });
}

/** An Env whose every call is validated and time-limited. */
class GuardedEnv implements Env {
  private steps = 0;
  /** Set after a timeout or crash; cleared by reset(). */
  private stoppedBy: EnvError | null = null;
  validActions?: () => Promise<string[]>;
  expertAction?: () => Promise<string>;

  constructor(
    private readonly inner: Env,
    private readonly envId: string,
    private readonly timeoutMs: number,
    private readonly inWorker: boolean,
  ) {
    const methods = envMethodTypes(inner)!;
    if (methods.validActions === 'function') this.validActions = () => this.callValidActions();
    if (methods.expertAction === 'function') this.expertAction = () => this.callExpertAction();
  }

  private async call<T>(method: EnvMethod, step: number | undefined, invoke: () => unknown, validate: (value: unknown, place: CallPlace) => T): Promise<T> {
    const place: CallPlace = { env: this.envId, step };
    let value: unknown;
    try {
      // Worker-backed envs enforce the limit themselves (and stop the worker); in-process ones here.
      value = await withTimeout(invoke(), this.inWorker ? Infinity : this.timeoutMs);
    } catch (error) {
      const envError = toEnvError(error, method, place, this.inWorker);
      if (envError.kind === 'timeout' || envError.kind === 'crashed') this.stoppedBy = envError;
      throw envError;
    }
    return validate(value, place);
  }

  private checkRunning(method: EnvMethod, step: number): void {
    if (!this.stoppedBy) return;
    throw new EnvError({
      env: this.envId, method, kind: 'stopped', step,
      problem: `${method}() was called${at(method, step)} after ${this.stoppedBy.method}() ${this.stoppedBy.kind === 'timeout' ? 'timed out' : 'crashed'}, before reset()`,
      fix: 'call reset() to start a new episode',
    });
  }

  async reset(args: { seed: number; options?: Record<string, unknown> }): Promise<ResetResult> {
    this.steps = 0;
    this.stoppedBy = null;
    return this.call('reset', undefined, () => this.inner.reset(args), validateResetResult);
  }

  async step(action: string): Promise<StepResult> {
    const step = ++this.steps;
    this.checkRunning('step', step);
    return this.call('step', step, () => this.inner.step(action), validateStepResult);
  }

  private async callValidActions(): Promise<string[]> {
    const step = this.steps + 1;
    this.checkRunning('validActions', step);
    return this.call('validActions', step, () => this.inner.validActions!(), validateValidActions);
  }

  private async callExpertAction(): Promise<string> {
    const step = this.steps + 1;
    this.checkRunning('expertAction', step);
    return this.call('expertAction', step, () => this.inner.expertAction!(), validateExpertAction);
  }

  async close(): Promise<void> {
    if (!this.inner.close) return;
    await this.call('close', undefined, () => this.inner.close!(), () => undefined);
  }
}

/** A guarded built-in: make() stays synchronous, and the expert is always there. */
export interface GuardedBuiltinModule extends EnvModule {
  make(options?: Record<string, unknown>): Env & { expertAction(): Promise<string> };
}

/**
 * Wraps an environment module so that every call is validated and time-limited: the module's shape
 * is checked now (an EnvError if it is wrong), make() must give an Env, and every reset, step and
 * validActions result must follow the contract. Async calls that do not settle within
 * `stepTimeoutMs` fail with an EnvError; the instance then refuses step() until the next reset().
 * The returned module's make() is synchronous when the inner one is, and a built-in's Env keeps its
 * expert (guarded and time-limited like the other calls, so asynchronous).
 */
export function guardEnvModule(module: BuiltinEnvModule, options?: GuardOptions): GuardedBuiltinModule;
export function guardEnvModule<M extends EnvModule>(module: M, options?: GuardOptions): EnvModule;
export function guardEnvModule(module: EnvModule, options: GuardOptions = {}): EnvModule {
  validateEnvModule(module, options.label);
  const timeoutMs = resolveStepTimeout(options.stepTimeoutMs);
  const inWorker = (module as { [ENFORCES_TIME_LIMITS]?: boolean })[ENFORCES_TIME_LIMITS] === true;
  const id = options.label ? `${JSON.stringify(module.id)} (${options.label})` : JSON.stringify(module.id);

  const wrap = (made: unknown): Env => {
    validateEnvMethods(id, envMethodTypes(made), describeValue(made));
    return new GuardedEnv(made as Env, id, timeoutMs, inWorker);
  };
  const fail = (error: unknown): never => {
    throw toEnvError(error, 'make', { env: id }, inWorker);
  };

  const make = (makeOptions?: Record<string, unknown>) => {
    let made: unknown;
    try {
      made = module.make(makeOptions);
    } catch (error) {
      fail(error);
    }
    if (!isPromiseLike(made)) return wrap(made);
    return withTimeout(made, inWorker ? Infinity : timeoutMs).then(wrap, fail);
  };
  return { id: module.id, description: module.description, maxEpisodeSteps: module.maxEpisodeSteps, make } as EnvModule;
}
