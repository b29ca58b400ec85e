// Training on the GPU: the loss kernel against its float64 reference, and (once the backward pass
// exists) gradients of whole models against finite differences. Run in Node and in Chromium.
import { readFloat32, storageBuffer, storageFrom } from '../../src/engine/gpu/buffers.ts';
import { encodeDispatches, Kernels } from '../../src/engine/gpu/kernels.ts';
import { referenceTokenLoss } from '../../src/engine/reference/loss.ts';
import { INPUT_FLOATS, LOSS_METRICS, LOSS_PARAMS_BYTES, lossDispatches, packLossInputs, writeLossParams, type LossWeights, type TokenLossInputs } from '../../src/engine/train/loss.ts';
import { GpuModel, hostWeightTensors, MAX_TRAINABLE_PARAMETERS } from '../../src/engine/gpu-model.ts';
import { loadModel } from '../../src/engine/model.ts';
import { loadModelFiles } from '../../src/engine/model/load.ts';
import type { HostLinear, HostTensor, HostWeights, ModelConfig } from '../../src/engine/model/types.ts';
import { score } from '../../src/engine/score.ts';
import type { HostLoraAdapter } from '../../src/engine/lora/adapter.ts';
import { padLeft } from '../../src/engine/padding.ts';
import { referenceForward, type ReferenceDropout } from '../../src/engine/reference/model.ts';
import { entropy, logSoftmax } from '../../src/engine/reference/ops.ts';
import { packBatch, type PackedBatch, type TrainBatch } from '../../src/engine/train/batch.ts';
import { TrainingState } from '../../src/engine/train/graph.ts';
import { Trainer } from '../../src/engine/train/trainer.ts';
import type { GpuContext } from '../../src/engine/gpu/device.ts';
import type { GpuLoraAdapter } from '../../src/engine/lora/gpu-adapter.ts';
import type { Model } from '../../src/engine/model.ts';
import { ValueHead } from '../../src/engine/train/value-head.ts';
import { assert, assertClose, maxAbsDiff, randomArray, seededRandom } from './assert.ts';
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
      { pg: 1, value: 1 }, // with a value mask apart from the action mask (below)
    ];
    const kernels = new Kernels(gpu.device, 8);
    for (const [i, weights] of settings.entries()) {
      const owned: GPUBuffer[] = [];
      const logprob = Float32Array.from({ length: R }, () => -4 * random());
      const entropy = Float32Array.from({ length: R }, () => 3 * random());
      const value = randomArray(random, R, 2);
      const inputs: TokenLossInputs = {
        mask: Float32Array.from({ length: R }, (_, r) => (r % 5 === 0 ? 0 : 1)),
        advantage: randomArray(random, R, 2),
        oldLogprob: Float32Array.from(logprob, (lp) => lp + (random() - 0.5) * 0.8),
        referenceLogProb: Float32Array.from(logprob, (lp) => lp + (random() - 0.5)),
        returns: randomArray(random, R, 2),
        oldValue: Float32Array.from(value, (v) => v + (random() - 0.5)),
        // A value mask apart from the action mask: some rows carry only the value loss, some only the others.
        ...(i === settings.length - 1 ? { valueMask: Float32Array.from({ length: R }, (_, r) => (r % 3 === 0 ? 1 : 0)) } : {}),
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

/**
 * The whole loss in float64: reference forward (base weights `base`, default the model's own, with the
 * adapter if any), LM head, value head, loss terms.
 */
function referenceLoss(
  model: { config: ModelConfig; files: { weights: HostWeights } }, batch: TrainBatch, packed: PackedBatch, weights: LossWeights,
  adapter: HostLoraAdapter | undefined, value: { weight: Float64Array; bias: number }, base: HostWeights = model.files.weights, dropout?: ReferenceDropout,
): number {
  const padded = padLeft(batch.sequences, 0);
  const { vocabSize: V, hiddenSize: C } = model.config;
  const layout = packed.rowLimits || packed.maxPosition !== undefined ? { positions: packed.positions, rowLimits: packed.rowLimits } : {};
  const ref = referenceForward(model.config, base, padded.ids, padded.mask, adapter, dropout, layout);
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
  const inputs: TokenLossInputs = { mask: column(0), advantage: column(1), oldLogprob: column(2), referenceLogProb: column(3), returns: column(4), oldValue: column(5), valueMask: column(6) };
  return referenceTokenLoss(weights, lp, ent, v, inputs).loss;
}

const gradientCheck: GpuCheck = {
  name: 'backward: LoRA (with and without dropout) and value-head gradients match central differences of the float64 loss (multi-turn masks, padding)',
  async run(gpu) {
    const shapes: TinyModelOptions[] = [
      { architecture: 'llama', numHeads: 4, numKvHeads: 2, tied: false, numLayers: 2, seed: 31 },
      { architecture: 'qwen2', numHeads: 4, numKvHeads: 1, tied: true, numLayers: 2, seed: 32 },
    ];
    const weights: LossWeights = { pg: 1, nll: 0.5, entropy: 0.1, kl: 0.2, value: 0.5 };
    // The qwen2 case trains with LoRA dropout: the gradient is that of the loss under the step's masks.
    const dropoutOf = (options: TinyModelOptions) => (options.architecture === 'qwen2' ? 0.25 : 0);
    const masks: ReferenceDropout = { seed: 5, step: 3 };

    for (const options of shapes) {
      const model = await loadModel(gpu, new MemoryModelSource(tinyModelFiles(options).files));
      const random = seededRandom(options.seed!);
      const host = model.createAdapter({ r: 2, alpha: 4, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], rslora: false, dropout: dropoutOf(options), layers: null }, options.seed!);
      for (const m of host.modules) m.B = randomArray(random, m.B.length, 0.3);
      const adapter = model.uploadAdapter(host);
      const C = model.config.hiddenSize;
      const value = { weight: randomArray(random, C, 0.3), bias: 0.1 };
      const valueHead = new ValueHead(gpu, C, value);
      // 2 x 20 rows, 10 of them seen by the loss: the LM head runs on 16 gathered rows (10 and 6 of
      // padding) and its gradient reaches the other 30 rows as zeros
      const lengths = [20, 4];
      const sequences = lengths.map((n) => [1, ...Array.from({ length: n - 1 }, () => 3 + Math.floor(random() * (model.config.vocabSize - 3)))]);
      // a long prompt, then action spans as in a multi-turn transcript: action, observation, action
      const actionMask = sequences.map((s) => s.map((_, t) => (t < s.length - 12 || t % 3 === 0 ? 0 : 1)));
      const perToken = (scale: number) => sequences.map((s) => s.map(() => (random() * 2 - 1) * scale));
      const batch: TrainBatch = { sequences, actionMask, advantages: perToken(1), referenceLogProbs: perToken(1).map((row) => row.map((x) => x - 3)), returns: perToken(1) };
      const packed = packBatch(batch);
      const state = new TrainingState(model.gpuModel, packed.B, packed.T, adapter, valueHead, { dropoutSeed: masks.seed });
      state.load(packed);
      state.setDropoutStep(masks.step);
      state.setLoss(weights, packed.actionTokens);
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
      const lossAt = (a: HostLoraAdapter, v = valueF64) => referenceLoss(model, batch, packed, weights, a, v, undefined, masks);
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

/** A float64 copy of host weights (a tied LM head stays the embedding object), for finite differences. */
function float64Weights(w: HostWeights): HostWeights {
  const copy = (t: HostTensor): HostTensor => ({ ...t, data: Float64Array.from(t.data) as unknown as Float32Array });
  const linear = (l: HostLinear): HostLinear => ({ weight: copy(l.weight), bias: l.bias && copy(l.bias) });
  const embedding = copy(w.embedding);
  return {
    embedding,
    lmHead: w.lmHead === w.embedding ? embedding : copy(w.lmHead),
    layers: w.layers.map((l) => ({
      inputNorm: copy(l.inputNorm), q: linear(l.q), k: linear(l.k), v: linear(l.v), o: linear(l.o),
      postAttentionNorm: copy(l.postAttentionNorm), gate: linear(l.gate), up: linear(l.up), down: linear(l.down),
    })),
    finalNorm: copy(w.finalNorm),
  };
}

/** A tiny model's config and host weights; `oBias` adds random o_proj biases (the fixture writes none). */
async function tinyHostModel(options: TinyModelOptions, oBias = false): Promise<{ config: ModelConfig; weights: HostWeights }> {
  const files = await loadModelFiles(new MemoryModelSource(tinyModelFiles(options).files));
  if (!oBias) return { config: files.config, weights: files.weights };
  const random = seededRandom(options.seed! + 1000);
  const C = files.config.hiddenSize;
  const w = files.weights;
  const layers = w.layers.map((l, i) => ({ ...l, o: { ...l.o, bias: { name: `model.layers.${i}.self_attn.o_proj.bias`, shape: [C], data: randomArray(random, C, 0.2) } } }));
  return { config: { ...files.config, oBias: true }, weights: { ...w, layers } };
}

/** Two sequences of a multi-turn transcript (prompt, action, observation, action), random advantages and returns. */
function multiTurnBatch(random: () => number, vocabSize: number, lengths: number[]): TrainBatch {
  const sequences = lengths.map((n) => [1, ...Array.from({ length: n - 1 }, () => 3 + Math.floor(random() * (vocabSize - 3)))]);
  const actionMask = sequences.map((s) => s.map((_, t) => (t === 0 ? 0 : t % 3 === 0 ? 0 : 1)));
  const perToken = (scale: number) => sequences.map((s) => s.map(() => (random() * 2 - 1) * scale));
  return { sequences, actionMask, advantages: perToken(1), referenceLogProbs: perToken(1).map((row) => row.map((x) => x - 3)), returns: perToken(1) };
}

function assertSameTensor(got: HostTensor, expected: HostTensor, what: string): void {
  assert(got.name === expected.name, `${what}: name ${got.name}, expected ${expected.name}`);
  assert(JSON.stringify(got.shape) === JSON.stringify(expected.shape), `${what} ${got.name}: shape [${got.shape}], expected [${expected.shape}]`);
  assertClose(got.data, expected.data, `${what} ${got.name}`, 0, 0);
}

const trainableModelCheck: GpuCheck = {
  name: 'trainable GpuModel: same logits as a normal one, weights read back under checkpoint names, limits enforced',
  async run(gpu) {
    const shapes: [TinyModelOptions, boolean][] = [
      [{ architecture: 'llama', numHeads: 4, numKvHeads: 2, tied: false, numLayers: 2, seed: 41 }, false],
      [{ architecture: 'qwen2', numHeads: 4, numKvHeads: 1, tied: true, numLayers: 2, seed: 42 }, true],
    ];
    for (const [options, oBias] of shapes) {
      const { config, weights } = await tinyHostModel(options, oBias);
      const what = `${options.architecture}${options.tied ? ' tied' : ''}`;
      const plain = new GpuModel(gpu, config, weights);
      const trainable = new GpuModel(gpu, config, weights, { trainable: true });
      assert(plain.trainable === null && trainable.trainable !== null, `${what}: trainable views only with { trainable: true }`);
      assert(trainable.trainable!.tied === (weights.lmHead === weights.embedding), `${what}: tied flag`);
      const sequences = [[1, 5, 9, 3, 40, 7], [1, 22, 4]];
      const a = await score(plain, sequences, { logits: true });
      const b = await score(trainable, sequences, { logits: true });
      a.logits!.forEach((row, i) => row.forEach((logits, t) => assertClose(b.logits![i][t], logits, `${what}: logits of sequence ${i} at ${t}`, 1e-6, 1e-6)));

      for (const [model, kind] of [[trainable, 'trainable'], [plain, 'plain']] as const) {
        const back = await model.readWeights();
        assert((back.lmHead === back.embedding) === (weights.lmHead === weights.embedding), `${what} ${kind}: tied LM head read back as the embedding`);
        const expected = hostWeightTensors(weights);
        const got = hostWeightTensors(back);
        assert(got.length === expected.length, `${what} ${kind}: ${got.length} tensors read back, expected ${expected.length}`);
        got.forEach((t, i) => assertSameTensor(t, expected[i], `${what} ${kind}: read back`));
      }
      // weights changed on the GPU come back changed, in the right (un-fused) place
      const set = trainable.trainable!.parameters;
      const qkv = Float32Array.from((await set.read()).get('layers.1.qkv')!);
      const C = config.hiddenSize;
      const kRow0 = config.numHeads * config.headDim;
      qkv[kRow0 * C + 2] = 123;
      set.write('layers.1.qkv', qkv);
      const changed = await trainable.readWeights();
      assert(changed.layers[1].k.weight.data[2] === 123 && changed.layers[1].q.weight.data.every((v, i) => v === weights.layers[1].q.weight.data[i]), `${what}: a write to the fused qkv reads back as k_proj`);
      plain.dispose();
      trainable.dispose();
    }
    // full mode is for tiny models: too many parameters for one binding is refused with a message
    const { config, weights } = await tinyHostModel({ seed: 43 });
    let message = '';
    try {
      new GpuModel({ ...gpu, maxBindingBytes: 16384 }, config, weights, { trainable: true }).dispose();
    } catch (error) {
      message = String(error);
    }
    assert(/tiny models.*LoRA/s.test(message), `a model over the binding limit must be refused in full mode, got: ${message || 'no error'}`);
    assert(MAX_TRAINABLE_PARAMETERS === 64 * 2 ** 20, 'the parameter cap is 64M');
    // and a training state refuses full mode without a trainable model, or with a LoRA adapter
    const plain = new GpuModel(gpu, config, weights);
    const valueHead = new ValueHead(gpu, config.hiddenSize);
    let refused = false;
    try {
      new TrainingState(plain, 1, 4, null, valueHead, { fullParameters: true }).dispose();
    } catch {
      refused = true;
    }
    assert(refused, 'full-parameter TrainingState on a model without trainable weights must be refused');
    valueHead.dispose();
    plain.dispose();
  },
};

/** Where a host tensor's gradient sits in the trainable model's parameter set: tensor name and float offset. */
interface GradSlot {
  what: string;
  host: HostTensor;
  tensor: string;
  offset: number;
}

const fullGradientCheck: GpuCheck = {
  name: 'backward: full-parameter gradients of every weight match central differences of the float64 loss',
  async run(gpu) {
    const shapes: [TinyModelOptions, boolean][] = [
      [{ architecture: 'llama', numHeads: 4, numKvHeads: 2, tied: false, numLayers: 2, seed: 51 }, false],
      [{ architecture: 'qwen2', numHeads: 4, numKvHeads: 1, tied: true, numLayers: 2, seed: 52 }, true],
    ];
    const lossWeights: LossWeights = { pg: 1, nll: 0.5, entropy: 0.1, kl: 0.2, value: 0.5 };
    for (const [options, oBias] of shapes) {
      const { config, weights } = await tinyHostModel(options, oBias);
      const what = `${options.architecture}${options.tied ? ' tied' : ''}`;
      const model = new GpuModel(gpu, config, weights, { trainable: true });
      const trainable = model.trainable!;
      const random = seededRandom(options.seed!);
      const { hiddenSize: C, numHeads: H, numKvHeads: Hk, headDim: D, intermediateSize: F, vocabSize: V } = config;
      const value = { weight: randomArray(random, C, 0.3), bias: 0.1 };
      const valueHead = new ValueHead(gpu, C, value);
      const batch = multiTurnBatch(random, V, [7, 4]);
      const packed = packBatch(batch);
      const state = new TrainingState(model, packed.B, packed.T, null, valueHead, { fullParameters: true });
      state.load(packed);
      state.setLoss(lossWeights, packed.actionTokens);
      const step = (zero: boolean) => {
        const encoder = gpu.device.createCommandEncoder();
        if (zero) {
          trainable.parameters.zeroGrads(encoder);
          valueHead.parameters.zeroGrads(encoder);
        }
        encoder.clearBuffer(state.metricSums);
        encodeDispatches(encoder, state.plan());
        gpu.device.queue.submit([encoder.finish()]);
      };
      step(true);
      const grads = await trainable.parameters.readGrads();
      // a second micro-batch without zeroing adds the same gradients again
      step(false);
      const twice = await trainable.parameters.readGrads();
      for (const [name, g] of grads) assertClose(twice.get(name)!, g.map((x) => 2 * x), `${what}: ${name} gradients accumulate`, 1e-6, 1e-5);

      // the coordinates to check, tensor by tensor
      const slots: GradSlot[] = [];
      const slot = (what: string, host: HostTensor, tensor: string, offset = 0) => slots.push({ what, host, tensor, offset });
      slot('embedding', weights.embedding, 'embedding');
      if (!trainable.tied) slot('lm_head', weights.lmHead, 'lm_head');
      weights.layers.forEach((l, i) => {
        const p = `layers.${i}`;
        slot(`${p}.input_norm`, l.inputNorm, `${p}.input_norm`);
        slot(`${p}.q`, l.q.weight, `${p}.qkv`, 0);
        slot(`${p}.k`, l.k.weight, `${p}.qkv`, H * D * C);
        slot(`${p}.v`, l.v.weight, `${p}.qkv`, (H + Hk) * D * C);
        if (l.q.bias) {
          slot(`${p}.q.bias`, l.q.bias, `${p}.qkv.bias`, 0);
          slot(`${p}.k.bias`, l.k.bias!, `${p}.qkv.bias`, H * D);
          slot(`${p}.v.bias`, l.v.bias!, `${p}.qkv.bias`, (H + Hk) * D);
        }
        slot(`${p}.o`, l.o.weight, `${p}.o`);
        if (l.o.bias) slot(`${p}.o.bias`, l.o.bias, `${p}.o.bias`);
        slot(`${p}.post_attention_norm`, l.postAttentionNorm, `${p}.post_attention_norm`);
        slot(`${p}.gate`, l.gate.weight, `${p}.gate_up`, 0);
        slot(`${p}.up`, l.up.weight, `${p}.gate_up`, F * C);
        slot(`${p}.down`, l.down.weight, `${p}.down`);
      });
      slot('final_norm', weights.finalNorm, 'final_norm');
      const expectedTensors = 1 + (trainable.tied ? 0 : 1) + config.numLayers * (6 + (config.qkvBias ? 1 : 0) + (oBias ? 1 : 0)) + 1;
      assert(trainable.parameters.names().length === expectedTensors, `${what}: ${trainable.parameters.names().length} tensors in the set, expected ${expectedTensors}`);

      const w64 = float64Weights(weights);
      const hosts = new Map<HostTensor, HostTensor>();
      const pairs = (a: HostWeights, b: HostWeights) => hostWeightTensors(a).forEach((t, i) => hosts.set(t, hostWeightTensors(b)[i]));
      pairs(weights, w64);
      const valueF64 = { weight: Float64Array.from(value.weight), bias: value.bias };
      const lossAt = () => referenceLoss({ config, files: { weights } }, batch, packed, lossWeights, undefined, valueF64, w64);
      const h = 1e-4;
      const compared: { slot: GradSlot; what: string; gpu: number; fd: number }[] = [];
      const compare = (s: GradSlot, index: number, label: string) => {
        const data = hosts.get(s.host)!.data as unknown as Float64Array;
        const saved = data[index];
        data[index] = saved + h;
        const up = lossAt();
        data[index] = saved - h;
        const down = lossAt();
        data[index] = saved;
        compared.push({ slot: s, what: `${s.what}${label}`, gpu: grads.get(s.tensor)![s.offset + index], fd: (up - down) / (2 * h) });
      };
      const padded = padLeft(batch.sequences, 0).ids.flat();
      for (const s of slots) {
        if (s.what === 'embedding') {
          // rows of tokens in the batch (BOS and two that predict a target), and one that is not (zero unless the LM head shares it)
          const absent = Array.from({ length: V }, (_, v) => v).find((v) => !padded.includes(v))!;
          for (const v of [1, batch.sequences[0][2], batch.sequences[1][1], absent]) {
            const c = Math.floor(random() * C);
            compare(s, v * C + c, `[${v}, ${c}]${v === absent ? ' (token not in the batch)' : ''}`);
            if (v === absent && !trainable.tied) {
              const row = grads.get('embedding')!.subarray(absent * C, (absent + 1) * C);
              assert(row.every((x) => x === 0), `${what}: the embedding row of token ${absent}, absent from the batch, has a gradient`);
            }
          }
        } else {
          const n = s.host.data.length;
          for (let k = 0; k < (n <= C ? 2 : 3); k++) {
            const index = Math.floor(random() * n);
            compare(s, index, `[${index}]`);
          }
        }
      }
      // relative error, with a floor of 1% of the largest checked gradient of the same tensor for the near-zero ones
      for (const s of slots) {
        const checked = compared.filter((c) => c.slot === s);
        const scale = Math.max(...checked.map((c) => Math.abs(c.fd)));
        assert(scale > 1e-6, `${what}: every checked gradient of ${s.what} is zero, which checks nothing`);
        for (const c of checked) {
          const error = Math.abs(c.gpu - c.fd) / Math.max(Math.abs(c.fd), 1e-2 * scale);
          assert(error <= 1e-3, `${what}: gradient of ${c.what}: GPU ${c.gpu}, finite differences ${c.fd} (relative error ${error.toExponential(2)})`);
        }
      }
      state.dispose();
      valueHead.dispose();
      model.dispose();
    }
  },
};

// ---- tree-structured (shared-prefix) batches -----------------------------------------------------

/** Per-token loss inputs of one sequence (or one branch's own tokens). */
interface TokenValues {
  actionMask: number[];
  advantages: number[];
  oldLogprobs: number[];
  referenceLogProbs: number[];
  returns: number[];
  oldValues: number[];
  valueMask: number[];
}

const VALUE_KEYS = ['actionMask', 'advantages', 'oldLogprobs', 'referenceLogProbs', 'returns', 'oldValues', 'valueMask'] as const;

/** A trunk and branches that continue its prefixes: branch i continues trunk[0, P) with its own tokens. */
interface TreeCase {
  trunk: number[];
  trunkValues: TokenValues;
  branches: { P: number; tokens: number[]; values: TokenValues }[];
}

function emptyTrainBatch(): TrainBatch & Required<Pick<TrainBatch, (typeof VALUE_KEYS)[number]>> {
  return { sequences: [], actionMask: [], advantages: [], oldLogprobs: [], referenceLogProbs: [], returns: [], oldValues: [], valueMask: [] };
}

function pushValues(batch: ReturnType<typeof emptyTrainBatch>, values: TokenValues): void {
  for (const key of VALUE_KEYS) batch[key].push(values[key]);
}

function concatValues(...parts: TokenValues[]): TokenValues {
  return Object.fromEntries(VALUE_KEYS.map((key) => [key, parts.flatMap((p) => p[key])])) as unknown as TokenValues;
}

const zeroValues = (n: number): TokenValues => Object.fromEntries(VALUE_KEYS.map((key) => [key, new Array<number>(n).fill(0)])) as unknown as TokenValues;

/**
 * The trees as tree-structured sequences: the trunk, then each branch as [copy of trunk[P-1] at position
 * P-1, its tokens at P, P+1, ...], attending to trunk[0, P-1) and to itself. `prefixShift` moves every
 * branch's attended prefix (a deliberately wrong mask for the sensitivity check); `flat` drops the tree
 * (plain causal attention over the concatenation, positions kept).
 */
function treeBatch(cases: TreeCase[], options: { prefixShift?: number; flat?: boolean } = {}): TrainBatch {
  const batch: TrainBatch & { positions: number[][]; attendPrefix: number[][]; segmentStart: number[][] } = { ...emptyTrainBatch(), positions: [], attendPrefix: [], segmentStart: [] };
  for (const c of cases) {
    const sequence = [...c.trunk];
    const positions = c.trunk.map((_, t) => t);
    const segmentStart = c.trunk.map(() => 0);
    const attendPrefix = c.trunk.map(() => 0);
    const parts: TokenValues[] = [c.trunkValues];
    for (const branch of c.branches) {
      const start = sequence.length;
      sequence.push(c.trunk[branch.P - 1], ...branch.tokens);
      for (let i = 0; i <= branch.tokens.length; i++) {
        positions.push(branch.P - 1 + i);
        segmentStart.push(start);
        attendPrefix.push(branch.P - 1 + (options.prefixShift ?? 0));
      }
      parts.push(zeroValues(1), branch.values);
    }
    batch.sequences.push(sequence);
    pushValues(batch as ReturnType<typeof emptyTrainBatch>, concatValues(...parts));
    batch.positions.push(positions);
    batch.segmentStart.push(segmentStart);
    batch.attendPrefix.push(attendPrefix);
  }
  if (options.flat) {
    const { attendPrefix: _a, segmentStart: _s, ...flat } = batch;
    return flat;
  }
  return batch;
}

/** The same trees as separate sequences: each trunk, and each branch expanded into [trunk[0, P), branch]. */
function expandedBatch(cases: TreeCase[]): TrainBatch {
  const batch = emptyTrainBatch();
  for (const c of cases) {
    batch.sequences.push(c.trunk);
    pushValues(batch, c.trunkValues);
    for (const branch of c.branches) {
      batch.sequences.push([...c.trunk.slice(0, branch.P), ...branch.tokens]);
      pushValues(batch, concatValues(zeroValues(branch.P), branch.values));
    }
  }
  return batch;
}

/** Random trees: action spans and value rows on the trunk and on the branches, random loss inputs. */
function randomTrees(random: () => number, vocabSize: number): TreeCase[] {
  const token = () => 3 + Math.floor(random() * (vocabSize - 3));
  const values = (mask: number[], valueAt: number[]): TokenValues => ({
    actionMask: mask,
    advantages: mask.map((m) => (m ? random() * 2 - 1 : 0)),
    oldLogprobs: mask.map((m) => (m ? -1 - 3 * random() : 0)),
    referenceLogProbs: mask.map((m) => (m ? -1 - 3 * random() : 0)),
    returns: mask.map((_, t) => (valueAt.includes(t) ? random() * 2 - 1 : 0)),
    oldValues: mask.map((_, t) => (valueAt.includes(t) ? random() * 2 - 1 : 0)),
    valueMask: mask.map((_, t) => (valueAt.includes(t) ? 1 : 0)),
  });
  const trunk = (n: number, spans: [number, number][], valueAt: number[]) => {
    const tokens = [1, ...Array.from({ length: n - 1 }, token)];
    return { tokens, values: values(tokens.map((_, t) => (spans.some(([a, b]) => t >= a && t < b) ? 1 : 0)), valueAt) };
  };
  const branch = (P: number, n: number, valueFirst = false, masked: number[] = []) => ({
    P,
    tokens: Array.from({ length: n }, token),
    values: values(Array.from({ length: n }, (_, i) => (masked.includes(i) ? 0 : 1)), valueFirst ? [0] : []),
  });
  const a = trunk(12, [[4, 6], [9, 11]], [4, 9]);
  const b = trunk(6, [[1, 3]], [1]);
  return [
    // two steps (actions at 4..5 and 9..10) with their alternatives, one with a value on a branch, one
    // with a non-action token inside it, and a branch after the whole trunk
    { trunk: a.tokens, trunkValues: a.values, branches: [branch(4, 2), branch(4, 3, true, [1]), branch(9, 2), branch(12, 1)] },
    // a branch off the first token (attends to no trunk token but its copy)
    { trunk: b.tokens, trunkValues: b.values, branches: [branch(1, 2)] },
    // no branches: a plain sequence in a tree batch
    { trunk: [1, token(), token(), token(), token()], trunkValues: values([0, 0, 1, 1, 0], [2]), branches: [] },
  ];
}

/** Gradients (LoRA and value head) and metric sums of one micro-batch, on a fresh training state. */
async function batchGradients(
  gpu: GpuContext, model: Model, adapter: GpuLoraAdapter, valueHead: ValueHead, batch: TrainBatch, weights: LossWeights, actionTokens?: number,
): Promise<{ packed: PackedBatch; grads: Map<string, Float32Array>; metrics: Float32Array }> {
  const packed = packBatch(batch);
  const state = new TrainingState(model.gpuModel, packed.B, packed.T, adapter, valueHead, { tree: packed.rowLimits !== undefined });
  state.load(packed);
  state.setLoss(weights, actionTokens ?? packed.actionTokens);
  const encoder = gpu.device.createCommandEncoder();
  adapter.parameters.zeroGrads(encoder);
  valueHead.parameters.zeroGrads(encoder);
  encoder.clearBuffer(state.metricSums);
  encodeDispatches(encoder, state.plan());
  gpu.device.queue.submit([encoder.finish()]);
  const grads = new Map([...(await adapter.parameters.readGrads()), ...(await valueHead.parameters.readGrads())]);
  const metrics = await readFloat32(gpu.device, state.metricSums, LOSS_METRICS.length);
  state.dispose();
  return { packed, grads, metrics };
}

const treeBatchCheck: GpuCheck = {
  name: 'tree-structured batches: LoRA and value-head gradients equal those of the trunks and branches as separate sequences',
  async run(gpu) {
    const shapes: TinyModelOptions[] = [
      { architecture: 'llama', numHeads: 4, numKvHeads: 2, tied: false, numLayers: 2, seed: 61 },
      { architecture: 'qwen2', numHeads: 4, numKvHeads: 1, tied: true, numLayers: 2, seed: 62 },
    ];
    const weights: LossWeights = { pg: 0.5, nll: 0.3, ppo: 1, clip: 0.2, entropy: 0.1, kl: 0.2, value: 0.5 };
    for (const options of shapes) {
      const what = options.architecture!;
      const model = await loadModel(gpu, new MemoryModelSource(tinyModelFiles(options).files));
      const random = seededRandom(options.seed!);
      const host = model.createAdapter({ r: 2, alpha: 4, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], rslora: false, dropout: 0, layers: null }, options.seed!);
      for (const m of host.modules) m.B = randomArray(random, m.B.length, 0.3);
      const adapter = model.uploadAdapter(host);
      const C = model.config.hiddenSize;
      const value = { weight: randomArray(random, C, 0.3), bias: 0.1 };
      const valueHead = new ValueHead(gpu, C, value);
      const trees = randomTrees(random, model.config.vocabSize);
      const treeInput = treeBatch(trees);
      const expandedInput = expandedBatch(trees);

      const tree = await batchGradients(gpu, model, adapter, valueHead, treeInput, weights);
      const expanded = await batchGradients(gpu, model, adapter, valueHead, expandedInput, weights);
      assert(tree.packed.rowLimits !== undefined && expanded.packed.rowLimits === undefined, `${what}: only the tree batch is tree-structured`);
      assert(tree.packed.actionTokens === expanded.packed.actionTokens, `${what}: ${tree.packed.actionTokens} action tokens in the tree batch, ${expanded.packed.actionTokens} expanded`);
      const tokens = (p: PackedBatch) => p.attentionMask.reduce((n, m) => n + m, 0);
      assert(tokens(tree.packed) < tokens(expanded.packed), `${what}: the tree batch has ${tokens(tree.packed)} tokens, no fewer than the ${tokens(expanded.packed)} expanded`);
      // same targets: the rows that predict action tokens predict the same tokens, in the same order
      const actionTargets = (p: PackedBatch) => Array.from(p.targets).filter((_, r) => p.lossInputs[r * INPUT_FLOATS] !== 0);
      assertClose(actionTargets(tree.packed), actionTargets(expanded.packed), `${what}: targets of the action rows`, 0, 0);

      // the float64 reference with the tree mask gives the loss of the separate sequences
      const valueF64 = { weight: Float64Array.from(value.weight), bias: value.bias };
      const referenceTree = referenceLoss(model, treeInput, tree.packed, weights, host, valueF64);
      const referenceExpanded = referenceLoss(model, expandedInput, expanded.packed, weights, host, valueF64);
      assertClose([referenceTree], [referenceExpanded], `${what}: float64 loss, tree against separate sequences`, 1e-10, 1e-9);
      const total = (m: Float32Array) => (weights.nll ?? 0) * m[0] + (weights.pg ?? 0) * m[1] + (weights.ppo ?? 0) * m[2] - (weights.entropy ?? 0) * m[3] + (weights.kl ?? 0) * m[4] + (weights.value ?? 0) * m[5];
      assertClose([total(tree.metrics)], [referenceTree], `${what}: GPU loss of the tree batch against the float64 reference`, 1e-5, 1e-4);
      assertClose(tree.metrics, expanded.metrics, `${what}: metric sums, tree against separate sequences`, 1e-5, 1e-4);

      // the gradients, tensor by tensor, to within float32 summation order
      let largest = 0;
      for (const g of expanded.grads.values()) for (const x of g) largest = Math.max(largest, Math.abs(x));
      assert(largest > 1e-3, `${what}: the gradients are all zero, which checks nothing`);
      for (const [name, g] of expanded.grads) assertClose(tree.grads.get(name)!, g, `${what}: gradient of ${name}, tree against separate sequences`, 2e-5 * largest, 1e-3);

      // a mask off by one (branches also see the trunk token their copy duplicates) must not pass
      const wrong = await batchGradients(gpu, model, adapter, valueHead, treeBatch(trees, { prefixShift: 1 }), weights);
      let worst = 0;
      for (const [name, g] of expanded.grads) worst = Math.max(worst, maxAbsDiff(wrong.grads.get(name)!, g));
      assert(worst > 1e-3 * largest, `${what}: an off-by-one tree mask gives the same gradients (max difference ${worst}, largest gradient ${largest})`);

      // and the trainer takes tree batches (a tree training state of its own) beside plain ones
      const trainer = new Trainer(model.gpuModel, { train: adapter, valueHead, optimizer: { schedule: { kind: 'constant', lr: 1e-3 } } });
      const stepped = await trainer.step([treeInput, expandedBatch(trees.slice(2))], weights);
      assert(Number.isFinite(stepped['losses/total']) && !stepped.skipped, `${what}: a trainer step over a tree batch and a plain one`);
      trainer.dispose();
      adapter.dispose();
      valueHead.dispose();
      model.dispose();
    }
  },
};

const treeValidationCheck: GpuCheck = {
  name: 'tree-structured batches: malformed trees are refused with RangeErrors, plain batches pack as before',
  async run() {
    const base: TrainBatch = { sequences: [[1, 5, 6, 7, 5, 8]], actionMask: [[0, 0, 1, 0, 0, 1]] };
    const refused = (patch: Partial<TrainBatch>, pattern: RegExp, what: string) => {
      let message = '';
      try {
        packBatch({ ...base, ...patch });
      } catch (error) {
        assert(error instanceof RangeError, `${what}: ${String(error)} is not a RangeError`);
        message = error.message;
      }
      assert(pattern.test(message), `${what}: expected an error matching ${pattern}, got ${message || 'none'}`);
    };
    // a branch [5 at position 1, 8 at 2] after the trunk [1, 5, 6, 7]
    const tree = { positions: [[0, 1, 2, 3, 1, 2]], segmentStart: [[0, 0, 0, 0, 4, 4]], attendPrefix: [[0, 0, 0, 0, 1, 1]] };
    const packed = packBatch({ ...base, ...tree });
    assertClose(packed.targets, [5, 6, 7, -1, 8, -1], 'targets stop at the end of each segment', 0, 0);
    assertClose(packed.rowLimits!, [0, 0, 0, 0, 0, 0, 0, 0, 1, 4, 1, 4], 'row limits', 0, 0);
    assertClose(packed.positions, tree.positions[0], 'positions', 0, 0);
    refused({ ...tree, actionMask: [[0, 0, 1, 0, 1, 1]] }, /branch must start with a copy/, 'an action at the start of a segment');
    refused({ ...tree, valueMask: [[0, 0, 0, 0, 1, 0]] }, /first token of a segment carries a value/, 'a value at the start of a segment');
    refused({ ...tree, segmentStart: [[0, 0, 0, 2, 4, 4]] }, /segments are contiguous/, 'a segment start that is neither the token nor the previous one');
    refused({ ...tree, segmentStart: [[0, 0, 0, 0, 4, 3]] }, /segments are contiguous/, 'a segment start that goes back');
    refused({ ...tree, segmentStart: [[1, 0, 0, 0, 4, 4]] }, /segments are contiguous/, 'a first token in a later segment');
    refused({ ...tree, attendPrefix: [[0, 0, 0, 0, 5, 5]] }, /exceeds its segmentStart/, 'an attended prefix past the segment');
    refused({ ...tree, attendPrefix: [[0, 0, 0, 0, 1, 2]] }, /differs/, 'an attended prefix that changes inside a segment');
    refused({ ...tree, positions: [[0, 1, 2, 3, 1.5, 2]] }, /integer/, 'a fractional position');
    refused({ ...tree, segmentStart: [[0, 0, 0, 4, 4]] }, /5 values for 6 tokens/, 'a short segmentStart');
    // without the tree fields the batch packs exactly as before
    const plain = packBatch(base);
    assert(plain.rowLimits === undefined && plain.maxPosition === undefined, 'a plain batch is not tree-structured');
    assertClose(plain.targets, [5, 6, 7, 5, 8, -1], 'plain targets', 0, 0);
    assertClose(plain.positions, [0, 1, 2, 3, 4, 5], 'plain positions', 0, 0);
  },
};

export const trainChecks: GpuCheck[] = [lossCheck, gradientCheck, trainableModelCheck, fullGradientCheck, treeBatchCheck, treeValidationCheck];
