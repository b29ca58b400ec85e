// The decoder forward pass on the GPU for a batch of B sequences, as replayable lists of dispatches.
//
// A ForwardState owns the KV cache (capacity S slots per sequence) and the activation buffers for up
// to `maxRows` token rows. A forward step feeds T tokens of every sequence (rows b*T + t) and writes
// their keys and values at cache slots cursor.slot0 .. slot0+T-1, so a long prompt runs as several
// chunks and a decode step is a forward of T = 1. Plans are built once per T and replayed: a decode
// step costs a few small buffer writes, one submit and one small read-back.
import { storageBuffer, uniformBuffer } from './gpu/buffers.ts';
import type { Dispatch } from './gpu/kernels.ts';
import { wholeMatrix } from './gpu/matrix.ts';
import type { GpuModel } from './gpu-model.ts';
import type { GpuLoraAdapter } from './lora/gpu-adapter.ts';
import type { LoraTarget } from './lora/adapter.ts';
import { OpBuilder } from './ops.ts';

export interface ForwardShape {
  /** Sequences in the batch. */
  B: number;
  /** Cache slots per sequence: the padded prompt plus every token to be generated. */
  S: number;
  /** Slots 0 .. maskLen-1 are the padded prompt, whose key mask is uploaded; later slots are always real. */
  maskLen: number;
  /** Most token rows (B * T) one forward step may feed. */
  maxRows: number;
  /** The LoRA adapter applied in every forward of this state (null: the base model). */
  adapter: GpuLoraAdapter | null;
  /**
   * Tree-structured training batches (src/engine/train/batch.ts): keyMask also holds a (prefix, segment)
   * pair per row after its B * maskLen flags, and attention honours them. Whole sequences only (slot0 = 0).
   */
  tree?: boolean;
}

/** Buffers as bytes per row, to size forward chunks before allocating anything. */
export function activationBytesPerRow(model: GpuModel): number {
  const { hiddenSize: C, numHeads: H, numKvHeads: Hk, headDim: D, intermediateSize: F } = model.config;
  return 4 * (2 * C + (H + 2 * Hk) * D + H * D + 3 * F);
}

/** The largest activation row, which one binding must hold for every row of a step. */
function widestRowBytes(model: GpuModel): number {
  const { hiddenSize: C, numHeads: H, numKvHeads: Hk, headDim: D, intermediateSize: F } = model.config;
  return 4 * Math.max(2 * F, (H + 2 * Hk) * D, C);
}

/** Rows per forward step that fit the binding limit and a memory budget for activations. */
export function maxRowsPerStep(model: GpuModel, budgetBytes = 256 * 2 ** 20): number {
  const byBinding = Math.floor(model.gpu.maxBindingBytes / widestRowBytes(model));
  const byBudget = Math.floor(budgetBytes / activationBytesPerRow(model));
  return Math.max(1, Math.min(byBinding, byBudget));
}

/**
 * The buffers one layer's forward reads and writes. In inference every layer shares one set; the
 * training state gives each layer its own, so that the backward pass finds what the forward saw.
 */
export interface LayerActivations {
  /** Normalised input of the attention block [rows, C]. */
  h1: GPUBuffer;
  qkv: GPUBuffer;
  attended: GPUBuffer;
  lse: GPUBuffer;
  /** Normalised input of the MLP block [rows, C]. */
  h2: GPUBuffer;
  gateUp: GPUBuffer;
  act: GPUBuffer;
  /** x A^T of the adapted projection `target`, [rows, r]. */
  loraHidden(target: LoraTarget): GPUBuffer;
  /** Copies of the residual stream before each block's norm (training only). */
  xIn?: GPUBuffer;
  xMid?: GPUBuffer;
}

export class ForwardState {
  readonly ops: OpBuilder;
  readonly kCache: GPUBuffer[];
  readonly vCache: GPUBuffer[];
  readonly keyMask: GPUBuffer;
  /** Input token ids of the rows of one step. */
  readonly ids: GPUBuffer;
  readonly positions: GPUBuffer;
  /** {slot0, step}: where this step's tokens go in the cache and the sampler's counter. */
  readonly cursor: GPUBuffer;
  /** Residual stream [maxRows, C]. */
  readonly x: GPUBuffer;
  /** Normalised residual [maxRows, C]; after the last layer, the final hidden states. */
  readonly h: GPUBuffer;
  readonly qkv: GPUBuffer;
  readonly attended: GPUBuffer;
  /** Log-sum-exp of each query's attention scores [maxRows, H] (read by the backward pass). */
  readonly attentionLse: GPUBuffer;
  readonly gateUp: GPUBuffer;
  readonly act: GPUBuffer;
  /** Which row of the step is each sequence's newest token ([B] u32), and that row's states. */
  readonly lastRows: GPUBuffer;
  readonly lastHidden: GPUBuffer;
  readonly lastNormed: GPUBuffer;
  readonly logits: GPUBuffer;
  readonly sampledIds: GPUBuffer;
  readonly sampledLogprobs: GPUBuffer;
  /** x A^T of the LoRA module being applied, [maxRows, r]. */
  readonly loraHidden: GPUBuffer | null;
  protected readonly buffers: GPUBuffer[] = [];
  private identityRows: GPUBuffer | undefined;

