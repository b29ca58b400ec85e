// Builders of the backward kernels' dispatches (shaders/backward.wgsl), one method per entry point,
// built like OpBuilder: each call creates the small uniform buffer that describes its shapes, owned by
// the builder and freed on dispose(), so a backward plan built from it can be replayed for free.
// Buffers may be whole GPUBuffers or GPUBufferBindings (a row range of a bigger buffer); every index
// in the kernels is relative to the bound range.
import { grid, uniformBuffer, type UniformField } from './gpu/buffers.ts';
import type { Dispatch, Kernels } from './gpu/kernels.ts';

type Binding = GPUBuffer | GPUBufferBinding;

/** Shapes of one layer's attention backward; the forward ran with cursor.slot0 = 0 over T <= S tokens. */
export interface AttentionBackwardShape {
  B: number;
  T: number;
  H: number;
  Hk: number;
  D: number;
  /** Cache capacity (slots per sequence) of kCache and vCache. */
  S: number;
  /** Columns of keyMask; slots >= maskLen are real tokens. */
  maskLen: number;
  /**
   * A tree-structured batch: keyMask [B, maskLen] is followed by a (prefix, segment) pair of u32 per query
   * row [B*T, 2], and query t sees only the keys s < prefix and segment <= s <= t (src/engine/train/batch.ts).
   */
  tree?: boolean;
}

export class BackwardOps {
  private readonly owned: GPUBuffer[] = [];

  constructor(readonly kernels: Kernels) {}

  private uniform(label: string, fields: UniformField[]): GPUBuffer {
    const buffer = uniformBuffer(this.kernels.device, fields, label);
    this.owned.push(buffer);
    return buffer;
  }

  /**
   * dx [R, C] (+)= the gradient of y = RMSNorm(x) * weight given dy [R, C]; also writes rs [R] (each row's
   * 1 / rms) for rmsnormWeightGrad. `accumulate` adds into dx (the residual stream's gradient). dx must
   * not be dy.
   */
  rmsnormBackward(x: Binding, weight: Binding, dy: Binding, dx: Binding, rs: Binding, s: { R: number; C: number; eps: number; accumulate?: boolean }): Dispatch {
    const params = this.uniform('rmsnorm backward', [s.R, s.C, { f32: s.eps }, s.accumulate ? 1 : 0]);
    return this.kernels.dispatch('rmsnorm_backward', [params, x, weight, dy, dx, rs], grid(s.R, this.kernels.rowsPerWorkgroup));
  }

  /** dweight [C] (+)= sum_r dy[r, :] * x[r, :] * rs[r], with rs [R] written by rmsnormBackward. */
  rmsnormWeightGrad(x: Binding, dy: Binding, rs: Binding, dweight: Binding, s: { R: number; C: number; accumulate?: boolean }): Dispatch {
    const params = this.uniform('rmsnorm weight grad', [s.R, s.C, s.accumulate ? 1 : 0]);
    return this.kernels.dispatch('rmsnorm_weight_grad', [params, x, dy, rs, dweight], grid(s.C, 64));
  }

  /** dgateUp [R, 2F] = the gradient of out = silu(gateUp[:, :F]) * gateUp[:, F:] given dout [R, F]. */
  siluMulBackward(gateUp: Binding, dout: Binding, dgateUp: Binding, R: number, F: number): Dispatch {
    return this.kernels.dispatch('silu_mul_backward', [this.uniform('silu_mul backward', [R, F]), gateUp, dout, dgateUp], grid(R * F, 64));
  }

  /** Un-rotates, in place, the q and k heads of the gradient dqkv [R, (H+2Hk)*D] with the forward's positions and table. */
  ropeBackward(dqkv: Binding, positions: Binding, rope: Binding, s: { R: number; H: number; Hk: number; D: number }): Dispatch {
    const params = this.uniform('rope backward', [s.R, s.H, s.Hk, s.D]);
    return this.kernels.dispatch('rope_backward', [params, dqkv, positions, rope], grid(s.R * (s.H + s.Hk), 64));
  }

  /**
   * delta [B*T, H] = dout . out per query head, and dq into the q columns of dqkv [B*T, (H+2Hk)*D]. qkv holds
   * the rotated queries (the forward's), kCache/vCache [B, Hk, S, D], dout [B*T, H*D], lse [B*T, H].
   */
  attentionBackwardQuery(
    qkv: Binding, kCache: Binding, vCache: Binding, keyMask: Binding, dout: Binding, lse: Binding, delta: Binding, dqkv: Binding,
    s: AttentionBackwardShape,
  ): Dispatch {
    return this.kernels.dispatch('attention_backward_query', [this.attentionParams(s), qkv, kCache, vCache, keyMask, dout, lse, delta, dqkv], grid(s.B * s.T * s.H, 64));
  }

  /** dk and dv into the k and v columns of dqkv, after attentionBackwardQuery has written delta. */
  attentionBackwardKey(
    qkv: Binding, kCache: Binding, vCache: Binding, keyMask: Binding, dout: Binding, lse: Binding, delta: Binding, dqkv: Binding,
    s: AttentionBackwardShape,
  ): Dispatch {
    return this.kernels.dispatch('attention_backward_key', [this.attentionParams(s), qkv, kCache, vCache, keyMask, dout, lse, delta, dqkv], grid(s.B * s.T * s.Hk, 64));
  }

  /**
   * dlogits [R, V] = gLogprob * (onehot(target) - p) - gEntropy * p * (log p + H) for p = softmax(logits row),
   * H its entropy; targets [R] i32 (< 0: no target, entropy term only), gLogprob and gEntropy [R].
   */
  logitsBackward(logits: Binding, targets: Binding, gLogprob: Binding, gEntropy: Binding, dlogits: Binding, R: number, V: number): Dispatch {
    return this.kernels.dispatch('logits_backward', [this.uniform('logits backward', [R, V]), logits, targets, gLogprob, gEntropy, dlogits], grid(R, this.kernels.rowsPerWorkgroup));
  }

  /**
   * dtable [V, C] (+)= the gradient of the lookup x[r, :] = table[ids[r], :] given dx [R, C]: row v gets the sum
   * of dx over the rows whose id is row0 + v (row0: first vocabulary row of the bound range, default 0).
   * Without `accumulate`, rows of absent tokens are zeroed.
   */
  embeddingBackward(ids: Binding, dx: Binding, dtable: Binding, s: { R: number; V: number; C: number; row0?: number; accumulate?: boolean }): Dispatch {
    const params = this.uniform('embedding backward', [s.R, s.V, s.C, s.accumulate ? 1 : 0, s.row0 ?? 0]);
    return this.kernels.dispatch('embedding_backward', [params, ids, dx, dtable], grid(s.V, 1));
  }

  dispose(): void {
    for (const buffer of this.owned) buffer.destroy();
    this.owned.length = 0;
  }

  private attentionParams(s: AttentionBackwardShape): GPUBuffer {
    if (s.D !== this.kernels.headDim) throw new RangeError(`attention backward: head_dim ${s.D} but kernels specialised for ${this.kernels.headDim}`);
    if (s.T > s.S) throw new RangeError(`attention backward: ${s.T} tokens exceed the cache's ${s.S} slots`);
    if (s.H % s.Hk !== 0) throw new RangeError(`attention backward: ${s.H} query heads are not a multiple of ${s.Hk} kv heads`);
    return this.uniform('attention backward', [s.B, s.T, s.H, s.Hk, s.S, s.maskLen, { f32: 1 / Math.sqrt(s.D) }, s.tree ? 1 : 0]);
  }
}
