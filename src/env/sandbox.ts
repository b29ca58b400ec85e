// A sandbox for untrusted JavaScript: QuickJS compiled to WebAssembly (quickjs-emscripten).
//
// Each run gets a fresh WebAssembly instance of the interpreter, with its own memory whose maximum
// is the memory limit, and in it a runtime and context with a stack limit and an interrupt handler
// that stops the code at a deadline (so an infinite loop ends). The cap is on the WebAssembly memory
// because QuickJS's own limit cannot see the sizes of live allocations under WebAssembly (no
// malloc_usable_size): it refuses one allocation over the limit but not a thousand under it. When
// the run ends the instance and its memory are dropped, so nothing a submission allocated stays
// with the host. The code sees only the ECMAScript built-ins: no console, no require, no process,
// no fetch, no timers, no files, no network, no storage, no host objects. Test inputs go in as JSON
// text; results come out as JSON text and are compared with the expected values here, on the host,
// so expected values never enter the sandbox. Works in Node and, through the package's default
// entry, in the browser (Vite).
import {
  RELEASE_SYNC,
  newQuickJSWASMModuleFromVariant,
  newVariant,
  shouldInterruptAfterDeadline,
  type QuickJSContext,
  type QuickJSHandle,
} from 'quickjs-emscripten';

export interface SandboxTest {
  /** Arguments of one call (JSON values). */
  args: unknown[];
  /** The expected return value (a JSON value); compared as canonical JSON text. */
  expected: unknown;
}

export interface SandboxLimits {
  /** Wall-clock budget for the whole run: evaluating the code and calling it on every test. */
  timeMs: number;
  /** All the memory the interpreter may hold, its own included: at least SANDBOX_MIN_MEMORY_BYTES. */
  memoryBytes: number;
  /** QuickJS stack limit; the default (128 KiB) stays well inside the host's own stack. */
  stackBytes?: number;
}

export interface SandboxOptions {
  /** The global function the tests call. Default 'solve'. */
  functionName?: string;
}

export type SandboxStatus = 'ok' | 'syntax-error' | 'runtime-error' | 'missing-function' | 'timeout' | 'out-of-memory' | 'sandbox-failure';
export type SandboxTestStatus = 'passed' | 'wrong' | 'error' | 'timeout' | 'out-of-memory' | 'not-run';

export interface SandboxTestResult {
  passed: boolean;
  status: SandboxTestStatus;
  /** What the function returned, as JSON text (`undefined` when it returned nothing). */
  actual?: string;
  /** The error it threw (or why it did not run). */
  error?: string;
}

export interface SandboxResult {
  /** 'ok' when the code loaded and every test ran (passing or not); otherwise what stopped it. */
  status: SandboxStatus;
  /** A human-readable explanation when status is not 'ok'. */
  error?: string;
  tests: SandboxTestResult[];
  passed: number;
  total: number;
}

const DEFAULT_STACK_BYTES = 128 * 1024;
const MAX_ERROR_CHARS = 300;
const MAX_OUTPUT_CHARS = 2000;

const WASM_PAGE_BYTES = 64 * 1024;
/** The memory the interpreter's WebAssembly build starts with (its memory import asks for 256 pages). */
const INITIAL_MEMORY_BYTES = 16 * 1024 * 1024;
/** The interpreter's own memory and at least 8 MiB to grow into. */
export const SANDBOX_MIN_MEMORY_BYTES = 24 * 1024 * 1024;
/** The most the interpreter's build grows its memory to. */
const SANDBOX_MAX_MEMORY_BYTES = 2 * 1024 * 1024 * 1024;
/**
 * QuickJS throws null when it cannot allocate the error object for an exception. Memory grown this
 * close to its maximum means that is why (the allocator's last try grows it by 5%); the minimum
 * limit keeps this fraction above the initial memory, so code that never grew it is not mistaken.
 */
const FULL_MEMORY_FRACTION = 0.9;

// Evaluated before the untrusted code, so the untrusted code cannot replace what the harness uses.
const HARNESS = `(function () {
  const parse = JSON.parse, stringify = JSON.stringify, apply = Reflect.apply;
  return function (fn, argsJson) {
    const out = apply(fn, undefined, parse(argsJson));
    if (out === undefined) return 'undefined';
    const text = stringify(out);
    return typeof text === 'string' ? text : typeof out;
  };
})()`;

