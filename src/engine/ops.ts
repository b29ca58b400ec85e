// Builders of kernel dispatches with their shapes checked: one method per WGSL entry point.
// Each call creates the small uniform buffer that describes its shapes; the builder owns those
// buffers and frees them on dispose(), so a forward plan built from it can be replayed for free.
import { grid, uniformBuffer, type UniformField } from './gpu/buffers.ts';
import type { Dispatch, Kernels } from './gpu/kernels.ts';
import type { GpuMatrix } from './gpu/matrix.ts';

export interface MatmulShape {
  /** Rows of x and y. */
  M: number;
  /** Row stride of y (>= the weight's rows). */
  ldY?: number;
  /** Add into y instead of overwriting it. */
  accumulate?: boolean;
  alpha?: number;
  /** First output column of y to write (default 0): a LoRA update of the k slice of a fused qkv row. */
  column0?: number;
}

/** The tiled matmul pays off from this many rows; fewer rows use the one-row-per-invocation variant. */
const TILED_MATMUL_MIN_ROWS = 16;

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

  /** y[:, cols] (+)= alpha * x . w^T + bias, one dispatch per row-chunk of w. x [M, K], w [N, K]. */
  matmul(x: GPUBufferBinding | GPUBuffer, w: GpuMatrix, bias: GPUBuffer | null, y: GPUBufferBinding | GPUBuffer, shape: MatmulShape): Dispatch[] {
    const { M } = shape;
    const ldY = shape.ldY ?? w.rows;
    if (ldY < (shape.column0 ?? 0) + w.rows) throw new RangeError(`matmul: output stride ${ldY} < ${(shape.column0 ?? 0) + w.rows} columns`);
    const tiled = M >= TILED_MATMUL_MIN_ROWS;
    return w.chunks.map((chunk) => {
      const column0 = (shape.column0 ?? 0) + chunk.rowStart;
      const params = this.uniform('matmul', [M, chunk.rows, w.cols, ldY, column0, shape.accumulate ? 1 : 0, bias ? 1 : 0, { f32: shape.alpha ?? 1 }, chunk.rowStart]);
      const workgroups: [number, number, number] = tiled
        ? [Math.ceil(chunk.rows / 32), Math.ceil(M / 32), 1]
        : [Math.ceil(chunk.rows / 256), M, 1];
      if (workgroups[1] > 65535) throw new RangeError(`matmul: ${M} rows exceed one dispatch; split the batch`);
      return this.kernels.dispatch(tiled ? 'matmul_tiled' : 'matmul_rows', [params, x, chunk.buffer, bias ?? this.dummy, y], workgroups);
    });
  }

  /** y = RMSNorm(x) * weight, x and y [R, C]. */
  rmsnorm(x: GPUBuffer | GPUBufferBinding, weight: GPUBuffer, y: GPUBuffer | GPUBufferBinding, R: number, C: number, eps: number): Dispatch {
    return this.kernels.dispatch('rmsnorm', [this.uniform('rmsnorm', [R, C, { f32: eps }]), x, weight, y], grid(R, 1));
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

  /** Causal GQA of the T new tokens of each sequence against the cache; out [B*T, H*D], lse [B*T, H]. */
  attention(
    qkv: GPUBuffer, kCache: GPUBuffer, vCache: GPUBuffer, keyMask: GPUBuffer, out: GPUBuffer, lse: GPUBuffer, cursor: GPUBuffer,
    s: { B: number; T: number; H: number; Hk: number; D: number; S: number; maskLen: number },
  ): Dispatch {
    if (s.D !== this.kernels.headDim) throw new RangeError(`attention: head_dim ${s.D} but kernels specialised for ${this.kernels.headDim}`);
    const params = this.uniform('attention', [s.B, s.T, s.H, s.Hk, s.S, s.maskLen, { f32: 1 / Math.sqrt(s.D) }]);
    return this.kernels.dispatch('attention', [params, qkv, kCache, vCache, keyMask, out, cursor, lse], grid(s.B * s.T * s.H, 64));
  }

  /** out[i, :] = table[rows[i], :] across the table's chunks; out [N, C]. */
  gatherRows(table: GpuMatrix, rows: GPUBuffer, out: GPUBuffer, N: number): Dispatch[] {
    return table.chunks.map((chunk) =>
      this.kernels.dispatch('gather_rows', [this.uniform('gather', [N, table.cols, chunk.rowStart, chunk.rows]), chunk.buffer, rows, out], grid(N * table.cols, 64)),
    );
  }

  /** out [R, F] = silu(gateUp[:, :F]) * gateUp[:, F:]. */
  siluMul(gateUp: GPUBuffer, out: GPUBuffer, R: number, F: number): Dispatch {
    return this.kernels.dispatch('silu_mul', [this.uniform('silu_mul', [R, F]), gateUp, out], grid(R * F, 64));
  }

  /** Per-row log-probability of targets[r] (i32, < 0 for none) and entropy, from logits [R, V]. */
  tokenLogprobs(logits: GPUBuffer | GPUBufferBinding, targets: GPUBuffer | GPUBufferBinding, logprob: GPUBuffer | GPUBufferBinding, entropy: GPUBuffer | GPUBufferBinding, R: number, V: number): Dispatch {
    return this.kernels.dispatch('token_logprobs', [this.uniform('logprobs', [R, V]), logits, targets, logprob, entropy], grid(R, 1));
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

  dispose(): void {
    for (const buffer of this.owned) buffer.destroy();
    this.owned.length = 0;
  }
}
