// Backward kernels of the transformer (everything but the matmuls), f32, row-major.
// R = B*T token rows, row r = b*T + t. Every output element is written by exactly one invocation
// (WGSL has no float atomics), so no kernel needs atomics or a second reduction pass. The entry points
// share this module and number their own bindings from 0; each entry point only sees its own.
//
// rmsnorm_backward       forward y = x * rs * w with rs = 1/sqrt(mean(x^2) + eps).
//                        x [R, C] (the forward's input), w [C], dy [R, C]  ->  dx [R, C], rs [R]
//                          dx = rs * w * dy - x * rs^3 / C * sum_c(w dy x)
//                        accumulate = 1 adds into dx (the residual-stream gradient) instead of overwriting.
//                        rs (each row's 1/rms) is written for rmsnorm_weight_grad. dx must not alias dy.
//                        LANES invocations per row (rows.wgsl).
// rmsnorm_weight_grad    dw[c] (+)= sum_r dy[r, c] * x[r, c] * rs[r], with rs [R] from rmsnorm_backward.
//                        One invocation per column c, looping over the rows.
// silu_mul_backward      forward out[r, j] = silu(g) * u with g = gateUp[r, j], u = gateUp[r, F + j].
//                        gateUp [R, 2F], dout [R, F]  ->  dgateUp [R, 2F] (overwritten):
//                          dg = dout * u * sig(g) * (1 + g * (1 - sig(g))),   du = dout * silu(g)
//                        One invocation per (r, j).
// rope_backward          In place on the gradient dqkv [R, (H + 2*Hk) * D], laid out like qkv (rope.wgsl):
//                        the transpose (inverse) of the forward rotation on the H query and Hk key heads,
//                          x1' = x1 cos + x2 sin,   x2' = x2 cos - x1 sin   (pairs (i, i + D/2))
//                        with the forward's positions [R] u32 and rope table [maxPos, D/2, 2] (cos, sin).
//                        Value heads are not touched. One invocation per (row, q or k head).
// attention_backward_query, attention_backward_key
//                        Backward of attention.wgsl for a whole sequence at once, as training runs it:
//                        cursor.slot0 = 0, T <= S, so query t sits at cache slot t and key slot s < T belongs
//                        to token row b*T + s. Query t sees key s iff s <= t and (s >= maskLen or
//                        keyMask[b*maskLen + s] != 0 or s == t), exactly the forward's rule.
//                          score[t, s] = scale * q_t . k_s,   p = exp(score - lse_t),   O_t = sum_s p v_s
//                        Inputs: qkv [R, (H + 2*Hk) * D] (q rotated in place by the forward; only the q columns
//                        are read), kCache, vCache [B, Hk, S, D] (k rotated), keyMask [B, maskLen] u32,
//                        dout [R, H*D] (gradient of the attention output), lse [R, H] (from the forward).
//                        With a[t, s] = dout_t . v_s and delta_t = dout_t . O_t = sum_s p a[t, s]:
//                          dS = p * (a - delta),  dq_t = scale * sum_s dS k_s,
//                          dk_s = scale * sum_t dS q_t,  dv_s = sum_t p dout_t
//                        attention_backward_query, one invocation per (b, t, h): delta [R, H] and dq into the q
//                        columns of dqkv [R, (H + 2*Hk) * D]. delta is accumulated from the recomputed p in the
//                        same pass over the keys, dq as scale * (sum_s p a k_s - delta * sum_s p k_s), so the
//                        forward output O is not needed (and the kernel stays within 8 storage buffers).
//                        attention_backward_key, one invocation per (b, s, kv head), after the query kernel:
//                        loops over the queries t >= s that see key s and the query heads h of the kv head's
//                        group (h / (H / Hk) == kv head), recomputing p and dS from lse and delta; writes dk and
//                        dv into the k and v columns of dqkv at row b*T + s. Together the two kernels overwrite
//                        all of dqkv; rope_backward then un-rotates its dq and dk.
//                        Tree-structured batches (tree != 0): keyMask [B, maskLen] is followed by a (prefix,
//                        segment) pair per query row r = b*T + t at keyMask[B*maskLen + 2r ..], as attention.wgsl
//                        reads it: query t sees key s only if s < prefix or s >= min(segment, t) (besides the
//                        rules above). The query kernel skips the hidden keys; the key kernel skips the queries
//                        that do not see its key. With tree = 0 the limits are never read.
// logits_backward        logits [R, V], targets [R] i32 (< 0: none), gLogprob [R] = dL/d logprob(target),
//                        gEntropy [R] = dL/d entropy  ->  dlogits [R, V] (overwritten), with p = softmax(row)
//                        and H its entropy:
//                          dlogits = gLogprob * (onehot(target) - p) - gEntropy * p * (log p + H)
//                        A row without a target has only the entropy term. LANES invocations per row (rows.wgsl).
// embedding_backward     forward x[r, :] = table[ids[r], :] (gather_rows). ids [R] u32, dx [R, C]  ->
//                        dtable [V, C], the rows row0 .. row0+V-1 of the table's gradient:
//                          dtable[v, c] (+)= sum over the rows r with ids[r] == row0 + v of dx[r, c]
//                        Rows of tokens absent from ids get nothing added (0 when overwriting). One workgroup
//                        of 64 per vocabulary row v (v = wg.x + wg.y * num_workgroups.x): the workgroup scans
//                        all R ids (the same id for every invocation, so the branch is uniform) and on a match
//                        each invocation adds its columns c = lid, lid + 64, ... of dx's row. Every element of
//                        dtable belongs to one invocation, so no atomics are needed.
//
// The attention kernels hold a head's vectors in vec4 variables, lines marked `// each vec4` written
// once per vec4 with `$` as its index, and HEAD_DIM set to the model's head dimension, all by the
// engine before compiling, as for attention.wgsl.

