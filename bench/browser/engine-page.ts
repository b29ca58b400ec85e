// The in-browser half of bench:engine (bench/engine.ts opens bench/browser/engine.html through the
// Vite dev server and calls window.rlplayBenchEngine.run). On this page's navigator.gpu: our engine
// on WebGPU, then transformers.js with device 'webgpu' and with device 'wasm' on the same folder's
// onnx/model.onnx, offline (model files from bench's static server on 127.0.0.1, onnxruntime-web's
// .wasm/.mjs from the dev server). Returns plain JSON.
import { AutoModelForCausalLM, env, Tensor } from '@huggingface/transformers';
import { requestGpu } from '../../src/engine/gpu/device.ts';
import { loadModel } from '../../src/engine/model.ts';
import { HttpModelSource } from '../../src/engine/model/source.ts';
import { benchOurs, benchTransformersJs, type BenchSettings, type Row } from './measure.ts';

export interface BrowserBenchOptions {
  /** URL of the model folder (config.json, model.safetensors, tokenizer.json, onnx/model.onnx). */
  modelUrl: string;
  /** transformers.js loads `${localModelPath}${modelId}/`, the same folder as modelUrl. */
  localModelPath: string;
  modelId: string;
  /** Whether the folder has onnx/model.onnx: without it only our engine runs. */
  onnx: boolean;
  /** Vocabulary size and BOS id, for transformers.js' prompts (our engine reads them from the model). */
  shape: { vocab: number; bos: number };
  settings: BenchSettings;
}

export interface BrowserRun {
  runtime: 'rlplay' | 'transformers.js';
  device: 'webgpu' | 'wasm';
  /** The WebGPU adapter the runtime's device came from (as the device reports it); absent for wasm. */
  adapter?: string;
  rows: Row[];
  /** Set instead of rows when this runtime failed; the other runs still happen. */
  error?: string;
}

export interface BrowserBenchResult {
  userAgent: string;
  runs: BrowserRun[];
}

declare global {
  interface Window {
    rlplayBenchEngine: { run(options: BrowserBenchOptions): Promise<BrowserBenchResult> };
  }
}

const ORT_DIST = `${location.origin}/node_modules/onnxruntime-web/dist/`;

function describe(info: GPUAdapterInfo): string {
  return [info.vendor, info.architecture, info.description].filter(Boolean).join(' ') || 'unknown adapter';
}

async function runOurs(options: BrowserBenchOptions): Promise<BrowserRun> {
  const gpu = await requestGpu(navigator.gpu, { onLost: (reason) => console.error(`GPU device lost: ${reason}`) });
  try {
    const model = await loadModel(gpu, new HttpModelSource(options.modelUrl));
    try {
      return { runtime: 'rlplay', device: 'webgpu', adapter: describe(gpu.device.adapterInfo), rows: await benchOurs(model, options.settings) };
    } finally {
      model.dispose();
    }
  } finally {
    gpu.device.destroy(); // transformers.js' WebGPU device runs next, alone on the adapter
  }
}

async function runTransformersJs(options: BrowserBenchOptions, device: 'webgpu' | 'wasm'): Promise<BrowserRun> {
  const model = await AutoModelForCausalLM.from_pretrained(options.modelId, { dtype: 'fp32', device });
  try {
    const rows = await benchTransformersJs(model, Tensor, options.shape, options.settings);
    // onnxruntime-web requests its own device on the first WebGPU session; it reports which adapter.
    const ortDevice = device === 'webgpu' ? await env.backends.onnx.webgpu?.device : undefined;
    return { runtime: 'transformers.js', device, adapter: ortDevice ? describe(ortDevice.adapterInfo) : undefined, rows };
  } finally {
    await model.dispose();
  }
}

async function attempt(runtime: BrowserRun['runtime'], device: BrowserRun['device'], run: () => Promise<BrowserRun>): Promise<BrowserRun> {
  try {
    return await run();
  } catch (error) {
    return { runtime, device, rows: [], error: error instanceof Error ? `${error.name}: ${error.message}` : String(error) };
  }
}

window.rlplayBenchEngine = {
  async run(options) {
    env.allowRemoteModels = false;
    env.allowLocalModels = true;
    env.localModelPath = options.localModelPath;
    env.useBrowserCache = false;
    // One build serves both devices in onnxruntime-web 1.2x+: the WebGPU EP lives in the asyncify wasm.
    env.backends.onnx.wasm!.wasmPaths = {
      mjs: `${ORT_DIST}ort-wasm-simd-threaded.asyncify.mjs`,
      wasm: `${ORT_DIST}ort-wasm-simd-threaded.asyncify.wasm`,
    };

    const runs = [await attempt('rlplay', 'webgpu', () => runOurs(options))];
    if (options.onnx) {
      for (const device of ['webgpu', 'wasm'] as const) runs.push(await attempt('transformers.js', device, () => runTransformersJs(options, device)));
    }
    return { userAgent: navigator.userAgent, runs };
  },
};
