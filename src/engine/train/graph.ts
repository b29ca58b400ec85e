// One training micro-batch on the GPU, as a replayable list of dispatches: the forward over whole
// padded sequences with every layer's activations kept, the LM head's per-token log-probs and
// entropies, the value head, the loss (loss.wgsl) and the backward pass through every frozen layer
// into the LoRA matrices and the value head. Gradients are added into the parameter sets' gradient
// buffers, so several micro-batches accumulate before one optimiser step.
//
// Full-parameter mode (tiny models; the alternative to LoRA) also takes the gradient of every base
// weight, into the ParameterSet of a GpuModel built with `trainable`: next to each input gradient
// dx = dy W the weight gradient dW += dy^T x from the activations the forward kept, bias gradients as
// column sums of dy, every RMSNorm weight's gradient right after its rmsnorm_backward (which writes the
// shared rs buffer they read), the LM head's dW += dlogits^T h, and the embedding's from the gradient of
// its lookup output (dx after layer 0) by embedding_backward. A tied embedding gets both contributions.
//
// Shapes follow llm.c: B sequences of T tokens, R = B*T rows, C hidden, F MLP width, V vocabulary.
// Row (b, t) predicts token t+1: its log-prob, entropy and value belong to that next token.
//
// The LM head, the value head and the loss run only on the N rows that the loss sees (lossRows: action
// tokens and value rows, gathered in order into hHead [N, C]; N rounded up to a power of two so that
// few plans are built), not on all R: prompts and observations are most rows, and the head's [R, V]
// logits were the largest matmul and memory traffic of a step. Their gradient dhHead [N, C] goes back
// to dh [R, C] by a second gather through rowToHead, whose other rows read dhHead's row R, kept zero.
import { storageBuffer, uniformBuffer } from '../gpu/buffers.ts';
import type { Dispatch } from '../gpu/kernels.ts';
import { wholeMatrix } from '../gpu/matrix.ts';
import type { GpuModel, TrainableWeights } from '../gpu-model.ts';
import { ForwardState, type LayerActivations } from '../forward.ts';
import { LORA_TARGETS, type LoraTarget } from '../lora/adapter.ts';
import type { GpuLoraAdapter } from '../lora/gpu-adapter.ts';
import { INPUT_FLOATS, LOSS_METRICS, LOSS_PARAMS_BYTES, lossDispatches, lossRows, writeLossParams, type LossWeights } from './loss.ts';
import type { PackedBatch } from './batch.ts';
import type { ParameterView } from './parameters.ts';
import type { ValueHead } from './value-head.ts';

export interface TrainingOptions {
  /**
   * Full-parameter training: gradients of every base weight, added into `model.trainable.parameters.grads`.
   * Needs a GpuModel built with `{ trainable: true }` and no LoRA adapter.
   */
  fullParameters?: boolean;
  /** Seed of the LoRA dropout masks (used when the adapter's dropout > 0). Default 0. */
  dropoutSeed?: number;
  /**
   * Accept tree-structured batches (PackedBatch.rowLimits; see batch.ts): the attention forward and
   * backward then read each row's (prefix, segment) limits. Plain batches load too (as one segment each).
   */
  tree?: boolean;
}

