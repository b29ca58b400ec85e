// Builders of kernel dispatches with their shapes checked: one method per WGSL entry point, each
// operation's backward right after its forward, as in its module in shaders/. Each call creates the
// small uniform buffer that describes its shapes; the builder owns those buffers and frees them on
// dispose(), so a plan built from it can be replayed for free. Buffers may be whole GPUBuffers or
// GPUBufferBindings (a row range of a bigger buffer); every index in the kernels is relative to the
// bound range.
import { grid, uniformBuffer, type UniformField } from './gpu/buffers.ts';
import type { Dispatch, Kernels } from './gpu/kernels.ts';
import type { GpuMatrix } from './gpu/matrix.ts';

/** A buffer or a range of one, as bound to a kernel. */
export type Binding = GPUBuffer | GPUBufferBinding;

export interface GemmShape {
  M: number;
  N: number;
  K: number;
  sAm: number;
  sAk: number;
  sBn: number;
  sBk: number;
  aOffset?: number;
  bOffset?: number;
  ldY?: number;
  column0?: number;
  accumulate?: boolean;
  alpha?: number;
}

export interface MatmulShape {
  /** Rows of x and y. */
  M: number;
  /** Row stride of x (default: the weight's columns). */
  ldX?: number;
  /** Row stride of y (>= the weight's rows). */
  ldY?: number;
  /** Add into y instead of overwriting it. */
  accumulate?: boolean;
  alpha?: number;
  /** First output column of y to write (default 0): a LoRA update of the k slice of a fused qkv row. */
  column0?: number;
}

/** Shapes of one layer's attention; its backward needs a forward with cursor.slot0 = 0 over T <= S tokens. */
export interface AttentionShape {
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

/** The tiled matmul pays off from this many rows; fewer rows use the one-row-per-invocation variant. */
const TILED_MATMUL_MIN_ROWS = 16;

/**
 * How matmul_tiled4 reads the operands of `g` as vec4s (along k or along m / n), or null when it
 * cannot: an operand must be contiguous along one of its dimensions, with its offset, its other
 * stride and the dimension it is read along in runs of 4 all multiples of 4 (K's tail is masked
 * only for an operand read along m or n).
 */
function vec4Layout(g: GemmShape): { aAlongK: boolean; bAlongK: boolean } | null {
  const four = (...values: number[]) => values.every((v) => v % 4 === 0);
  if (!four(g.aOffset ?? 0, g.bOffset ?? 0)) return null;
  const aAlongK = g.sAk === 1 && four(g.sAm, g.K);
  const aAlongM = g.sAm === 1 && four(g.sAk, g.M);
  const bAlongK = g.sBk === 1 && four(g.sBn, g.K);
  const bAlongN = g.sBn === 1 && four(g.sBk, g.N);
  if (!(aAlongK || aAlongM) || !(bAlongK || bAlongN)) return null;
  return { aAlongK, bAlongK };
}

export class OpBuilder {
  private readonly owned: GPUBuffer[] = [];
  private readonly dummy: GPUBuffer;

  constructor(readonly kernels: Kernels) {
    this.dummy = this.own(kernels.device.createBuffer({ size: 16, usage: GPUBufferUsage.STORAGE, label: 'no bias' }));
  }

  private get device(): GPUDevice {
    return this.kernels.device;
  }

  private own<T extends GPUBuffer>(buffer: T): T {
    this.owned.push(buffer);
    return buffer;
  }

  private uniform(label: string, fields: UniformField[]): GPUBuffer {
    return this.own(uniformBuffer(this.device, fields, label));
  }

  /**
   * The general strided product of matmul.wgsl: y[m, column0 + n] (+)= alpha sum_k A(m, k) B(n, k),
   * A(m, k) = a[aOffset + m sAm + k sAk], B(n, k) = b[bOffset + n sBn + k sBk].
   */
  gemm(a: Binding, b: Binding, y: Binding, g: GemmShape, bias: { buffer: Binding; row0: number } | null = null): Dispatch {
    const ldY = g.ldY ?? g.N;
    if (ldY < (g.column0 ?? 0) + g.N) throw new RangeError(`matmul: output stride ${ldY} < ${(g.column0 ?? 0) + g.N} columns`);
    const tiled = g.M >= TILED_MATMUL_MIN_ROWS;
    const params = this.uniform('matmul', [
      g.M, g.N, g.K, ldY, g.column0 ?? 0, g.accumulate ? 1 : 0, bias ? 1 : 0, { f32: g.alpha ?? 1 }, bias?.row0 ?? 0,
      g.sAm, g.sAk, g.sBn, g.sBk, g.aOffset ?? 0, g.bOffset ?? 0,
    ]);
    const workgroups: [number, number, number] = tiled ? [Math.ceil(g.N / 32), Math.ceil(g.M / 32), 1] : [Math.ceil(g.N / 256), g.M, 1];
    if (workgroups[1] > 65535) throw new RangeError(`matmul: ${g.M} rows exceed one dispatch; split the batch`);
    const layout = tiled ? vec4Layout(g) : null;
    if (layout) return this.kernels.dispatch('matmul_tiled4', [params, a, b, bias?.buffer ?? this.dummy, y], workgroups, { A_ALONG_K: Number(layout.aAlongK), B_ALONG_K: Number(layout.bAlongK) });
    return this.kernels.dispatch(tiled ? 'matmul_tiled' : 'matmul_rows', [params, a, b, bias?.buffer ?? this.dummy, y], workgroups);
  }

