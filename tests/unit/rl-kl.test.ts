// Every KL figure of a run is one estimate, actionKl (src/agent/policy.ts): k3 per action, summed over
// the action's draws (its tokens in text mode). It is never negative where the mean of log-ratios (k1)
// is; GRPO and PPO report it as losses/kl per episode; and PPO's approx KL is per action in both policy
// modes, so that one earlyStopKl stops choice and text mode at the same drift.
import { beforeAll, describe, expect, test } from 'vitest';
import { ChoicePolicy, type ChoiceStep } from '../../src/agent/choice-policy.ts';
import { actionKl, type PlayedEpisode, type Policy, type PolicyOptions, type PolicyStep, type UpdateMetrics } from '../../src/agent/policy.ts';
import { TextPolicy, type TextStep } from '../../src/agent/text-policy.ts';
import type { GpuLoraAdapter } from '../../src/engine/lora/gpu-adapter.ts';
import { loadModel, type Model } from '../../src/engine/model.ts';
import { Trainer } from '../../src/engine/train/trainer.ts';
import type { EnvModule } from '../../src/env/types.ts';
import { actionSpans } from '../../src/agent/transcript.ts';
import { GRPO_DEFAULTS, grpo } from '../../src/rl/grpo.ts';
import { PPO_DEFAULTS, ppo } from '../../src/rl/ppo.ts';
import { MemoryModelSource, seededNormal, tinyModelFiles } from '../shared/tiny-model.ts';
import { nodeGpu } from '../support/node-gpu.ts';

/** k3 of one draw, r = log q − log p, written out. */
const k3 = (r: number) => Math.exp(r) - 1 - r;
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

describe('actionKl', () => {
  test('adds k3 of each draw: zero for equal log-probs, and never negative where the log-ratio is', () => {
    // log π = −0.5, log π_ref = −0.2: the log-ratio log π − log π_ref (k1) is −0.3.
    expect(actionKl([-0.5], [-0.2])).toBeCloseTo(k3(0.3), 14);
    expect(actionKl([-0.5], [-0.2])).toBeGreaterThan(0);
    expect(actionKl([-0.2], [-0.5])).toBeCloseTo(k3(-0.3), 14);
    expect(actionKl([-1.25], [-1.25])).toBe(0);
    // A text action's tokens: the sum of their k3s.
    expect(actionKl([-0.5, -2, -0.1], [-0.2, -2.5, -0.1])).toBeCloseTo(k3(0.3) + k3(-0.5), 14);
    expect(() => actionKl([-1, -2], [-1])).toThrow(/2 sampled log-probs against 1/);
  });
});

describe('losses/kl', () => {
  /** Two steps of one episode each: log π above log π_ref at the first, below it at the second. */
  function playedWithReference(): PlayedEpisode[] {
    const steps: [number, number][][] = [
      [[-0.5, -0.2], [-1.0, -1.1]],
      [[-0.3, -0.1]],
    ];
    return steps.map((episode, e) => ({
      seed: 0,
      samplingSeed: e,
      totalReward: e,
      success: true,
      steps: episode.map(([logProb, referenceLogProb], t) => ({
        observation: `episode ${e}`,
        action: `step ${t}`,
        reward: t === episode.length - 1 ? e : 0,
        terminated: t === episode.length - 1,
        truncated: false,
        info: {},
        logProb,
        referenceLogProb,
        referenceKl: k3(referenceLogProb - logProb),
        value: 0,
        tokens: { ids: [e, t], actionMask: [0, 1] },
      })),
    }));
  }
  const metrics: UpdateMetrics = {
    'losses/total': 0,
    terms: {} as UpdateMetrics['terms'],
    'charts/learning_rate': 1e-3,
    'losses/grad_norm': 0,
    'losses/value_grad_norm': 0,
    skipped: false,
    step: 0,
    tokens: 0,
    actionTokens: 0,
    approxKl: 0,
    clipFraction: 0,
    entropy: 0,
    logProb: 0,
  };
  const fake = (played: PlayedEpisode[]): Policy => ({ mode: 'choice', options: {} as PolicyOptions, play: async () => played, update: async () => metrics });
  // The mean log-ratio per episode is ((−0.3 + 0.1) + (−0.2)) / 2 = −0.2; the KL is the steps' k3s.
  const expected = (k3(0.3) + k3(-0.1) + k3(0.2)) / 2;

  test("GRPO and PPO report the mean per-episode sum of the steps' k3, not the mean log-ratio", async () => {
    const played = playedWithReference();
    const context = { model: null as never, trainer: null as never, policy: fake(played), update: 0, seed: 3 };
    const fromGrpo = await grpo({ ...GRPO_DEFAULTS, groupsPerUpdate: 1, groupSize: 2 }).update(context);
    const fromPpo = await ppo({ ...PPO_DEFAULTS, episodesPerUpdate: 2, earlyStopKl: null }).update(context);
    for (const { metrics } of [fromGrpo, fromPpo]) {
      expect(metrics['losses/kl']).toBeGreaterThan(0);
      expect(metrics['losses/kl']).toBeCloseTo(expected, 12);
    }
  });

  test("PPO's adaptive coefficient steers that KL: above its target, β grows", async () => {
    const algorithm = ppo({ ...PPO_DEFAULTS, episodesPerUpdate: 2, earlyStopKl: null, klCoef: 0.1, adaptiveKlTarget: expected / 1.1 });
    await algorithm.update({ model: null as never, trainer: null as never, policy: fake(playedWithReference()), update: 0, seed: 3 });
    // β ← β (1 + clip(KL / target − 1, ±0.2)) = 0.1 × 1.1 (the negative mean log-ratio would shrink it)
    expect((algorithm.state() as { klCoef: number }).klCoef).toBeCloseTo(0.1 * 1.1, 12);
  });
});

