// Training on the GPU: the loss kernel against its float64 reference, and (once the backward pass
// exists) gradients of whole models against finite differences. Run in Node and in Chromium.
import { readFloat32, storageBuffer, storageFrom } from '../../src/engine/gpu/buffers.ts';
import { encodeDispatches, Kernels } from '../../src/engine/gpu/kernels.ts';
import { referenceTokenLoss } from '../../src/engine/reference/loss.ts';
import { INPUT_FLOATS, LOSS_PARAMS_BYTES, lossDispatches, packLossInputs, writeLossParams, type LossWeights, type TokenLossInputs } from '../../src/engine/train/loss.ts';
import { loadModel, type Model } from '../../src/engine/model.ts';
import type { HostLoraAdapter } from '../../src/engine/lora/adapter.ts';
import { padLeft } from '../../src/engine/padding.ts';
import { referenceForward } from '../../src/engine/reference/model.ts';
import { entropy, logSoftmax } from '../../src/engine/reference/ops.ts';
import { packBatch, type PackedBatch, type TrainBatch } from '../../src/engine/train/batch.ts';
import { TrainingState } from '../../src/engine/train/graph.ts';
import { ValueHead } from '../../src/engine/train/value-head.ts';
import { assert, assertClose, randomArray, seededRandom } from './assert.ts';
import { MemoryModelSource, tinyModelFiles, type TinyModelOptions } from './tiny-model.ts';
import type { GpuCheck } from './kernel-checks.ts';