  /** y[:, column0 ..] (+)= alpha * x . w^T + bias, one dispatch per row-chunk of w. x [M, K] (row stride ldX), w [N, K]. */
  matmul(x: Binding, w: GpuMatrix, bias: Binding | null, y: Binding, shape: MatmulShape): Dispatch[] {
    const K = w.cols;
    return w.chunks.map((chunk) =>
      this.gemm(x, chunk.buffer, y, {
        M: shape.M, N: chunk.rows, K, ldY: shape.ldY ?? (shape.column0 ?? 0) + w.rows, column0: (shape.column0 ?? 0) + chunk.rowStart,
        accumulate: shape.accumulate, alpha: shape.alpha, sAm: shape.ldX ?? K, sAk: 1, sBn: K, sBk: 1,
      }, bias ? { buffer: bias, row0: chunk.rowStart } : null),
    );
  }

  /**
   * The input gradient of y = x w^T: dx (+)= alpha * dy[:, dyColumn0 ..] . w, dy [M, ldDy], w [N, K], dx [M, K].
   * Row-chunks of w each add their part.
   */
  matmulInputGrad(dy: Binding, w: GpuMatrix, dx: Binding, shape: { M: number; ldDy: number; dyColumn0?: number; accumulate?: boolean; alpha?: number }): Dispatch[] {
    return w.chunks.map((chunk, i) =>
      this.gemm(dy, chunk.buffer, dx, {
        M: shape.M, N: w.cols, K: chunk.rows, ldY: w.cols, accumulate: shape.accumulate || i > 0, alpha: shape.alpha,
        sAm: shape.ldDy, sAk: 1, aOffset: (shape.dyColumn0 ?? 0) + chunk.rowStart, sBn: 1, sBk: w.cols,
      }),
    );
  }

  /**
   * The weight gradient of y = x w^T: dw [N, K] += alpha * dy[:, dyColumn0 ..]^T . x, a reduction over
   * the M rows of dy [M, ldDy] and x [M, K].
   */
  matmulWeightGrad(dy: Binding, x: Binding, dw: Binding, s: { M: number; N: number; K: number; ldDy: number; dyColumn0?: number; alpha?: number }): Dispatch {
    return this.gemm(dy, x, dw, { M: s.N, N: s.K, K: s.M, sAm: 1, sAk: s.ldDy, aOffset: s.dyColumn0, sBn: 1, sBk: s.K, alpha: s.alpha, accumulate: true });
  }

  /** The bias gradient of y = x w^T + bias: db [N] += sum_m dy[m, :] for dy [M, N], with `ones` [M] all 1 (the bias's input). */
  biasGrad(dy: Binding, ones: Binding, db: Binding, s: { M: number; N: number }): Dispatch {
    return this.matmulWeightGrad(ones, dy, db, { M: s.M, N: 1, K: s.N, ldDy: 1 });
  }

  /**
   * The backward of a LoRA update y[:, dyColumn0 ..] += alpha (x A^T) B^T, given dy [M, ldDy] and the
   * forward's t = x A^T [M, r]: dB += alpha dy^T t, dt = alpha dy B, dA += dt^T x, and dx (+)= dt A.
   * A [r, in], B [out, r], x and dx [M, in], dt [M, r] (scratch).
   */
  loraBackward(
    lora: { A: GpuMatrix; B: GpuMatrix; dA: Binding; dB: Binding; alpha: number },
    io: { x: Binding; t: Binding; dy: Binding; dt: Binding; dx: Binding },
    s: { M: number; ldDy: number; dyColumn0: number; accumulateDx: boolean },
  ): Dispatch[] {
    const { M, ldDy, dyColumn0 } = s;
    const r = lora.A.rows;
    return [
      this.matmulWeightGrad(io.dy, io.t, lora.dB, { M, N: lora.B.rows, K: r, ldDy, dyColumn0, alpha: lora.alpha }),
      ...this.matmulInputGrad(io.dy, lora.B, io.dt, { M, ldDy, dyColumn0, alpha: lora.alpha }),
      this.matmulWeightGrad(io.dt, io.x, lora.dA, { M, N: r, K: lora.A.cols, ldDy: r }),
      ...this.matmulInputGrad(io.dt, lora.A, io.dx, { M, ldDy: r, accumulate: s.accumulateDx }),
    ];
  }

