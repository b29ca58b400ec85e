// Causal grouped-query attention of one layer against its KV cache, forward and backward.
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
// attention   T new tokens per sequence. Query (b, t) sits at cache slot cursor.slot0 + t and attends to
//             the slots s <= slot0 + t that hold real tokens. It always attends to itself too, so a padding
//             query gets a finite (unused) output instead of a NaN that could spread through later matmuls.
//             One invocation per (b, t, h); it streams the keys once with an online softmax.
//
// attention_backward_query, attention_backward_key
//             A whole sequence at once, as training runs it: cursor.slot0 = 0, T <= S, so query t sits at
//             cache slot t and key slot s < T belongs to token row b*T + s. Query t sees key s exactly as in
//             the forward. With score[t, s] = scale * q_t . k_s, p = exp(score - lse_t), O_t = sum_s p v_s,
//             inputs dout [B*T, H*D] (gradient of out) and lse, a[t, s] = dout_t . v_s and
//             delta_t = dout_t . O_t = sum_s p a[t, s]:
//               dS = p * (a - delta),  dq_t = scale * sum_s dS k_s,
//               dk_s = scale * sum_t dS q_t,  dv_s = sum_t p dout_t
//             attention_backward_query, one invocation per (b, t, h): delta [B*T, H] and dq into the q
//             columns of dqkv [B*T, (H + 2*Hk) * D]. delta is accumulated from the recomputed p in the same
//             pass over the keys, dq as scale * (sum_s p a k_s - delta * sum_s p k_s), so the forward
//             output O is not needed (and the kernel stays within 8 storage buffers).
//             attention_backward_key, one invocation per (b, s, kv head), after the query kernel: loops over
//             the queries t >= s that see key s and the query heads of the kv head's group, recomputing p
//             and dS from lse and delta; writes dk and dv into the k and v columns of dqkv at row b*T + s.
//             Together the two kernels overwrite all of dqkv; rope_backward then un-rotates its dq and dk.
//
// Tree-structured training batches (tree != 0; src/engine/train/batch.ts): keyMask is followed by one
// (prefix, segment) pair of u32 per query row r = b*T + t, at keyMask[B*maskLen + 2r ..]. The query then
// sees only the slots s < prefix and segment <= s <= its own slot (still only real ones, and always
// itself); the forward and the query kernel skip the slots [prefix, segment) without reading them, the
// key kernel skips the queries that do not see its key. With tree = 0 nothing more is read.
//
// A head's vectors live in HEAD_DIM / 4 vec4 variables rather than arrays: lines marked `// each vec4`
// are written once per vec4 by the engine (src/engine/gpu/kernels.ts), `$` replaced by 0, 1, 2, ...; it
// also sets HEAD_DIM (a multiple of 4) to the model's head dimension. Compilers keep such variables in
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

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> kCache: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> vCache: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> keyMask: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(6) var<uniform> cursor: Cursor;
@group(0) @binding(7) var<storage, read_write> lse: array<f32>;

const WG: u32 = 64u;

/** Whether key slot s of sequence b is a real token (padding keys are seen only by their own query). */
fn key_is_real(b: u32, s: u32) -> bool {
  return s >= p.maskLen || keyMask[b * p.maskLen + s] != 0u;
}

