// Row gather:  out[i, :] = table[rows[i] - rowStart, :]   for rows[i] in [rowStart, rowStart + tableRows)
//
// Shapes (f32, row-major): table [tableRows, C] (one row-chunk of a matrix that may be split across
// bindings, starting at global row rowStart); rows [N] u32; out [N, C]. Rows that fall outside this
// chunk are left for the dispatch of the chunk that holds them.
// Serves the token embedding lookup (table = embedding, rows = token ids) and the selection of
// hidden states at chosen positions (table = hidden states, rows = positions).
// One invocation per output element, numbered across a 2-D grid.

struct Params {
  N: u32,
  C: u32,
  rowStart: u32,
  tableRows: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read> rows: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn gather_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let index = gid.x + gid.y * nwg.x * WG;
  if (index >= p.N * p.C) {
    return;
  }
  let i = index / p.C;
  let c = index % p.C;
  let row = rows[i];
  if (row < p.rowStart || row >= p.rowStart + p.tableRows) {
    return;
  }
  out[index] = table[(row - p.rowStart) * p.C + c];
}
