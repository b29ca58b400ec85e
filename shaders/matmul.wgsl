// Matrix multiply with strided operands, which covers the forward pass against a weight stored the
// way PyTorch's nn.Linear stores it ([out, in], row-major) and every product of the backward pass:
//
//   y[m, yColumn0 + n] = alpha * sum_k A(m, k) * B(n, k)  (+ bias[wRow0 + n])  (+ y[m, yColumn0 + n])
//   A(m, k) = a[aOffset + m * sAm + k * sAk],   B(n, k) = b[bOffset + n * sBn + k * sBk]
//
// Forward y = x W^T: a = x [M, K] (sAm = K, sAk = 1), b = W [N, K] (sBn = K, sBk = 1). Weights larger
// than one binding are split by rows: a chunk holds rows wRow0 .. wRow0+N and writes those columns.
// Input gradient dx = dy W: A = dy, B(n, k) = W[k, n] (sBn = 1, sBk = in). Weight gradient
// dW = dy^T x: A(n, m) = dy[m, n] (sAm = 1, sAk = ld), B(k, m) = x[m, k] (sBn = 1, sBk = K).
//
// Shapes: y [M, ldY] row-major f32; with accumulate = 1 the product is added to what y holds
// (residual adds, LoRA updates, gradient accumulation); bias [N_total] read only when hasBias = 1.
// Three entry points share these bindings:
//   matmul_tiled   4 rows x 4 columns per invocation, workgroup 8x8 (a 32x32 tile): many rows.
//   matmul_tiled4  the same with vec4 loads, where strides and offsets allow (below).
//   matmul_rows    1 row x 4 columns per invocation, workgroup 64: a few rows (decode).
// All keep the tile in registers and use no workgroup barriers (they stall SwiftShader).

