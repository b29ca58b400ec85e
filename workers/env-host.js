// @ts-check
// The browser's environment worker (a module Web Worker started by src/env/load-browser.ts): the
// shared host from env-host-core.js, spoken to through comlink. Source text from the editor is
// imported from a Blob URL, so it is an ordinary ES module with a default export.
import { expose } from 'comlink';
import { createEnvHost } from './env-host-core.js';

/** @type {import('./env-host-core.js').ImportModule} */
async function importModule(request) {
  if (!('text' in request)) return { namespace: await import(/* @vite-ignore */ request.url), url: request.url };
  const url = URL.createObjectURL(new Blob([request.text], { type: 'text/javascript' }));
  try {
    return { namespace: await import(/* @vite-ignore */ url), url };
  } finally {
    URL.revokeObjectURL(url);
  }
}

expose(createEnvHost(importModule));
