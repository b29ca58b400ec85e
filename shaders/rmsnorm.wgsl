// RMSNorm, as in Llama and Qwen2:  y[r, c] = x[r, c] / sqrt(mean_c(x[r, :]^2) + eps) * weight[c]
//
// Shapes (f32, row-major): x [R, C], weight [C], y [R, C].
// One workgroup of 64 invocations per row; rows are numbered across a 2-D grid of workgroups
// (row = wg.x + wg.y * num_workgroups.x) so that R may exceed 65535.

struct Params {
  R: u32,
  C: u32,
  eps: f32,
  _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const WG: u32 = 64u;
var<workgroup> partial: array<f32, WG>;

@compute @workgroup_size(WG)
fn rmsnorm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
  let row = wg.x + wg.y * nwg.x;
  if (row >= p.R) {
    return; // uniform across the workgroup, so no barrier is skipped by only some invocations
  }
  let base = row * p.C;
  var sum = 0.0;
  for (var c = lid; c < p.C; c += WG) {
    let v = x[base + c];
    sum += v * v;
  }
  partial[lid] = sum;
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
    if (lid < stride) {
      partial[lid] += partial[lid + stride];
    }
    workgroupBarrier();
  }
  let scale = inverseSqrt(partial[0] / f32(p.C) + p.eps);
  for (var c = lid; c < p.C; c += WG) {
    y[base + c] = x[base + c] * scale * weight[c];
  }
}