/** Throws, naming `owner`, the value and the allowed range, when `limits` cannot be kept. */
export function checkSandboxLimits(limits: SandboxLimits, owner: string): void {
  if (!(limits.memoryBytes >= SANDBOX_MIN_MEMORY_BYTES && limits.memoryBytes <= SANDBOX_MAX_MEMORY_BYTES)) {
    throw new Error(`${owner}: memoryBytes ${limits.memoryBytes} is out of range; give ${formatBytes(SANDBOX_MIN_MEMORY_BYTES)} (the interpreter's own ${formatBytes(INITIAL_MEMORY_BYTES)} and room to grow) to ${formatBytes(SANDBOX_MAX_MEMORY_BYTES)}`);
  }
  if (!(limits.timeMs > 0 && Number.isFinite(limits.timeMs))) throw new Error(`${owner}: timeMs ${limits.timeMs} is out of range; give a time limit in milliseconds above 0, e.g. 250`);
}

/**
 * Runs `code` in a fresh QuickJS context and calls its function on every test. Never throws for
 * anything the code does: syntax errors, thrown errors, timeouts and memory exhaustion are reported.
 */
export async function runInSandbox(code: string, tests: readonly SandboxTest[], limits: SandboxLimits, options: SandboxOptions = {}): Promise<SandboxResult> {
  const functionName = options.functionName ?? 'solve';
  if (!/^[A-Za-z_$][\w$]*$/.test(functionName)) throw new Error(`runInSandbox: bad function name ${JSON.stringify(functionName)}`);
  checkSandboxLimits(limits, 'runInSandbox');
  const total = tests.length;
  const notRun = (error: string): SandboxTestResult[] => tests.map(() => ({ passed: false, status: 'not-run' as const, error }));
  const finish = (status: SandboxStatus, results: SandboxTestResult[], error?: string): SandboxResult => ({
    status,
    ...(error === undefined ? {} : { error }),
    tests: results,
    passed: results.filter((r) => r.passed).length,
    total,
  });

  // A fresh interpreter in a memory that can never grow past the limit.
  const memory = new WebAssembly.Memory({
    initial: INITIAL_MEMORY_BYTES / WASM_PAGE_BYTES,
    maximum: Math.floor(limits.memoryBytes / WASM_PAGE_BYTES),
  });
  const QuickJS = await newQuickJSWASMModuleFromVariant(newVariant(RELEASE_SYNC, { wasmMemory: memory }));
  const runtime = QuickJS.newRuntime();
  const handles: QuickJSHandle[] = [];
  let context: QuickJSContext | null = null;
  try {
    // QuickJS's own limit refuses a single allocation over it, before the memory has to grow.
    runtime.setMemoryLimit(Math.floor(limits.memoryBytes));
    runtime.setMaxStackSize(Math.max(16 * 1024, Math.floor(limits.stackBytes ?? DEFAULT_STACK_BYTES)));
    runtime.setInterruptHandler(shouldInterruptAfterDeadline(Date.now() + Math.max(1, limits.timeMs)));
    context = runtime.newContext();
    const ctx = context;

    const harness = ctx.evalCode(HARNESS, 'harness.js');
    if (harness.error) {
      const why = describeError(ctx, harness.error, limits, memory);
      harness.error.dispose();
      return finish('sandbox-failure', notRun(why.message), `the test harness failed: ${why.message}`);
    }
    const runner = harness.value;
    handles.push(runner);

    const loaded = ctx.evalCode(String(code ?? ''), 'solution.js');
    if (loaded.error) {
      const why = describeError(ctx, loaded.error, limits, memory);
      loaded.error.dispose();
      const status: SandboxStatus = why.kind === 'syntax' ? 'syntax-error' : why.kind === 'error' ? 'runtime-error' : why.kind;
      return finish(status, notRun(why.message), why.message);
    }
    loaded.value.dispose();

    const lookup = ctx.evalCode(`typeof ${functionName} === 'function' ? ${functionName} : undefined`, 'lookup.js');
    if (lookup.error) {
      const why = describeError(ctx, lookup.error, limits, memory);
      lookup.error.dispose();
      const status: SandboxStatus = why.kind === 'timeout' || why.kind === 'out-of-memory' ? why.kind : 'missing-function';
      return finish(status, notRun(why.message), why.message);
    }
    const fn = lookup.value;
    handles.push(fn);
    if (ctx.typeof(fn) !== 'function') {
      const message = `no function named ${functionName} was defined`;
      return finish('missing-function', notRun(message), message);
    }

    const results: SandboxTestResult[] = [];
    for (let i = 0; i < tests.length; i++) {
      const test = tests[i];
      const argsHandle = ctx.newString(JSON.stringify(test.args));
      const call = ctx.callFunction(runner, ctx.undefined, fn, argsHandle);
      argsHandle.dispose();
      if (call.error) {
        const why = describeError(ctx, call.error, limits, memory);
        call.error.dispose();
        if (why.kind === 'timeout' || why.kind === 'out-of-memory') {
          results.push({ passed: false, status: why.kind, error: why.message });
          for (let j = i + 1; j < tests.length; j++) results.push({ passed: false, status: 'not-run', error: `not run: ${why.message}` });
          return finish(why.kind, results, why.message);
        }
        results.push({ passed: false, status: 'error', error: why.message });
        continue;
      }
      const actual = ctx.typeof(call.value) === 'string' ? ctx.getString(call.value) : 'undefined';
      call.value.dispose();
      const passed = actual === JSON.stringify(test.expected);
      results.push({ passed, status: passed ? 'passed' : 'wrong', actual: truncate(actual, MAX_OUTPUT_CHARS) });
    }
    return finish('ok', results);
  } catch (error) {
    // A failure of the host or the WebAssembly module itself (not of the sandboxed code).
    const message = `sandbox failure: ${truncate(error instanceof Error ? error.message : String(error), MAX_ERROR_CHARS)}`;
    return finish('sandbox-failure', notRun(message), message);
  } finally {
    // The instance is dropped either way; a module that fails here is never used again.
    try {
      for (const handle of handles) if (handle.alive) handle.dispose();
      context?.dispose();
      runtime.dispose();
    } catch {}
  }
}

