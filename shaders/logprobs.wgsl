// Log-probabilities and entropy from logits, one workgroup per row.
//
//   logprob[r] = logits[r, target[r]] - logsumexp(logits[r, :])     (0 when target[r] < 0: no target)
//   entropy[r] = -sum_v softmax(logits[r, :])_v * log softmax(logits[r, :])_v
//
// Shapes: logits [R, V] f32 row-major; targets [R] i32; logprob [R] f32; entropy [R] f32.
// Rows are numbered across a 2-D grid of workgroups (row = wg.x + wg.y * num_workgroups.x).

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

const WG: u32 = 64u;
var<workgroup> partial: array<f32, WG>;

fn reduce_max(lid: u32) -> f32 {
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
    if (lid < stride) {
      partial[lid] = max(partial[lid], partial[lid + stride]);
    }
    workgroupBarrier();
  }
  let result = partial[0];
  workgroupBarrier();
  return result;
}

fn reduce_sum(lid: u32) -> f32 {
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
    if (lid < stride) {
      partial[lid] += partial[lid + stride];
    }
    workgroupBarrier();
  }
  let result = partial[0];
  workgroupBarrier();
  return result;
}

@compute @workgroup_size(WG)
fn token_logprobs(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
  let row = wg.x + wg.y * nwg.x;
  if (row >= p.R) {
    return;
  }
  let base = row * p.V;
  var localMax = -3.0e38;
  for (var v = lid; v < p.V; v += WG) {
    localMax = max(localMax, logits[base + v]);
  }
  partial[lid] = localMax;
  let rowMax = reduce_max(lid);

  // sum e^(l - max) and sum e^(l - max) (l - max), for the normaliser and the entropy
  var sumExp = 0.0;
  var sumExpShifted = 0.0;
  for (var v = lid; v < p.V; v += WG) {
    let shifted = logits[base + v] - rowMax;
    let e = exp(shifted);
    sumExp += e;
    sumExpShifted += e * shifted;
  }
  partial[lid] = sumExp;
  let total = reduce_sum(lid);
  partial[lid] = sumExpShifted;
  let totalShifted = reduce_sum(lid);

  if (lid == 0u) {
    let logZ = log(total);
    let wanted = targets[row];
    logprob[row] = select(0.0, logits[base + u32(max(wanted, 0))] - rowMax - logZ, wanted >= 0);
    // H = log Z - E[l - max]
    entropy[row] = logZ - totalShifted / total;
  }
}