export class TrainingState extends ForwardState {
  readonly R: number;
  /** The model's weights whose gradients plan() takes (full-parameter mode), or null. */
  readonly fullWeights: TrainableWeights | null;
  private readonly layerBuffers: LayerActivations[];
  // head and loss
  readonly targets: GPUBuffer;
  readonly logprob: GPUBuffer;
  readonly entropy: GPUBuffer;
  readonly value: GPUBuffer;
  readonly lossInputs: GPUBuffer;
  readonly lossParams: GPUBuffer;
  readonly metricSums: GPUBuffer;
  private readonly headLogits: GPUBuffer;
  // the rows the heads run on: hHead[i] = h[headRowIndex[i]]; dh[r] = dhHead[rowToHead[r]]
  private readonly headRowIndex: GPUBuffer;
  private readonly rowToHead: GPUBuffer;
  private readonly hHead: GPUBuffer;
  private readonly dhHead: GPUBuffer;
  /** Head rows of the loaded batch (a power of two, at most R; 0 before the first load). */
  private headRows = 0;
  private readonly plans = new Map<number, Dispatch[]>();
  private readonly gLogprob: GPUBuffer;
  private readonly gEntropy: GPUBuffer;
  private readonly gValue: GPUBuffer;
  private readonly rowMetrics: GPUBuffer;
  private readonly ones: GPUBuffer;
  // gradients of activations
  private readonly dx: GPUBuffer;
  private readonly dh: GPUBuffer;
  private readonly rs: GPUBuffer;
  private readonly dgateUp: GPUBuffer;
  private readonly dact: GPUBuffer;
  private readonly dattended: GPUBuffer;
  private readonly dqkv: GPUBuffer;
  private readonly delta: GPUBuffer;
  private readonly dlogits: GPUBuffer;
  private readonly dLoraHidden: GPUBuffer | null;
  // LoRA dropout: each adapted projection's dropped-out input, and a scratch for its gradient
  private readonly dropoutSeed: number;
  private readonly dropoutCounter: GPUBuffer;
  private readonly droppedInputs = new Map<string, GPUBuffer>();
  private droppedGrad: GPUBuffer | null = null;

  constructor(
    model: GpuModel,
    readonly B: number,
    readonly T: number,
    readonly adapter: GpuLoraAdapter | null,
    readonly valueHead: ValueHead,
    options: TrainingOptions = {},
  ) {
    if (options.fullParameters) {
      if (!model.trainable) throw new Error('full-parameter training needs the model built with { trainable: true } (GpuModel options)');
      if (adapter) throw new Error('LoRA and full-parameter training are alternatives: pass adapter = null with fullParameters');
    }
    super(model, { B, S: T, maskLen: T, maxRows: B * T, adapter, tree: options.tree ?? false });
    this.fullWeights = options.fullParameters ? model.trainable : null;
    const { hiddenSize: C, numHeads: H, numKvHeads: Hk, headDim: D, intermediateSize: F, vocabSize: V, numLayers } = model.config;
    const R = (this.R = B * T);
    if (R * V * 4 > model.gpu.maxBindingBytes) {
      throw new RangeError(`a training batch of ${R} tokens needs ${R * V * 4} bytes of logits, more than one GPU binding holds; use smaller micro-batches`);
    }
    const buffer = (floats: number, label: string) => {
      const b = storageBuffer(model.gpu.device, floats * 4, label);
      this.buffers.push(b);
      return b;
    };
    const r = adapter?.rank ?? 0;
    this.layerBuffers = Array.from({ length: numLayers }, (_, l) => {
      const hidden = new Map<LoraTarget, GPUBuffer>((adapter?.settings.targets ?? []).map((t) => [t, buffer(R * r, `lora hidden ${l}.${t}`)]));
      return {
        h1: buffer(R * C, `h1 ${l}`),
        qkv: buffer(R * (H + 2 * Hk) * D, `qkv ${l}`),
        attended: buffer(R * H * D, `attended ${l}`),
        lse: buffer(R * H, `lse ${l}`),
        h2: buffer(R * C, `h2 ${l}`),
        gateUp: buffer(R * 2 * F, `gate_up ${l}`),
        act: buffer(R * F, `act ${l}`),
        loraHidden: (target: LoraTarget) => hidden.get(target)!,
        xIn: buffer(R * C, `x in ${l}`),
        xMid: buffer(R * C, `x mid ${l}`),
      };
    });
    this.targets = buffer(R, 'targets');
    this.logprob = buffer(R, 'logprob');
    this.entropy = buffer(R, 'entropy');
    this.value = buffer(R, 'value');
    this.lossInputs = buffer(R * INPUT_FLOATS, 'loss inputs');
    this.lossParams = model.gpu.device.createBuffer({ size: LOSS_PARAMS_BYTES, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST, label: 'loss params' });
    this.buffers.push(this.lossParams);
    this.metricSums = buffer(LOSS_METRICS.length, 'metric sums');
    this.headLogits = buffer(R * V, 'logits');
    this.headRowIndex = buffer(R, 'head row index');
    this.rowToHead = buffer(R, 'row to head row');
    this.hHead = buffer(R * C, 'h of the head rows');
    this.dhHead = buffer((R + 1) * C, 'dh of the head rows'); // row R stays zero
    this.gLogprob = buffer(R, 'dL/dlogprob');
    this.gEntropy = buffer(R, 'dL/dentropy');
    this.gValue = buffer(R, 'dL/dvalue');
    this.rowMetrics = buffer(R * LOSS_METRICS.length, 'row metrics');
    this.ones = buffer(R, 'ones');
    this.write(this.ones, new Float32Array(R).fill(1));
    this.dx = buffer(R * C, 'dx');
    this.dh = buffer(R * C, 'dh');
    this.rs = buffer(R, 'rms scale');
    this.dgateUp = buffer(R * 2 * F, 'd gate_up');
    this.dact = buffer(R * F, 'd act');
    this.dattended = buffer(R * H * D, 'd attended');
    this.dqkv = buffer(R * (H + 2 * Hk) * D, 'd qkv');
    this.delta = buffer(R * H, 'attention delta');
    this.dlogits = buffer(R * V, 'd logits');
    this.dLoraHidden = adapter ? buffer(R * r, 'd lora hidden') : null;
    this.dropoutSeed = options.dropoutSeed ?? 0;
    this.dropoutCounter = uniformBuffer(model.gpu.device, [0, 0, 0, 0], 'dropout step');
    this.buffers.push(this.dropoutCounter);
    if (adapter && adapter.settings.dropout > 0) {
      for (const m of adapter.host.modules) this.droppedInputs.set(`${m.layer}.${m.target}`, buffer(R * m.inFeatures, `lora dropped input ${m.layer}.${m.target}`));
      this.droppedGrad = buffer(R * Math.max(C, F, H * D), 'lora dropped input gradient');
    }
  }