const lossCheck: GpuCheck = {
  name: 'token_loss: every loss term, its gradients and the metric sums match the float64 reference',
  async run(gpu) {
    const random = seededRandom(21);
    const R = 150;
    const settings: LossWeights[] = [
      { nll: 1 },
      { pg: 1 },
      { ppo: 1, clip: 0.2, value: 0.5, entropy: 0.01, kl: 0.05 },
      { ppo: 1, clip: 0.1, value: 1, valueClip: 0.2 },
    ];
    const kernels = new Kernels(gpu.device, 8);
    for (const weights of settings) {
      const owned: GPUBuffer[] = [];
      const logprob = Float32Array.from({ length: R }, () => -4 * random());
      const entropy = Float32Array.from({ length: R }, () => 3 * random());
      const value = randomArray(random, R, 2);
      const inputs: TokenLossInputs = {
        mask: Float32Array.from({ length: R }, (_, r) => (r % 5 === 0 ? 0 : 1)),
        advantage: randomArray(random, R, 2),
        oldLogprob: Float32Array.from(logprob, (lp) => lp + (random() - 0.5) * 0.8),
        refLogprob: Float32Array.from(logprob, (lp) => lp + (random() - 0.5)),
        returns: randomArray(random, R, 2),
        oldValue: Float32Array.from(value, (v) => v + (random() - 0.5)),
      };
      const actionTokens = Array.from(inputs.mask).reduce((a, m) => a + m, 0);
      const buffer = (bytes: number, label: string) => {
        const b = storageBuffer(gpu.device, bytes, label);
        owned.push(b);
        return b;
      };
      const b = {
        logprob: storageFrom(gpu.device, logprob, 'lp'),
        entropy: storageFrom(gpu.device, entropy, 'ent'),
        value: storageFrom(gpu.device, value, 'v'),
        inputs: storageFrom(gpu.device, packLossInputs(inputs), 'inputs'),
        gLogprob: buffer(R * 4, 'g lp'),
        gEntropy: buffer(R * 4, 'g ent'),
        gValue: buffer(R * 4, 'g v'),
        rowMetrics: buffer(R * INPUT_FLOATS * 4, 'metrics'),
        sums: buffer(8 * 4, 'sums'),
      };
      owned.push(b.logprob, b.entropy, b.value, b.inputs);
      const params = gpu.device.createBuffer({ size: LOSS_PARAMS_BYTES, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
      owned.push(params);
      writeLossParams(gpu.device, params, weights, R, actionTokens);
      const encoder = gpu.device.createCommandEncoder();
      encodeDispatches(encoder, lossDispatches(kernels, params, R, b));
      gpu.device.queue.submit([encoder.finish()]);
      const ref = referenceTokenLoss(weights, logprob, entropy, value, inputs);
      const what = JSON.stringify(weights);
      assertClose(await readFloat32(gpu.device, b.gLogprob, R), ref.gLogprob, `${what}: dL/dlogprob`, 1e-6, 1e-5);
      assertClose(await readFloat32(gpu.device, b.gEntropy, R), ref.gEntropy, `${what}: dL/dentropy`, 1e-6, 1e-5);
      assertClose(await readFloat32(gpu.device, b.gValue, R), ref.gValue, `${what}: dL/dvalue`, 1e-6, 1e-5);
      assertClose(await readFloat32(gpu.device, b.sums, 8), ref.metrics, `${what}: metric sums`, 1e-5, 1e-4);
      for (const o of owned) o.destroy();
    }
  },
};

/** The whole loss in float64: reference forward with the adapter, LM head, value head, loss terms. */
function referenceLoss(model: Model, batch: TrainBatch, packed: PackedBatch, weights: LossWeights, adapter: HostLoraAdapter, value: { weight: Float64Array; bias: number }): number {
  const padded = padLeft(batch.sequences, 0);
  const { vocabSize: V, hiddenSize: C } = model.config;
  const ref = referenceForward(model.config, model.files.weights, padded.ids, padded.mask, adapter);
  const R = packed.B * packed.T;
  const lp = new Float64Array(R);
  const ent = new Float64Array(R);
  const v = new Float64Array(R);
  for (let r = 0; r < R; r++) {
    const logits = ref.logits.subarray(r * V, (r + 1) * V);
    const logp = logSoftmax(logits);
    lp[r] = packed.targets[r] >= 0 ? logp[packed.targets[r]] : 0;
    ent[r] = entropy(logits);
    let sum = value.bias;
    for (let c = 0; c < C; c++) sum += value.weight[c] * ref.hidden[r * C + c];
    v[r] = sum;
  }
  const column = (c: number) => Float64Array.from({ length: R }, (_, r) => packed.lossInputs[r * INPUT_FLOATS + c]);
  const inputs: TokenLossInputs = { mask: column(0), advantage: column(1), oldLogprob: column(2), refLogprob: column(3), returns: column(4), oldValue: column(5) };
  return referenceTokenLoss(weights, lp, ent, v, inputs).loss;
}

const gradientCheck: GpuCheck = {
  name: 'backward: LoRA and value-head gradients match central differences of the float64 loss (multi-turn masks, padding)',
  async run(gpu) {
    const shapes: TinyModelOptions[] = [
      { architecture: 'llama', numHeads: 4, numKvHeads: 2, tied: false, numLayers: 2, seed: 31 },
      { architecture: 'qwen2', numHeads: 4, numKvHeads: 1, tied: true, numLayers: 2, seed: 32 },
    ];
    const weights: LossWeights = { pg: 1, nll: 0.5, entropy: 0.1, kl: 0.2, value: 0.5 };

    for (const options of shapes) {
      const model = await loadModel(gpu, new MemoryModelSource(tinyModelFiles(options).files));
      const random = seededRandom(options.seed!);
      const host = model.createAdapter({ r: 2, alpha: 4, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], rslora: false, dropout: 0, layers: null }, options.seed!);
      for (const m of host.modules) m.B = randomArray(random, m.B.length, 0.3);
      const adapter = model.uploadAdapter(host);
      const C = model.config.hiddenSize;
      const value = { weight: randomArray(random, C, 0.3), bias: 0.1 };
      const valueHead = new ValueHead(gpu, C, value);
      const lengths = [7, 4];
      const sequences = lengths.map((n) => [1, ...Array.from({ length: n - 1 }, () => 3 + Math.floor(random() * (model.config.vocabSize - 3)))]);
      // two action spans per sequence, as in a multi-turn transcript: prompt, action, observation, action
      const actionMask = sequences.map((s) => s.map((_, t) => (t === 0 ? 0 : t % 3 === 0 ? 0 : 1)));
      const perToken = (scale: number) => sequences.map((s) => s.map(() => (random() * 2 - 1) * scale));
      const batch: TrainBatch = { sequences, actionMask, advantages: perToken(1), refLogprobs: perToken(1).map((row) => row.map((x) => x - 3)), returns: perToken(1) };
      const packed = packBatch(batch);
      const state = new TrainingState(model.gpuModel, packed.B, packed.T, adapter, valueHead);
      state.load(packed);
      writeLossParams(gpu.device, state.lossParams, weights, packed.B * packed.T, packed.actionTokens);
      const encoder = gpu.device.createCommandEncoder();
      adapter.parameters.zeroGrads(encoder);
      valueHead.parameters.zeroGrads(encoder);
      encoder.clearBuffer(state.metricSums);
      encodeDispatches(encoder, state.plan());
      gpu.device.queue.submit([encoder.finish()]);
      const loraGrads = await adapter.parameters.readGrads();
      const valueGrads = await valueHead.parameters.readGrads();

      const h = 1e-4;
      const valueF64 = { weight: Float64Array.from(value.weight), bias: value.bias };
      const lossAt = (a: HostLoraAdapter, v = valueF64) => referenceLoss(model, batch, packed, weights, a, v);
      const compared: { what: string; gpu: number; fd: number }[] = [];
      for (const m of host.modules.filter((_, i) => i % 3 === 0)) {
        for (const [matrix, name] of [[m.A, 'A'], [m.B, 'B']] as const) {
          for (let k = 0; k < 3; k++) {
            const index = Math.floor(random() * matrix.length);
            const perturbed = (delta: number) => ({
              ...host,
              modules: host.modules.map((x) => (x !== m ? x : { ...x, [name]: Float64Array.from(matrix, (value, i) => (i === index ? value + delta : value)) as unknown as Float32Array })),
            });
            const fd = (lossAt(perturbed(h)) - lossAt(perturbed(-h))) / (2 * h);
            compared.push({ what: `${m.layer}.${m.target}.${name}[${index}]`, gpu: loraGrads.get(`${m.layer}.${m.target}.${name}`)![index], fd });
          }
        }
      }
      for (let c = 0; c < C; c += 3) {
        const shifted = (delta: number) => ({ weight: Float64Array.from(valueF64.weight, (w, i) => (i === c ? w + delta : w)), bias: valueF64.bias });
        compared.push({ what: `value.weight[${c}]`, gpu: valueGrads.get('value.weight')![c], fd: (lossAt(host, shifted(h)) - lossAt(host, shifted(-h))) / (2 * h) });
      }
      compared.push({ what: 'value.bias', gpu: valueGrads.get('value.bias')![0], fd: (lossAt(host, { ...valueF64, bias: valueF64.bias + h }) - lossAt(host, { ...valueF64, bias: valueF64.bias - h })) / (2 * h) });
      const scale = Math.max(...compared.map((c) => Math.abs(c.fd)));
      for (const c of compared) {
        const error = Math.abs(c.gpu - c.fd) / Math.max(Math.abs(c.fd), 1e-2 * scale);
        assert(error <= 1e-3, `${options.architecture}: gradient of ${c.what}: GPU ${c.gpu}, finite differences ${c.fd} (relative error ${error.toExponential(2)})`);
      }
      assert(compared.some((c) => Math.abs(c.fd) > 1e-3), 'the checked gradients are not all zero');
      state.dispose();
      adapter.dispose();
      valueHead.dispose();
      model.dispose();
    }
  },
};

export const trainChecks: GpuCheck[] = [lossCheck, gradientCheck];
