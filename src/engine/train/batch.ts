// A training micro-batch as the algorithms describe it (per token of each sequence) and as the
// GPU reads it (per row of a left-padded [B, T] block, where row t predicts token t+1).
//
// Tree-structured ("shared-prefix") sequences. A sequence may hold a trunk and branches that all
// continue some prefix of it, so that a shared prefix is computed once instead of once per branch.
// Three optional per-token arrays describe it (token indices are within the unpadded sequence):
//
//   positions[t]     the RoPE position of token t (default t);
//   segmentStart[t]  the first token of t's segment, a contiguous run of tokens: either t itself
//                    (t starts a new segment) or segmentStart[t - 1] (t continues it);
//   attendPrefix[t]  the tokens [0, attendPrefix[t]) before the segment that t also sees (default 0;
//                    at most segmentStart[t], and the same for every token of a segment).
//
// Token t attends to key k iff k < attendPrefix[t] or segmentStart[t] <= k <= t (and k is not
// padding). Without segmentStart and attendPrefix every token is in segment 0: plain causal attention.
// Row t has a target (token t+1) only when t+1 continues t's segment; the first token of a segment
// is predicted by nothing, so it may not be an action (action mask 0) nor carry a value (value mask 0).
// A branch that continues the trunk's tokens [0, P) therefore starts with a copy of token P-1 at
// position P-1 (attendPrefix P-1): its row then predicts the branch's first action token exactly as
// row P-1 of a separate sequence [trunk[0, P), branch...] would. Several independent sequences can
// also be packed into one row: segments with attendPrefix 0.
import { padLeft, positionsFromMask } from '../padding.ts';
import type { TokenLossInputs } from './loss.ts';
import { packLossInputs } from './loss.ts';

export interface TrainBatch {
  /** Token ids of each sequence, unpadded: prompt, actions, observations... */
  sequences: number[][];
  /**
   * 1 where the token is the agent's own action, whose log-probability enters the loss; 0 for prompt,
   * observation, tool-output tokens. May switch on and off along a multi-turn transcript.
   */
  actionMask: number[][];
  advantages?: number[][];
  oldLogprobs?: number[][];
  referenceLogProbs?: number[][];
  returns?: number[][];
  oldValues?: number[][];
  /**
   * 1 where the value head's output for the state ending just before this token is regressed to
   * `returns` (default: the action mask). A state's value lives on the row that predicts its next token.
   */
  valueMask?: number[][];
  /** RoPE position of each token (default 0, 1, 2, ...); see the header on tree-structured sequences. */
  positions?: number[][];
  /** Per token: the tokens [0, attendPrefix) before its segment that it also attends to (default 0). */
  attendPrefix?: number[][];
  /** Per token: the first token of its segment, t itself or the previous token's (default 0: one segment). */
  segmentStart?: number[][];
}

export interface PackedBatch {
  B: number;
  T: number;
  ids: Uint32Array;
  attentionMask: Uint32Array;
  positions: Uint32Array;
  /** Largest entry of positions, when they were given or the batch is tree-structured (checked against the RoPE table on load). */
  maxPosition?: number;
  /** Per row: the next token's id, or -1 where there is none (last position, padding, end of a segment). */
  targets: Int32Array;
  lossInputs: Float32Array;
  actionTokens: number;
  /**
   * Tree-structured batches only: per row r = b*T + t the pair (prefix, segment) in padded slots, [B*T*2]:
   * query slot t sees the key slots s < prefix and segment <= s <= t (padding rows: 0, 0 = causal).
   */
  rowLimits?: Uint32Array;
}

/** Per-token values moved to the rows that predict those tokens (row t holds token t+1's values). */
function toRows(batch: TrainBatch, values: number[][] | undefined, name: string, T: number): Float64Array | undefined {
  if (!values) return undefined;
  const rows = new Float64Array(batch.sequences.length * T);
  batch.sequences.forEach((seq, b) => {
    if (values[b]?.length !== seq.length) throw new RangeError(`${name} of sequence ${b} has ${values[b]?.length} values for ${seq.length} tokens`);
    const pad = T - seq.length;
    for (let t = 1; t < seq.length; t++) rows[b * T + pad + t - 1] = values[b][t];
  });
  return rows;
}

/** One sequence's per-token integer array, checked for length and range. */
function perToken(values: number[][] | undefined, b: number, n: number, name: string): number[] | undefined {
  if (!values) return undefined;
  const row = values[b];
  if (row?.length !== n) throw new RangeError(`${name} of sequence ${b} has ${row?.length} values for ${n} tokens`);
  row.forEach((v, t) => {
    if (!Number.isInteger(v) || v < 0) throw new RangeError(`${name} of sequence ${b}, token ${t} is ${v}; it must be an integer >= 0`);
  });
  return row;
}

