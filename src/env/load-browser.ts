// Custom environments in the browser: source text (from the editor, a file picker or a shared link
// the user has agreed to run) runs in a sandbox that cannot touch the page, read or write rlplay's
// IndexedDB, or reach the network. A plain Worker could do the last two, so each environment worker
// is started inside an opaque-origin iframe (sandbox="allow-scripts", no allow-same-origin: no
// storage of rlplay's) whose Content-Security-Policy allows no connections (fetch, WebSocket,
// imports from URLs) and inherits to the worker. A call that loops forever is stopped by removing
// the iframe, which ends its worker; the page stays responsive whatever the environment does.
import comlinkUmd from 'comlink/dist/umd/comlink.js?raw';
import hostCore from '../../workers/env-host-core.js?raw';
import sandboxTail from '../../workers/env-sandbox-worker.js?raw';
import { loadWorkerEnvModule, type WorkerEnvModule, type WorkerEnvOptions, type WorkerHandle } from './worker-env.ts';

export type { WorkerEnvModule } from './worker-env.ts';

export interface LoadEnvSourceOptions extends WorkerEnvOptions {
  /** How errors name the source before its id is known, e.g. the file name. Default 'custom environment'. */
  label?: string;
}

/** The sandbox's policy: scripts only from the iframe itself and Blob URLs, nothing else at all. */
export const SANDBOX_CSP = "default-src 'none'; script-src 'unsafe-inline' blob:; worker-src blob:";

/** The worker's whole script, classic (no imports to resolve in an origin that may fetch nothing). */
const WORKER_SOURCE = [comlinkUmd, hostCore.replace(/^export /gm, ''), sandboxTail].join('\n;\n');

// The iframe's document: it starts the worker from the script it is sent, hands it the page's
// channel, and reports the worker's death to the page.
const SANDBOX_DOCUMENT = `<!doctype html><meta http-equiv="Content-Security-Policy" content="${SANDBOX_CSP}"><script>
addEventListener('message', (event) => {
  const worker = new Worker(URL.createObjectURL(new Blob([event.data.source], { type: 'text/javascript' })), { name: 'rlplay-env' });
  worker.addEventListener('error', (e) => {
    e.preventDefault();
    parent.postMessage({ rlplayEnvDeath: e.message || 'the worker failed (it may not have started)' }, '*');
  });
  worker.postMessage({ port: event.data.port }, [event.data.port]);
}, { once: true });
parent.postMessage({ rlplayEnvSandboxReady: true }, '*');
</script>`;

function sandboxedWorker(): WorkerHandle {
  const iframe = document.createElement('iframe');
  iframe.sandbox.add('allow-scripts');
  iframe.hidden = true;
  iframe.title = 'rlplay environment sandbox';
  iframe.srcdoc = SANDBOX_DOCUMENT;
  // Calls sent before the sandbox is up wait in the channel.
  const channel = new MessageChannel();
  let onDeath: (reason: string) => void = () => {};
  const listener = (event: MessageEvent) => {
    if (event.source !== iframe.contentWindow) return;
    if (event.data?.rlplayEnvSandboxReady) iframe.contentWindow!.postMessage({ source: WORKER_SOURCE, port: channel.port2 }, '*', [channel.port2]);
    else if (typeof event.data?.rlplayEnvDeath === 'string') onDeath(`uncaught ${event.data.rlplayEnvDeath}`);
  };
  window.addEventListener('message', listener);
  document.body.append(iframe);
  return {
    endpoint: channel.port1,
    terminate() {
      window.removeEventListener('message', listener);
      channel.port1.close();
      iframe.remove(); // ends the document, and with it the worker
    },
    onDeath(listener) {
      onDeath = listener;
    },
  };
}

/**
 * Loads a custom environment from its source text: an ES module whose default export is
 * `{ id, description, maxEpisodeSteps, make }`. It runs in sandboxed Web Workers, one per Env
 * instance; calls are validated and limited to `stepTimeoutMs` (default 5000). A syntax error, no
 * default export or a wrong shape rejects with an EnvError. Call dispose() to end its workers.
 * Needs a document (the sandbox is an iframe): call it from the page, not from a Worker.
 */
export function loadEnvSource(sourceText: string, options: LoadEnvSourceOptions = {}): Promise<WorkerEnvModule> {
  return loadWorkerEnvModule(sandboxedWorker, { text: sourceText, label: options.label ?? 'custom environment' }, options);
}
