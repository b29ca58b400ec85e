// Matrix multiply against a weight stored the way PyTorch's nn.Linear stores it: [out, in], row-major.
//
//   y[m, yColumn0 + n] = alpha * sum_k x[m, k] * w[n, k]  (+ bias[wRow0 + n])  (+ y[m, yColumn0 + n])
//
// Shapes and layout (all f32, row-major):
//   x    [M, K]      activations, row stride K
//   w    [N, K]      one row-chunk of a weight: rows wRow0 .. wRow0+N of the whole matrix (weights
//                    larger than one binding are split by rows)
//   bias [N_total]   the whole weight's bias, read only when hasBias = 1 (a dummy otherwise)
//   y    [M, ldY]    output; the chunk writes columns yColumn0 .. yColumn0+N (a LoRA update writes
//                    the q, k or v slice of a fused qkv row); with accumulate = 1 the product is added
//                    to what y holds (residual adds, LoRA updates)
//
// Two entry points share these bindings:
//   matmul_tiled  4 rows x 4 columns per invocation, workgroup 8x8 (a 32x32 tile): many rows (prefill).
//   matmul_rows   1 row x 4 columns per invocation, workgroup 64: a few rows (decode, one token a sequence).
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
  _pad0: u32,
  _pad1: u32,
  _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
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
  let xRow = vec4<u32>(min(m0, p.M - 1u), min(m0 + 1u, p.M - 1u), min(m0 + 2u, p.M - 1u), min(m0 + 3u, p.M - 1u)) * p.K;
  let wRow = vec4<u32>(min(n0, p.N - 1u), min(n0 + 1u, p.N - 1u), min(n0 + 2u, p.N - 1u), min(n0 + 3u, p.N - 1u)) * p.K;
  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
  for (var k = 0u; k < p.K; k++) {
    let wv = vec4<f32>(w[wRow.x + k], w[wRow.y + k], w[wRow.z + k], w[wRow.w + k]);
    acc0 += x[xRow.x + k] * wv;
    acc1 += x[xRow.y + k] * wv;
    acc2 += x[xRow.z + k] * wv;
    acc3 += x[xRow.w + k] * wv;
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
  let xRow = m * p.K;
  let wRow = vec4<u32>(n0, min(n0 + 1u, p.N - 1u), min(n0 + 2u, p.N - 1u), min(n0 + 3u, p.N - 1u)) * p.K;
  var acc = vec4<f32>(0.0);
  for (var k = 0u; k < p.K; k++) {
    acc += x[xRow + k] * vec4<f32>(w[wRow.x + k], w[wRow.y + k], w[wRow.z + k], w[wRow.w + k]);
  }
  for (var j = 0u; j < 4u; j++) {
    store(m, n0 + j, acc[j]);
  }
}
