// Causal grouped-query attention of T new tokens per sequence against one layer's KV cache.
//
// Shapes (f32 unless said, row-major):
//   qkv      [B*T, (H + 2*Hk) * D]   rotated queries in the first H*D columns (see rope.wgsl)
//   kCache, vCache [B, Hk, S, D]     query head h reads kv head h / (H / Hk)
//   keyMask  [B, maskLen] u32         1 = real token, 0 = padding, for cache slots < maskLen (the prompt);
//                                     slots >= maskLen hold generated tokens and are always real
//   out      [B*T, H*D]
//   lse      [B*T, H]   log-sum-exp of each query's scaled scores (max + log denominator), which the
//                       backward pass uses to recompute attention probabilities without storing them
//
// Query (b, t) sits at cache slot cursor.slot0 + t and attends to the slots s <= slot0 + t that hold real
// tokens. It always attends to itself too, so a padding query gets a finite (unused) output
// instead of a NaN that could spread through later matmuls.
//
// Tree-structured training batches (tree != 0; src/engine/train/batch.ts): keyMask is followed by one
// (prefix, segment) pair of u32 per query row r = b*T + t, at keyMask[B*maskLen + 2r ..]. The query then
// sees only the slots s < prefix and segment <= s <= its own slot (still only real ones, and always
// itself); it skips the slots [prefix, segment) without reading them. With tree = 0 nothing more is read.
// One invocation per (b, t, h); it streams the keys once with an online softmax. A head's vectors
// live in HEAD_DIM / 4 vec4 variables rather than arrays: lines marked `// each vec4` are written
// once per vec4 by the engine (src/engine/gpu/kernels.ts), `$` replaced by 0, 1, 2, ...; it also
// sets HEAD_DIM (a multiple of 4) to the model's head dimension. Compilers keep such variables in
// registers, where arrays indexed in a loop go to memory on CPU adapters (3x slower on SwiftShader).

const HEAD_DIM: u32 = 64u;

struct Params {
  B: u32,
  T: u32,
  H: u32,
  Hk: u32,
  S: u32,
  maskLen: u32,
  scale: f32,
  tree: u32,
}

struct Cursor {
  slot0: u32,
  step: u32,
  _pad0: u32,
  _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> kCache: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> vCache: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> keyMask: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(6) var<uniform> cursor: Cursor;
@group(0) @binding(7) var<storage, read_write> lse: array<f32>;

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn attention(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let index = gid.x + gid.y * nwg.x * WG;
  if (index >= p.B * p.T * p.H) {
    return;
  }
  let h = index % p.H;
  let r = index / p.H;
  let b = r / p.T;
  let t = r % p.T;
  let kvHead = h / (p.H / p.Hk);
  let slot = cursor.slot0 + t;
  // vec4 indices: HEAD_DIM / 4 per head
  let V4 = HEAD_DIM / 4u;
  let qBase = r * (p.H + 2u * p.Hk) * V4 + h * V4;
  let q$ = qkv[qBase + $u] * p.scale; // each vec4
  var acc$ = vec4<f32>(0.0); // each vec4
  var runningMax = -3.0e38;
  var denominator = 0.0;
  let cacheBase = (b * p.Hk + kvHead) * p.S;
  // keys [prefix, segment) are hidden from this query (none without a tree)
  var prefix = 0u;
  var segment = 0u;
  if (p.tree != 0u) {
    let limits = p.B * p.maskLen + 2u * r;
    prefix = keyMask[limits];
    segment = min(keyMask[limits + 1u], slot);
  }
  for (var s = 0u; s <= slot; s++) {
    if (s >= prefix && s < segment) {
      s = segment;
    }
    let real = s >= p.maskLen || keyMask[b * p.maskLen + s] != 0u || s == slot;
    if (!real) {
      continue;
    }
    let kBase = (cacheBase + s) * V4;
    var score = 0.0;
    score += dot(q$, kCache[kBase + $u]); // each vec4
    // One exp per key: of the old sum's rescaling and the new key's weight, one is exp(0) = 1.
    let raises = score > runningMax;
    let other = exp(-abs(score - runningMax));
    let correction = select(1.0, other, raises);
    let weight = select(other, 1.0, raises);
    denominator = denominator * correction + weight;
    acc$ = acc$ * correction + weight * vCache[kBase + $u]; // each vec4
    runningMax = max(runningMax, score);
  }
  let outBase = (r * p.H + h) * V4;
  out[outBase + $u] = acc$ / denominator; // each vec4
  lse[index] = runningMax + log(denominator);
}