const HEAD_DIM: u32 = 64u;
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

// ---- silu_mul_backward --------------------------------------------------------------------------

struct SiluParams {
  R: u32,
  F: u32,
  _pad0: u32,
  _pad1: u32,
}

@group(0) @binding(0) var<uniform> siluParams: SiluParams;
@group(0) @binding(1) var<storage, read> siluGateUp: array<f32>;
@group(0) @binding(2) var<storage, read> siluDout: array<f32>;
@group(0) @binding(3) var<storage, read_write> siluDgateUp: array<f32>;

@compute @workgroup_size(WG)
fn silu_mul_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let index = gid.x + gid.y * nwg.x * WG;
  let F = siluParams.F;
  if (index >= siluParams.R * F) {
    return;
  }
  let r = index / F;
  let j = index % F;
  let gateAt = r * 2u * F + j;
  let g = siluGateUp[gateAt];
  let u = siluGateUp[gateAt + F];
  let dout = siluDout[index];
  let sig = 1.0 / (1.0 + exp(-g)); // exp overflows to inf for g << 0, giving sig = 0 as it should
  siluDgateUp[gateAt] = dout * u * sig * (1.0 + g * (1.0 - sig));
  siluDgateUp[gateAt + F] = dout * g * sig;
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
@group(0) @binding(2) var<storage, read> ropePositions: array<u32>;
@group(0) @binding(3) var<storage, read> ropeTable: array<f32>;

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
  let tableBase = ropePositions[r] * half * 2u;
  for (var i = 0u; i < half; i++) {
    let c = ropeTable[tableBase + 2u * i];
    let s = ropeTable[tableBase + 2u * i + 1u];
    let x1 = ropeDqkv[rowBase + i];
    let x2 = ropeDqkv[rowBase + i + half];
    ropeDqkv[rowBase + i] = x1 * c + x2 * s;
    ropeDqkv[rowBase + i + half] = x2 * c - x1 * s;
  }
}

// ---- attention_backward_query, attention_backward_key -------------------------------------------

