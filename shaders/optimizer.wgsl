// AdamW with global gradient-norm clipping over one flat buffer of parameters.
//
// All trainable parameters live in one f32 buffer params [n] and their gradients in grads [n], same
// layout; m and v [n] are Adam's first and second moments. A step is three dispatches, however many
// tensors the buffer holds:
//
//   1. grad_sum_squares, first pass:  workgroup w reduces grads[w*CHUNK, (w+1)*CHUNK) into
//      partials[2w] = sum of squares and partials[2w+1] = 1.0 if any of those gradients is NaN or
//      Inf, else 0.0. Workgroups are numbered across a 2-D grid (w = wg.x + wg.y * nwg.x).
//   2. grad_sum_squares, final pass:  one workgroup reduces the ceil(n / CHUNK) partials into
//      gradNorm (below). Both passes are tree reductions in workgroup memory: no atomics, no races.
//   3. adamw_step: one invocation per element, index = gid.x + gid.y * nwg.x * WG.
//
// gradNorm [4] (f32), written by the final pass, read by adamw_step and by the caller:
//   [0] global L2 norm of the scaled gradients, gradScale * ||grads|| (what clip_grad_norm_ returns)
//   [1] 1.0 if the norm is not finite (a NaN or Inf gradient, or an f32 overflow), else 0.0:
//       adamw_step then leaves params, m and v unchanged
//   [2] clip coefficient min(1, maxGradNorm / (norm + 1e-6)), or 1.0 when maxGradNorm is 0
//   [3] unused
//
// The update is PyTorch's AdamW (torch.optim.AdamW, single-tensor path) applied to
// g = grads * gradScale * clip:
//   p *= 1 - lr * weightDecay;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   p -= stepSize * m / (sqrt(v) / sqrt(1 - beta2^t) + eps),  stepSize = lr / (1 - beta1^t)
// The per-step scalars are computed on the CPU in float64 and written into `opt` before each step.
//
// Non-finite values are detected from their bits: WGSL lets implementations assume that floats are
// finite, so comparisons such as x != x may be compiled away.
//
// The two entry points have separate bindings; their variables share binding numbers, which WGSL
// allows because no entry point uses two variables with the same binding.

struct StepParams {
  n: u32,
  gradScale: f32,
  maxGradNorm: f32,
  beta1: f32,
  oneMinusBeta1: f32,
  beta2: f32,
  oneMinusBeta2: f32,
  stepSize: f32,
  biasCorrection2Sqrt: f32,
  eps: f32,
  decay: f32,
  _pad: u32,
}

// Which pass of grad_sum_squares: the first reads `count` gradients, the final reads `count` partials.
struct Stage {
  count: u32,
  isFinal: u32,
  _pad0: u32,
  _pad1: u32,
}

@group(0) @binding(0) var<uniform> opt: StepParams;

// grad_sum_squares
@group(0) @binding(1) var<uniform> stage: Stage;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

// adamw_step
@group(0) @binding(1) var<storage, read> gradNorm: array<f32>;
@group(0) @binding(2) var<storage, read> grads: array<f32>;
@group(0) @binding(3) var<storage, read_write> params: array<f32>;
@group(0) @binding(4) var<storage, read_write> m: array<f32>;
@group(0) @binding(5) var<storage, read_write> v: array<f32>;

const REDUCE_WG: u32 = 256u;
// Gradients per workgroup in the first pass (16 per invocation). Keep in sync with GRAD_NORM_CHUNK in
// src/engine/train/optimizer.ts, which sizes the partials buffer.
const CHUNK: u32 = REDUCE_WG * 16u;
const EXPONENT_BITS: u32 = 0x7f800000u;

var<workgroup> sums: array<f32, REDUCE_WG>;
var<workgroup> flags: array<f32, REDUCE_WG>;

/** 1.0 if x is NaN or +-Inf (all exponent bits set), else 0.0. */
fn non_finite(x: f32) -> f32 {
  return select(0.0, 1.0, (bitcast<u32>(x) & EXPONENT_BITS) == EXPONENT_BITS);
}

@compute @workgroup_size(REDUCE_WG)
fn grad_sum_squares(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
  let group = wg.x + wg.y * nwg.x;
  var begin = 0u;
  var end = stage.count;
  if (stage.isFinal == 0u) {
    if (group * CHUNK >= stage.count) {
      return; // padding of the 2-D grid; uniform across the workgroup, so no barrier is skipped
    }
    begin = group * CHUNK;
    end = min(begin + CHUNK, stage.count);
  }
  var sum = 0.0;
  var flag = 0.0;
  for (var i = begin + lid; i < end; i += REDUCE_WG) {
    if (stage.isFinal == 0u) {
      let g = src[i];
      sum += g * g;
      flag = max(flag, non_finite(g));
    } else {
      sum += src[2u * i];
      flag = max(flag, src[2u * i + 1u]);
    }
  }
  sums[lid] = sum;
  flags[lid] = flag;
  workgroupBarrier();
  for (var stride = REDUCE_WG / 2u; stride > 0u; stride /= 2u) {
    if (lid < stride) {
      sums[lid] += sums[lid + stride];
      flags[lid] = max(flags[lid], flags[lid + stride]);
    }
    workgroupBarrier();
  }
  if (lid != 0u) {
    return;
  }
  if (stage.isFinal == 0u) {
    dst[2u * group] = sums[0];
    dst[2u * group + 1u] = flags[0];
    return;
  }
  let norm = sqrt(sums[0]) * opt.gradScale;
  var clip = 1.0;
  if (opt.maxGradNorm > 0.0) {
    clip = min(1.0, opt.maxGradNorm / (norm + 1e-6));
  }
  dst[0] = norm;
  dst[1] = max(flags[0], non_finite(norm));
  dst[2] = clip;
}

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn adamw_step(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let index = gid.x + gid.y * nwg.x * WG;
  if (index >= opt.n || gradNorm[1] != 0.0) {
    return;
  }
  let g = grads[index] * opt.gradScale * gradNorm[2];
  let p = params[index] * opt.decay;
  let mt = opt.beta1 * m[index] + opt.oneMinusBeta1 * g;
  let vt = opt.beta2 * v[index] + opt.oneMinusBeta2 * g * g;
  m[index] = mt;
  v[index] = vt;
  params[index] = p - opt.stepSize * (mt / (sqrt(vt) / opt.biasCorrection2Sqrt + opt.eps));
}
