// @ts-nocheck
// The tail of the browser's sandboxed environment worker (src/env/load-browser.ts builds the whole
// script: comlink's UMD build, env-host-core.js, then this). It runs inside an opaque-origin iframe
// whose Content-Security-Policy allows no network, so the environment's code cannot reach rlplay's
// IndexedDB, the page or the network. Source text is imported from a Blob URL, as an ES module.
async function importModule(request) {
  if (!('text' in request)) throw new Error('the sandbox imports environments from source text only');
  const url = URL.createObjectURL(new Blob([request.text], { type: 'text/javascript' }));
  try {
    return { namespace: await import(url), url };
  } finally {
    URL.revokeObjectURL(url);
  }
}

// The page's end of the channel arrives once; comlink serves the host on it.
self.addEventListener('message', (event) => Comlink.expose(createEnvHost(importModule), event.data.port), { once: true });
