// Row gather:  out[i, c] = table[rows[i] - rowStart, c]   for rows[i] in [rowStart, rowStart + tableRows), c < C
//
// Shapes (f32, row-major): table [tableRows, tableStride] (one row-chunk of a matrix that may be split
// across bindings, starting at global row rowStart); rows [N] u32; out [N, outStride]. The first C
// columns of each row are copied (C <= both strides; the rest of an output row is left as it is). Rows
// that fall outside this chunk are left for the dispatch of the chunk that holds them.
// Serves the token embedding lookup (table = embedding, rows = token ids), the selection of hidden
// states at chosen positions (table = hidden states, rows = positions) and the copy of a prompt's KV
// cache into its candidates' rows, whose caches have room for fewer slots (rows = one per kv head,
// C = the prompt's slots × head dim, strides = each cache's slots × head dim).
// One invocation per copied element, numbered across a 2-D grid.

struct Params {
  N: u32,
  C: u32,
  rowStart: u32,
  tableRows: u32,
  tableStride: u32,
  outStride: u32,
  _pad0: u32,
  _pad1: u32,
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
  out[i * p.outStride + c] = table[(row - p.rowStart) * p.tableStride + c];
}
