// Batches of sequences of different lengths are padded on the left, as Hugging Face does for
// generation: every sequence's newest token then sits in the same column, so one decode step
// writes one cache slot for the whole batch, and the mask keeps padding out of attention.

export interface PaddedBatch {
  /** [B][T], padding filled with `padId`. */
  ids: number[][];
  /** [B][T], 1 = real token, 0 = padding. */
  mask: number[][];
  /** Length of the padded rows. */
  length: number;
}

export function padLeft(sequences: number[][], padId: number): PaddedBatch {
  if (sequences.length === 0) throw new RangeError('a batch needs at least one sequence');
  const length = Math.max(...sequences.map((s) => s.length));
  if (length === 0) throw new RangeError('every batch needs at least one token; an empty prompt needs a BOS token');
  const ids = sequences.map((s) => [...new Array<number>(length - s.length).fill(padId), ...s]);
  const mask = sequences.map((s) => [...new Array<number>(length - s.length).fill(0), ...new Array<number>(s.length).fill(1)]);
  return { ids, mask, length };
}

/** Position id of every token: the number of real tokens before it (0 for padding). */
export function positionsFromMask(mask: number[][]): number[][] {
  return mask.map((row) => {
    let seen = 0;
    return row.map((m) => (m ? seen++ : 0));
  });
}
