// Loaded into a page of the Vite dev server by tests/browser/export-onnx.spec.ts: exports a model
// with an adapter merged to ONNX in the page — the stories260K fixture with its synthetic adapter,
// or the embedded default model with a random one — loads the folder with transformers.js on
// onnxruntime-web's wasm backend (its .wasm/.mjs files served by the dev server, the exported files
// from memory) and compares it with our engine on Chromium's WebGPU.
import { AutoModelForCausalLM, env } from '@huggingface/transformers';
import { exportOnnx } from '../../src/engine/export/onnx.ts';
import { requestGpu } from '../../src/engine/gpu/device.ts';
import { readPeftAdapter } from '../../src/engine/lora/peft.ts';
import { Model } from '../../src/engine/model.ts';
import { loadModelFiles } from '../../src/engine/model/load.ts';
import { HttpModelSource } from '../../src/engine/model/source.ts';
import { compareWithEngine, randomAdapter, type ParityReport } from './onnx-parity.ts';

export type ExportOnnxPageResult =
  | { skipped: string }
  | (ParityReport & { files: Record<string, number>; adapterName: string; exportedFetches: string[] });

/** Which model: the fixture with its synthetic adapter, or the default model with a random adapter. */
export type ExportOnnxCase = 'stories260K' | 'default-model';

export interface ExportOnnxPage {
  run(which: ExportOnnxCase): Promise<ExportOnnxPageResult>;
}

declare global {
  interface Window {
    rlplayExportOnnx: ExportOnnxPage;
  }
}

const CASES = {
  'stories260K': { url: `${location.origin}/fixtures/stories260K/`, prompt: 'Once upon a time, there was a little girl' },
  'default-model': { url: `${location.origin}/models/rlplay-agent-mini/`, prompt: 'Question: What is the population of Fulstead?\nObservation:' },
};
/** transformers.js looks for models here; nothing is served at this path: env.fetch answers from memory. */
const EXPORTED_URL = `${location.origin}/exported-onnx/`;
const MODEL_ID = 'exported-lora';
const ORT_DIST = `${location.origin}/node_modules/onnxruntime-web/dist/`;

/** Serves the exported folder to transformers.js from memory; other requests go to the network as usual. */
function serveFromMemory(folder: Map<string, Uint8Array>, fetched: string[]): typeof env.fetch {
  const prefix = `${EXPORTED_URL}${MODEL_ID}/`;
  const fetchNext = env.fetch;
  return async (input, init) => {
    const url = new URL(input, location.href).href;
    if (!url.startsWith(prefix)) return fetchNext(input, init);
    fetched.push(url.slice(prefix.length));
    const bytes = folder.get(url.slice(prefix.length));
    if (!bytes) return new Response(`not found: ${url}`, { status: 404 });
    return new Response(bytes as Uint8Array<ArrayBuffer>, { headers: { 'Content-Length': String(bytes.length) } });
  };
}

window.rlplayExportOnnx = {
  async run(which) {
    const { url, prompt: promptText } = CASES[which];
    const present = await fetch(`${url}config.json`, { method: 'HEAD' });
    if (!present.ok || present.headers.get('content-type')?.startsWith('text/html')) return { skipped: `no ${which} at ${url}` };
    const files = await loadModelFiles(new HttpModelSource(url));
    const adapter = which === 'stories260K' ? await readPeftAdapter(new HttpModelSource(`${url}lora-synthetic-r4/`), files.config) : randomAdapter(files, 5);
    const folder = await exportOnnx(files, adapter);

    const exportedFetches: string[] = [];
    env.allowRemoteModels = false;
    env.allowLocalModels = true;
    env.localModelPath = EXPORTED_URL;
    env.useBrowserCache = false;
    env.fetch = serveFromMemory(folder, exportedFetches);
    env.backends.onnx.wasm!.wasmPaths = {
      mjs: `${ORT_DIST}ort-wasm-simd-threaded.asyncify.mjs`,
      wasm: `${ORT_DIST}ort-wasm-simd-threaded.asyncify.wasm`,
    };
    const exported = await AutoModelForCausalLM.from_pretrained(MODEL_ID, { dtype: 'fp32', device: 'wasm' });

    const gpu = await requestGpu(navigator.gpu, { onLost: (reason) => console.error(`GPU device lost: ${reason}`) });
    const engine = new Model(gpu, files);
    try {
      const prompt = files.tokenizer.encode(promptText);
      const report = await compareWithEngine(engine, engine.uploadAdapter(adapter), exported, prompt, { decodeSteps: 4, newTokens: 24, stopTokenIds: files.config.eosTokenIds });
      return {
        ...report,
        files: Object.fromEntries([...folder].map(([name, bytes]) => [name, bytes.length])),
        adapterName: gpu.adapterName,
        exportedFetches,
      };
    } finally {
      engine.dispose();
      await exported.dispose();
    }
  },
};
