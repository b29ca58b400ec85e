// What the main thread and an environment worker (workers/env-host-core.js) say to each other,
// through comlink. One worker holds one environment module and at most one Env instance. Replies
// never throw across the boundary: every failure is a value, so the main side can tell the
// environment's own errors from the worker's.

/** What the worker imports: a module URL (a file in Node) or source text (the browser's editor). */
export type ModuleRequest =
  | { url: string; label: string }
  | { text: string; label: string };

/** An error as it crosses the worker boundary. */
export interface WireError {
  name: string;
  message: string;
  stack?: string;
  /** Node's error code, e.g. ERR_MODULE_NOT_FOUND. */
  code?: string;
  /** The thrown value was not an Error (a string, a number...); `message` describes it. */
  nonError?: boolean;
}

export type HostReply<T> = (
  | { ok: true; value: T }
  /**
   * `threw`: the environment's code threw (or the import failed); `uncloneable`: it returned something
   * that cannot be copied out of the worker; `no-module` / `no-instance`: called out of order.
   */
  | { ok: false; kind: 'threw' | 'uncloneable' | 'no-module' | 'no-instance'; error: WireError }
) & {
  /**
   * The memory the worker holds after the call, where the platform can measure it (Node): its JS
   * heap and everything outside it (ArrayBuffers, Buffers, WebAssembly memory).
   */
  memoryBytes?: number;
};

/** One field of the default export: its typeof and, for primitives, its value. */
export interface FieldSummary {
  type: string;
  value?: string | number | boolean;
}

export interface ModuleSummary {
  /** Whether the module has a default export (other than undefined). */
  hasDefault: boolean;
  exportNames: string[];
  /** Named exports that look like environment modules (an object with make()): likely meant as default. */
  moduleLikeExports: string[];
  /** typeof the default export ('object', 'function'...). */
  defaultType: string;
  defaultIsArray: boolean;
  fields: { id: FieldSummary; description: FieldSummary; maxEpisodeSteps: FieldSummary; make: FieldSummary };
}

export type EnvCallMethod = 'reset' | 'step' | 'validActions' | 'close' | 'expertAction';

export interface EnvHostApi {
  /** Imports the module once; later calls fail. */
  load(request: ModuleRequest): Promise<HostReply<ModuleSummary>>;
  /** Calls the module's make(options) and keeps the Env; the reply is typeof each contract method, or null when make gave no object. */
  make(options: Record<string, unknown> | undefined): Promise<HostReply<{ methods: Record<string, string> | null; made: string }>>;
  /** Calls one method of the Env (reset's argument is { seed, options }, step's the action). */
  call(method: EnvCallMethod, argument?: unknown): Promise<HostReply<unknown>>;
  /** Forgets the Env, so the worker can host a new instance. */
  dispose(): Promise<HostReply<null>>;
}
