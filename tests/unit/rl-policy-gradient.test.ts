// REINFORCE and GRPO end to end on the GPU, on a one-step environment whose right answer is known:
// the action-level policy must move towards the rewarded action.
import { describe, expect, test } from 'vitest';
import { Transcript } from '../../src/agent/transcript.ts';
import { loadModel } from '../../src/engine/model.ts';
import type { EnvModule } from '../../src/env/types.ts';
import { actionLogProbs } from '../../src/rl/action-policy.ts';
import { GRPO_DEFAULTS, trainGrpo } from '../../src/rl/grpo.ts';
import { REINFORCE_DEFAULTS, trainReinforce } from '../../src/rl/reinforce.ts';
import { MemoryModelSource, tinyModelFiles } from '../shared/tiny-model.ts';
import { nodeGpu } from '../support/node-gpu.ts';

const ACTIONS = ['yes', 'no way'];

/** One question, two answers; "yes" earns 1. */
const yesOrNo: EnvModule = {
  id: 'yes-or-no',
  description: 'Answer the question.',
  maxEpisodeSteps: 1,
  make: () => ({
    reset: () => ({ observation: 'is it raining?', info: {} }),
    validActions: () => ACTIONS,
    step: (action: string) => ({ observation: 'ok', reward: action === 'yes' ? 1 : 0, terminated: true, truncated: false, info: { success: action === 'yes' } }),
  }),
};

async function probabilityOf(model: Awaited<ReturnType<typeof loadModel>>, adapter: Parameters<typeof trainReinforce>[2]): Promise<number> {
  const transcript = new Transcript(model.tokenizer, 'plain', yesOrNo.description);
  transcript.addObservation('is it raining?');
  const tokens = ACTIONS.map((a) => transcript.encodeAction(a));
  const [scores] = await model.scoreContinuations([{ prompt: transcript.ids, continuations: tokens }], { adapter });
  return Math.exp(actionLogProbs([scores.sums], [tokens.map((t) => t.length)], { lengthNormalize: true })[0][0]);
}

describe('action-level policy gradient', () => {
  test('REINFORCE raises the probability of the rewarded action', async () => {
    const gpu = await nodeGpu();
    const model = await loadModel(gpu, new MemoryModelSource(tinyModelFiles({ vocabSize: 96, seed: 3 }).files));
    const adapter = model.uploadAdapter(model.createAdapter(REINFORCE_DEFAULTS.lora, 1));
    const probabilityOfYes = () => probabilityOf(model, adapter);
    const before = await probabilityOfYes();
    const history = await trainReinforce(model, yesOrNo, adapter, { ...REINFORCE_DEFAULTS, totalEpisodes: 48, episodesPerUpdate: 8, normalizeAdvantages: false, learningRate: 1e-2, seed: 2 });
    const after = await probabilityOfYes();
    expect(history).toHaveLength(6);
    expect(after).toBeGreaterThan(before + 0.2);
    adapter.dispose();
    model.dispose();
  });

  test('GRPO (with the KL penalty to the reference) raises it too', async () => {
    const gpu = await nodeGpu();
    const model = await loadModel(gpu, new MemoryModelSource(tinyModelFiles({ vocabSize: 96, seed: 3 }).files));
    const adapter = model.uploadAdapter(model.createAdapter(GRPO_DEFAULTS.lora, 1));
    const before = await probabilityOf(model, adapter);
    const history = await trainGrpo(model, yesOrNo, adapter, { ...GRPO_DEFAULTS, totalEpisodes: 48, groupsPerUpdate: 2, groupSize: 4, learningRate: 1e-2, seed: 2 });
    const after = await probabilityOf(model, adapter);
    expect(history).toHaveLength(6);
    expect(history.every((u) => Number.isFinite(u.meanKl))).toBe(true);
    expect(after).toBeGreaterThan(before + 0.2);
    adapter.dispose();
    model.dispose();
  });
});
