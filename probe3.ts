import { requestNodeGpu } from './src/engine/gpu/node-gpu.ts';
import { readFloat32, storageFrom, storageBuffer } from './src/engine/gpu/buffers.ts';
const g = await requestNodeGpu();
const variant = process.argv[2];
const code = `
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
var<workgroup> partial: array<f32, 64>;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  partial[lid] = f32(lid);
  ${variant === 'barrier' ? 'workgroupBarrier();' : ''}
  y[wg.x * 64u + lid] = partial[63u - lid];
}`;
const m = g.device.createShaderModule({ code });
const p = g.device.createComputePipeline({ layout: 'auto', compute: { module: m, entryPoint: 'main' } });
for (const n of [4, 16, 64, 256]) {
  const y = storageBuffer(g.device, n * 64 * 4, 'y');
  const bg = g.device.createBindGroup({ layout: p.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: y } }] });
  const enc = g.device.createCommandEncoder(); const pass = enc.beginComputePass(); pass.setPipeline(p); pass.setBindGroup(0, bg); pass.dispatchWorkgroups(n); pass.end();
  g.device.queue.submit([enc.finish()]);
  console.log(n, (await readFloat32(g.device, y, 2)));
}
