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
  /** Who makes the sandboxes: the page's own by default; a Worker must pass the page's. */
  host?: SandboxHost;
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

/**
 * Where sandboxes are made: a document (the page). A Worker, which has none, gets the page's host
 * through comlink (workerSandboxHost) and sends it one end of each worker's channel.
 */
export interface SandboxHost {
  /** Starts a sandboxed environment worker serving `port`; `onDeath` hears of its death. */
  open(port: MessagePort, onDeath: (reason: string) => void): number | Promise<number>;
  /** Ends that sandbox and its worker. */
  close(id: number): void;
}

/** The page's sandboxes: one hidden opaque-origin iframe per environment worker. */
export function documentSandboxHost(): SandboxHost {
  const sandboxes = new Map<number, () => void>();
  let next = 0;
  return {
    open(port, onDeath) {
      const id = next++;
      const iframe = document.createElement('iframe');
      iframe.sandbox.add('allow-scripts');
      iframe.hidden = true;
      iframe.title = 'rlplay environment sandbox';
      iframe.srcdoc = SANDBOX_DOCUMENT;
      const listener = (event: MessageEvent) => {
        if (event.source !== iframe.contentWindow) return;
        if (event.data?.rlplayEnvSandboxReady) iframe.contentWindow!.postMessage({ source: WORKER_SOURCE, port }, '*', [port]);
        else if (typeof event.data?.rlplayEnvDeath === 'string') onDeath(`uncaught ${event.data.rlplayEnvDeath}`);
      };
      window.addEventListener('message', listener);
      document.body.append(iframe);
      sandboxes.set(id, () => {
        window.removeEventListener('message', listener);
        iframe.remove(); // ends the document, and with it the worker
      });
      return id;
    },
    close(id) {
      sandboxes.get(id)?.();
      sandboxes.delete(id);
    },
  };
}

let pageHost: SandboxHost | null = null;

/** The page's sandbox host (made on first use). */
export function pageSandboxHost(): SandboxHost {
  return (pageHost ??= documentSandboxHost());
}

function sandboxedWorker(host: SandboxHost): WorkerHandle {
  // Calls sent before the sandbox is up wait in the channel.
  const channel = new MessageChannel();
  let onDeath: (reason: string) => void = () => {};
  const id = Promise.resolve(host.open(channel.port2, (reason) => onDeath(reason)));
  return {
    endpoint: channel.port1,
    terminate() {
      channel.port1.close();
      void id.then((opened) => host.close(opened));
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
 * In the page the sandboxes are its own; in a Worker, pass the page's host (options.host).
 */
export function loadEnvSource(sourceText: string, options: LoadEnvSourceOptions = {}): Promise<WorkerEnvModule> {
  const host = options.host ?? pageSandboxHost();
  return loadWorkerEnvModule(() => sandboxedWorker(host), { text: sourceText, label: options.label ?? 'custom environment' }, options);
}
