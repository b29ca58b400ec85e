// @ts-check
// The inside of an environment worker, shared by Node (env-host-node.js) and the browser's
// sandbox (src/env/load-browser.ts puts this text, without its `export`, into the sandboxed
// worker's script): it imports one custom environment module, makes one Env at a time and runs its
// calls. Plain JavaScript on purpose: Node runs it as is in a worker_threads Worker, with no
// TypeScript loader (which would also change how the user's .js files load), and the browser runs
// it as a classic script. Replies never throw: every failure is a value (see src/env/env-host-protocol.ts).

/** @typedef {import('../src/env/env-host-protocol.ts').EnvHostApi} EnvHostApi */
/** @typedef {import('../src/env/env-host-protocol.ts').ModuleRequest} ModuleRequest */
/** @typedef {import('../src/env/env-host-protocol.ts').WireError} WireError */
/** @typedef {import('../src/env/env-host-protocol.ts').FieldSummary} FieldSummary */
/** @typedef {import('../src/env/env-host-protocol.ts').EnvCallMethod} EnvCallMethod */

/**
 * Imports what a request names; `url` is where the module ended up (for readable stack traces).
 * @typedef {(request: ModuleRequest) => Promise<{ namespace: Record<string, unknown>, url: string }>} ImportModule
 */

const CONTRACT_METHODS = ['reset', 'step', 'validActions', 'close', 'expertAction'];

/**
 * @param {unknown} thrown
 * @param {(text: string) => string} relabel
 * @returns {WireError}
 */
function wireError(thrown, relabel) {
  if (thrown instanceof Error) {
    /** @type {WireError} */
    const wire = { name: thrown.name || 'Error', message: relabel(String(thrown.message)) };
    if (typeof thrown.stack === 'string') wire.stack = relabel(thrown.stack);
    const code = /** @type {{ code?: unknown }} */ (thrown).code;
    if (typeof code === 'string') wire.code = code;
    return wire;
  }
  let text;
  try {
    text = typeof thrown === 'string' ? JSON.stringify(thrown) : String(thrown);
  } catch {
    text = typeof thrown;
  }
  return { name: 'Error', message: `${text} (a ${thrown === null ? 'null' : typeof thrown}, not an Error)`, nonError: true };
}

/**
 * @param {unknown} value
 * @returns {FieldSummary}
 */
function field(value) {
  const type = typeof value;
  if (type === 'string' || type === 'number' || type === 'boolean') return { type, value: /** @type {string | number | boolean} */ (value) };
  if (value === null) return { type: 'null' };
  if (Array.isArray(value)) return { type: 'array' };
  return { type };
}

/** @param {unknown} value */
function looksLikeModule(value) {
  return typeof value === 'object' && value !== null && typeof (/** @type {{ make?: unknown }} */ (value).make) === 'function';
}

/**
 * @param {ImportModule} importModule
 * @param {() => number} [measureMemory] the bytes the worker holds, sent with every reply of a call
 * @returns {EnvHostApi}
 */
export function createEnvHost(importModule, measureMemory) {
  /** @type {Record<string, unknown> | null} */
  let module = null;
  /** @type {Record<string, unknown> | null} */
  let env = null;
  /** @type {(text: string) => string} */
  let relabel = (text) => text;

  /**
   * @template T
   * @param {() => Promise<T> | T} run
   * @returns {Promise<import('../src/env/env-host-protocol.ts').HostReply<T>>}
   */
  async function reply(run) {
    const measured = await settle(run);
    return measureMemory ? { ...measured, memoryBytes: measureMemory() } : measured;
  }

  /**
   * @template T
   * @param {() => Promise<T> | T} run
   * @returns {Promise<import('../src/env/env-host-protocol.ts').HostReply<T>>}
   */
  async function settle(run) {
    let value;
    try {
      value = await run();
    } catch (thrown) {
      return { ok: false, kind: 'threw', error: wireError(thrown, relabel) };
    }
    try {
      structuredClone(value);
    } catch (thrown) {
      return { ok: false, kind: 'uncloneable', error: wireError(thrown, relabel) };
    }
    return { ok: true, value };
  }

  return {
    async load(request) {
      if (module !== null) return { ok: false, kind: 'no-module', error: { name: 'Error', message: 'this worker has already loaded a module' } };
      return reply(async () => {
        const { namespace, url } = await importModule(request);
        if (url !== request.label) relabel = (text) => text.split(url).join(request.label);
        let exported = namespace.default;
        // A TypeScript file compiled as CommonJS (outside a "type": "module" package) nests its default export.
        if (typeof exported === 'object' && exported !== null && /** @type {{ __esModule?: unknown }} */ (exported).__esModule && 'default' in exported) {
          exported = /** @type {{ default: unknown }} */ (exported).default;
        }
        const exportNames = Object.keys(namespace).filter((name) => name !== 'default');
        const record = typeof exported === 'object' && exported !== null ? /** @type {Record<string, unknown>} */ (exported) : {};
        module = looksLikeModule(exported) ? record : null;
        return {
          hasDefault: exported !== undefined,
          exportNames,
          moduleLikeExports: exportNames.filter((name) => looksLikeModule(namespace[name])),
          defaultType: exported === null ? 'null' : typeof exported,
          defaultIsArray: Array.isArray(exported),
          fields: { id: field(record.id), description: field(record.description), maxEpisodeSteps: field(record.maxEpisodeSteps), make: field(record.make) },
        };
      });
    },

    async make(options) {
      if (module === null) return { ok: false, kind: 'no-module', error: { name: 'Error', message: 'no environment module is loaded in this worker' } };
      const make = /** @type {(options: unknown) => unknown} */ (module.make);
      const owner = module;
      return reply(async () => {
        env = null;
        const made = await make.call(owner, options);
        if (typeof made !== 'object' || made === null) {
          return { methods: null, made: made === null ? 'null' : made === undefined ? 'undefined' : `a ${typeof made}` };
        }
        env = /** @type {Record<string, unknown>} */ (made);
        const instance = env;
        return { methods: Object.fromEntries(CONTRACT_METHODS.map((name) => [name, typeof instance[name]])), made: 'an object' };
      });
    },

    async call(method, argument) {
      const instance = env;
      if (instance === null) return { ok: false, kind: 'no-instance', error: { name: 'Error', message: 'no environment instance: make() has not run in this worker' } };
      const fn = /** @type {(argument?: unknown) => unknown} */ (instance[method]);
      return reply(() => (method === 'reset' || method === 'step' ? fn.call(instance, argument) : fn.call(instance)));
    },

    async dispose() {
      env = null;
      return { ok: true, value: null };
    },
  };
}
