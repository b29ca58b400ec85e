// npm run bench:engine -- [--model DIR] [--prompt-tokens N] [--new-tokens N] [--batches 1,8,32] [--repeats R]
//
// Prefill and decode throughput of the WGSL engine at several batch sizes, with dispatches and
// read-backs per decode step; and, in the same run, the same model through transformers.js
// (ONNX Runtime) when the folder has onnx/model.onnx, as ratios. Prints a table.
import { existsSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { requestNodeGpu } from '../src/engine/gpu/node-gpu.ts';
import { loadModel, type Model } from '../src/engine/model.ts';
import { openModelSource } from '../src/engine/model/source-node.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: '../shared/fixtures/stories260K' },
    'prompt-tokens': { type: 'string', default: '64' },
    'new-tokens': { type: 'string', default: '64' },
    batches: { type: 'string', default: '1,8,32' },
    repeats: { type: 'string', default: '3' },
  },
});
const modelDir = resolve(values.model!);
const promptTokens = Number(values['prompt-tokens']);
const newTokens = Number(values['new-tokens']);
const batches = values.batches!.split(',').map(Number);
const repeats = Number(values.repeats);

interface Row {
  batch: number;
  prefill: number;
  decode: number;
  dispatches?: number;
  readbacks?: number;
}

/** Prompts of `promptTokens` ids each, different per sequence, starting with BOS. */
function prompts(model: { vocab: number; bos: number }, batch: number): number[][] {
  return Array.from({ length: batch }, (_, b) => [model.bos, ...Array.from({ length: promptTokens - 1 }, (_, t) => 3 + ((b * 31 + t * 7) % (model.vocab - 3)))]);
}

function best<T>(runs: T[], key: (run: T) => number): number {
  return Math.max(...runs.map(key));
}

async function benchOurs(model: Model): Promise<Row[]> {
  const shape = { vocab: model.config.vocabSize, bos: model.config.bosTokenId ?? 1 };
  await model.generate(prompts(shape, 1), { maxNewTokens: 4, sampling: { greedy: true } }); // compile pipelines
  const rows: Row[] = [];
  for (const batch of batches) {
    const runs = [];
    for (let r = 0; r < repeats; r++) {
      const result = await model.generate(prompts(shape, batch), { maxNewTokens: newTokens, sampling: { greedy: true } });
      runs.push(result.stats);
    }
    rows.push({
      batch,
      prefill: best(runs, (s) => (batch * promptTokens) / (s.prefillMs / 1000)),
      decode: best(runs, (s) => (batch * s.decodeSteps) / (s.decodeMs / 1000)),
      dispatches: runs[0].dispatchesPerDecodeStep,
      readbacks: runs[0].readbacksPerDecodeStep,
    });
  }
  return rows;
}

async function benchTransformersJs(vocab: number, bos: number): Promise<Row[] | null> {
  if (!existsSync(join(modelDir, 'onnx', 'model.onnx'))) return null;
  const { AutoModelForCausalLM, Tensor, env } = await import('@huggingface/transformers');
  env.allowRemoteModels = false;
  env.localModelPath = dirname(modelDir) + '/';
  const model = await AutoModelForCausalLM.from_pretrained(basename(modelDir), { dtype: 'fp32' });
  const tensor = (ids: number[][]) => new Tensor('int64', BigInt64Array.from(ids.flat(), BigInt), [ids.length, ids[0].length]);
  const inputsFor = (batch: number) => {
    const ids = prompts({ vocab, bos }, batch);
    return { input_ids: tensor(ids), attention_mask: tensor(ids.map((row) => row.map(() => 1))) };
  };
  await model.generate({ ...inputsFor(1), max_new_tokens: 4, do_sample: false }); // warm-up
  const rows: Row[] = [];
  for (const batch of batches) {
    const inputs = inputsFor(batch);
    const runs = [];
    for (let r = 0; r < repeats; r++) {
      let started = performance.now();
      await model(inputs);
      const prefillMs = performance.now() - started;
      started = performance.now();
      await model.generate({ ...inputs, max_new_tokens: newTokens, min_new_tokens: newTokens, do_sample: false });
      // generate() runs the prompt once more, then newTokens - 1 decode steps
      runs.push({ prefillMs, decodeMs: Math.max(1e-3, performance.now() - started - prefillMs) });
    }
    rows.push({
      batch,
      prefill: best(runs, (s) => (batch * promptTokens) / (s.prefillMs / 1000)),
      decode: best(runs, (s) => (batch * (newTokens - 1)) / (s.decodeMs / 1000)),
    });
  }
  return rows;
}

const gpu = await requestNodeGpu();
const model = await loadModel(gpu, openModelSource(modelDir));
console.log(`model ${modelDir}: ${model.config.architecture}, ${model.config.numLayers} layers, hidden ${model.config.hiddenSize}, vocabulary ${model.config.vocabSize}`);
console.log(`WebGPU adapter: ${gpu.adapterName}; prompt ${promptTokens} tokens, ${newTokens} new tokens, best of ${repeats}`);
const ours = await benchOurs(model);
const theirs = await benchTransformersJs(model.config.vocabSize, model.config.bosTokenId ?? 1);
model.dispose();

const fmt = (n: number | undefined) => (n === undefined ? '-' : n >= 100 ? n.toFixed(0) : n.toFixed(1));
const header = ['batch', 'prefill tok/s', 'decode tok/s', 'dispatches/step', 'readbacks/step'];
if (theirs) header.push('tjs prefill tok/s', 'tjs decode tok/s', 'prefill ratio', 'decode ratio');
const table = ours.map((row) => {
  const cells = [String(row.batch), fmt(row.prefill), fmt(row.decode), String(row.dispatches), String(row.readbacks)];
  const other = theirs?.find((r) => r.batch === row.batch);
  if (theirs) cells.push(fmt(other?.prefill), fmt(other?.decode), other ? `${(row.prefill / other.prefill).toFixed(2)}x` : '-', other ? `${(row.decode / other.decode).toFixed(2)}x` : '-');
  return cells;
});
const widths = header.map((h, i) => Math.max(h.length, ...table.map((r) => r[i].length)));
const line = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i])).join('  ');
console.log(line(header));
for (const row of table) console.log(line(row));
if (theirs) console.log('ratios: rlplay WGSL engine / transformers.js (onnxruntime-node, CPU) on the same model; > 1 means rlplay is faster');
else console.log(`no ${join(modelDir, 'onnx', 'model.onnx')}: transformers.js comparison skipped`);
process.exit(0);