/**
 * Checks one sequence's tree structure (see the header) and returns its segment starts and attended
 * prefixes (defaults filled in).
 */
function treeOf(batch: TrainBatch, b: number): { segment: number[]; prefix: number[] } {
  const n = batch.sequences[b].length;
  const segment = perToken(batch.segmentStart, b, n, 'segmentStart') ?? new Array<number>(n).fill(0);
  const prefix = perToken(batch.attendPrefix, b, n, 'attendPrefix') ?? new Array<number>(n).fill(0);
  const where = (t: number) => `sequence ${b}, token ${t}`;
  for (let t = 0; t < n; t++) {
    const starts = segment[t] === t;
    if (!starts && (t === 0 || segment[t] !== segment[t - 1])) {
      throw new RangeError(`${where(t)}: segmentStart ${segment[t]} must be the token itself (a new segment) or the previous token's segmentStart ${t > 0 ? segment[t - 1] : '(none)'}; segments are contiguous`);
    }
    if (prefix[t] > segment[t]) throw new RangeError(`${where(t)}: attendPrefix ${prefix[t]} exceeds its segmentStart ${segment[t]}; the attended prefix ends before the segment`);
    if (!starts && prefix[t] !== prefix[t - 1]) throw new RangeError(`${where(t)}: attendPrefix ${prefix[t]} differs from ${prefix[t - 1]} of the token before it in the same segment`);
    if (starts && batch.actionMask[b]?.[t]) {
      throw new RangeError(`${where(t)}: the first token of a segment is marked as an action, but nothing predicts it; a branch must start with a copy of the token that predicts its first action token`);
    }
    if (starts && t > 0 && batch.valueMask?.[b]?.[t]) {
      throw new RangeError(`${where(t)}: the first token of a segment carries a value, but its state's row belongs to another segment`);
    }
  }
  return { segment, prefix };
}

export function packBatch(batch: TrainBatch): PackedBatch {
  const B = batch.sequences.length;
  if (batch.actionMask.length !== B) throw new RangeError(`${batch.actionMask.length} action masks for ${B} sequences`);
  batch.actionMask.forEach((mask, b) => {
    if (mask[0]) throw new RangeError(`sequence ${b}: its first token is marked as an action, but nothing predicts a first token; start sequences with the prompt`);
  });
  const padded = padLeft(batch.sequences, 0);
  const T = padded.length;
  const targets = new Int32Array(B * T).fill(-1);
  const tree = batch.segmentStart !== undefined || batch.attendPrefix !== undefined;
  let positions: Uint32Array;
  let maxPosition: number | undefined;
  let rowLimits: Uint32Array | undefined;
  if (!tree && !batch.positions) {
    padded.ids.forEach((row, b) => {
      for (let t = 0; t + 1 < T; t++) if (padded.mask[b][t + 1]) targets[b * T + t] = row[t + 1];
    });
    positions = Uint32Array.from(positionsFromMask(padded.mask).flat());
  } else {
    positions = new Uint32Array(B * T);
    rowLimits = tree ? new Uint32Array(B * T * 2) : undefined;
    batch.sequences.forEach((seq, b) => {
      const n = seq.length;
      const pad = T - n;
      const { segment, prefix } = treeOf(batch, b);
      const explicit = perToken(batch.positions, b, n, 'positions');
      for (let t = 0; t < n; t++) {
        const r = b * T + pad + t;
        positions[r] = explicit ? explicit[t] : t;
        maxPosition = Math.max(maxPosition ?? 0, positions[r]);
        if (t + 1 < n && segment[t + 1] === segment[t]) targets[r] = seq[t + 1];
        if (rowLimits) {
          rowLimits[2 * r] = pad + prefix[t];
          rowLimits[2 * r + 1] = pad + segment[t];
        }
      }
    });
  }
  const mask = toRows(batch, batch.actionMask, 'action mask', T)!;
  const inputs: TokenLossInputs = {
    mask,
    advantage: toRows(batch, batch.advantages, 'advantages', T),
    oldLogprob: toRows(batch, batch.oldLogprobs, 'old log-probs', T),
    referenceLogProb: toRows(batch, batch.referenceLogProbs, 'reference log-probs', T),
    returns: toRows(batch, batch.returns, 'returns', T),
    oldValue: toRows(batch, batch.oldValues, 'old values', T),
    valueMask: toRows(batch, batch.valueMask, 'value mask', T),
  };
  return {
    B,
    T,
    ids: Uint32Array.from(padded.ids.flat()),
    attentionMask: Uint32Array.from(padded.mask.flat()),
    positions,
    targets,
    lossInputs: packLossInputs(inputs),
    actionTokens: mask.reduce((a, m) => a + m, 0),
    ...(maxPosition !== undefined ? { maxPosition } : {}),
    ...(rowLimits ? { rowLimits } : {}),
  };
}
