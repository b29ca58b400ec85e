// The policy-gradient update of an action-level policy, shared by REINFORCE and GRPO.
//
// π(a|s) = softmax_b(score_b), score_b = the summed (or mean) log-probability of candidate b's tokens
// after the state s. Then ∇ log π(a|s) = ∇ score_a - Σ_b π_b ∇ score_b: the gradient reaches EVERY
// candidate. So a step with advantage A becomes one training sequence per candidate (the state, then
// that candidate), each of its tokens weighted A (1[b = a] - π_b) (divided by the candidate's length
// for mean scores), and the GPU's policy-gradient term -Σ weight · log p(token) does the rest.
import type { ActionStep } from '../agent/rollout.ts';
import type { TrainBatch } from '../engine/train/batch.ts';

/** Training micro-batches of `microBatch` sequences for steps with their advantages. */
export function actionPolicyGradientBatches(steps: { step: ActionStep; advantage: number }[], lengthNormalize: boolean, microBatch: number): TrainBatch[] {
  const batches: TrainBatch[] = [];
  let current: TrainBatch = { sequences: [], actionMask: [], advantages: [] };
  for (const { step, advantage } of steps) {
    step.actionTokens.forEach((tokens, b) => {
      const weight = (advantage * ((b === step.chosen ? 1 : 0) - Math.exp(step.logProbs[b]))) / (lengthNormalize ? tokens.length : 1);
      current.sequences.push([...step.context, ...tokens]);
      current.actionMask.push([...step.context.map(() => 0), ...tokens.map(() => 1)]);
      current.advantages!.push([...step.context.map(() => 0), ...tokens.map(() => weight)]);
      if (current.sequences.length === microBatch) {
        batches.push(current);
        current = { sequences: [], actionMask: [], advantages: [] };
      }
    });
  }
  if (current.sequences.length > 0) batches.push(current);
  return batches;
}
