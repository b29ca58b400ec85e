// Pieces the GPU checks share: submitting dispatches, a cursor uniform, and the random inputs that
// forward and backward kernel checks both draw (RoPE tables, padding masks, query columns).
import { uniformBuffer } from '../../src/engine/gpu/buffers.ts';
import type { GpuContext } from '../../src/engine/gpu/device.ts';
import { encodeDispatches, type Dispatch } from '../../src/engine/gpu/kernels.ts';

export function run(gpu: GpuContext, dispatches: Dispatch[]): void {
  const encoder = gpu.device.createCommandEncoder();
  encodeDispatches(encoder, dispatches);
  gpu.device.queue.submit([encoder.finish()]);
}

/** The {slot0, step} uniform that rope, attention, sampling and dropout read. */
export function cursorBuffer(device: GPUDevice, slot0: number, step: number): GPUBuffer {
  return uniformBuffer(device, [slot0, step, 0, 0], 'cursor');
}

/** A [positions, D/2, 2] table of (cos, sin) of random angles. */
export function randomRopeTable(random: () => number, positions: number, half: number): Float32Array {
  const table = new Float32Array(positions * half * 2);
  for (let i = 0; i < positions * half; i++) {
    const angle = random() * 100;
    table[2 * i] = Math.cos(angle);
    table[2 * i + 1] = Math.sin(angle);
  }
  return table;
}

/** Sequence b is left-padded by b slots, and sequence 0 has a hole at slot 1: a non-contiguous mask. */
export function paddingMask(B: number, maskLen: number): Uint32Array {
  const mask = Uint32Array.from({ length: B * maskLen }, (_, i) => (i % maskLen >= Math.floor(i / maskLen) ? 1 : 0));
  if (maskLen > 2) mask[1] = 0;
  return mask;
}

/** The first H*D columns (the query heads) of each row of qkv [R, (H+2Hk)*D]. */
export function queryColumns(qkv: ArrayLike<number>, R: number, H: number, Hk: number, D: number): Float64Array {
  const width = (H + 2 * Hk) * D;
  const q = new Float64Array(R * H * D);
  for (let r = 0; r < R; r++) for (let i = 0; i < H * D; i++) q[r * H * D + i] = qkv[r * width + i];
  return q;
}
