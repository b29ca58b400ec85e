// npm run bench:engine -- [--model DIR (default: the embedded default model, else stories260K)] [--prompt-tokens N] [--new-tokens N] [--batches 1,8,32] [--repeats R] [--no-browser]
//
// Prefill and decode throughput of the WGSL engine at several batch sizes, with dispatches and
// read-backs per decode step, against the same model through transformers.js when the folder has
// onnx/model.onnx, in one run, as two tables:
// - Node: our engine on Dawn against transformers.js on onnxruntime-node with its WebGPU execution
//   provider (the same Vulkan GPU) and on its CPU;
// - browser (headless Chromium, unless --no-browser or no Chromium at CHROMIUM_PATH or
//   /usr/bin/chromium): on the page's one WebGPU adapter, our engine against transformers.js with
//   device 'webgpu' and with device 'wasm' (bench/browser/). Everything stays on 127.0.0.1.
import { existsSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { DEFAULT_MODEL_DIR } from '../src/cli/load.ts';
import { requestNodeGpu } from '../src/engine/gpu/node-gpu.ts';
import { loadModel } from '../src/engine/model.ts';
import { openModelSource } from '../src/engine/model/source-node.ts';
import type { BrowserBenchReport } from './browser/driver.ts';
import { benchOurs, benchTransformersJs, type BenchSettings, type Row } from './browser/measure.ts';

const chromiumPath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const defaultModel = existsSync(join(DEFAULT_MODEL_DIR, 'config.json')) ? DEFAULT_MODEL_DIR : '../shared/fixtures/stories260K';
const { values } = parseArgs({
  allowNegative: true,
  options: {
    model: { type: 'string', default: defaultModel },
    'prompt-tokens': { type: 'string', default: '64' },
    'new-tokens': { type: 'string', default: '64' },
    batches: { type: 'string', default: '1,8,32' },
    repeats: { type: 'string', default: '3' },
    browser: { type: 'boolean', default: existsSync(chromiumPath) },
  },
});
const modelDir = resolve(values.model!);
const settings: BenchSettings = {
  promptTokens: Number(values['prompt-tokens']),
  newTokens: Number(values['new-tokens']),
  batches: values.batches!.split(',').map(Number),
  repeats: Number(values.repeats),
};
const onnxFile = join(modelDir, 'onnx', 'model.onnx');
const hasOnnx = existsSync(onnxFile);
if (values.browser && !existsSync(chromiumPath)) throw new Error(`--browser: no Chromium at ${chromiumPath} (set CHROMIUM_PATH)`);

/**
 * transformers.js in Node on onnxruntime-node, with `device` 'webgpu' (its WebGPU execution
 * provider: Dawn of its own on the same Vulkan GPU as ours) or 'cpu'. A device that fails to load
 * is reported and skipped, so one missing provider does not lose the other figures.
 */
async function benchTransformersJsNode(device: 'webgpu' | 'cpu', shape: { vocab: number; bos: number }): Promise<Row[] | string> {
  const { AutoModelForCausalLM, Tensor, env } = await import('@huggingface/transformers');
  env.allowRemoteModels = false;
  env.localModelPath = dirname(modelDir) + '/';
  try {
    const model = await AutoModelForCausalLM.from_pretrained(basename(modelDir), { dtype: 'fp32', device });
    try {
      return await benchTransformersJs(model, Tensor, shape, settings);
    } finally {
      await model.dispose();
    }
  } catch (error) {
    return (error as Error).message;
  }
}

const fmt = (n: number | undefined) => (n === undefined ? '-' : n >= 100 ? n.toFixed(0) : n.toFixed(1));
const ratio = (ours: number | undefined, theirs: number | undefined) => (ours === undefined || theirs === undefined ? '-' : `${(ours / theirs).toFixed(2)}x`);

function printTable(header: string[], table: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...table.map((r) => r[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i])).join('  ');
  console.log(line(header));
  for (const row of table) console.log(line(row));
}