interface ErrorDescription {
  kind: 'syntax' | 'error' | 'timeout' | 'out-of-memory';
  message: string;
}

function describeError(ctx: QuickJSContext, handle: QuickJSHandle, limits: SandboxLimits, memory: WebAssembly.Memory): ErrorDescription {
  const outOfMemory: ErrorDescription = { kind: 'out-of-memory', message: `memory limit exceeded (${formatBytes(limits.memoryBytes)})` };
  let name = '';
  let message = '';
  try {
    const dumped: unknown = ctx.dump(handle);
    if (dumped === null && memory.buffer.byteLength >= FULL_MEMORY_FRACTION * limits.memoryBytes) return outOfMemory;
    if (dumped !== null && typeof dumped === 'object') {
      const record = dumped as { name?: unknown; message?: unknown };
      name = typeof record.name === 'string' ? record.name : '';
      message = typeof record.message === 'string' ? record.message : JSON.stringify(dumped) ?? '';
    } else {
      message = `threw ${typeof dumped === 'string' ? JSON.stringify(dumped) : String(dumped)}`;
    }
  } catch {
    message = 'an error that could not be read';
  }
  message = truncate(message, MAX_ERROR_CHARS);
  if (name === 'InternalError' && message === 'interrupted') return { kind: 'timeout', message: `time limit exceeded (${limits.timeMs} ms)` };
  if (name === 'InternalError' && message === 'out of memory') return outOfMemory;
  if (name === 'SyntaxError') return { kind: 'syntax', message: `SyntaxError: ${message}` };
  return { kind: 'error', message: name ? `${name}: ${message}` : message };
}

function formatBytes(bytes: number): string {
  return bytes >= 1 << 20 ? `${Math.round(bytes / (1 << 20))} MiB` : `${Math.round(bytes / 1024)} KiB`;
}

function truncate(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}