struct AttentionParams {
  B: u32,
  T: u32,
  H: u32,
  Hk: u32,
  S: u32,
  maskLen: u32,
  scale: f32,
  tree: u32,
}

@group(0) @binding(0) var<uniform> attnParams: AttentionParams;
@group(0) @binding(1) var<storage, read> attnQkv: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> attnK: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> attnV: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> attnKeyMask: array<u32>;
@group(0) @binding(5) var<storage, read> attnDout: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> attnLse: array<f32>;
// delta: written by the query kernel, read by the key kernel
@group(0) @binding(7) var<storage, read_write> attnDelta: array<f32>;
@group(0) @binding(8) var<storage, read_write> attnDqkv: array<vec4<f32>>;

/** Whether key slot s of sequence b is a real token (padding keys are seen only by their own query). */
fn key_is_real(b: u32, s: u32) -> bool {
  return s >= attnParams.maskLen || attnKeyMask[b * attnParams.maskLen + s] != 0u;
}

/** Tree batches: the (prefix, segment) limits of query row r, segment clamped to the query's slot t. */
fn row_limits(r: u32, t: u32) -> vec2<u32> {
  let at = attnParams.B * attnParams.maskLen + 2u * r;
  return vec2<u32>(attnKeyMask[at], min(attnKeyMask[at + 1u], t));
}

@compute @workgroup_size(WG)
fn attention_backward_query(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let H = attnParams.H;
  let index = gid.x + gid.y * nwg.x * WG; // = r * H + h
  if (index >= attnParams.B * attnParams.T * H) {
    return;
  }
  let h = index % H;
  let r = index / H;
  let b = r / attnParams.T;
  let t = r % attnParams.T;
  let kvHead = h / (H / attnParams.Hk);
  // vec4 indices: HEAD_DIM / 4 per head
  let V4 = HEAD_DIM / 4u;
  let qBase = r * (H + 2u * attnParams.Hk) * V4 + h * V4;
  let q$ = attnQkv[qBase + $u]; // each vec4
  let dout$ = attnDout[index * V4 + $u]; // each vec4
  // weightedK = sum_s p a k_s, probK = sum_s p k_s
  var weightedK$ = vec4<f32>(0.0); // each vec4
  var probK$ = vec4<f32>(0.0); // each vec4
  let lse = attnLse[index];
  var delta = 0.0;
  let cacheBase = (b * attnParams.Hk + kvHead) * attnParams.S;
  // keys [limits.x, limits.y) are hidden from this query (none without a tree)
  var limits = vec2<u32>(0u, 0u);
  if (attnParams.tree != 0u) {
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
    let k$ = attnK[kvBase + $u]; // each vec4
    var score = 0.0;
    var a = 0.0;
    score += dot(q$, k$); // each vec4
    a += dot(dout$, attnV[kvBase + $u]); // each vec4
    let prob = exp(attnParams.scale * score - lse);
    delta += prob * a;
    weightedK$ += prob * a * k$; // each vec4
    probK$ += prob * k$; // each vec4
  }
  attnDqkv[qBase + $u] = attnParams.scale * (weightedK$ - delta * probK$); // each vec4
  attnDelta[index] = delta;
}

