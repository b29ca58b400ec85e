// Row gather and its backward, the embedding's gradient. f32 unless said, row-major.
//
// gather_rows          out[i, c] = table[rows[i] - rowStart, c]   for rows[i] in [rowStart, rowStart + tableRows), c < C
//                      table [tableRows, tableStride] (one row-chunk of a matrix that may be split across
//                      bindings, starting at global row rowStart); rows [N] u32; out [N, outStride]. The first C
//                      columns of each row are copied (C <= both strides; the rest of an output row is left as
//                      it is). Rows that fall outside this chunk are left for the dispatch of the chunk that
//                      holds them. Serves the token embedding lookup (table = embedding, rows = token ids), the
//                      selection of hidden states at chosen positions (table = hidden states, rows = positions)
//                      and the copy of a prompt's KV cache into its candidates' rows, whose caches have room for
//                      fewer slots (rows = one per kv head, C = the prompt's slots × head dim, strides = each
//                      cache's slots × head dim). One invocation per copied element, numbered across a 2-D grid.
// embedding_backward   the backward of the lookup x[r, :] = table[ids[r], :]. ids [R] u32, dx [R, C]  ->
//                      dtable [V, C], the rows row0 .. row0+V-1 of the table's gradient:
//                        dtable[v, c] (+)= sum over the rows r with ids[r] == row0 + v of dx[r, c]
//                      Rows of tokens absent from ids get nothing added (0 when overwriting). One workgroup
//                      of 64 per vocabulary row v (v = wg.x + wg.y * num_workgroups.x): the workgroup scans
//                      all R ids (the same id for every invocation, so the branch is uniform) and on a match
//                      each invocation adds its columns c = lid, lid + 64, ... of dx's row. Every element of
//                      dtable belongs to one invocation, so no atomics are needed.
//
// Each entry point numbers its own bindings from 0.

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
