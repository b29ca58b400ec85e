// Trainable tensors (LoRA matrices, a value head, or every weight of a tiny model) packed into one
// flat f32 buffer, with their gradients in a second buffer of the same layout. Each tensor starts at
// a 256-byte boundary (the binding-offset alignment), so every tensor can still be bound on its own,
// while the optimiser updates them all in a fixed handful of dispatches.
import { readFloat32, storageBuffer } from '../gpu/buffers.ts';
import { wholeMatrix, type GpuMatrix } from '../gpu/matrix.ts';

const ALIGN_FLOATS = 64; // 256 bytes

export interface ParameterView {
  name: string;
  rows: number;
  cols: number;
  /** Offset in floats into the flat buffers. */
  offset: number;
  /** The tensor as a matrix bound from the parameter buffer. */
  matrix: GpuMatrix;
  /** Its gradient, bound from the gradient buffer. */
  grad: GpuMatrix;
}

/** Floats a tensor of `count` values takes in the flat buffers, padding to the next 256-byte boundary included. */
function paddedFloats(count: number): number {
  return Math.ceil(count / ALIGN_FLOATS) * ALIGN_FLOATS;
}

let nextRevision = 1;

export class ParameterSet {
  /** Floats each flat buffer of a set of these tensors holds, padding included (to check limits before allocating). */
  static sizeFor(tensors: { rows: number; cols: number }[]): number {
    return Math.max(ALIGN_FLOATS, tensors.reduce((n, t) => n + paddedFloats(t.rows * t.cols), 0));
  }


  readonly params: GPUBuffer;
  readonly grads: GPUBuffer;
  /** Floats in each flat buffer, padding included. */
  readonly size: number;
  private readonly views = new Map<string, ParameterView>();
  private stamp = nextRevision++;

  constructor(
    private readonly device: GPUDevice,
    tensors: { name: string; rows: number; cols: number; data: Float32Array }[],
  ) {
    let offset = 0;
    const layout = tensors.map((t) => {
      if (t.data.length !== t.rows * t.cols) throw new RangeError(`${t.name}: ${t.data.length} values for [${t.rows}, ${t.cols}]`);
      const at = offset;
      offset += paddedFloats(t.rows * t.cols);
      return { ...t, offset: at };
    });
    this.size = Math.max(ALIGN_FLOATS, offset);
    this.params = storageBuffer(device, this.size * 4, 'parameters');
    this.grads = storageBuffer(device, this.size * 4, 'gradients');
    for (const t of layout) {
      device.queue.writeBuffer(this.params, t.offset * 4, t.data.buffer, t.data.byteOffset, t.data.byteLength);
      const range = (buffer: GPUBuffer) => wholeMatrix({ buffer, offset: t.offset * 4, size: t.rows * t.cols * 4 }, t.rows, t.cols);
      this.views.set(t.name, { name: t.name, rows: t.rows, cols: t.cols, offset: t.offset, matrix: range(this.params), grad: range(this.grads) });
    }
  }

  view(name: string): ParameterView {
    const view = this.views.get(name);
    if (!view) throw new Error(`no trainable tensor named ${name}`);
    return view;
  }

  names(): string[] {
    return [...this.views.keys()];
  }

  /**
   * A stamp of the values, new at every change (writes and optimiser steps) and unique across sets: what
   * was computed with the set at one revision holds for as long as the revision stays the same.
   */
  get revision(): number {
    return this.stamp;
  }

  /** Records a change made on the GPU (an optimiser step). */
  markChanged(): void {
    this.stamp = nextRevision++;
  }

  /** Every tensor's current values, read back in one copy. */
  async read(): Promise<Map<string, Float32Array>> {
    return this.readFrom(this.params);
  }

  async readGrads(): Promise<Map<string, Float32Array>> {
    return this.readFrom(this.grads);
  }

  private async readFrom(buffer: GPUBuffer): Promise<Map<string, Float32Array>> {
    const all = await readFloat32(this.device, buffer, this.size);
    return new Map([...this.views.values()].map((v) => [v.name, all.slice(v.offset, v.offset + v.rows * v.cols)]));
  }

  /** Overwrites one tensor's values. */
  write(name: string, data: Float32Array): void {
    const v = this.view(name);
    if (data.length !== v.rows * v.cols) throw new RangeError(`${name}: ${data.length} values for [${v.rows}, ${v.cols}]`);
    this.device.queue.writeBuffer(this.params, v.offset * 4, data.buffer, data.byteOffset, data.byteLength);
    this.stamp = nextRevision++;
  }

  zeroGrads(encoder: GPUCommandEncoder): void {
    encoder.clearBuffer(this.grads);
  }

  dispose(): void {
    this.params.destroy();
    this.grads.destroy();
  }
}
