// A weight matrix on the GPU, split by rows into chunks that each fit one storage binding.
// Only the largest matrices of big models (embeddings of 150k-token vocabularies) ever split.
import { storageFrom } from './buffers.ts';

export interface MatrixChunk {
  /** A buffer of its own, or a range of a shared one (trainable parameters live in one flat buffer). */
  buffer: GPUBuffer | GPUBufferBinding;
  /** First matrix row held by this chunk. */
  rowStart: number;
  rows: number;
}

export interface GpuMatrix {
  rows: number;
  cols: number;
  chunks: MatrixChunk[];
}

/** A [rows, cols] row-major matrix held whole in one buffer or buffer range (activations, parameter views). */
export function wholeMatrix(buffer: GPUBuffer | GPUBufferBinding, rows: number, cols: number): GpuMatrix {
  return { rows, cols, chunks: [{ buffer, rowStart: 0, rows }] };
}

/** Uploads a row-major [rows, cols] matrix, splitting it so that no chunk exceeds `maxBindingBytes`. */
export function uploadMatrix(device: GPUDevice, data: Float32Array, rows: number, cols: number, maxBindingBytes: number, label: string): GpuMatrix {
  if (data.length !== rows * cols) throw new RangeError(`${label}: ${data.length} values for a [${rows}, ${cols}] matrix`);
  const rowsPerChunk = Math.floor(maxBindingBytes / (cols * 4));
  if (rowsPerChunk < 1) throw new RangeError(`${label}: one row of ${cols} floats exceeds the ${maxBindingBytes}-byte binding limit`);
  const chunks: MatrixChunk[] = [];
  for (let rowStart = 0; rowStart < rows; rowStart += rowsPerChunk) {
    const chunkRows = Math.min(rowsPerChunk, rows - rowStart);
    const part = data.subarray(rowStart * cols, (rowStart + chunkRows) * cols);
    chunks.push({ buffer: storageFrom(device, part, `${label}[${rowStart}:${rowStart + chunkRows}]`), rowStart, rows: chunkRows });
  }
  return { rows, cols, chunks };
}

/** Frees the buffers a matrix owns (ranges of shared buffers belong to their owner). */
export function destroyMatrix(matrix: GpuMatrix): void {
  for (const chunk of matrix.chunks) if (!('buffer' in chunk.buffer)) chunk.buffer.destroy();
}
