// Row reductions shared by the kernels that reduce over a row (rmsnorm, token log-probs and their
// backward passes); the engine prepends this file to theirs.
//
// A workgroup of WG invocations covers WG / LANES rows, LANES invocations per row. LANES is an
// override constant the engine sets per adapter: 64 on GPUs (one workgroup per row, a tree
// reduction with barriers), 1 on CPU adapters such as SwiftShader, where each workgroup barrier
// costs tens of microseconds and one invocation per row is faster; with LANES = 1 the reductions
// return at once and no barrier runs.
//
// Kernels must reach every reduction from uniform control flow: rows past the end are clamped to
// the last row, reduced like it, and store nothing.

const WG: u32 = 64u;
override LANES: u32 = 64u;

var<workgroup> rowPartial: array<vec2<f32>, WG>;

/** (row, lane) of invocation lid: row = workgroup * (WG / LANES) + lid / LANES. */
fn row_of(wg: vec3<u32>, nwg: vec3<u32>, lid: u32) -> vec2<u32> {
  return vec2<u32>((wg.x + wg.y * nwg.x) * (WG / LANES) + lid / LANES, lid % LANES);
}

/** Sum of `value` over the LANES invocations of a row (componentwise); each of them gets it. */
fn row_sum2(lid: u32, value: vec2<f32>) -> vec2<f32> {
  if (LANES == 1u) {
    return value;
  }
  rowPartial[lid] = value;
  workgroupBarrier();
  let lane = lid % LANES;
  for (var stride = LANES / 2u; stride > 0u; stride /= 2u) {
    if (lane < stride) {
      rowPartial[lid] += rowPartial[lid + stride];
    }
    workgroupBarrier();
  }
  let result = rowPartial[lid - lane];
  workgroupBarrier(); // everyone has read the total before the array is reused
  return result;
}

fn row_sum(lid: u32, value: f32) -> f32 {
  return row_sum2(lid, vec2<f32>(value, 0.0)).x;
}

/** Maximum of `value` over the LANES invocations of a row; each of them gets it. */
fn row_max(lid: u32, value: f32) -> f32 {
  if (LANES == 1u) {
    return value;
  }
  rowPartial[lid].x = value;
  workgroupBarrier();
  let lane = lid % LANES;
  for (var stride = LANES / 2u; stride > 0u; stride /= 2u) {
    if (lane < stride) {
      rowPartial[lid].x = max(rowPartial[lid].x, rowPartial[lid + stride].x);
    }
    workgroupBarrier();
  }
  let result = rowPartial[lid - lane].x;
  workgroupBarrier();
  return result;
}