  protected override layerActivations(layer: number): LayerActivations {
    return this.layerBuffers[layer];
  }

  /** Bytes of GPU memory this state holds for one micro-batch (activations, their gradients, logits). */
  static bytesNeeded(model: GpuModel, B: number, T: number, loraRank: number, loraTargets: number): number {
    const { hiddenSize: C, numHeads: H, numKvHeads: Hk, headDim: D, intermediateSize: F, vocabSize: V, numLayers: L, } = model.config;
    const R = B * T;
    const perLayer = R * (4 * C + (H + 2 * Hk) * D + H * D + H + 3 * F + loraTargets * loraRank) + 2 * B * Hk * T * D;
    const head = R * (2 * V + 5 * C + 18 + 2 * INPUT_FLOATS) + C;
    const grads = R * (2 * C + 3 * F + H * D + (H + 2 * Hk) * D + H + loraRank);
    return 4 * (L * perLayer + head + grads);
  }

  /** Whether this state takes tree-structured batches. */
  get tree(): boolean {
    return this.shape.tree ?? false;
  }

  /** Uploads a packed micro-batch of exactly this state's shape. */
  load(batch: PackedBatch): void {
    if (batch.B !== this.B || batch.T !== this.T) throw new RangeError(`a [${batch.B}, ${batch.T}] batch does not fit a [${this.B}, ${this.T}] training state`);
    if (batch.rowLimits && !this.tree) throw new RangeError('a tree-structured batch needs a training state built with { tree: true }');
    if (batch.maxPosition !== undefined && batch.maxPosition >= this.model.ropePositions) {
      throw new RangeError(`position ${batch.maxPosition} is beyond the model's ${this.model.ropePositions} positions`);
    }
    this.write(this.ids, batch.ids);
    this.write(this.positions, batch.positions);
    this.write(this.keyMask, batch.attentionMask);
    // a plain batch in a tree state: every row's limits (0, 0), i.e. plain causal attention
    if (this.tree) this.write(this.keyMask, batch.rowLimits ?? new Uint32Array(2 * this.R), batch.attentionMask.byteLength);
    // The heads' rows: the loss rows first, then padding rows (row 0, target none, no loss inputs).
    const rows = lossRows(batch.lossInputs);
    const N = Math.min(this.R, 2 ** Math.ceil(Math.log2(Math.max(16, rows.length))));
    const rowToHead = new Uint32Array(this.R).fill(this.R);
    const targets = new Int32Array(N).fill(-1);
    const inputs = new Float32Array(N * INPUT_FLOATS);
    rows.forEach((r, i) => {
      rowToHead[r] = i;
      targets[i] = batch.targets[r];
      inputs.set(batch.lossInputs.subarray(r * INPUT_FLOATS, (r + 1) * INPUT_FLOATS), i * INPUT_FLOATS);
    });
    const headRowIndex = new Uint32Array(N);
    headRowIndex.set(rows);
    this.write(this.headRowIndex, headRowIndex);
    this.write(this.rowToHead, rowToHead);
    this.write(this.targets, targets);
    this.write(this.lossInputs, inputs);
    this.headRows = N;
    this.setCursor(0, 0);
  }

