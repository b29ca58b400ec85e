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
// Two entry points share these bindings:
//   matmul_tiled  4 rows x 4 columns per invocation, workgroup 8x8 (a 32x32 tile): many rows.
//   matmul_rows   1 row x 4 columns per invocation, workgroup 64: a few rows (decode).
// Both keep the tile in registers and use no workgroup barriers (they stall SwiftShader).

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

@compute @workgroup_size(8, 8)
fn matmul_tiled(@builtin(global_invocation_id) gid: vec3<u32>) {
  let n0 = gid.x * 4u;
  let m0 = gid.y * 4u;
  if (n0 >= p.N || m0 >= p.M) {
    return;
  }
  // Out-of-range rows and columns read a valid row instead; their results are never stored.
  let aRow = p.aOffset + vec4<u32>(min(m0, p.M - 1u), min(m0 + 1u, p.M - 1u), min(m0 + 2u, p.M - 1u), min(m0 + 3u, p.M - 1u)) * p.sAm;
  let bRow = p.bOffset + vec4<u32>(min(n0, p.N - 1u), min(n0 + 1u, p.N - 1u), min(n0 + 2u, p.N - 1u), min(n0 + 3u, p.N - 1u)) * p.sBn;
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
  let rows = array<vec4<f32>, 4>(acc0, acc1, acc2, acc3);
  for (var i = 0u; i < 4u; i++) {
    for (var j = 0u; j < 4u; j++) {
      store(m0 + i, n0 + j, rows[i][j]);
    }
  }
}

@compute @workgroup_size(64)
fn matmul_rows(@builtin(global_invocation_id) gid: vec3<u32>) {
  let n0 = gid.x * 4u;
  let m = gid.y;
  if (n0 >= p.N || m >= p.M) {
    return;
  }
  let aRow = p.aOffset + m * p.sAm;
  let bRow = p.bOffset + vec4<u32>(n0, min(n0 + 1u, p.N - 1u), min(n0 + 2u, p.N - 1u), min(n0 + 3u, p.N - 1u)) * p.sBn;
  var acc = vec4<f32>(0.0);
  for (var k = 0u; k < p.K; k++) {
    let bk = k * p.sBk;
    acc += a[aRow + k * p.sAk] * vec4<f32>(b[bRow.x + bk], b[bRow.y + bk], b[bRow.z + bk], b[bRow.w + bk]);
  }
  for (var j = 0u; j < 4u; j++) {
    store(m, n0 + j, acc[j]);
  }
}
