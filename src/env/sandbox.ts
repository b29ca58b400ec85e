// A sandbox for untrusted JavaScript: QuickJS compiled to WebAssembly (quickjs-emscripten).
//
// Each run gets a fresh QuickJS runtime and context with a memory limit, a stack limit and an
// interrupt handler that stops the code at a deadline (so an infinite loop ends). The code sees only
// the ECMAScript built-ins: no console, no require, no process, no fetch, no timers, no files, no
// network, no storage, no host objects. Test inputs go in as JSON text; results come out as JSON
// text and are compared with the expected values here, on the host, so expected values never enter
// the sandbox. Works in Node and, through the package's default entry, in the browser (Vite).
import {
  getQuickJS,
  newQuickJSWASMModule,
  shouldInterruptAfterDeadline,
  type QuickJSContext,
  type QuickJSHandle,
  type QuickJSWASMModule,
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
  /** Heap limit of the QuickJS runtime. */
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

let modulePromise: Promise<QuickJSWASMModule> | null = null;
let moduleBroken = false;

/** Loads the QuickJS WebAssembly module once (async) and reuses it; a fresh one after a host-side failure. */
export function loadQuickJS(): Promise<QuickJSWASMModule> {
  if (moduleBroken) {
    moduleBroken = false;
    modulePromise = newQuickJSWASMModule();
  }
  modulePromise ??= getQuickJS();
  return modulePromise;
}

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

/**
 * Runs `code` in a fresh QuickJS context and calls its function on every test. Never throws for
 * anything the code does: syntax errors, thrown errors, timeouts and memory exhaustion are reported.
 */
export async function runInSandbox(code: string, tests: readonly SandboxTest[], limits: SandboxLimits, options: SandboxOptions = {}): Promise<SandboxResult> {
  const functionName = options.functionName ?? 'solve';
  if (!/^[A-Za-z_$][\w$]*$/.test(functionName)) throw new Error(`runInSandbox: bad function name ${JSON.stringify(functionName)}`);
  const total = tests.length;
  const notRun = (error: string): SandboxTestResult[] => tests.map(() => ({ passed: false, status: 'not-run' as const, error }));
  const finish = (status: SandboxStatus, results: SandboxTestResult[], error?: string): SandboxResult => ({
    status,
    ...(error === undefined ? {} : { error }),
    tests: results,
    passed: results.filter((r) => r.passed).length,
    total,
  });

  const QuickJS = await loadQuickJS();
  const runtime = QuickJS.newRuntime();
  const handles: QuickJSHandle[] = [];
  let context: QuickJSContext | null = null;
  let hostFailure = false;
  try {
    runtime.setMemoryLimit(Math.max(1 << 20, Math.floor(limits.memoryBytes)));
    runtime.setMaxStackSize(Math.max(16 * 1024, Math.floor(limits.stackBytes ?? DEFAULT_STACK_BYTES)));
    runtime.setInterruptHandler(shouldInterruptAfterDeadline(Date.now() + Math.max(1, limits.timeMs)));
    context = runtime.newContext();
    const ctx = context;

    const harness = ctx.evalCode(HARNESS, 'harness.js');
    if (harness.error) {
      const why = describeError(ctx, harness.error, limits);
      harness.error.dispose();
      return finish('sandbox-failure', notRun(why.message), `the test harness failed: ${why.message}`);
    }
    const runner = harness.value;
    handles.push(runner);

    const loaded = ctx.evalCode(String(code ?? ''), 'solution.js');
    if (loaded.error) {
      const why = describeError(ctx, loaded.error, limits);
      loaded.error.dispose();
      const status: SandboxStatus = why.kind === 'syntax' ? 'syntax-error' : why.kind === 'error' ? 'runtime-error' : why.kind;
      return finish(status, notRun(why.message), why.message);
    }
    loaded.value.dispose();

    const lookup = ctx.evalCode(`typeof ${functionName} === 'function' ? ${functionName} : undefined`, 'lookup.js');
    if (lookup.error) {
      const why = describeError(ctx, lookup.error, limits);
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
        const why = describeError(ctx, call.error, limits);
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
    hostFailure = true;
    const message = `sandbox failure: ${truncate(error instanceof Error ? error.message : String(error), MAX_ERROR_CHARS)}`;
    return finish('sandbox-failure', notRun(message), message);
  } finally {
    try {
      for (const handle of handles) if (handle.alive) handle.dispose();
      context?.dispose();
      runtime.dispose();
    } catch {
      hostFailure = true;
    }
    if (hostFailure) moduleBroken = true;
  }
}

interface ErrorDescription {
  kind: 'syntax' | 'error' | 'timeout' | 'out-of-memory';
  message: string;
}

function describeError(ctx: QuickJSContext, handle: QuickJSHandle, limits: SandboxLimits): ErrorDescription {
  let name = '';
  let message = '';
  try {
    const dumped: unknown = ctx.dump(handle);
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
  if (name === 'InternalError' && message === 'out of memory') return { kind: 'out-of-memory', message: `memory limit exceeded (${formatBytes(limits.memoryBytes)})` };
  if (name === 'SyntaxError') return { kind: 'syntax', message: `SyntaxError: ${message}` };
  return { kind: 'error', message: name ? `${name}: ${message}` : message };
}

function formatBytes(bytes: number): string {
  return bytes >= 1 << 20 ? `${Math.round(bytes / (1 << 20))} MiB` : `${Math.round(bytes / 1024)} KiB`;
}

function truncate(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}