struct Params {
  M: u32,
  N: u32,
  K: u32,
  ldY: u32,
  yColumn0: u32,
  accumulate: u32,
  hasBias: u32,
  alpha: f32,
  wRow0: u32,
  sAm: u32,
  sAk: u32,
  sBn: u32,
  sBk: u32,
  aOffset: u32,
  bOffset: u32,
  _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

/** first, first + 1, first + 2, first + 3, each at most count - 1: indices past the end read the last row or column, whose results are never stored. */
fn clamped4(first: u32, count: u32) -> vec4<u32> {
  return min(vec4<u32>(first, first + 1u, first + 2u, first + 3u), vec4<u32>(count - 1u));
}

fn store(m: u32, n: u32, value: f32) {
  if (m >= p.M || n >= p.N) {
    return;
  }
  let column = p.yColumn0 + n;
  var result = p.alpha * value;
  if (p.hasBias == 1u) {
    result += bias[p.wRow0 + n];
  }
  let index = m * p.ldY + column;
  if (p.accumulate == 1u) {
    result += y[index];
  }
  y[index] = result;
}

/** Stores the tile at rows m0 .. m0+3, columns n0 .. n0+3: column n0 + j of the tile is tile[j]. */
fn store_tile(m0: u32, n0: u32, tile: mat4x4<f32>) {
  for (var j = 0u; j < 4u; j++) {
    let column = tile[j];
    store(m0, n0 + j, column.x);
    store(m0 + 1u, n0 + j, column.y);
    store(m0 + 2u, n0 + j, column.z);
    store(m0 + 3u, n0 + j, column.w);
  }
}

@compute @workgroup_size(8, 8)
fn matmul_tiled(@builtin(global_invocation_id) gid: vec3<u32>) {
  let n0 = gid.x * 4u;
  let m0 = gid.y * 4u;
  if (n0 >= p.N || m0 >= p.M) {
    return;
  }
  let aRow = p.aOffset + clamped4(m0, p.M) * p.sAm;
  let bRow = p.bOffset + clamped4(n0, p.N) * p.sBn;
  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
  for (var k = 0u; k < p.K; k++) {
    let ak = k * p.sAk;
    let bk = k * p.sBk;
    let bv = vec4<f32>(b[bRow.x + bk], b[bRow.y + bk], b[bRow.z + bk], b[bRow.w + bk]);
    acc0 += a[aRow.x + ak] * bv;
    acc1 += a[aRow.y + ak] * bv;
    acc2 += a[aRow.z + ak] * bv;
    acc3 += a[aRow.w + ak] * bv;
  }
  store_tile(m0, n0, transpose(mat4x4<f32>(acc0, acc1, acc2, acc3)));
}

@compute @workgroup_size(64)
fn matmul_rows(@builtin(global_invocation_id) gid: vec3<u32>) {
  let n0 = gid.x * 4u;
  let m = gid.y;
  if (n0 >= p.N || m >= p.M) {
    return;
  }
  let aRow = p.aOffset + m * p.sAm;
  let bRow = p.bOffset + clamped4(n0, p.N) * p.sBn;
  var acc = vec4<f32>(0.0);
  for (var k = 0u; k < p.K; k++) {
    let bk = k * p.sBk;
    acc += a[aRow + k * p.sAk] * vec4<f32>(b[bRow.x + bk], b[bRow.y + bk], b[bRow.z + bk], b[bRow.w + bk]);
  }
  for (var j = 0u; j < 4u; j++) {
    store(m, n0 + j, acc[j]);
  }
}

// ---- matmul_tiled4: the tiled product with vec4 loads ---------------------------------------------
// The same product and 4x4 tile per invocation as matmul_tiled, reading each operand as vec4s along
// the dimension where it is contiguous: A along k (sAk = 1; the forward pass and the input gradient)
// or along m (sAm = 1; the weight gradient), B along k (sBk = 1; the forward pass) or along n
// (sBn = 1; both gradients), as the override constants A_ALONG_K and B_ALONG_K say. A 4x4 block of
// each operand per 4 k's is then 8 vec4 loads where matmul_tiled makes 32 scalar ones. The engine
// uses it when the offsets and the other strides are multiples of 4 and so are the dimensions each
// contiguous run spans (K for an operand along k, M or N otherwise); the tail of K is masked.

override A_ALONG_K: bool = true;
override B_ALONG_K: bool = true;

@group(0) @binding(1) var<storage, read> a4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> b4: array<vec4<f32>>;

@compute @workgroup_size(8, 8)
fn matmul_tiled4(@builtin(global_invocation_id) gid: vec3<u32>) {
  let n0 = gid.x * 4u;
  let m0 = gid.y * 4u;
  if (n0 >= p.N || m0 >= p.M) {
    return;
  }
  // in vec4s
  let a0 = p.aOffset / 4u;
  let b0 = p.bOffset / 4u;
  let aRows = clamped4(m0, p.M) * (p.sAm / 4u);
  let bColumns = clamped4(n0, p.N) * (p.sBn / 4u);
  // acc[j] holds column n0 + j of the tile, rows m0 .. m0 + 3
  var acc = mat4x4<f32>();
  for (var k = 0u; k < p.K; k += 4u) {
    // blockA[kk] = A(m0 .. m0+3, k + kk), blockB[j] = B(n0 + j, k .. k+3)
    var blockA: mat4x4<f32>;
    if (A_ALONG_K) {
      blockA = transpose(mat4x4<f32>(a4[a0 + aRows.x + k / 4u], a4[a0 + aRows.y + k / 4u], a4[a0 + aRows.z + k / 4u], a4[a0 + aRows.w + k / 4u]));
    } else {
      let at = a0 + m0 / 4u;
      let kk = clamped4(k, p.K) * (p.sAk / 4u);
      let real = vec4<f32>(vec4<u32>(k, k + 1u, k + 2u, k + 3u) < vec4<u32>(p.K));
      blockA = mat4x4<f32>(a4[at + kk.x] * real.x, a4[at + kk.y] * real.y, a4[at + kk.z] * real.z, a4[at + kk.w] * real.w);
    }
    var blockB: mat4x4<f32>;
    if (B_ALONG_K) {
      blockB = mat4x4<f32>(b4[b0 + bColumns.x + k / 4u], b4[b0 + bColumns.y + k / 4u], b4[b0 + bColumns.z + k / 4u], b4[b0 + bColumns.w + k / 4u]);
    } else {
      let at = b0 + n0 / 4u;
      let kk = clamped4(k, p.K) * (p.sBk / 4u);
      blockB = transpose(mat4x4<f32>(b4[at + kk.x], b4[at + kk.y], b4[at + kk.z], b4[at + kk.w]));
    }
    acc += blockA * blockB;
  }
  store_tile(m0, n0, acc);
}
