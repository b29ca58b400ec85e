// GRPO (DeepSeekMath, Shao et al. 2024): no value function. Each update plays G episodes from each of
// several reset seeds (the same start state, different samples), scores every episode against its
// group, and follows the policy gradient of those group-relative advantages.
//
//   A_i  = (R_i − mean_group R) / (std_group R + ε)        (or mean-centred only: Dr. GRPO)
//   every step of episode i carries A_i (outcome supervision)
//   loss = −mean_t A_i log π(a_t|s_t) + β k3(π, π_ref)     (k3 = e^(ref − lp) − (ref − lp) − 1 on the
//          chosen action, the reference being the model with the adapter off; β = 0 skips it)
// One optimiser step per update, on-policy, so PPO's ratio clipping is the identity and is left out.
import { episodeMetrics, lossMetrics, referenceKlPerEpisode, usable, type Algorithm, type UpdateContext, type UpdateResult } from './algorithm.ts';
import { groupAdvantages } from './group-advantages.ts';
import { booleanSetting, defaultsOf, integerSetting, numberSetting, type SettingsOf, type SettingsSchema } from '../common/settings.ts';
import { annealLearningRateSetting, klCoefSetting, learningRateSetting } from './settings.ts';

export const GRPO_SETTINGS = {
  groupsPerUpdate: integerSetting(2, 'Groups played per update; each group shares one task (reset seed).', { min: 1, unit: 'groups' }),
  groupSize: integerSetting(4, 'Attempts per group, compared with each other (at least 2: a lone episode has nothing to be compared with).', { min: 2, unit: 'episodes' }),
  klCoef: klCoefSetting(0.04),
  scaleByStd: booleanSetting(true, 'Divide group advantages by their deviation (off: Dr. GRPO, which only centres them).'),
  learningRate: learningRateSetting(3e-3),
  annealLearningRate: annealLearningRateSetting(true),
} satisfies SettingsSchema;

export type GrpoConfig = SettingsOf<typeof GRPO_SETTINGS>;
export const GRPO_DEFAULTS: GrpoConfig = defaultsOf(GRPO_SETTINGS);

export function grpo(config: GrpoConfig = GRPO_DEFAULTS): Algorithm {
  return {
    name: 'grpo',
    modes: ['choice', 'text'],
    episodesPerUpdate: config.groupsPerUpdate * config.groupSize,
    learningRate: config.learningRate,
    annealLearningRate: config.annealLearningRate,

    async update({ policy, trainer, seed, onEpisode }: UpdateContext): Promise<UpdateResult> {
      // 1. Groups: groupSize samples from each reset seed, told apart by their sampling seeds.
      const requests = Array.from({ length: config.groupsPerUpdate }, (_, g) =>
        Array.from({ length: config.groupSize }, (_, i) => ({ seed: seed + g, samplingSeed: (seed + g) * 131 + i })),
      ).flat();
      const played = await policy.play(requests, { reference: config.klCoef > 0, onEpisode });
      const episodes = usable(played);
      if (episodes.length === 0) return { episodes: played, metrics: episodeMetrics(played) };
      // 2. Group-relative advantages (a group that lost members to environment errors compares the rest).
      const advantages = groupAdvantages(episodes.map((e) => ({ seed: e.seed, reward: e.totalReward })), { scaleByStd: config.scaleByStd });
      // 3. One policy-gradient step, every step of an episode carrying its episode's advantage.
      const items = episodes.flatMap((e, i) => e.steps.map((step) => ({ step, advantage: advantages[i] })));
      const metrics = await policy.update(trainer, items, { objective: 'pg', kl: config.klCoef });
      return {
        episodes: played,
        metrics: {
          ...episodeMetrics(played),
          ...lossMetrics(metrics, 'losses/policy_gradient', false),
          'losses/entropy': metrics.entropy,
          ...(config.klCoef > 0 ? { 'losses/kl': referenceKlPerEpisode(episodes) } : {}),
        },
      };
    },

    state: () => null,
    restore() {},
  };
}