  /** Writes the loss's weights and averaging scale (1 / action tokens of the whole optimiser step) for the loaded batch. */
  setLoss(weights: LossWeights, actionTokens: number): void {
    if (this.headRows === 0) throw new Error('load a batch before setting its loss');
    writeLossParams(this.model.gpu.device, this.lossParams, weights, this.headRows, actionTokens);
  }

  /**
   * Forward, loss and backward of the loaded micro-batch; parameter gradients are added, never
   * overwritten. At the end dx holds the gradient of the embedding lookup's output [R, C]. Plans are
   * kept per head-row count; before any load, the plan for all R rows.
   */
  plan(): Dispatch[] {
    const N = this.headRows || this.R;
    let plan = this.plans.get(N);
    if (!plan) this.plans.set(N, (plan = this.buildPlan(N)));
    return plan;
  }

  private buildPlan(N: number): Dispatch[] {
    const { model, ops, R, T } = this;
    const { hiddenSize: C, numHeads: H, numKvHeads: Hk, headDim: D, intermediateSize: F, vocabSize: V, rmsNormEps: eps } = model.config;
    const vh = this.valueHead;
    const full = this.fullWeights;
    const grad = (w: ParameterView) => w.grad.chunks[0].buffer;
    /** Full mode: dW [out, in] += dy^T x for y = x W^T, dy [rows, ldDy] (ldDy = out), x [rows, in]. */
    const weightGrad = (dy: GPUBuffer, ldDy: number, x: GPUBuffer, w: ParameterView | undefined, rows = R): Dispatch[] =>
      !w ? [] : [ops.matmulWeightGrad(dy, x, grad(w), { M: rows, N: w.rows, K: w.cols, ldDy })];
    /** Full mode: db [n] += sum_r dy[r, :], dy [R, n]. */
    const biasGrad = (dy: GPUBuffer, b: ParameterView | null | undefined): Dispatch[] =>
      !b ? [] : [ops.biasGrad(dy, this.ones, grad(b), { M: R, N: b.cols })];
    /** Full mode: the norm weight's gradient, from x, dy and the rs its rmsnormBackward just wrote. */
    const normGrad = (x: GPUBuffer, w: ParameterView | undefined): Dispatch[] =>
      !w ? [] : [ops.rmsnormWeightGrad(x, this.dh, this.rs, grad(w), { R, C, accumulate: true })];
    const dispatches: Dispatch[] = [
      ...this.body(T, this.ids),
      this.finalNorm(T),
      // the heads and the loss on the N loss rows
      ...ops.gatherRows(wholeMatrix(this.h, R, C), this.headRowIndex, this.hHead, N),
      ...ops.matmul(this.hHead, model.lmHead, null, this.headLogits, { M: N }),
      ops.tokenLogprobs(this.headLogits, this.targets, this.logprob, this.entropy, N, V),
      ...ops.matmul(this.hHead, vh.weight.matrix, vh.bias.matrix.chunks[0].buffer, this.value, { M: N }),
      ...lossDispatches(model.kernels, this.lossParams, N, {
        logprob: this.logprob, entropy: this.entropy, value: this.value, inputs: this.lossInputs,
        gLogprob: this.gLogprob, gEntropy: this.gEntropy, gValue: this.gValue, rowMetrics: this.rowMetrics, sums: this.metricSums,
      }),
      // LM head and value head, then their input gradient back to all R rows (zero off the loss rows)
      ops.logitsBackward(this.headLogits, this.targets, this.gLogprob, this.gEntropy, this.dlogits, N, V),
      ...ops.matmulInputGrad(this.dlogits, model.lmHead, this.dhHead, { M: N, ldDy: V }),
      ...weightGrad(this.dlogits, V, this.hHead, full?.lmHead, N),
      ...ops.matmulInputGrad(this.gValue, vh.weight.matrix, this.dhHead, { M: N, ldDy: 1, accumulate: true }),
      ops.matmulWeightGrad(this.gValue, this.hHead, vh.weight.grad.chunks[0].buffer, { M: N, N: 1, K: C, ldDy: 1 }),
      ops.biasGrad(this.gValue, this.ones, vh.bias.grad.chunks[0].buffer, { M: N, N: 1 }),
      ...ops.gatherRows(wholeMatrix(this.dhHead, R + 1, C), this.rowToHead, this.dh, R),
      ops.rmsnormBackward(this.x, model.finalNorm, this.dh, this.dx, this.rs, { R, C, eps }),
      ...normGrad(this.x, full?.finalNorm),
    ];
    const qkvWidth = (H + 2 * Hk) * D;
    const attention = { B: this.B, T, H, Hk, D, S: T, maskLen: T, tree: this.tree };
    for (let l = model.layers.length - 1; l >= 0; l--) {
      const layer = model.layers[l];
      const a = this.layerBuffers[l];
      const w = full?.layers[l];
      dispatches.push(
        // MLP block: x_out = x_mid + down(silu(gate(h2)) * up(h2)), h2 = RMSNorm(x_mid)
        ...ops.matmulInputGrad(this.dx, layer.down, this.dact, { M: R, ldDy: C }),
        ...weightGrad(this.dx, C, a.act, w?.down),
        ...this.loraBackward(l, 'down_proj', a.act, F, this.dx, C, 0, this.dact),
        ops.siluMulBackward(a.gateUp, this.dact, this.dgateUp, R, F),
        ...ops.matmulInputGrad(this.dgateUp, layer.gateUp, this.dh, { M: R, ldDy: 2 * F }),
        ...weightGrad(this.dgateUp, 2 * F, a.h2, w?.gateUp),
        ...this.loraBackward(l, 'gate_proj', a.h2, C, this.dgateUp, 2 * F, 0, this.dh),
        ...this.loraBackward(l, 'up_proj', a.h2, C, this.dgateUp, 2 * F, F, this.dh),
        ops.rmsnormBackward(a.xMid!, layer.postAttentionNorm, this.dh, this.dx, this.rs, { R, C, eps, accumulate: true }),
        ...normGrad(a.xMid!, w?.postAttentionNorm),
        // attention block: x_mid = x_in + o(attention(rope(q), rope(k), v)), q, k, v from h1 = RMSNorm(x_in)
        ...ops.matmulInputGrad(this.dx, layer.o, this.dattended, { M: R, ldDy: C }),
        ...weightGrad(this.dx, C, a.attended, w?.o),
        ...biasGrad(this.dx, w?.oBias),
        ...this.loraBackward(l, 'o_proj', a.attended, H * D, this.dx, C, 0, this.dattended),
        ops.attentionBackwardQuery(a.qkv, this.kCache[l], this.vCache[l], this.keyMask, this.dattended, a.lse, this.delta, this.dqkv, attention),
        ops.attentionBackwardKey(a.qkv, this.kCache[l], this.vCache[l], this.keyMask, this.dattended, a.lse, this.delta, this.dqkv, attention),
        ops.ropeBackward(this.dqkv, this.positions, model.rope, { R, H, Hk, D }),
        ...ops.matmulInputGrad(this.dqkv, layer.qkv, this.dh, { M: R, ldDy: qkvWidth }),
        ...weightGrad(this.dqkv, qkvWidth, a.h1, w?.qkv),
        ...biasGrad(this.dqkv, w?.qkvBias),
        ...this.loraBackward(l, 'q_proj', a.h1, C, this.dqkv, qkvWidth, 0, this.dh),
        ...this.loraBackward(l, 'k_proj', a.h1, C, this.dqkv, qkvWidth, H * D, this.dh),
        ...this.loraBackward(l, 'v_proj', a.h1, C, this.dqkv, qkvWidth, (H + Hk) * D, this.dh),
        ops.rmsnormBackward(a.xIn!, layer.inputNorm, this.dh, this.dx, this.rs, { R, C, eps, accumulate: true }),
        ...normGrad(a.xIn!, w?.inputNorm),
      );
    }
    // dx is now the gradient of the embedding lookup's output
    if (full) dispatches.push(ops.embeddingBackward(this.ids, this.dx, grad(full.embedding), { R, V, C, accumulate: true }));
    return dispatches;
  }

