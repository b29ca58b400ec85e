// Sampling of the next token of every sequence from its logits, entirely on the GPU.
//
// Shapes: logits [B, V] f32 row-major; outIds [B] u32; outLogprobs [B] f32 = log softmax(logits[b])[id],
// the model's own log-probability of the sampled token (temperature 1, before any truncation).
// One workgroup of 256 invocations per sequence b; invocation i owns the contiguous vocabulary
// chunk [i * chunk, (i + 1) * chunk), so that sums in vocabulary order are a prefix scan of chunk sums.
//
// greedy = 1: the argmax (lowest index among ties).
// Otherwise: z = logits / temperature; keep the top-k logits (topK = 0 keeps all); of those keep the
// smallest set of most probable tokens whose mass, renormalised over the top-k, reaches topP; draw
// u in [0, 1) from a counter-based hash of (seed, b, step) and return the kept token at which the
// cumulative kept mass, in vocabulary order, passes u times the kept mass.
// rowSeeds = 1: one seed per sequence. outIds then holds 2B words, the sampled ids [0, B) followed by
// the sequences' seeds [B, 2B) (read only), and sequence b draws from (outIds[B + b], 0, step): its
// draws depend on its own seed and the step, not on its row or on the other sequences of the batch.
// Both cut-offs are found exactly: logits map to order-preserving u32 keys, and the cut-off key is
// built bit by bit from the top (32 counting passes), so ties at the cut-off are all kept.

struct Params {
  B: u32,
  V: u32,
  greedy: u32,
  topK: u32,
  topP: f32,
  invTemperature: f32,
  seed: u32,
  rowSeeds: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> cursor: Cursor;
@group(0) @binding(2) var<storage, read> logits: array<f32>;
@group(0) @binding(3) var<storage, read_write> outIds: array<u32>;
@group(0) @binding(4) var<storage, read_write> outLogprobs: array<f32>;

const WG: u32 = 256u;
var<workgroup> sums: array<f32, WG>;
var<workgroup> values: array<f32, WG>;
var<workgroup> indices: array<u32, WG>;
var<workgroup> chosen: u32;

// Order-preserving map from f32 to u32: a < b as floats iff key(a) < key(b) as integers.
fn order_key(value: f32) -> u32 {
  let bits = bitcast<u32>(value);
  return select(bits | 0x80000000u, ~bits, (bits & 0x80000000u) != 0u);
}

fn uniform01(seed: u32, b: u32, step: u32) -> f32 {
  let h = pcg(seed ^ pcg(b ^ pcg(step)));
  return f32(h >> 8u) / 16777216.0;
}

fn reduce_sum(lid: u32) -> f32 {
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
    if (lid < stride) {
      sums[lid] += sums[lid + stride];
    }
    workgroupBarrier();
  }
  let result = sums[0];
  workgroupBarrier();
  return result;
}

