import { requestNodeGpu } from './src/engine/gpu/node-gpu.ts';
import { Kernels } from './src/engine/gpu/kernels.ts';
import { OpBuilder } from './src/engine/ops.ts';
import { storageFrom, storageBuffer, readFloat32 } from './src/engine/gpu/buffers.ts';
const g = await requestNodeGpu();
const ops = new OpBuilder(new Kernels(g.device, 8));
console.log('ops');
for (const [R, C] of [[8, 8], [16, 8], [32,8], [64,8]]) {
  const y = storageBuffer(g.device, R*C*4, 'y');
  const d = ops.rmsnorm(storageFrom(g.device, new Float32Array(R*C).fill(1), 'x'), storageFrom(g.device, new Float32Array(C).fill(1), 'w'), y, R, C, 1e-5);
  console.log('dispatch', d.workgroups);
  const enc = g.device.createCommandEncoder();
  const pass = enc.beginComputePass(); pass.setPipeline(d.pipeline); pass.setBindGroup(0, d.bindGroup); pass.dispatchWorkgroups(...d.workgroups); pass.end();
  g.device.queue.submit([enc.finish()]);
  console.log('submitted');
  console.log((await readFloat32(g.device, y, 3)));
}
ops.dispose();
console.log('disposed');
