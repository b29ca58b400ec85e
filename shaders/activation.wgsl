// SwiGLU activation of the MLP:  out[r, j] = silu(gateUp[r, j]) * gateUp[r, F + j],  silu(g) = g / (1 + exp(-g))
//
// Shapes (f32, row-major): gateUp [R, 2F] (the gate and up projections side by side, from one fused
// matmul), out [R, F]. One invocation per output element, numbered across a 2-D grid.

struct Params {
  R: u32,
  F: u32,
  _pad0: u32,
  _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> gateUp: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn silu_mul(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let index = gid.x + gid.y * nwg.x * WG;
  if (index >= p.R * p.F) {
    return;
  }
  let r = index / p.F;
  let j = index % p.F;
  let g = gateUp[r * 2u * p.F + j];
  let u = gateUp[r * 2u * p.F + p.F + j];
  out[index] = g / (1.0 + exp(-g)) * u;
}
