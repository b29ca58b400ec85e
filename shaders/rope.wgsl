// Rotary position embedding and KV-cache store for one layer, forward and backward. f32, row-major.
//
// The q, k and v projections live side by side in one activation row (a fused qkv matmul):
//   qkv [R, (H + 2*Hk) * D]   row r = b * T + t; columns: H query heads, then Hk key heads, then Hk value heads
//   positions [R] u32         position id of each row's token (its index among the sequence's real tokens)
//   rope [maxPos, D/2, 2]     (cos, sin) of position * inv_freq[i], computed in float64 on the CPU
//   kCache, vCache [B, Hk, S, D]   token (b, t) is stored at cache slot cursor.slot0 + t
//   cursor                    the first cache slot of this forward (0 for a prompt, then one more per decode step)
//
// rope_and_store_kv   Rotation follows Hugging Face's rotate_half: pairs (i, i + D/2) of each head,
//                       out[i] = x[i] cos - x[i + D/2] sin,   out[i + D/2] = x[i + D/2] cos + x[i] sin.
//                     Query heads are rotated in place; key heads are rotated into the cache; value heads
//                     are copied. One invocation per (row, head) over H + 2*Hk heads.
// rope_backward       In place on the gradient dqkv [R, (H + 2*Hk) * D], laid out like qkv: the transpose
//                     (inverse) of the forward rotation on the H query and Hk key heads,
//                       x1' = x1 cos + x2 sin,   x2' = x2 cos - x1 sin
//                     with the forward's positions and rope table. Value heads are not touched.
//                     One invocation per (row, q or k head).
//
// Invocations are numbered across a 2-D grid. positions and rope are shared bindings; each entry
// point numbers the rest of its own.

struct Params {
  R: u32,
  T: u32,
  H: u32,
  Hk: u32,
  D: u32,
  S: u32,
  _pad0: u32,
  _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> qkv: array<f32>;
@group(0) @binding(2) var<storage, read> positions: array<u32>;
@group(0) @binding(3) var<storage, read> rope: array<f32>;
@group(0) @binding(4) var<storage, read_write> kCache: array<f32>;
@group(0) @binding(5) var<storage, read_write> vCache: array<f32>;
@group(0) @binding(6) var<uniform> cursor: Cursor;

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn rope_and_store_kv(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let heads = p.H + 2u * p.Hk;
  let index = gid.x + gid.y * nwg.x * WG;
  if (index >= p.R * heads) {
    return;
  }
  let r = index / heads;
  let head = index % heads;
  let b = r / p.T;
  let t = r % p.T;
  let half = p.D / 2u;
  let rowBase = r * heads * p.D + head * p.D;
  let ropeBase = positions[r] * half * 2u;
  if (head < p.H) {
    for (var i = 0u; i < half; i++) {
      let c = rope[ropeBase + 2u * i];
      let s = rope[ropeBase + 2u * i + 1u];
      let x1 = qkv[rowBase + i];
      let x2 = qkv[rowBase + i + half];
      qkv[rowBase + i] = x1 * c - x2 * s;
      qkv[rowBase + i + half] = x2 * c + x1 * s;
    }
    return;
  }
  let isKey = head < p.H + p.Hk;
  let kvHead = select(head - p.H - p.Hk, head - p.H, isKey);
  let cacheBase = ((b * p.Hk + kvHead) * p.S + cursor.slot0 + t) * p.D;
  if (isKey) {
    for (var i = 0u; i < half; i++) {
      let c = rope[ropeBase + 2u * i];
      let s = rope[ropeBase + 2u * i + 1u];
      let x1 = qkv[rowBase + i];
      let x2 = qkv[rowBase + i + half];
      kCache[cacheBase + i] = x1 * c - x2 * s;
      kCache[cacheBase + i + half] = x2 * c + x1 * s;
    }
  } else {
    for (var d = 0u; d < p.D; d++) {
      vCache[cacheBase + d] = qkv[rowBase + d];
    }
  }
}

// ---- rope_backward ------------------------------------------------------------------------------

struct RopeParams {
  R: u32,
  H: u32,
  Hk: u32,
  D: u32,
}

@group(0) @binding(0) var<uniform> ropeParams: RopeParams;
@group(0) @binding(1) var<storage, read_write> ropeDqkv: array<f32>;

@compute @workgroup_size(WG)
fn rope_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let rotated = ropeParams.H + ropeParams.Hk; // the q and k heads, which come first in a row
  let index = gid.x + gid.y * nwg.x * WG;
  if (index >= ropeParams.R * rotated) {
    return;
  }
  let r = index / rotated;
  let head = index % rotated;
  let D = ropeParams.D;
  let half = D / 2u;
  let rowBase = r * (ropeParams.H + 2u * ropeParams.Hk) * D + head * D;
  let tableBase = positions[r] * half * 2u;
  for (var i = 0u; i < half; i++) {
    let c = rope[tableBase + 2u * i];
    let s = rope[tableBase + 2u * i + 1u];
    let x1 = ropeDqkv[rowBase + i];
    let x2 = ropeDqkv[rowBase + i + half];
    ropeDqkv[rowBase + i] = x1 * c + x2 * s;
    ropeDqkv[rowBase + i + half] = x2 * c - x1 * s;
  }
}