  /** y = RMSNorm(x) * weight, x and y [R, C]. */
  rmsnorm(x: GPUBuffer | GPUBufferBinding, weight: Binding, y: GPUBuffer | GPUBufferBinding, R: number, C: number, eps: number): Dispatch {
    return this.kernels.dispatch('rmsnorm', [this.uniform('rmsnorm', [R, C, { f32: eps }]), x, weight, y], grid(R, this.kernels.rowsPerWorkgroup));
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

  /** RoPE on the q and k heads of qkv [B*T, (H+2Hk)*D]; k and v stored at cache slots cursor.slot0 + t. */
  ropeAndStoreKv(
    qkv: GPUBuffer, positions: GPUBuffer, rope: GPUBuffer, kCache: GPUBuffer, vCache: GPUBuffer, cursor: GPUBuffer,
    s: { B: number; T: number; H: number; Hk: number; D: number; S: number },
  ): Dispatch {
    const R = s.B * s.T;
    const params = this.uniform('rope', [R, s.T, s.H, s.Hk, s.D, s.S]);
    return this.kernels.dispatch('rope_and_store_kv', [params, qkv, positions, rope, kCache, vCache, cursor], grid(R * (s.H + 2 * s.Hk), 64));
  }

  /** Un-rotates, in place, the q and k heads of the gradient dqkv [R, (H+2Hk)*D] with the forward's positions and table. */
  ropeBackward(dqkv: Binding, positions: Binding, rope: Binding, s: { R: number; H: number; Hk: number; D: number }): Dispatch {
    const params = this.uniform('rope backward', [s.R, s.H, s.Hk, s.D]);
    return this.kernels.dispatch('rope_backward', [params, dqkv, positions, rope], grid(s.R * (s.H + s.Hk), 64));
  }

  /**
   * Causal GQA of the T new tokens of each sequence against the cache; out [B*T, H*D], lse [B*T, H].
   * With `tree` (training of tree-structured batches, slot0 = 0), keyMask [B, maskLen] is followed by a
   * (prefix, segment) pair of u32 per query row, [B*T, 2]: query t sees only slots s < prefix and segment <= s <= t.
   */
  attention(
    qkv: GPUBuffer, kCache: GPUBuffer, vCache: GPUBuffer, keyMask: GPUBuffer, out: GPUBuffer, lse: GPUBuffer, cursor: GPUBuffer,
    s: AttentionShape,
  ): Dispatch {
    return this.kernels.dispatch('attention', [this.attentionParams('attention', s), qkv, kCache, vCache, keyMask, out, cursor, lse], grid(s.B * s.T * s.H, 64));
  }

  /**
   * delta [B*T, H] = dout . out per query head, and dq into the q columns of dqkv [B*T, (H+2Hk)*D]. qkv holds
   * the rotated queries (the forward's), kCache/vCache [B, Hk, S, D], dout [B*T, H*D], lse [B*T, H].
   */
  attentionBackwardQuery(
    qkv: Binding, kCache: Binding, vCache: Binding, keyMask: Binding, dout: Binding, lse: Binding, delta: Binding, dqkv: Binding,
    s: AttentionShape,
  ): Dispatch {
    return this.kernels.dispatch('attention_backward_query', [this.attentionBackwardParams(s), qkv, kCache, vCache, keyMask, dout, lse, delta, dqkv], grid(s.B * s.T * s.H, 64));
  }

  /** dk and dv into the k and v columns of dqkv, after attentionBackwardQuery has written delta. */
  attentionBackwardKey(
    qkv: Binding, kCache: Binding, vCache: Binding, keyMask: Binding, dout: Binding, lse: Binding, delta: Binding, dqkv: Binding,
    s: AttentionShape,
  ): Dispatch {
    return this.kernels.dispatch('attention_backward_key', [this.attentionBackwardParams(s), qkv, kCache, vCache, keyMask, dout, lse, delta, dqkv], grid(s.B * s.T * s.Hk, 64));
  }

  /**
   * out[i, :] = table[rows[i], :] across the table's chunks; out [N, C]. Strided: only the first
   * `columns` of each row, into output rows of `outStride` floats (the rest of each left as it is).
   */
  gatherRows(table: GpuMatrix, rows: GPUBuffer, out: GPUBuffer, N: number, strided: { columns: number; outStride: number } | null = null): Dispatch[] {
    const columns = strided?.columns ?? table.cols;
    const outStride = strided?.outStride ?? table.cols;
    if (columns > table.cols || columns > outStride) throw new RangeError(`gather of ${columns} columns from rows of ${table.cols} into rows of ${outStride}`);
    return table.chunks.map((chunk) =>
      this.kernels.dispatch('gather_rows', [this.uniform('gather', [N, columns, chunk.rowStart, chunk.rows, table.cols, outStride, 0, 0]), chunk.buffer, rows, out], grid(N * columns, 64)),
    );
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

  /** out [R, F] = silu(gateUp[:, :F]) * gateUp[:, F:]. */
  siluMul(gateUp: GPUBuffer, out: GPUBuffer, R: number, F: number): Dispatch {
    return this.kernels.dispatch('silu_mul', [this.uniform('silu_mul', [R, F]), gateUp, out], grid(R * F, 64));
  }

  /** dgateUp [R, 2F] = the gradient of out = silu(gateUp[:, :F]) * gateUp[:, F:] given dout [R, F]. */
  siluMulBackward(gateUp: Binding, dout: Binding, dgateUp: Binding, R: number, F: number): Dispatch {
    return this.kernels.dispatch('silu_mul_backward', [this.uniform('silu_mul backward', [R, F]), gateUp, dout, dgateUp], grid(R * F, 64));
  }

  /**
   * Inverted dropout of x [N] into out (added with accumulate), with the counter-based mask of
   * (seed, stream, counter.step); drop probability p in [0, 1).
   */
  dropout(x: Binding, out: Binding, counter: GPUBuffer, s: { N: number; seed: number; stream: number; p: number; accumulate?: boolean }): Dispatch {
    const threshold = Math.min(0xffffffff, Math.floor(s.p * 2 ** 32));
    const params = this.uniform('dropout', [s.N, s.seed >>> 0, s.stream, threshold, { f32: 1 / (1 - s.p) }, s.accumulate ? 1 : 0]);
    return this.kernels.dispatch('dropout', [params, counter, x, out], grid(s.N, 64));
  }

  /** Per-row log-probability of targets[r] (i32, < 0 for none) and entropy, from logits [R, V]. */
  tokenLogprobs(logits: GPUBuffer | GPUBufferBinding, targets: GPUBuffer | GPUBufferBinding, logprob: GPUBuffer | GPUBufferBinding, entropy: GPUBuffer | GPUBufferBinding, R: number, V: number): Dispatch {
    return this.kernels.dispatch('token_logprobs', [this.uniform('logprobs', [R, V]), logits, targets, logprob, entropy], grid(R, this.kernels.rowsPerWorkgroup));
  }

  /**
   * dlogits [R, V] = gLogprob * (onehot(target) - p) - gEntropy * p * (log p + H) for p = softmax(logits row),
   * H its entropy; targets [R] i32 (< 0: no target, entropy term only), gLogprob and gEntropy [R].
   */
  logitsBackward(logits: Binding, targets: Binding, gLogprob: Binding, gEntropy: Binding, dlogits: Binding, R: number, V: number): Dispatch {
    return this.kernels.dispatch('logits_backward', [this.uniform('logits backward', [R, V]), logits, targets, gLogprob, gEntropy, dlogits], grid(R, this.kernels.rowsPerWorkgroup));
  }

  /** One token per row of logits [B, V] into ids [B] and its log-probability into logprobs [B]. */
  sample(
    logits: GPUBuffer, ids: GPUBuffer, logprobs: GPUBuffer, cursor: GPUBuffer,
    s: { B: number; V: number; greedy: boolean; topK: number; topP: number; temperature: number; seed: number },
  ): Dispatch {
    if (s.B > 65535) throw new RangeError('sample: at most 65535 sequences per dispatch');
    const params = this.uniform('sample', [s.B, s.V, s.greedy ? 1 : 0, s.topK, { f32: s.topP }, { f32: 1 / s.temperature }, s.seed >>> 0]);
    return this.kernels.dispatch('sample', [params, cursor, logits, ids, logprobs], [s.B, 1, 1]);
  }

  /** attention.wgsl's Params, shared by the forward and the backward kernels. */
  private attentionParams(label: string, s: AttentionShape): GPUBuffer {
    if (s.D !== this.kernels.headDim) throw new RangeError(`${label}: head_dim ${s.D} but kernels specialised for ${this.kernels.headDim}`);
    return this.uniform(label, [s.B, s.T, s.H, s.Hk, s.S, s.maskLen, { f32: 1 / Math.sqrt(s.D) }, s.tree ? 1 : 0]);
  }

  private attentionBackwardParams(s: AttentionShape): GPUBuffer {
    if (s.T > s.S) throw new RangeError(`attention backward: ${s.T} tokens exceed the cache's ${s.S} slots`);
    if (s.H % s.Hk !== 0) throw new RangeError(`attention backward: ${s.H} query heads are not a multiple of ${s.Hk} kv heads`);
    return this.attentionParams('attention backward', s);
  }

  dispose(): void {
    for (const buffer of this.owned) buffer.destroy();
    this.owned.length = 0;
  }
}