/** Tree batches: the (prefix, segment) limits of query row r, segment clamped to the query's slot. */
fn row_limits(r: u32, slot: u32) -> vec2<u32> {
  let at = p.B * p.maskLen + 2u * r;
  return vec2<u32>(keyMask[at], min(keyMask[at + 1u], slot));
}

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
  // keys [limits.x, limits.y) are hidden from this query (none without a tree)
  var limits = vec2<u32>(0u, 0u);
  if (p.tree != 0u) {
    limits = row_limits(r, slot);
  }
  for (var s = 0u; s <= slot; s++) {
    if (s >= limits.x && s < limits.y) {
      s = limits.y;
    }
    if (!(s == slot || key_is_real(b, s))) {
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

// ---- attention_backward_query, attention_backward_key -------------------------------------------
// The forward's bindings 0-4 are shared; 5-8 are the backward's own.

@group(0) @binding(5) var<storage, read> attnDout: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> attnLse: array<f32>;
// delta: written by the query kernel, read by the key kernel
@group(0) @binding(7) var<storage, read_write> attnDelta: array<f32>;
@group(0) @binding(8) var<storage, read_write> attnDqkv: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn attention_backward_query(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let H = p.H;
  let index = gid.x + gid.y * nwg.x * WG; // = r * H + h
  if (index >= p.B * p.T * H) {
    return;
  }
  let h = index % H;
  let r = index / H;
  let b = r / p.T;
  let t = r % p.T;
  let kvHead = h / (H / p.Hk);
  // vec4 indices: HEAD_DIM / 4 per head
  let V4 = HEAD_DIM / 4u;
  let qBase = r * (H + 2u * p.Hk) * V4 + h * V4;
  let q$ = qkv[qBase + $u]; // each vec4
  let dout$ = attnDout[index * V4 + $u]; // each vec4
  // weightedK = sum_s p a k_s, probK = sum_s p k_s
  var weightedK$ = vec4<f32>(0.0); // each vec4
  var probK$ = vec4<f32>(0.0); // each vec4
  let lse = attnLse[index];
  var delta = 0.0;
  let cacheBase = (b * p.Hk + kvHead) * p.S;
  // keys [limits.x, limits.y) are hidden from this query (none without a tree)
  var limits = vec2<u32>(0u, 0u);
  if (p.tree != 0u) {
    limits = row_limits(r, t);
  }
  for (var s = 0u; s <= t; s++) {
    if (s >= limits.x && s < limits.y) {
      s = limits.y;
    }
    if (!(s == t || key_is_real(b, s))) {
      continue;
    }
    let kvBase = (cacheBase + s) * V4;
    let k$ = kCache[kvBase + $u]; // each vec4
    var score = 0.0;
    var a = 0.0;
    score += dot(q$, k$); // each vec4
    a += dot(dout$, vCache[kvBase + $u]); // each vec4
    let prob = exp(p.scale * score - lse);
    delta += prob * a;
    weightedK$ += prob * a * k$; // each vec4
    probK$ += prob * k$; // each vec4
  }
  attnDqkv[qBase + $u] = p.scale * (weightedK$ - delta * probK$); // each vec4
  attnDelta[index] = delta;
}

@compute @workgroup_size(WG)
fn attention_backward_key(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let H = p.H;
  let Hk = p.Hk;
  let T = p.T;
  let index = gid.x + gid.y * nwg.x * WG; // = (b * T + s) * Hk + kvHead
  if (index >= p.B * T * Hk) {
    return;
  }
  let kvHead = index % Hk;
  let keyRow = index / Hk;
  let b = keyRow / T;
  let s = keyRow % T;
  let group = H / Hk;
  // vec4 indices: HEAD_DIM / 4 per head
  let V4 = HEAD_DIM / 4u;
  let qkvStride = (H + 2u * Hk) * V4;
  let kvBase = ((b * Hk + kvHead) * p.S + s) * V4;
  let k$ = kCache[kvBase + $u]; // each vec4
  let v$ = vCache[kvBase + $u]; // each vec4
  var dk$ = vec4<f32>(0.0); // each vec4
  var dv$ = vec4<f32>(0.0); // each vec4
  // every later query sees a real key; a padding key is seen only by the query at its own slot
  let lastQuery = select(s, T - 1u, key_is_real(b, s));
  for (var t = s; t <= lastQuery; t++) {
    let r = b * T + t;
    if (p.tree != 0u) {
      let limits = row_limits(r, t);
      if (s >= limits.x && s < limits.y) {
        continue; // query t does not see key s
      }
    }
    for (var h = kvHead * group; h < (kvHead + 1u) * group; h++) {
      let qBase = r * qkvStride + h * V4;
      let at = r * H + h;
      let doutBase = at * V4;
      let q$ = qkv[qBase + $u]; // each vec4
      let dout$ = attnDout[doutBase + $u]; // each vec4
      var score = 0.0;
      var a = 0.0;
      score += dot(q$, k$); // each vec4
      a += dot(dout$, v$); // each vec4
      let prob = exp(p.scale * score - attnLse[at]);
      let dS = prob * (a - attnDelta[at]);
      dk$ += dS * q$; // each vec4
      dv$ += prob * dout$; // each vec4
    }
  }
  let kOut = keyRow * qkvStride + (H + kvHead) * V4;
  let vOut = keyRow * qkvStride + (H + Hk + kvHead) * V4;
  attnDqkv[kOut + $u] = p.scale * dk$; // each vec4
  attnDqkv[vOut + $u] = dv$; // each vec4
}
