// @ts-check
// Node's environment worker (a worker_threads Worker started by src/env/load-node.ts): the shared
// host from env-host-core.js, spoken to through comlink's Node adapter. Plain JavaScript, so it runs
// without a TypeScript loader whether rlplay runs under tsx (the CLI) or Vite (Vitest). Environment
// files load by dynamic import of their file URL; TypeScript ones through tsx's tsImport, which
// compiles them without changing how anything else in this worker loads. Every reply carries the
// memory this worker's isolate holds (process.memoryUsage() in a worker reports its own heap and
// ArrayBuffers), which the main thread checks against the limit in workerData.
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { parentPort, workerData } from 'node:worker_threads';
import { expose } from 'comlink';
import nodeEndpoint from 'comlink/dist/esm/node-adapter.mjs';
import { createEnvHost } from './env-host-core.js';

const TYPESCRIPT = /\.[cm]?tsx?$/i;

/** @type {import('./env-host-core.js').ImportModule} */
async function importModule(request) {
  if ('text' in request) {
    const url = `data:text/javascript;base64,${Buffer.from(request.text, 'utf8').toString('base64')}`;
    return { namespace: await import(url), url };
  }
  if (TYPESCRIPT.test(new URL(request.url).pathname)) {
    const { tsImport } = await import('tsx/esm/api');
    return { namespace: await tsImport(request.url, import.meta.url), url: request.url };
  }
  return { namespace: await import(request.url), url: request.url };
}

/** @type {number} */
const memoryLimitBytes = workerData?.memoryLimitBytes ?? Infinity;
/** @type {(() => void) | null} */
let gcFunction = null;
/**
 * Runs a full garbage collection. A worker cannot be started with --expose-gc, so gc() is taken
 * from a context made while the flag is set. The flag is process-wide and other workers clear it
 * again, so a context made meanwhile may lack gc(): taking it is tried again.
 */
function collectGarbage() {
  for (let attempt = 0; gcFunction === null && attempt < 100; attempt++) {
    setFlagsFromString('--expose-gc');
    const found = runInNewContext('typeof gc === "function" ? gc : null');
    setFlagsFromString('--no-expose-gc');
    gcFunction = found;
  }
  if (gcFunction === null) throw new Error('could not run a garbage collection to measure the memory the environment holds');
  gcFunction();
}

function heldBytes() {
  const { heapUsed, external } = process.memoryUsage(); // external includes the ArrayBuffers
  return heapUsed + external;
}

/** What the worker holds; over the limit, what stays after garbage collection (dead ArrayBuffers wait for one). */
function measureMemory() {
  const held = heldBytes();
  if (held <= memoryLimitBytes) return held;
  // V8 frees the memory of the dead ArrayBuffers a collection finds in the background; the next
  // collection finishes that first.
  collectGarbage();
  collectGarbage();
  return heldBytes();
}

if (!parentPort) throw new Error('env-host-node.js runs as a worker_threads Worker');
expose(createEnvHost(importModule, measureMemory), nodeEndpoint(/** @type {any} */ (parentPort)));
