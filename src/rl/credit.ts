// Credit assignment from environment steps to tokens, for TrainBatch's per-token arrays.
//
//   A transcript interleaves context tokens (actionMask 0) with the agent's actions (actionMask 1);
//   step k's action occupies the half-open token span [start_k, end_k). A per-step quantity x_k
//   (advantage, return, old value) becomes the per-token array
//       x_token[t] = x_k  if start_k ≤ t < end_k,     0 otherwise (prompt, observations, tool output).
//   An episode-level quantity is the same x for every step.
//   The spans must cover exactly the mask's 1s, in order, without overlap.

/** The tokens of one environment step's action: [start, end) in the transcript. */
export interface ActionSpan {
  start: number;
  end: number;
}

/** The maximal runs of 1s in an action mask, in order: one span per action when context separates actions. */
export function actionSpans(actionMask: readonly number[]): ActionSpan[] {
  const spans: ActionSpan[] = [];
  actionMask.forEach((m, t) => {
    if (m !== 0 && m !== 1) throw new RangeError(`action mask entry ${t} is ${m}; it must be 0 or 1`);
    if (m === 1 && actionMask[t - 1] !== 1) spans.push({ start: t, end: t + 1 });
    else if (m === 1) spans[spans.length - 1].end = t + 1;
  });
  return spans;
}

/** Throws unless the spans are ordered, disjoint, non-empty, in range and cover exactly the mask's 1s. */
export function checkSpans(actionMask: readonly number[], spans: readonly ActionSpan[]): void {
  spans.forEach(({ start, end }, k) => {
    if (!Number.isInteger(start) || !Number.isInteger(end) || start >= end) throw new RangeError(`action span ${k} [${start}, ${end}) must be a non-empty integer range`);
    if (k > 0 && start < spans[k - 1].end) throw new RangeError(`action span ${k} [${start}, ${end}) starts before span ${k - 1} ends (${spans[k - 1].end}); spans must be in order and disjoint`);
    if (start < 0 || end > actionMask.length) throw new RangeError(`action span ${k} [${start}, ${end}) lies outside the transcript's ${actionMask.length} tokens`);
  });
  let previousEnd = 0;
  spans.forEach(({ start, end }, k) => {
    for (let t = previousEnd; t < start; t++) {
      if (actionMask[t] !== 0) throw new RangeError(`token ${t} is marked as an action but lies in no action span (it precedes span ${k} [${start}, ${end}))`);
    }
    for (let t = start; t < end; t++) {
      if (actionMask[t] !== 1) throw new RangeError(`token ${t} of action span ${k} [${start}, ${end}) has action mask ${actionMask[t]}, not 1`);
    }
    previousEnd = end;
  });
  for (let t = previousEnd; t < actionMask.length; t++) {
    if (actionMask[t] !== 0) throw new RangeError(`token ${t} is marked as an action but lies in no action span (after the last span)`);
  }
}

/** The per-token array of one quantity: step k's value (or the episode's single value) on step k's action tokens, 0 elsewhere. */
export function spreadToTokens(actionMask: readonly number[], spans: readonly ActionSpan[], perStep: number | readonly number[]): number[] {
  checkSpans(actionMask, spans);
  return fill(actionMask.length, spans, perStep, 'values');
}

/** Several quantities at once (e.g. advantages, returns, oldValues), each spread as spreadToTokens does. */
export function spreadColumnsToTokens<K extends string>(actionMask: readonly number[], spans: readonly ActionSpan[], columns: Record<K, number | readonly number[]>): Record<K, number[]> {
  checkSpans(actionMask, spans);
  const out = {} as Record<K, number[]>;
  for (const name of Object.keys(columns) as K[]) out[name] = fill(actionMask.length, spans, columns[name], name);
  return out;
}

function fill(length: number, spans: readonly ActionSpan[], perStep: number | readonly number[], name: string): number[] {
  if (typeof perStep !== 'number' && perStep.length !== spans.length) throw new RangeError(`${name}: ${perStep.length} per-step values for ${spans.length} action spans`);
  const tokens = new Array<number>(length).fill(0);
  spans.forEach(({ start, end }, k) => {
    const value = typeof perStep === 'number' ? perStep : perStep[k];
    if (!Number.isFinite(value)) throw new RangeError(`${name} of step ${k} is ${value}; every value must be finite`);
    tokens.fill(value, start, end);
  });
  return tokens;
}
