// Loaded into a page of the Vite dev server by tests/browser/hub.spec.ts: loads a model from a
// Hub-layout server through HubModelSource, which caches in the page's Cache Storage, and reports
// the logits and the download progress as plain JSON, through window.rlplayHub.
import { requestGpu, type GpuContext } from '../../src/engine/gpu/device.ts';
import { loadModel } from '../../src/engine/model.ts';
import { HubModelSource, parseHubId } from '../../src/engine/model/hub.ts';
import { HttpModelSource } from '../../src/engine/model/source.ts';
import type { ModelSource } from '../../src/engine/model/types.ts';

export interface HubLoadReport {
  /** Logits after every position of a short prompt, flattened. */
  logits: number[];
  /** Every progress report of the weights: [file, loaded, total]. */
  progress: [string, number, number | null][];
}

export interface HubPage {
  /** Loads `id` (hf:OWNER/REPO[@REVISION]) from the Hub at `endpoint`, through the default cache. */
  load(endpoint: string, id: string): Promise<HubLoadReport>;
  /** Loads a plain model folder served over http, for comparison. */
  loadFolder(url: string): Promise<HubLoadReport>;
  /** The message of the error that loading `id` throws, or null when it loads. */
  loadError(endpoint: string, id: string): Promise<{ name: string; kind: string; message: string } | null>;
  /** The URLs of the entries in the Hub cache. */
  cacheKeys(): Promise<string[]>;
}

declare global {
  interface Window {
    rlplayHub: HubPage;
  }
}

let gpuPromise: Promise<GpuContext> | null = null;
function gpu(): Promise<GpuContext> {
  gpuPromise ??= requestGpu(navigator.gpu, { onLost: (reason) => console.error(`GPU device lost: ${reason}`) });
  return gpuPromise;
}

async function report(source: ModelSource): Promise<HubLoadReport> {
  const progress: HubLoadReport['progress'] = [];
  const model = await loadModel(await gpu(), source, (p) => progress.push([p.file, p.loadedBytes, p.totalBytes]));
  try {
    const { logits } = await model.score([model.tokenizer.encode('Once upon a time')], { logits: true });
    return { logits: logits![0].flatMap((row) => [...row]), progress };
  } finally {
    model.dispose();
  }
}

window.rlplayHub = {
  load: (endpoint, id) => report(new HubModelSource(parseHubId(id), { endpoint })),
  loadFolder: (url) => report(new HttpModelSource(new URL(url, location.href).href)),
  async loadError(endpoint, id) {
    try {
      await report(new HubModelSource(parseHubId(id), { endpoint }));
      return null;
    } catch (error) {
      const e = error as Error & { kind?: string };
      return { name: e.name, kind: e.kind ?? '', message: e.message };
    }
  },
  async cacheKeys() {
    // HubModelSource's default cache in a page: CacheStorageHubCache, in the cache named rlplay-models.
    return (await (await caches.open('rlplay-models')).keys()).map((request) => request.url);
  },
};
document.title = 'hub ready';