/** Two steps of free answers; the reward depends on the answer's length, so that group members differ. */
const talk: EnvModule = {
  id: 'talk',
  description: 'Say something.',
  maxEpisodeSteps: 2,
  make: () => {
    let t = 0;
    return {
      reset: ({ seed }: { seed: number }) => ((t = 0), { observation: `hi ${seed}`, info: {} }),
      validActions: () => ['yes', 'no way', 'maybe so'],
      step: (action: string) => {
        t++;
        return { observation: `said ${action.length}`, reward: action.length % 3, terminated: t >= 2, truncated: false, info: { success: action.length > 2 } };
      },
    };
  },
};

describe('KL on the GPU, in both policy modes', () => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(await nodeGpu(), new MemoryModelSource(tinyModelFiles({ vocabSize: 96, seed: 3 }).files));
  });

  /** An adapter with random B, so that the policy is not the reference. */
  function randomAdapter(seed: number): GpuLoraAdapter {
    const host = model.createAdapter({ r: 4, alpha: 8, targets: ['q_proj', 'v_proj', 'o_proj', 'down_proj'], rslora: false, dropout: 0, layers: null }, seed);
    const normal = seededNormal(seed);
    for (const m of host.modules) m.B = Float32Array.from(m.B, () => 0.3 * normal());
    return model.uploadAdapter(host);
  }
  const policyOf = (mode: 'choice' | 'text', adapter: GpuLoraAdapter): Policy =>
    mode === 'choice'
      ? new ChoicePolicy(model, { env: talk, reset: {}, format: 'plain', adapter, microBatch: 4, lengthNormalize: true })
      : new TextPolicy(model, { env: talk, reset: {}, format: 'plain', adapter, microBatch: 4, maxActionTokens: 4 });

  /** Each step's draws: the chosen action in choice mode, the action's tokens in text mode. */
  const draws = (mode: 'choice' | 'text', step: PolicyStep): { sampled: number[]; reference: number[] } =>
    mode === 'choice' ? { sampled: [step.logProb], reference: [step.referenceLogProb!] } : { sampled: (step as TextStep).tokens.logprobs, reference: (step as TextStep).referenceLogProbs! };

  /** log π of each step's draws under the policy as it is now. */
  async function currentDraws(policy: Policy, steps: PolicyStep[]): Promise<number[][]> {
    if (policy instanceof ChoicePolicy) {
      const choice = steps as ChoiceStep[];
      const scored = await policy.scoreStates(choice);
      return scored.map((s, i) => [s.logProbs[choice[i].chosen]]);
    }
    const text = steps as TextStep[];
    const { tokenLogprobs } = await model.score(text.map((s) => s.tokens.ids), { adapter: policy.options.adapter });
    return text.map((s, i) => {
      const span = actionSpans(s.tokens.actionMask)[s.index];
      return tokenLogprobs[i].slice(span.start, span.end).map((lp) => lp!);
    });
  }

  for (const mode of ['choice', 'text'] as const) {
    test(`${mode} mode: GRPO's losses/kl is the mean per-episode sum of each action's k3 to the reference`, async () => {
      const adapter = randomAdapter(5);
      const trainer = new Trainer(model.gpuModel, { train: adapter, optimizer: { schedule: { kind: 'constant', lr: 1e-2 } } });
      try {
        const { episodes, metrics } = await grpo({ ...GRPO_DEFAULTS, groupsPerUpdate: 2, groupSize: 3 }).update({ model, policy: policyOf(mode, adapter), trainer, update: 0, seed: 5 });
        expect(episodes.every((e) => !e.error && e.steps.length === 2)).toBe(true);
        const perEpisode = episodes.map((e) =>
          e.steps.reduce((sum, s) => {
            const { sampled, reference } = draws(mode, s);
            return sum + sampled.reduce((a, lp, j) => a + k3(reference[j] - lp), 0);
          }, 0),
        );
        expect(mean(perEpisode)).toBeGreaterThan(1e-4); // the random adapter has moved the policy off the reference
        expect(metrics['losses/kl']).toBeCloseTo(mean(perEpisode), 10);
      } finally {
        trainer.dispose();
        adapter.dispose();
      }
    });

    test(`${mode} mode: approx KL is per action, the mean over the update's actions of each action's k3 to the old policy`, async () => {
      const adapter = randomAdapter(6);
      const trainer = new Trainer(model.gpuModel, { train: adapter, optimizer: { schedule: { kind: 'constant', lr: 2e-2 } } });
      try {
        const policy = policyOf(mode, adapter);
        const episodes = await policy.play([1, 2, 3, 4].map((seed) => ({ seed })));
        const items = episodes.flatMap((e) => e.steps.map((step, t) => ({ step, advantage: (e.seed + t) % 2 ? 1 : -1 })));
        await policy.update(trainer, items, { objective: 'pg' }); // the policy moves off the one that played
        const now = await currentDraws(policy, items.map((i) => i.step));
        const byHand = mean(items.map(({ step }, i) => draws(mode, step).sampled.reduce((a, old, j) => a + k3(now[i][j] - old), 0)));
        const metrics = await policy.update(trainer, items, { objective: 'ppo' });
        expect(byHand).toBeGreaterThan(1e-3);
        expect(Math.abs(metrics.approxKl - byHand)).toBeLessThan(1e-3 * byHand + 1e-6);
        // In text mode an action has several tokens: a mean over tokens would be a different figure.
        if (mode === 'text') expect(metrics.actionTokens).toBeGreaterThan(1.5 * items.length);
      } finally {
        trainer.dispose();
        adapter.dispose();
      }
    });
  }
});
