// RMSNorm, as in Llama and Qwen2, forward and backward. f32, row-major; R = B*T token rows.
//
// rmsnorm               y[r, c] = x[r, c] * rs[r] * weight[c],   rs[r] = 1 / sqrt(mean_c(x[r, :]^2) + eps)
//                       x [R, C], weight [C]  ->  y [R, C]
// rmsnorm_backward      x [R, C] (the forward's input), weight [C], dy [R, C]  ->  dx [R, C], rs [R]
//                         dx = rs * w * dy - x * rs^3 / C * sum_c(w dy x)
//                       accumulate = 1 adds into dx (the residual-stream gradient) instead of overwriting.
//                       rs (each row's 1/rms) is written for rmsnorm_weight_grad. dx must not alias dy.
// rmsnorm_weight_grad   dw[c] (+)= sum_r dy[r, c] * x[r, c] * rs[r], with rs [R] from rmsnorm_backward.
//                       One invocation per column c, looping over the rows.
//
// rmsnorm and rmsnorm_backward give a row LANES invocations (rows.wgsl): 64 on GPUs, 1 on CPU
// adapters, where workgroup barriers are slow. Rows are numbered across a 2-D grid of workgroups so
// that R may exceed 65535 * 64 / LANES. Each entry point numbers its own bindings from 0.

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

// ---- rmsnorm_backward ---------------------------------------------------------------------------

struct NormParams {
  R: u32,
  C: u32,
  eps: f32,
  accumulate: u32,
}

@group(0) @binding(0) var<uniform> normParams: NormParams;
@group(0) @binding(1) var<storage, read> normX: array<f32>;
@group(0) @binding(2) var<storage, read> normWeight: array<f32>;
@group(0) @binding(3) var<storage, read> normDy: array<f32>;
@group(0) @binding(4) var<storage, read_write> normDx: array<f32>;
@group(0) @binding(5) var<storage, read_write> normRs: array<f32>;

@compute @workgroup_size(WG)
fn rmsnorm_backward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
  let at = row_of(wg, nwg, lid);
  let row = min(at.x, normParams.R - 1u); // rows past the end redo the last row and store nothing
  let C = normParams.C;
  let base = row * C;
  // (sum x^2, sum w dy x) in one reduction
  var sums = vec2<f32>(0.0, 0.0);
  for (var c = at.y; c < C; c += LANES) {
    let x = normX[base + c];
    sums += vec2<f32>(x * x, normWeight[c] * normDy[base + c] * x);
  }
  let total = row_sum2(lid, sums);
  if (at.x >= normParams.R) {
    return;
  }
  let rs = inverseSqrt(total.x / f32(C) + normParams.eps);
  let correction = total.y * rs * rs * rs / f32(C);
  for (var c = at.y; c < C; c += LANES) {
    let g = rs * normWeight[c] * normDy[base + c] - normX[base + c] * correction;
    if (normParams.accumulate != 0u) {
      normDx[base + c] += g;
    } else {
      normDx[base + c] = g;
    }
  }
  if (at.y == 0u) {
    normRs[row] = rs;
  }
}

// ---- rmsnorm_weight_grad ------------------------------------------------------------------------

struct NormWeightParams {
  R: u32,
  C: u32,
  accumulate: u32,
  _pad: u32,
}

@group(0) @binding(0) var<uniform> normWeightParams: NormWeightParams;
@group(0) @binding(1) var<storage, read> normWeightX: array<f32>;
@group(0) @binding(2) var<storage, read> normWeightDy: array<f32>;
@group(0) @binding(3) var<storage, read> normWeightRs: array<f32>;
@group(0) @binding(4) var<storage, read_write> normWeightDw: array<f32>;

@compute @workgroup_size(WG)
fn rmsnorm_weight_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let c = gid.x + gid.y * nwg.x * WG;
  let C = normWeightParams.C;
  if (c >= C) {
    return;
  }
  var sum = 0.0;
  for (var r = 0u; r < normWeightParams.R; r++) {
    sum += normWeightDy[r * C + c] * normWeightX[r * C + c] * normWeightRs[r];
  }
  if (normWeightParams.accumulate != 0u) {
    normWeightDw[c] += sum;
  } else {
    normWeightDw[c] = sum;
  }
}
