// Log-probabilities and entropy from logits, forward and backward. f32 unless said, row-major.
//
// token_logprobs    logits [R, V], targets [R] i32 (< 0: none)  ->  logprob [R], entropy [R]:
//                     logprob[r] = logits[r, target[r]] - logsumexp(logits[r, :])     (0 when target[r] < 0)
//                     entropy[r] = -sum_v softmax(logits[r, :])_v * log softmax(logits[r, :])_v
// logits_backward   logits [R, V], targets [R], gLogprob [R] = dL/d logprob, gEntropy [R] = dL/d entropy
//                   ->  dlogits [R, V] (overwritten), with p = softmax(row) and H its entropy:
//                     dlogits = gLogprob * (onehot(target) - p) - gEntropy * p * (log p + H)
//                   A row without a target has only the entropy term.
//
// Both give a row LANES invocations (rows.wgsl). Bindings 0-2 are shared; each entry point numbers the
// rest of its own.

struct Params {
  R: u32,
  V: u32,
  _pad0: u32,
  _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> targets: array<i32>;
@group(0) @binding(3) var<storage, read_write> logprob: array<f32>;
@group(0) @binding(4) var<storage, read_write> entropy: array<f32>;

@compute @workgroup_size(WG)
fn token_logprobs(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
  let at = row_of(wg, nwg, lid);
  let row = min(at.x, p.R - 1u); // rows past the end redo the last row and store nothing
  let base = row * p.V;
  var localMax = -3.0e38;
  for (var v = at.y; v < p.V; v += LANES) {
    localMax = max(localMax, logits[base + v]);
  }
  let rowMax = row_max(lid, localMax);

  // sum e^(l - max) and sum e^(l - max) (l - max), for the normaliser and the entropy
  var sums = vec2<f32>(0.0, 0.0);
  for (var v = at.y; v < p.V; v += LANES) {
    let shifted = logits[base + v] - rowMax;
    let e = exp(shifted);
    sums += vec2<f32>(e, e * shifted);
  }
  let total = row_sum2(lid, sums);

  if (at.x < p.R && at.y == 0u) {
    let logZ = log(total.x);
    let wanted = targets[row];
    logprob[row] = select(0.0, logits[base + u32(max(wanted, 0))] - rowMax - logZ, wanted >= 0);
    // H = log Z - E[l - max]
    entropy[row] = logZ - total.y / total.x;
  }
}

// ---- logits_backward ----------------------------------------------------------------------------

@group(0) @binding(3) var<storage, read> gLogprob: array<f32>;
@group(0) @binding(4) var<storage, read> gEntropy: array<f32>;
@group(0) @binding(5) var<storage, read_write> dlogits: array<f32>;

@compute @workgroup_size(WG)
fn logits_backward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
  let at = row_of(wg, nwg, lid);
  let row = min(at.x, p.R - 1u); // rows past the end redo the last row and store nothing
  let V = p.V;
  let base = row * V;
  var localMax = -3.0e38;
  for (var v = at.y; v < V; v += LANES) {
    localMax = max(localMax, logits[base + v]);
  }
  let rowMax = row_max(lid, localMax);
  // (sum e^(l - max), sum e^(l - max) (l - max)) for the normaliser and the entropy
  var sums = vec2<f32>(0.0, 0.0);
  for (var v = at.y; v < V; v += LANES) {
    let shifted = logits[base + v] - rowMax;
    let e = exp(shifted);
    sums += vec2<f32>(e, e * shifted);
  }
  let total = row_sum2(lid, sums);
  if (at.x >= p.R) {
    return;
  }
  let logZ = log(total.x);
  let entropy = logZ - total.y / total.x;
  let wanted = targets[row];
  let gLp = select(0.0, gLogprob[row], wanted >= 0);
  let gH = gEntropy[row];
  for (var v = at.y; v < V; v += LANES) {
    let logp = logits[base + v] - rowMax - logZ;
    let prob = exp(logp);
    dlogits[base + v] = select(0.0, gLp, i32(v) == wanted) - gLp * prob - gH * prob * (logp + entropy);
  }
}
