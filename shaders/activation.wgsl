// SwiGLU activation of the MLP, forward and backward. f32, row-major; R = B*T token rows.
//
// silu_mul            out[r, j] = silu(g) * u,   g = gateUp[r, j], u = gateUp[r, F + j],   silu(g) = g / (1 + exp(-g))
//                     gateUp [R, 2F] (the gate and up projections side by side, from one fused matmul)  ->  out [R, F]
// silu_mul_backward   gateUp [R, 2F] (the forward's input), dout [R, F]  ->  dgateUp [R, 2F] (overwritten):
//                       dg = dout * u * sig(g) * (1 + g * (1 - sig(g))),   du = dout * silu(g)
//
// One invocation per (r, j), numbered across a 2-D grid. Bindings 0 and 1 are shared; each entry
// point numbers the rest of its own.

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

// ---- silu_mul_backward --------------------------------------------------------------------------

@group(0) @binding(2) var<storage, read> siluDout: array<f32>;
@group(0) @binding(3) var<storage, read_write> siluDgateUp: array<f32>;

@compute @workgroup_size(WG)
fn silu_mul_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let index = gid.x + gid.y * nwg.x * WG;
  let F = p.F;
  if (index >= p.R * F) {
    return;
  }
  let r = index / F;
  let j = index % F;
  let gateAt = r * 2u * F + j;
  let g = gateUp[gateAt];
  let u = gateUp[gateAt + F];
  let dout = siluDout[index];
  let sig = 1.0 / (1.0 + exp(-g)); // exp overflows to inf for g << 0, giving sig = 0 as it should
  siluDgateUp[gateAt] = dout * u * sig * (1.0 + g * (1.0 - sig));
  siluDgateUp[gateAt + F] = dout * g * sig;
}
