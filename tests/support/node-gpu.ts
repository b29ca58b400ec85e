// One GPU device per test file in Node, on Dawn (SwiftShader on machines without a GPU).
import { requestNodeGpu } from '../../src/engine/gpu/node-gpu.ts';
import type { GpuContext } from '../../src/engine/gpu/device.ts';

let context: Promise<GpuContext> | null = null;

export function nodeGpu(): Promise<GpuContext> {
  context ??= requestNodeGpu();
  return context;
}
