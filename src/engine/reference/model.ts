// Float64 reference of the whole decoder forward over a padded batch, built from the reference ops.
// The engine's logits are checked against it on random tiny models of every supported shape.
import { LORA_TARGETS, loraScaling, type HostLoraAdapter, type LoraModule, type LoraTarget } from '../lora/adapter.ts';
import { dropoutKeeps } from '../sampling-params.ts';
import type { HostLinear, HostWeights, ModelConfig } from '../model/types.ts';
import { ropeTable } from '../rope.ts';
import { positionsFromMask } from '../padding.ts';
import { attention, gatherRows, matmul, rmsnorm, rotate, siluMul, toCacheLayout } from './ops.ts';

export interface ReferenceOutput {
  /** [B, T, V] */
  logits: Float64Array;
  /** Final hidden states after the last RMSNorm, [B, T, C]. */
  hidden: Float64Array;
}

/** LoRA dropout as dropout.wgsl draws it: the masks of one training step. */
export interface ReferenceDropout {
  seed: number;
  step: number;
}

/**
 * x W^T + bias, plus the LoRA update s (dropout(x) A^T) B^T when the adapter adapts this projection
 * (dropout only when `dropout` is given and the adapter's probability is above 0).
 */
function linear(x: Float64Array, rows: number, layer: HostLinear, lora: LoraModule | undefined, scaling: number, dropout?: { seed: number; step: number; stream: number; p: number }): Float64Array {
  const [N, K] = layer.weight.shape;
  const y = matmul(x, layer.weight.data, rows, N, K, layer.bias?.data ?? null);
  if (!lora) return y;
  const r = lora.A.length / K;
  const input = dropout && dropout.p > 0 ? x.map((v, i) => (dropoutKeeps(dropout.seed, dropout.stream, dropout.step, i, dropout.p) ? v / (1 - dropout.p) : 0)) : x;
  const update = matmul(matmul(input, lora.A, rows, r, K), lora.B, rows, N, r, null, scaling);
  return y.map((value, i) => value + update[i]);
}

/**
 * Explicit positions [B*T] and tree-structured attention: rowLimits [B*T*2], a (prefix, segment) pair of
 * padded slots per row (PackedBatch.positions and rowLimits; see src/engine/train/batch.ts).
 */
export interface ReferenceLayout {
  positions?: ArrayLike<number>;
  rowLimits?: ArrayLike<number>;
}

/** ids and mask are [B][T] (mask 1 = real token, 0 = padding); the adapter, if given, is applied in float64. */
export function referenceForward(
  config: ModelConfig, weights: HostWeights, ids: number[][], mask: number[][], adapter?: HostLoraAdapter, dropout?: ReferenceDropout, layout: ReferenceLayout = {},
): ReferenceOutput {
  const B = ids.length;
  const T = ids[0].length;
  const R = B * T;
  const { hiddenSize: C, numHeads: H, numKvHeads: Hk, headDim: D, intermediateSize: F, vocabSize: V } = config;
  const positions = layout.positions ? Array.from(layout.positions) : positionsFromMask(mask).flat();
  const table = ropeTable(config, Math.max(...positions) + 1);
  const scaling = adapter ? loraScaling(adapter.settings) : 0;
  const project = (x: Float64Array, l: number, target: LoraTarget, w: HostLinear) =>
    linear(x, R, w, adapter?.modules.find((m) => m.layer === l && m.target === target), scaling,
      dropout && adapter ? { ...dropout, stream: l * LORA_TARGETS.length + LORA_TARGETS.indexOf(target), p: adapter.settings.dropout } : undefined);
  let x = gatherRows(weights.embedding.data, ids.flat(), C);
  for (const [l, layer] of weights.layers.entries()) {
    const h = rmsnorm(x, layer.inputNorm.data, R, C, config.rmsNormEps);
    const q = project(h, l, 'q_proj', layer.q);
    const k = project(h, l, 'k_proj', layer.k);
    const v = project(h, l, 'v_proj', layer.v);
    for (let r = 0; r < R; r++) {
      for (let head = 0; head < H; head++) q.set(rotate(q.subarray((r * H + head) * D, (r * H + head + 1) * D), positions[r], table), (r * H + head) * D);
      for (let head = 0; head < Hk; head++) k.set(rotate(k.subarray((r * Hk + head) * D, (r * Hk + head + 1) * D), positions[r], table), (r * Hk + head) * D);
    }
    const cache = { B, T, H, Hk, D, S: T, maskLen: T, slot0: 0, rowLimits: layout.rowLimits };
    const attended = attention(q, toCacheLayout(k, B, T, Hk, D), toCacheLayout(v, B, T, Hk, D), mask.flat(), cache).out;
    const o = project(attended, l, 'o_proj', layer.o);
    x = x.map((value, i) => value + o[i]);
    const h2 = rmsnorm(x, layer.postAttentionNorm.data, R, C, config.rmsNormEps);
    const gate = project(h2, l, 'gate_proj', layer.gate);
    const up = project(h2, l, 'up_proj', layer.up);
    const gateUp = new Float64Array(R * 2 * F);
    for (let r = 0; r < R; r++) {
      gateUp.set(gate.subarray(r * F, (r + 1) * F), r * 2 * F);
      gateUp.set(up.subarray(r * F, (r + 1) * F), r * 2 * F + F);
    }
    const down = project(siluMul(gateUp, R, F), l, 'down_proj', layer.down);
    x = x.map((value, i) => value + down[i]);
  }
  const hidden = rmsnorm(x, weights.finalNorm.data, R, C, config.rmsNormEps);
  const logits = matmul(hidden, weights.lmHead.data, R, V, C);
  return { logits, hidden };
}