  /**
   * Gradients of y[:, column0 ..] += s (x A^T) B^T given dy into the adapter's parameter gradients and
   * dx (through the dropout mask, when A saw a dropped-out input).
   */
  private loraBackward(layer: number, target: LoraTarget, input: GPUBuffer, inFeatures: number, dy: GPUBuffer, ldDy: number, column0: number, dx: GPUBuffer): Dispatch[] {
    const module = this.adapter?.module(layer, target);
    if (!this.adapter || !module) return [];
    const { ops, R } = this;
    // With dropout, A saw the dropped-out input, and the input's gradient passes the same mask.
    const dropped = this.droppedInputs.get(`${layer}.${target}`);
    const grad = (name: string) => this.adapter!.parameters.view(name).grad.chunks[0].buffer;
    const lora = { A: module.A, B: module.B, dA: grad(module.names.A), dB: grad(module.names.B), alpha: this.adapter.scaling };
    const io = { x: dropped ?? input, t: this.layerBuffers[layer].loraHidden(target), dy, dt: this.dLoraHidden!, dx: dropped ? this.droppedGrad! : dx };
    return [
      ...ops.loraBackward(lora, io, { M: R, ldDy, dyColumn0: column0, accumulateDx: !dropped }),
      ...(dropped ? [ops.dropout(this.droppedGrad!, dx, this.dropoutCounter, { ...this.dropoutStream(layer, target), N: R * inFeatures, accumulate: true })] : []),
    ];
  }

  /** The mask parameters of one adapted projection: its own stream, the adapter's drop probability. */
  private dropoutStream(layer: number, target: LoraTarget): { seed: number; stream: number; p: number } {
    return { seed: this.dropoutSeed, stream: layer * LORA_TARGETS.length + LORA_TARGETS.indexOf(target), p: this.adapter!.settings.dropout };
  }

  protected override loraDropout(layer: number, target: LoraTarget, x: GPUBuffer, R: number, inFeatures: number): { input: GPUBuffer; dispatches: Dispatch[] } | null {
    const input = this.droppedInputs.get(`${layer}.${target}`);
    if (!input) return null;
    return { input, dispatches: [this.ops.dropout(x, input, this.dropoutCounter, { ...this.dropoutStream(layer, target), N: R * inFeatures })] };
  }

  /** Selects the dropout masks of a training step (the same step always draws the same masks). */
  setDropoutStep(step: number): void {
    this.write(this.dropoutCounter, new Uint32Array([step, 0, 0, 0]));
  }
}