@compute @workgroup_size(WG)
fn sample(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let b = wg.x;
  let base = b * p.V;
  let chunk = (p.V + WG - 1u) / WG;
  let begin = min(lid * chunk, p.V);
  let end = min(begin + chunk, p.V);

  // 1. Row maximum and its (lowest) index.
  var bestValue = -3.0e38;
  var bestIndex = 0xffffffffu;
  for (var v = begin; v < end; v++) {
    let l = logits[base + v];
    if (l > bestValue) {
      bestValue = l;
      bestIndex = v;
    }
  }
  values[lid] = bestValue;
  indices[lid] = bestIndex;
  workgroupBarrier();
  for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
    if (lid < stride) {
      let other = values[lid + stride];
      let otherIndex = indices[lid + stride];
      if (other > values[lid] || (other == values[lid] && otherIndex < indices[lid])) {
        values[lid] = other;
        indices[lid] = otherIndex;
      }
    }
    workgroupBarrier();
  }
  let rowMax = values[0];
  let argmax = indices[0];
  workgroupBarrier();

  // 2. Normaliser of the raw distribution, for the sampled token's log-probability.
  var rawSum = 0.0;
  for (var v = begin; v < end; v++) {
    rawSum += exp(logits[base + v] - rowMax);
  }
  sums[lid] = rawSum;
  let logZ = log(reduce_sum(lid));

  if (p.greedy == 1u) {
    if (lid == 0u) {
      outIds[b] = argmax;
      outLogprobs[b] = logits[base + argmax] - rowMax - logZ;
    }
    return;
  }

  // 3. Top-k cut-off: the largest key x with count(key >= x) >= topK.
  var kCut = 0u;
  if (p.topK > 0u && p.topK < p.V) {
    for (var bit = 31i; bit >= 0i; bit--) {
      let candidate = kCut | (1u << u32(bit));
      var count = 0.0;
      for (var v = begin; v < end; v++) {
        count += select(0.0, 1.0, order_key(logits[base + v]) >= candidate);
      }
      sums[lid] = count;
      if (reduce_sum(lid) >= f32(p.topK)) {
        kCut = candidate;
      }
    }
  }

  // 4. Top-p cut-off: the largest key x >= kCut whose kept mass reaches topP of the top-k mass.
  var cut = kCut;
  if (p.topP < 1.0) {
    var kMass = 0.0;
    for (var v = begin; v < end; v++) {
      let l = logits[base + v];
      kMass += select(0.0, exp((l - rowMax) * p.invTemperature), order_key(l) >= kCut);
    }
    sums[lid] = kMass;
    let massNeeded = p.topP * reduce_sum(lid);
    var pCut = 0u;
    for (var bit = 31i; bit >= 0i; bit--) {
      let candidate = pCut | (1u << u32(bit));
      let threshold = max(candidate, kCut);
      var mass = 0.0;
      for (var v = begin; v < end; v++) {
        let l = logits[base + v];
        mass += select(0.0, exp((l - rowMax) * p.invTemperature), order_key(l) >= threshold);
      }
      sums[lid] = mass;
      if (reduce_sum(lid) >= massNeeded) {
        pCut = candidate;
      }
    }
    cut = max(pCut, kCut);
  }

  // 5. Inverse CDF in vocabulary order: exclusive scan of the chunk masses, then one chunk is walked.
  var chunkMass = 0.0;
  var lastKept = 0xffffffffu;
  for (var v = begin; v < end; v++) {
    let l = logits[base + v];
    if (order_key(l) >= cut) {
      chunkMass += exp((l - rowMax) * p.invTemperature);
      lastKept = v;
    }
  }
  sums[lid] = chunkMass;
  indices[lid] = lastKept;
  if (lid == 0u) {
    chosen = 0xffffffffu;
  }
  workgroupBarrier();
  if (lid == 0u) {
    // A sequential scan of 256 chunk sums keeps the order of additions fixed (reproducible) and is cheap.
    var running = 0.0;
    for (var i = 0u; i < WG; i++) {
      let mass = sums[i];
      values[i] = running;
      running += mass;
    }
    sums[0] = running;
  }
  workgroupBarrier();
  let total = sums[0];
  var seed = p.seed;
  var row = b;
  if (p.rowSeeds == 1u) {
    seed = outIds[p.B + b];
    row = 0u;
  }
  let draw = uniform01(seed, row, cursor.step) * total;
  let before = values[lid];
  workgroupBarrier();
  if (chunkMass > 0.0 && draw >= before && draw < before + chunkMass) {
    var running = before;
    var pick = lastKept;
    for (var v = begin; v < end; v++) {
      let l = logits[base + v];
      if (order_key(l) >= cut) {
        running += exp((l - rowMax) * p.invTemperature);
        if (draw < running) {
          pick = v;
          break;
        }
      }
    }
    chosen = pick;
  }
  workgroupBarrier();
  if (lid == 0u) {
    var pick = chosen;
    if (pick == 0xffffffffu) {
      // Rounding put the target at the very end of the mass: take the last kept token.
      for (var i = 0u; i < WG; i++) {
        if (indices[i] != 0xffffffffu) {
          pick = indices[i];
        }
      }
    }
    outIds[b] = pick;
    outLogprobs[b] = logits[base + pick] - rowMax - logZ;
  }
}
