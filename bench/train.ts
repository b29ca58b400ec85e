// npm run bench:train -- [--model DIR] [--batch B] [--tokens T] [--steps N] [--lora-r R]
//
// Training throughput of the WGSL engine: tokens/s of a LoRA step (all seven projections) and of a
// full-parameter step where the model is small enough, with the memory each needs (activations and
// their gradients; parameters, gradients and AdamW moments) and dispatches and read-backs per step,
// and in Node what polite polling of Dawn's events saves against Dawn's own busy polling.
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { pollDawnPolitely, spinDawnPolls } from '../src/engine/gpu/dawn-polling.ts';
import { requestNodeGpu } from '../src/engine/gpu/node-gpu.ts';
import { LORA_TARGETS } from '../src/engine/lora/adapter.ts';
import { loadModel, type Model } from '../src/engine/model.ts';
import { openModelSource } from '../src/engine/model/source-node.ts';
import type { TrainBatch } from '../src/engine/train/batch.ts';
import { Trainer } from '../src/engine/train/trainer.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: '../shared/fixtures/stories260K' },
    batch: { type: 'string', default: '8' },
    tokens: { type: 'string', default: '64' },
    steps: { type: 'string', default: '5' },
    'lora-r': { type: 'string', default: '8' },
  },
});
const B = Number(values.batch);
const T = Number(values.tokens);
const steps = Number(values.steps);

const gpu = await requestNodeGpu();
const model = await loadModel(gpu, openModelSource(resolve(values.model!)));
const V = model.config.vocabSize;
// Sequences of T tokens; the second half of each is the "completion" the loss sees.
const batch: TrainBatch = {
  sequences: Array.from({ length: B }, (_, b) => Array.from({ length: T }, (_, t) => (t === 0 ? 1 : 3 + ((b * 131 + t * 17) % (V - 3))))),
  actionMask: Array.from({ length: B }, () => Array.from({ length: T }, (_, t) => (t >= T / 2 ? 1 : 0))),
};

const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
console.log(`model ${values.model}: ${model.config.numLayers} layers, hidden ${model.config.hiddenSize}, vocabulary ${V}; WebGPU adapter: ${gpu.adapterName}`);
console.log(`micro-batch ${B} x ${T} tokens, best of ${steps} steps after one warm-up step`);

/** Best step time of `trainer` over `steps` steps, after one warm-up step. */
async function bestStepMs(trainer: Trainer): Promise<number> {
  await trainer.step([batch], { nll: 1 });
  let best = Infinity;
  for (let i = 0; i < steps; i++) {
    const started = performance.now();
    await trainer.step([batch], { nll: 1 });
    best = Math.min(best, performance.now() - started);
  }
  return best;
}

function row(mode: string, trainer: Trainer, ms: number): string {
  const floats = trainer.parameters.size + trainer.valueHead.parameters.size;
  return [
    mode.padEnd(4),
    ((B * T) / (ms / 1000)).toFixed(0).padStart(8),
    ms.toFixed(0).padStart(7),
    mib(trainer.bytesPerMicroBatch(B, T)).padStart(17),
    mib(floats * 4 * 4).padStart(16),
    String(trainer.dispatchesPerStep(B, T)).padStart(15),
    '1'.padStart(14),
  ].join('  ');
}

console.log('mode  tokens/s  step ms  activation memory  optimiser memory  dispatches/step  readbacks/step');
const host = model.createAdapter({ r: Number(values['lora-r']), alpha: 2 * Number(values['lora-r']), targets: [...LORA_TARGETS], rslora: false, dropout: 0, layers: null }, 0);
const adapter = model.uploadAdapter(host);
const loraTrainer = new Trainer(model.gpuModel, { train: adapter, optimizer: { schedule: { kind: 'constant', lr: 1e-4 } } });
const loraMs = await bestStepMs(loraTrainer);
console.log(row('LoRA', loraTrainer, loraMs));
// The same LoRA step with Dawn's own busy polling, for the ratio (src/engine/gpu/dawn-polling.ts).
spinDawnPolls();
const busyPollingMs = await bestStepMs(loraTrainer);
pollDawnPolitely();
const pollingLine = `Dawn's event polling: a LoRA step takes ${loraMs.toFixed(0)} ms polling politely, ${busyPollingMs.toFixed(0)} ms busy-polling (${(busyPollingMs / loraMs).toFixed(2)}x)`;
loraTrainer.dispose();
adapter.dispose();
model.dispose();

let full: Model | null = null;
try {
  full = await loadModel(gpu, openModelSource(resolve(values.model!)), undefined, { trainable: true });
} catch (error) {
  console.log(`full  (not run: ${(error as Error).message})`);
}
if (full) {
  const fullTrainer = new Trainer(full.gpuModel, { train: 'full', optimizer: { schedule: { kind: 'constant', lr: 1e-4 } } });
  console.log(row('full', fullTrainer, await bestStepMs(fullTrainer)));
  fullTrainer.dispose();
  full.dispose();
}
console.log(pollingLine);
console.log(`LoRA: r=${host.settings.r} on all 7 projections of every layer. Optimiser memory: parameters, gradients and two AdamW moments (value head included).`);
process.exit(0);
