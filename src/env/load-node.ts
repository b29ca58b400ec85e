// Custom environment files in Node (`rlplay ... --env ./my-env.js`): the module is imported inside a
// worker_threads Worker (workers/env-host-node.js), so a call that loops forever, even
// synchronously, is stopped by terminating the worker. The worker is plain JavaScript and starts
// with no loader flags, so it runs the same under the CLI (tsx) and under Vitest (Vite), and the
// user's .js file loads exactly as plain Node would load it. TypeScript files (.ts, .mts) are
// compiled in the worker by tsx, a dependency of rlplay.
import { spawn } from 'node:child_process';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { extname, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import nodeEndpoint from 'comlink/dist/esm/node-adapter.mjs';
import type { WireError } from './env-host-protocol.ts';
import { EnvError, describeThrown } from './guard.ts';
import { loadWorkerEnvModule, rebuildError, type LoadProblem, type WorkerEnvModule, type WorkerEnvOptions, type WorkerHandle } from './worker-env.ts';
import { DEFAULT_MAX_MEMORY_MB } from './settings.ts';

export type { WorkerEnvModule } from './worker-env.ts';

export interface LoadEnvFileOptions extends WorkerEnvOptions {
  /**
   * Memory limit of each environment worker, in MiB: its JS heap (enforced as it grows) and, checked
   * after every call, the heap with its ArrayBuffers, Buffers and WebAssembly memory. Runaway memory
   * use stops the worker, not rlplay. Default ENV_LIMIT_SETTINGS.maxMemoryMb.
   */
  maxMemoryMb?: number;
}

const HOST_URL = new URL('../../workers/env-host-node.js', import.meta.url);
const JAVASCRIPT = new Set(['.js', '.mjs', '.cjs']);
const TYPESCRIPT = new Set(['.ts', '.mts', '.cts']);

function nodeWorker(name: string, maxMemoryMb: number): WorkerHandle {
  // execArgv: [] so the worker never inherits a loader (tsx, --import) that would change how the
  // environment file loads; the host needs none.
  const memoryLimit = { bytes: maxMemoryMb * 1024 * 1024, option: 'maxMemoryMb, --max-memory-mb' };
  const worker = new Worker(HOST_URL, { name, execArgv: [], resourceLimits: { maxOldGenerationSizeMb: maxMemoryMb }, workerData: { memoryLimitBytes: memoryLimit.bytes } });
  // Idle workers must not keep the process alive; a call in flight holds a reference.
  worker.unref();
  let inFlight = 0;
  let error: Error | null = null;
  let terminated = false;
  return {
    endpoint: nodeEndpoint(worker),
    memoryLimit,
    terminate() {
      terminated = true;
      void worker.terminate();
    },
    onDeath(listener) {
      worker.on('error', (e: Error) => {
        error = e;
      });
      worker.on('exit', (code) => {
        if (terminated) return;
        const err = error as (Error & { code?: string }) | null;
        if (err?.code === 'ERR_WORKER_OUT_OF_MEMORY') listener(`it ran out of memory (the limit is ${maxMemoryMb} MiB, maxMemoryMb, --max-memory-mb)`);
        else if (err) listener(`uncaught ${err.name}: ${err.message}`);
        else listener(`it exited with code ${code}`);
      });
    },
    hold() {
      if (inFlight++ === 0) worker.ref();
    },
    release() {
      if (--inFlight === 0) worker.unref();
    },
  };
}

/**
 * Runs `node --check` on the file's text to find where a syntax error is (Node's import error does
 * not say): the message with `label:line` and the offending line, null when the file parses, or
 * undefined when the check itself could not run.
 */
function syntaxCheck(path: string, label: string, inputType: 'module' | 'commonjs'): Promise<string | null | undefined> {
  return new Promise((resolvePromise) => {
    const child = spawn(process.execPath, ['--check', `--input-type=${inputType}`], { stdio: ['pipe', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.on('error', () => resolvePromise(undefined));
    child.on('close', (code) => {
      if (code === 0) return resolvePromise(null);
      const lines = stderr.split('\n');
      const where = /^\[stdin\]:(\d+)$/.exec(lines[0] ?? '');
      const message = lines.find((line) => /^SyntaxError: /.test(line));
      if (!where || !message) return resolvePromise(undefined);
      // Node shows the offending line and a caret under the error: the caret gives the column.
      const caret = /^(\s*)\^/.exec(lines[2] ?? '');
      const column = caret ? `:${caret[1].length + 1}` : '';
      resolvePromise(`at ${label}:${where[1]}${column}: ${message.slice('SyntaxError: '.length)}`);
    });
    child.stdin.on('error', () => {}); // the child may exit before reading everything
    createReadStream(path).on('error', () => child.stdin.end()).pipe(child.stdin);
  });
}

/**
 * Loads a custom environment module from a file: an ES module (.js, .mjs) whose default export is
 * `{ id, description, maxEpisodeSteps, make }`, or the same in TypeScript (.ts, .mts). Its
 * instances run in worker threads; calls are validated and limited to `stepTimeoutMs` (default
 * 5000). A missing file, a syntax error, no default export or a wrong shape rejects with an
 * EnvError naming the file and the fix. Call dispose() when done (idle workers do not keep the
 * process alive either way).
 */
export async function loadEnvFile(path: string, options: LoadEnvFileOptions = {}): Promise<WorkerEnvModule> {
  const label = path;
  const absolute = resolve(path);
  const fail = (problem: string, fix: string, cause?: unknown): never => {
    throw new EnvError({ env: label, method: 'load', kind: 'load', problem, fix, cause });
  };
  const stats = await stat(absolute).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT' || error.code === 'ENOTDIR') {
      return fail(`file not found (looked for ${absolute})`, `check the path; a relative path starts from the current directory, ${process.cwd()}`, error);
    }
    return fail(`cannot be read: ${error.message}`, 'check the path and its permissions', error);
  });
  if (stats.isDirectory()) fail('is a directory, not a module file', 'give the path of the environment module itself, e.g. ./my-env/index.js');
  const extension = extname(absolute).toLowerCase();
  if (!JAVASCRIPT.has(extension) && !TYPESCRIPT.has(extension)) {
    fail(`has the extension ${JSON.stringify(extension || '(none)')}; an environment file is a JavaScript module`, 'save it as .js or .mjs (an ES module with a default export), or as TypeScript (.ts, .mts)');
  }

  const maxMemoryMb = options.maxMemoryMb ?? DEFAULT_MAX_MEMORY_MB;
  const explain = async (error: WireError): Promise<LoadProblem | null> => {
    if (error.name === 'TransformError') {
      // tsx (esbuild) reports `file:line:col: ERROR: message` for TypeScript.
      const detail = error.message.split(absolute).join(label).replace(/^Transform failed with \d+ errors?:\n/, '');
      return { problem: `has a syntax error: ${detail}`, fix: 'correct the syntax at that line' };
    }
    if (error.name !== 'SyntaxError' || !JAVASCRIPT.has(extension)) return null;
    const located = await syntaxCheck(absolute, label, extension === '.cjs' ? 'commonjs' : 'module');
    if (located === undefined) return null;
    if (located !== null) return { problem: `has a syntax error ${located}`, fix: 'correct the syntax at that line' };
    // The file parses: the SyntaxError was thrown by its top-level code (JSON.parse, a RegExp...).
    return { problem: `threw while loading: ${describeThrown(rebuildError(error))}`, fix: 'fix the error in the top-level code of the module' };
  };
  const name = `rlplay-env ${label}`;
  return loadWorkerEnvModule(() => nodeWorker(name, maxMemoryMb), { url: pathToFileURL(absolute).href, label }, options, explain);
}
