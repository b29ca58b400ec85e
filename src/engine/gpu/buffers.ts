// Small helpers around GPUBuffer: creation from typed arrays, uniforms, read-back, dispatch grids.

const STORAGE = () => GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;

/** A storage buffer of `bytes` (rounded up to 4), zero-filled. */
export function storageBuffer(device: GPUDevice, bytes: number, label: string): GPUBuffer {
  return device.createBuffer({ size: Math.max(4, Math.ceil(bytes / 4) * 4), usage: STORAGE(), label });
}

/** A storage buffer holding `data`. */
export function storageFrom(device: GPUDevice, data: Float32Array | Uint32Array | Int32Array, label: string): GPUBuffer {
  const buffer = storageBuffer(device, data.byteLength, label);
  device.queue.writeBuffer(buffer, 0, data.buffer, data.byteOffset, data.byteLength);
  return buffer;
}

export type UniformField = number | { f32: number };

/** A uniform buffer of 32-bit fields in order: plain numbers are u32, `{ f32 }` are f32. Padded to 16 bytes. */
export function uniformBuffer(device: GPUDevice, fields: UniformField[], label: string): GPUBuffer {
  const words = Math.ceil(fields.length / 4) * 4;
  const data = new ArrayBuffer(words * 4);
  const view = new DataView(data);
  fields.forEach((field, i) => {
    if (typeof field === 'number') {
      if (!Number.isInteger(field) || field < 0 || field > 0xffffffff) throw new RangeError(`${label}: field ${i} = ${field} is not a u32`);
      view.setUint32(i * 4, field, true);
    } else {
      view.setFloat32(i * 4, field.f32, true);
    }
  });
  const buffer = device.createBuffer({ size: data.byteLength, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST, label });
  device.queue.writeBuffer(buffer, 0, data);
  return buffer;
}

/** Copies `bytes` from each (buffer, offset) into one staging buffer, maps it once and returns the bytes. */
export async function readBuffers(device: GPUDevice, parts: { buffer: GPUBuffer; offset?: number; bytes: number }[]): Promise<ArrayBuffer> {
  const total = parts.reduce((sum, part) => sum + part.bytes, 0);
  const staging = device.createBuffer({ size: Math.max(4, total), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST, label: 'readback' });
  const encoder = device.createCommandEncoder({ label: 'readback' });
  let at = 0;
  for (const part of parts) {
    encoder.copyBufferToBuffer(part.buffer, part.offset ?? 0, staging, at, part.bytes);
    at += part.bytes;
  }
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const result = staging.getMappedRange().slice(0);
  // Unmap before destroy: Dawn under Node frees the mapped memory on destroy, and the mapped
  // ArrayBuffer would then point into freed memory (seen as heap corruption and aborts).
  staging.unmap();
  staging.destroy();
  return result;
}

export async function readFloat32(device: GPUDevice, buffer: GPUBuffer, count: number, offsetElements = 0): Promise<Float32Array> {
  return new Float32Array(await readBuffers(device, [{ buffer, offset: offsetElements * 4, bytes: count * 4 }]));
}

export const MAX_WORKGROUPS_PER_DIMENSION = 65535;

/** A 2-D grid of workgroups covering `count` items of `perWorkgroup` each (kernels linearise x + y * nx). */
export function grid(count: number, perWorkgroup: number): [number, number, number] {
  const groups = Math.max(1, Math.ceil(count / perWorkgroup));
  if (groups <= MAX_WORKGROUPS_PER_DIMENSION) return [groups, 1, 1];
  const y = Math.ceil(groups / MAX_WORKGROUPS_PER_DIMENSION);
  return [Math.ceil(groups / y), y, 1];
}
