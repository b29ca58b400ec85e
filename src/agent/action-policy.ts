// A policy over a state's listed valid actions, from the language model's token log-probs.
//
//   score      s_a = Σ_tokens log p(token)            (summed)
//              s_a = Σ_tokens log p(token) / n_a      (length-normalised: long actions not penalised)
//   policy     log π(a|s) = s_a/τ − logsumexp_b s_b/τ  (computed as x_a − m − log Σ_b exp(x_b − m), x = s/τ, m = max_b x_b)
//              with temperature τ (default 1): τ < 1 sharpens π towards the greedy pick, τ > 1 flattens it
//   entropy    H(π) = −Σ_a π(a) log π(a)
//   sampling   the first a with u < Σ_{b ≤ a} π(b), u uniform in [0, 1)
//
// A batch of states is number[][]; states with fewer actions pad with −Infinity, which gets
// probability 0 and is never sampled. A state needs at least one real action.

export interface ActionPolicyOptions {
  /** Divide each action's summed token log-prob by its token count before the softmax. */
  lengthNormalize: boolean;
  /** τ of the softmax over the scores (default 1). */
  temperature?: number;
}

/** log π(a|s) from scores, stably; −Infinity (padding) stays −Infinity. */
export function logSoftmax(scores: readonly number[]): number[] {
  let max = -Infinity;
  for (const s of scores) {
    if (Number.isNaN(s) || s === Infinity) throw new RangeError(`action score ${s}: scores must be finite or -Infinity padding`);
    max = Math.max(max, s);
  }
  if (max === -Infinity) throw new RangeError('a state needs at least one action with a finite score');
  let sum = 0;
  for (const s of scores) sum += Math.exp(s - max);
  const logZ = max + Math.log(sum);
  return scores.map((s) => s - logZ);
}

/** Per state, log π(a|s) from each action's summed token log-probs and token counts. */
export function actionLogProbs(summedLogprobs: readonly (readonly number[])[], tokenCounts: readonly (readonly number[])[], options: ActionPolicyOptions): number[][] {
  if (tokenCounts.length !== summedLogprobs.length) throw new RangeError(`actionLogProbs: ${summedLogprobs.length} states of log-probs but ${tokenCounts.length} of token counts`);
  const temperature = options.temperature ?? 1;
  if (!(temperature > 0 && Number.isFinite(temperature))) throw new RangeError(`actionLogProbs: temperature must be a positive number, got ${temperature}`);
  return summedLogprobs.map((row, s) => {
    if (tokenCounts[s].length !== row.length) throw new RangeError(`actionLogProbs: state ${s} has ${row.length} log-probs but ${tokenCounts[s].length} token counts`);
    const scores = row.map((logp, a) => {
      if (logp === -Infinity || !options.lengthNormalize) return logp / temperature;
      const n = tokenCounts[s][a];
      if (!Number.isInteger(n) || n < 1) throw new RangeError(`actionLogProbs: action ${a} of state ${s} has token count ${n}; a real action has at least one token`);
      return logp / n / temperature;
    });
    return logSoftmax(scores);
  });
}

/** H(π) = −Σ π log π of one state's action distribution (padding contributes 0). */
export function actionEntropy(logProbs: readonly number[]): number {
  let h = 0;
  for (const logp of logProbs) if (logp !== -Infinity) h -= Math.exp(logp) * logp;
  return h;
}

/** An action index drawn from π; `random` is a seeded stream such as mulberry32(seed). */
export function sampleAction(logProbs: readonly number[], random: () => number): number {
  const u = random();
  let cumulative = 0;
  let last = -1;
  for (let a = 0; a < logProbs.length; a++) {
    if (logProbs[a] === -Infinity) continue;
    cumulative += Math.exp(logProbs[a]);
    last = a;
    if (u < cumulative) return a;
  }
  if (last < 0) throw new RangeError('sampleAction: the state has no valid actions');
  return last; // u landed in the rounding gap between the cumulative sum and 1
}
