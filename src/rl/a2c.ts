// A2C (Mnih et al. 2016, synchronous): an actor-critic with one on-policy step per batch of episodes.
// The critic is the value head V(s) at the state's last token; the advantage is GAE(λ), which with
// λ = 1 is the Monte-Carlo return minus V (A2C's n-step returns over whole episodes).
//
//   A_t  = GAE(γ, λ) from V;  R_t = A_t + V(s_t)
//   loss = −mean_t A_t log π(a_t|s_t) + c_V ½ (V(s_t) − R_t)² − c_H H(π(·|s_t))
// Unlike the textbook, advantages are normalised per update by default: with the sparse 0/1 rewards
// of the built-in environments and a value head that starts at 0, that keeps the first steps sane.
import { normalizeAdvantages } from './advantages.ts';
import { episodeMetrics, episodeSeeds, gaeItems, lossMetrics, usable, type Algorithm, type UpdateContext, type UpdateResult } from './algorithm.ts';
import { defaultsOf, type SettingsOf, type SettingsSchema } from '../common/settings.ts';
import { annealLearningRateSetting, entropyCoefSetting, episodesPerUpdateSetting, gaeLambdaSetting, gammaSetting, learningRateSetting, normalizeAdvantagesSetting, valueCoefSetting } from './settings.ts';

export const A2C_SETTINGS = {
  episodesPerUpdate: episodesPerUpdateSetting(8),
  gamma: gammaSetting(1),
  gaeLambda: gaeLambdaSetting(1),
  valueCoef: valueCoefSetting(0.5),
  entropyCoef: entropyCoefSetting(0.01),
  normalizeAdvantages: normalizeAdvantagesSetting(true),
  learningRate: learningRateSetting(3e-3),
  annealLearningRate: annealLearningRateSetting(true),
} satisfies SettingsSchema;

export type A2cConfig = SettingsOf<typeof A2C_SETTINGS>;
export const A2C_DEFAULTS: A2cConfig = defaultsOf(A2C_SETTINGS);

export function a2c(config: A2cConfig = A2C_DEFAULTS): Algorithm {
  return {
    name: 'a2c',
    modes: ['choice', 'text'],
    episodesPerUpdate: config.episodesPerUpdate,
    learningRate: config.learningRate,
    annealLearningRate: config.annealLearningRate,

    async update({ policy, trainer, seed, onEpisode }: UpdateContext): Promise<UpdateResult> {
      // 1. Rollouts with the critic's values.
      const played = await policy.play(episodeSeeds(seed, config.episodesPerUpdate).map((s) => ({ seed: s })), { values: true, onEpisode });
      const episodes = usable(played);
      if (episodes.length === 0) return { episodes: played, metrics: episodeMetrics(played) };
      // 2. Advantages and value targets.
      const items = gaeItems(episodes, { gamma: config.gamma, lambda: config.gaeLambda });
      const advantages = config.normalizeAdvantages ? normalizeAdvantages(items.map((i) => i.advantage)) : items.map((i) => i.advantage);
      // 3. One actor-critic step.
      const metrics = await policy.update(
        trainer,
        items.map((item, i) => ({ ...item, advantage: advantages[i] })),
        { objective: 'pg', value: config.valueCoef, entropy: config.entropyCoef },
      );
      return { episodes: played, metrics: { ...episodeMetrics(played), ...lossMetrics(metrics, 'losses/policy_gradient', true), 'losses/entropy': metrics.entropy } };
    },

    state: () => null,
    restore() {},
  };
}