function printNode(ours: Row[], theirs: { webgpu: Row[] | string; cpu: Row[] | string } | null): void {
  const header = ['batch', 'prefill tok/s', 'decode tok/s', 'dispatches/step', 'readbacks/step'];
  const devices = ['webgpu', 'cpu'] as const;
  if (theirs) for (const d of devices) header.push(`tjs ${d} prefill`, `tjs ${d} decode`, `prefill / tjs ${d}`, `decode / tjs ${d}`);
  const table = ours.map((row) => {
    const cells = [String(row.batch), fmt(row.prefill), fmt(row.decode), String(row.dispatches), String(row.readbacks)];
    for (const d of theirs ? devices : []) {
      const rows = theirs![d];
      const other = typeof rows === 'string' ? undefined : rows.find((r) => r.batch === row.batch);
      cells.push(fmt(other?.prefill), fmt(other?.decode), ratio(row.prefill, other?.prefill), ratio(row.decode, other?.decode));
    }
    return cells;
  });
  printTable(header, table);
  if (!theirs) {
    console.log(`no ${onnxFile}: transformers.js comparison skipped`);
    return;
  }
  for (const d of devices) if (typeof theirs[d] === 'string') console.log(`transformers.js device '${d}' FAILED: ${theirs[d]}`);
  console.log('ratios: rlplay WGSL engine / transformers.js (onnxruntime-node; webgpu = its WebGPU execution provider on the same GPU); > 1 means rlplay is faster. Target: decode / tjs webgpu >= 2x');
}

function printBrowser(report: BrowserBenchReport): void {
  console.log(`\nbrowser: ${report.userAgent}`);
  for (const run of report.runs) {
    const what = `${run.runtime} ${run.device}`;
    if (run.error) console.log(`  ${what}: FAILED: ${run.error}`);
    else if (run.adapter) console.log(`  ${what}: adapter ${run.adapter}`);
  }
  const find = (runtime: string, device: string, batch: number) => report.runs.find((r) => r.runtime === runtime && r.device === device)?.rows.find((r) => r.batch === batch);
  const header = ['runtime', 'device', 'batch', 'prefill tok/s', 'decode tok/s', 'prefill / tjs webgpu', 'decode / tjs webgpu', 'prefill / tjs wasm', 'decode / tjs wasm'];
  const table = report.runs.flatMap((run) =>
    run.rows.map((row) => {
      const cells = [run.runtime, run.device, String(row.batch), fmt(row.prefill), fmt(row.decode)];
      if (run.runtime !== 'rlplay') return [...cells, '', '', '', ''];
      const gpu = find('transformers.js', 'webgpu', row.batch);
      const wasm = find('transformers.js', 'wasm', row.batch);
      return [...cells, ratio(row.prefill, gpu?.prefill), ratio(row.decode, gpu?.decode), ratio(row.prefill, wasm?.prefill), ratio(row.decode, wasm?.decode)];
    }),
  );
  printTable(header, table);
  if (!hasOnnx) console.log(`no ${onnxFile}: transformers.js comparison skipped`);
  console.log('ratios: rlplay on WebGPU / transformers.js in the same page; > 1 means rlplay is faster. Target: decode / tjs webgpu >= 2x');
  if (report.offHost.length > 0) console.log(`OFF-HOST REQUESTS (aborted): ${report.offHost.join(', ')}`);
}

const gpu = await requestNodeGpu();
const model = await loadModel(gpu, openModelSource(modelDir));
const shape = { vocab: model.config.vocabSize, bos: model.config.bosTokenId ?? 1 };
console.log(`model ${modelDir}: ${model.config.architecture}, ${model.config.numLayers} layers, hidden ${model.config.hiddenSize}, vocabulary ${model.config.vocabSize}`);
console.log(`prompt ${settings.promptTokens} tokens, ${settings.newTokens} new tokens, greedy, best of ${settings.repeats}; tok/s summed over the batch`);
console.log(`\nNode: WebGPU adapter ${gpu.adapterName} (Dawn); transformers.js on onnxruntime-node, WebGPU and CPU`);
const ours = await benchOurs(model, settings);
model.dispose();
gpu.device.destroy();
printNode(ours, hasOnnx ? { webgpu: await benchTransformersJsNode('webgpu', shape), cpu: await benchTransformersJsNode('cpu', shape) } : null);

if (values.browser) {
  // Loaded only here: the Node part runs without Playwright (e.g. on a GPU machine with no Chromium).
  const { runBrowserBench } = await import('./browser/driver.ts');
  const report = await runBrowserBench(modelDir, chromiumPath, { onnx: hasOnnx, shape, settings });
  printBrowser(report);
  process.exit(report.offHost.length > 0 || report.runs.some((run) => run.error) ? 1 : 0);
}
process.exit(0);
