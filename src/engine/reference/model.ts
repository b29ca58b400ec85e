// Float64 reference of the whole decoder forward over a padded batch, built from the reference ops.
// The engine's logits are checked against it on random tiny models of every supported shape.
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

function linear(x: Float64Array, rows: number, layer: HostLinear): Float64Array {
  const [N, K] = layer.weight.shape;
  return matmul(x, layer.weight.data, rows, N, K, layer.bias?.data ?? null);
}

/** ids and mask are [B][T] (mask 1 = real token, 0 = padding). */
export function referenceForward(config: ModelConfig, weights: HostWeights, ids: number[][], mask: number[][]): ReferenceOutput {
  const B = ids.length;
  const T = ids[0].length;
  const R = B * T;
  const { hiddenSize: C, numHeads: H, numKvHeads: Hk, headDim: D, intermediateSize: F, vocabSize: V } = config;
  const positions = positionsFromMask(mask).flat();
  const table = ropeTable(config, Math.max(...positions) + 1);
  let x = gatherRows(weights.embedding.data, ids.flat(), C);
  for (const layer of weights.layers) {
    const h = rmsnorm(x, layer.inputNorm.data, R, C, config.rmsNormEps);
    const q = linear(h, R, layer.q);
    const k = linear(h, R, layer.k);
    const v = linear(h, R, layer.v);
    for (let r = 0; r < R; r++) {
      for (let head = 0; head < H; head++) q.set(rotate(q.subarray((r * H + head) * D, (r * H + head + 1) * D), positions[r], table), (r * H + head) * D);
      for (let head = 0; head < Hk; head++) k.set(rotate(k.subarray((r * Hk + head) * D, (r * Hk + head + 1) * D), positions[r], table), (r * Hk + head) * D);
    }
    const cache = { B, T, H, Hk, D, S: T, maskLen: T, slot0: 0 };
    const attended = attention(q, toCacheLayout(k, B, T, Hk, D), toCacheLayout(v, B, T, Hk, D), mask.flat(), cache).out;
    const o = linear(attended, R, layer.o);
    x = x.map((value, i) => value + o[i]);
    const h2 = rmsnorm(x, layer.postAttentionNorm.data, R, C, config.rmsNormEps);
    const gate = linear(h2, R, layer.gate);
    const up = linear(h2, R, layer.up);
    const gateUp = new Float64Array(R * 2 * F);
    for (let r = 0; r < R; r++) {
      gateUp.set(gate.subarray(r * F, (r + 1) * F), r * 2 * F);
      gateUp.set(up.subarray(r * F, (r + 1) * F), r * 2 * F + F);
    }
    const down = linear(siluMul(gateUp, R, F), R, layer.down);
    x = x.map((value, i) => value + down[i]);
  }
  const hidden = rmsnorm(x, weights.finalNorm.data, R, C, config.rmsNormEps);
  const logits = matmul(hidden, weights.lmHead.data, R, V, C);
  return { logits, hidden };
}
