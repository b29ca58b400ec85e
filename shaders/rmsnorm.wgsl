// RMSNorm, as in Llama and Qwen2:  y[r, c] = x[r, c] / sqrt(mean_c(x[r, :]^2) + eps) * weight[c]
//
// Shapes (f32, row-major): x [R, C], weight [C], y [R, C].
// LANES invocations share a row (rows.wgsl): 64 on GPUs, 1 on CPU adapters, where workgroup
// barriers are slow. Rows are numbered across a 2-D grid of workgroups so that R may exceed
// 65535 * 64 / LANES.

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

@compute @workgroup_size(WG)
fn rmsnorm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
  let at = row_of(wg, nwg, lid);
  let row = min(at.x, p.R - 1u); // rows past the end redo the last row and store nothing
  let base = row * p.C;
  var sum = 0.0;
  for (var c = at.y; c < p.C; c += LANES) {
    let v = x[base + c];
    sum += v * v;
  }
  let scale = inverseSqrt(row_sum(lid, sum) / f32(p.C) + p.eps);
  if (at.x >= p.R) {
    return;
  }
  for (var c = at.y; c < p.C; c += LANES) {
    y[base + c] = x[base + c] * scale * weight[c];
  }
}
