// REINFORCE with a baseline (Williams 1992), CleanRL style: the hyperparameters in one record, then
// one update top to bottom.
//
//   G_t = Σ_{k≥t} γ^(k−t) r_k                (return-to-go)
//   A_t = G_t − b,   b = running mean of episode returns (decay 0.9), optionally normalised per update
//   loss = −mean_t A_t log π(a_t|s_t)        (one optimiser step per update, on-policy)
import type { PolicyStep, UpdateItem } from '../agent/policy.ts';
import { discountedReturns, normalizeAdvantages, RunningMean } from './advantages.ts';
import { episodeMetrics, episodeSeeds, lossMetrics, usable, type Algorithm, type UpdateContext, type UpdateResult } from './algorithm.ts';
import { defaultsOf, numberSetting, type SettingsOf, type SettingsSchema } from '../common/settings.ts';
import { annealLearningRateSetting, episodesPerUpdateSetting, gammaSetting, learningRateSetting, normalizeAdvantagesSetting } from './settings.ts';

export const REINFORCE_SETTINGS = {
  episodesPerUpdate: episodesPerUpdateSetting(8),
  gamma: gammaSetting(1),
  learningRate: learningRateSetting(3e-3),
  annealLearningRate: annealLearningRateSetting(true),
  normalizeAdvantages: normalizeAdvantagesSetting(true),
  baselineDecay: numberSetting(0.9, 'How slowly the running-mean baseline follows new episode returns (0: the latest return alone).', { min: 0, max: 1 }),
} satisfies SettingsSchema;

export type ReinforceConfig = SettingsOf<typeof REINFORCE_SETTINGS>;
export const REINFORCE_DEFAULTS: ReinforceConfig = defaultsOf(REINFORCE_SETTINGS);

export function reinforce(config: ReinforceConfig = REINFORCE_DEFAULTS): Algorithm {
  let baseline = new RunningMean({ decay: config.baselineDecay });
  return {
    name: 'reinforce',
    modes: ['choice', 'text'],
    episodesPerUpdate: config.episodesPerUpdate,
    learningRate: config.learningRate,
    annealLearningRate: config.annealLearningRate,

    async update({ policy, trainer, seed, onEpisode }: UpdateContext): Promise<UpdateResult> {
      // 1. Rollouts.
      const played = await policy.play(episodeSeeds(seed, config.episodesPerUpdate).map((s) => ({ seed: s })), { onEpisode });
      const episodes = usable(played);
      if (episodes.length === 0) return { episodes: played, metrics: episodeMetrics(played) };
      // 2. Advantages: return-to-go minus the baseline of earlier updates' episode returns.
      const returns = episodes.map((e) => discountedReturns(e.steps.map((s) => s.reward), config.gamma));
      const raw = returns.flat().map((g) => g - baseline.mean);
      const advantages = config.normalizeAdvantages ? normalizeAdvantages(raw) : raw;
      baseline.update(episodes.map((e) => e.totalReward));
      // 3. One policy-gradient step over every step of every episode.
      const items: UpdateItem<PolicyStep>[] = episodes.flatMap((e) => e.steps).map((step, k) => ({ step, advantage: advantages[k] }));
      const metrics = await policy.update(trainer, items, { objective: 'pg' });
      return { episodes: played, metrics: { ...episodeMetrics(played), ...lossMetrics(metrics, 'losses/policy_gradient', false), 'losses/entropy': metrics.entropy, 'reinforce/baseline': baseline.mean } };
    },

    state: () => baseline.toJSON(),
    restore(state) {
      baseline = RunningMean.fromJSON(state, { decay: config.baselineDecay });
    },
  };
}