  constructor(
    readonly model: GpuModel,
    readonly shape: ForwardShape,
  ) {
    const device = model.gpu.device;
    const { hiddenSize: C, numHeads: H, numKvHeads: Hk, headDim: D, intermediateSize: F, vocabSize: V, numLayers } = model.config;
    const { B, S, maskLen, maxRows } = shape;
    const cacheBytes = B * Hk * S * D * 4;
    if (cacheBytes > model.gpu.maxBindingBytes) {
      throw new RangeError(
        `The KV cache of one layer for ${B} sequences of ${S} tokens needs ${cacheBytes} bytes, more than this GPU binds at once ` +
          `(${model.gpu.maxBindingBytes}); use fewer sequences per batch or fewer tokens.`,
      );
    }
    const buffer = (bytes: number, label: string) => {
      const b = storageBuffer(device, bytes, label);
      this.buffers.push(b);
      return b;
    };
    this.ops = new OpBuilder(model.kernels);
    this.kCache = Array.from({ length: numLayers }, (_, l) => buffer(cacheBytes, `k cache ${l}`));
    this.vCache = Array.from({ length: numLayers }, (_, l) => buffer(cacheBytes, `v cache ${l}`));
    this.keyMask = buffer((B * maskLen + (shape.tree ? 2 * maxRows : 0)) * 4, 'key mask');
    this.ids = buffer(maxRows * 4, 'ids');
    this.positions = buffer(maxRows * 4, 'positions');
    this.cursor = uniformBuffer(device, [0, 0, 0, 0], 'cursor');
    this.buffers.push(this.cursor);
    this.x = buffer(maxRows * C * 4, 'x');
    this.h = buffer(maxRows * C * 4, 'h');
    this.qkv = buffer(maxRows * (H + 2 * Hk) * D * 4, 'qkv');
    this.attended = buffer(maxRows * H * D * 4, 'attended');
    this.attentionLse = buffer(maxRows * H * 4, 'attention lse');
    this.gateUp = buffer(maxRows * 2 * F * 4, 'gate_up');
    this.act = buffer(maxRows * F * 4, 'act');
    this.lastRows = buffer(B * 4, 'last rows');
    this.lastHidden = buffer(B * C * 4, 'last hidden');
    this.lastNormed = buffer(B * C * 4, 'last normed');
    this.logits = buffer(B * V * 4, 'logits');
    this.sampledIds = buffer(B * 4, 'sampled ids');
    this.sampledLogprobs = buffer(B * 4, 'sampled logprobs');
    this.loraHidden = shape.adapter ? buffer(maxRows * shape.adapter.rank * 4, 'lora hidden') : null;
  }

  /** The buffers layer l works in: shared by every layer here; one set per layer when training. */
  protected layerActivations(_layer: number): LayerActivations {
    return {
      h1: this.h,
      qkv: this.qkv,
      attended: this.attended,
      lse: this.attentionLse,
      h2: this.h,
      gateUp: this.gateUp,
      act: this.act,
      loraHidden: () => this.loraHidden!,
    };
  }

  /**
   * LoRA dropout of the adapter's input: none at inference. The training state overrides this to
   * return the dropped-out input it keeps for the backward pass, and the dispatch that makes it.
   */
  protected loraDropout(_layer: number, _target: LoraTarget, _x: GPUBuffer, _R: number, _inFeatures: number): { input: GPUBuffer; dispatches: Dispatch[] } | null {
    return null;
  }

  /** y[:, column0 ..] += scaling * (x A^T) B^T for the adapter's module at (layer, target), if any. */
  private lora(layer: number, target: LoraTarget, a: LayerActivations, x: GPUBuffer, y: GPUBuffer, R: number, ldY: number, column0 = 0): Dispatch[] {
    const adapter = this.shape.adapter;
    const module = adapter?.module(layer, target);
    if (!adapter || !module) return [];
    const hidden = a.loraHidden(target);
    const dropped = this.loraDropout(layer, target, x, R, module.A.cols);
    return [
      ...(dropped?.dispatches ?? []),
      ...this.ops.matmul(dropped?.input ?? x, module.A, null, hidden, { M: R }),
      ...this.ops.matmul(hidden, module.B, null, y, { M: R, ldY, column0, accumulate: true, alpha: adapter.scaling }),
    ];
  }

  /** A copy of the first R rows of the residual stream (a gather with the identity row list). */
  private saveResidual(to: GPUBuffer | undefined, R: number): Dispatch[] {
    if (!to) return [];
    const C = this.model.config.hiddenSize;
    this.identityRows ??= (() => {
      const rows = storageBuffer(this.model.gpu.device, this.shape.maxRows * 4, 'identity rows');
      this.write(rows, Uint32Array.from({ length: this.shape.maxRows }, (_, i) => i));
      this.buffers.push(rows);
      return rows;
    })();
    return this.ops.gatherRows(wholeMatrix(this.x, R, C), this.identityRows, to, R);
  }

