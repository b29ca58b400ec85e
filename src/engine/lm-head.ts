// The LM head for scoring: logits of R rows of final hidden states, then each row's log-probability
// of its target token and the entropy of its next-token distribution. Rows go through in chunks so
// that a [rows, vocabulary] block of logits never outgrows one binding.
import { storageBuffer } from './gpu/buffers.ts';
import type { Dispatch } from './gpu/kernels.ts';
import type { GpuModel } from './gpu-model.ts';
import type { OpBuilder } from './ops.ts';

/** Binding offsets must be multiples of 256 bytes: row chunks start at multiples of 64 rows. */
const ROW_ALIGN = 64;

export class LogprobHead {
  /** Rows per chunk: the logits block holds this many rows. */
  readonly rowsPerChunk: number;
  readonly logits: GPUBuffer;
  /** Per row: the token whose log-probability is wanted (i32, < 0 for none). */
  readonly targets: GPUBuffer;
  readonly logprob: GPUBuffer;
  readonly entropy: GPUBuffer;

  constructor(
    private readonly model: GpuModel,
    maxRows: number,
  ) {
    const V = model.config.vocabSize;
    const device = model.gpu.device;
    this.rowsPerChunk = Math.max(ROW_ALIGN, Math.floor(model.gpu.maxBindingBytes / (V * 4) / ROW_ALIGN) * ROW_ALIGN);
    this.logits = storageBuffer(device, Math.min(this.rowsPerChunk, maxRows) * V * 4, 'head logits');
    this.targets = storageBuffer(device, maxRows * 4, 'targets');
    this.logprob = storageBuffer(device, maxRows * 4, 'logprob');
    this.entropy = storageBuffer(device, maxRows * 4, 'entropy');
  }

  /** Whether all R rows' logits sit in the logits block at once (needed to read them back). */
  holdsAllLogits(R: number): boolean {
    return R <= this.rowsPerChunk;
  }

  /** Dispatches for rows 0..R-1 of `hidden` [R, C]. */
  dispatches(ops: OpBuilder, hidden: GPUBuffer, R: number): Dispatch[] {
    const { hiddenSize: C, vocabSize: V } = this.model.config;
    const dispatches: Dispatch[] = [];
    for (let r0 = 0; r0 < R; r0 += this.rowsPerChunk) {
      const rows = Math.min(this.rowsPerChunk, R - r0);
      const at = (buffer: GPUBuffer) => ({ buffer, offset: r0 * 4, size: rows * 4 });
      const logits = { buffer: this.logits, size: rows * V * 4 };
      dispatches.push(
        ...ops.matmul({ buffer: hidden, offset: r0 * C * 4, size: rows * C * 4 }, this.model.lmHead, null, logits, { M: rows }),
        ops.tokenLogprobs(logits, at(this.targets), at(this.logprob), at(this.entropy), rows, V),
      );
    }
    return dispatches;
  }

  dispose(): void {
    for (const b of [this.logits, this.targets, this.logprob, this.entropy]) b.destroy();
  }
}
