// A training micro-batch as the algorithms describe it (per token of each sequence) and as the
// GPU reads it (per row of a left-padded [B, T] block, where row t predicts token t+1).
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
  refLogprobs?: number[][];
  returns?: number[][];
  oldValues?: number[][];
  /**
   * 1 where the value head's output for the state ending just before this token is regressed to
   * `returns` (default: the action mask). A state's value lives on the row that predicts its next token.
   */
  valueMask?: number[][];
}

export interface PackedBatch {
  B: number;
  T: number;
  ids: Uint32Array;
  attentionMask: Uint32Array;
  positions: Uint32Array;
  /** Per row: the next token's id, or -1 where there is none (last position, padding). */
  targets: Int32Array;
  lossInputs: Float32Array;
  actionTokens: number;
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

export function packBatch(batch: TrainBatch): PackedBatch {
  const B = batch.sequences.length;
  batch.actionMask.forEach((mask, b) => {
    if (mask[0]) throw new RangeError(`sequence ${b}: its first token is marked as an action, but nothing predicts a first token; start sequences with the prompt`);
  });
  const padded = padLeft(batch.sequences, 0);
  const T = padded.length;
  const targets = new Int32Array(B * T).fill(-1);
  padded.ids.forEach((row, b) => {
    for (let t = 0; t + 1 < T; t++) if (padded.mask[b][t + 1]) targets[b * T + t] = row[t + 1];
  });
  const mask = toRows(batch, batch.actionMask, 'action mask', T)!;
  const inputs: TokenLossInputs = {
    mask,
    advantage: toRows(batch, batch.advantages, 'advantages', T),
    oldLogprob: toRows(batch, batch.oldLogprobs, 'old log-probs', T),
    refLogprob: toRows(batch, batch.refLogprobs, 'reference log-probs', T),
    returns: toRows(batch, batch.returns, 'returns', T),
    oldValue: toRows(batch, batch.oldValues, 'old values', T),
    valueMask: toRows(batch, batch.valueMask, 'value mask', T),
  };
  return {
    B,
    T,
    ids: Uint32Array.from(padded.ids.flat()),
    attentionMask: Uint32Array.from(padded.mask.flat()),
    positions: Uint32Array.from(positionsFromMask(padded.mask).flat()),
    targets,
    lossInputs: packLossInputs(inputs),
    actionTokens: mask.reduce((a, m) => a + m, 0),
  };
}