@compute @workgroup_size(WG)
fn attention_backward_key(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let H = attnParams.H;
  let Hk = attnParams.Hk;
  let T = attnParams.T;
  let index = gid.x + gid.y * nwg.x * WG; // = (b * T + s) * Hk + kvHead
  if (index >= attnParams.B * T * Hk) {
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
  let kvBase = ((b * Hk + kvHead) * attnParams.S + s) * V4;
  let k$ = attnK[kvBase + $u]; // each vec4
  let v$ = attnV[kvBase + $u]; // each vec4
  var dk$ = vec4<f32>(0.0); // each vec4
  var dv$ = vec4<f32>(0.0); // each vec4
  // every later query sees a real key; a padding key is seen only by the query at its own slot
  let lastQuery = select(s, T - 1u, key_is_real(b, s));
  for (var t = s; t <= lastQuery; t++) {
    let r = b * T + t;
    if (attnParams.tree != 0u) {
      let limits = row_limits(r, t);
      if (s >= limits.x && s < limits.y) {
        continue; // query t does not see key s
      }
    }
    for (var h = kvHead * group; h < (kvHead + 1u) * group; h++) {
      let qBase = r * qkvStride + h * V4;
      let at = r * H + h;
      let doutBase = at * V4;
      let q$ = attnQkv[qBase + $u]; // each vec4
      let dout$ = attnDout[doutBase + $u]; // each vec4
      var score = 0.0;
      var a = 0.0;
      score += dot(q$, k$); // each vec4
      a += dot(dout$, v$); // each vec4
      let prob = exp(attnParams.scale * score - attnLse[at]);
      let dS = prob * (a - attnDelta[at]);
      dk$ += dS * q$; // each vec4
      dv$ += prob * dout$; // each vec4
    }
  }
  let kOut = keyRow * qkvStride + (H + kvHead) * V4;
  let vOut = keyRow * qkvStride + (H + Hk + kvHead) * V4;
  attnDqkv[kOut + $u] = attnParams.scale * dk$; // each vec4
  attnDqkv[vOut + $u] = dv$; // each vec4
}

// ---- logits_backward ----------------------------------------------------------------------------

struct LogitsParams {
  R: u32,
  V: u32,
  _pad0: u32,
  _pad1: u32,
}

@group(0) @binding(0) var<uniform> logitsParams: LogitsParams;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> logitsTargets: array<i32>;
@group(0) @binding(3) var<storage, read> gLogprob: array<f32>;
@group(0) @binding(4) var<storage, read> gEntropy: array<f32>;
@group(0) @binding(5) var<storage, read_write> dlogits: array<f32>;

@compute @workgroup_size(WG)
fn logits_backward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
  let at = row_of(wg, nwg, lid);
  let row = min(at.x, logitsParams.R - 1u); // rows past the end redo the last row and store nothing
  let V = logitsParams.V;
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
  if (at.x >= logitsParams.R) {
    return;
  }
  let logZ = log(total.x);
  let entropy = logZ - total.y / total.x;
  let wanted = logitsTargets[row];
  let gLp = select(0.0, gLogprob[row], wanted >= 0);
  let gH = gEntropy[row];
  for (var v = at.y; v < V; v += LANES) {
    let logp = logits[base + v] - rowMax - logZ;
    let prob = exp(logp);
    dlogits[base + v] = select(0.0, gLp, i32(v) == wanted) - gLp * prob - gH * prob * (logp + entropy);
  }
}

// ---- embedding_backward -------------------------------------------------------------------------

struct EmbeddingParams {
  R: u32,
  V: u32,
  C: u32,
  accumulate: u32,
  row0: u32,
  _pad0: u32,
  _pad1: u32,
  _pad2: u32,
}

@group(0) @binding(0) var<uniform> embeddingParams: EmbeddingParams;
@group(0) @binding(1) var<storage, read> embeddingIds: array<u32>;
@group(0) @binding(2) var<storage, read> embeddingDx: array<f32>;
@group(0) @binding(3) var<storage, read_write> embeddingDtable: array<f32>;

@compute @workgroup_size(WG)
fn embedding_backward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
  let v = wg.x + wg.y * nwg.x;
  if (v >= embeddingParams.V) {
    return; // uniform across the workgroup
  }
  let C = embeddingParams.C;
  let base = v * C;
  if (embeddingParams.accumulate == 0u) {
    for (var c = lid; c < C; c += WG) {
      embeddingDtable[base + c] = 0.0;
    }
  }
  let token = embeddingParams.row0 + v;
  for (var r = 0u; r < embeddingParams.R; r++) {
    if (embeddingIds[r] == token) {
      let rowBase = r * C;
      for (var c = lid; c < C; c += WG) {
        embeddingDtable[base + c] += embeddingDx[rowBase + c];
      }
    }
  }
}