  /** Sets where the next step's tokens go in the cache and the sampler's step counter. */
  setCursor(slot0: number, step: number): void {
    this.model.gpu.device.queue.writeBuffer(this.cursor, 0, new Uint32Array([slot0, step, 0, 0]));
  }

  write(buffer: GPUBuffer, data: Uint32Array | Int32Array | Float32Array, offsetBytes = 0): void {
    this.model.gpu.device.queue.writeBuffer(buffer, offsetBytes, data.buffer, data.byteOffset, data.byteLength);
  }

  /** The dispatches from token ids to the last layer's residual stream, for T tokens per sequence. */
  body(T: number, ids: GPUBuffer): Dispatch[] {
    const { model, ops, shape } = this;
    const { hiddenSize: C, numHeads: H, numKvHeads: Hk, headDim: D, intermediateSize: F, rmsNormEps: eps } = model.config;
    const R = shape.B * T;
    if (R > shape.maxRows) throw new RangeError(`forward of ${R} rows exceeds the ${shape.maxRows} this state holds`);
    const dims = { B: shape.B, T, H, Hk, D, S: shape.S };
    const dispatches: Dispatch[] = [...ops.gatherRows(model.embedding, ids, this.x, R)];
    const qkvWidth = (H + 2 * Hk) * D;
    model.layers.forEach((layer, l) => {
      const a = this.layerActivations(l);
      dispatches.push(
        ...this.saveResidual(a.xIn, R),
        ops.rmsnorm(this.x, layer.inputNorm, a.h1, R, C, eps),
        ...ops.matmul(a.h1, layer.qkv, layer.qkvBias, a.qkv, { M: R }),
        ...this.lora(l, 'q_proj', a, a.h1, a.qkv, R, qkvWidth, 0),
        ...this.lora(l, 'k_proj', a, a.h1, a.qkv, R, qkvWidth, H * D),
        ...this.lora(l, 'v_proj', a, a.h1, a.qkv, R, qkvWidth, (H + Hk) * D),
        ops.ropeAndStoreKv(a.qkv, this.positions, model.rope, this.kCache[l], this.vCache[l], this.cursor, dims),
        ops.attention(a.qkv, this.kCache[l], this.vCache[l], this.keyMask, a.attended, a.lse, this.cursor, { ...dims, maskLen: shape.maskLen, tree: shape.tree }),
        ...ops.matmul(a.attended, layer.o, layer.oBias, this.x, { M: R, accumulate: true }),
        ...this.lora(l, 'o_proj', a, a.attended, this.x, R, C),
        ...this.saveResidual(a.xMid, R),
        ops.rmsnorm(this.x, layer.postAttentionNorm, a.h2, R, C, eps),
        ...ops.matmul(a.h2, layer.gateUp, null, a.gateUp, { M: R }),
        ...this.lora(l, 'gate_proj', a, a.h2, a.gateUp, R, 2 * F, 0),
        ...this.lora(l, 'up_proj', a, a.h2, a.gateUp, R, 2 * F, F),
        ops.siluMul(a.gateUp, a.act, R, F),
        ...ops.matmul(a.act, layer.down, null, this.x, { M: R, accumulate: true }),
        ...this.lora(l, 'down_proj', a, a.act, this.x, R, C),
      );
    });
    return dispatches;
  }

  /** Final norm and LM head on each sequence's newest row (lastRows), then one sampled token each. */
  samplingHead(T: number, sampling: { greedy: boolean; topK: number; topP: number; temperature: number; seed: number }): Dispatch[] {
    const { model, ops, shape } = this;
    const { hiddenSize: C, vocabSize: V, rmsNormEps: eps } = model.config;
    const { B } = shape;
    const newest = wholeMatrix(this.x, B * T, C);
    return [
      ...(T === 1 ? [ops.rmsnorm(this.x, model.finalNorm, this.lastNormed, B, C, eps)] : [
        ...ops.gatherRows(newest, this.lastRows, this.lastHidden, B),
        ops.rmsnorm(this.lastHidden, model.finalNorm, this.lastNormed, B, C, eps),
      ]),
      ...ops.matmul(this.lastNormed, model.lmHead, null, this.logits, { M: B }),
      ops.sample(this.logits, this.sampledIds, this.sampledLogprobs, this.cursor, { B, V, ...sampling }),
    ];
  }

  /** Final norm of every row of the step into h: the hidden states a value head reads. */
  finalNorm(T: number): Dispatch {
    const { hiddenSize: C, rmsNormEps: eps } = this.model.config;
    return this.ops.rmsnorm(this.x, this.model.finalNorm, this.h, this.shape.B * T, C, eps);
  }

  dispose(): void {
    this.ops.dispose();
    for (const b of this.buffers) b.destroy();
  }
}
