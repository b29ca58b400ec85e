// Behaviour cloning: supervised learning of the actions in good episodes,
//   loss = −mean_t log π(a_t|s_t)
// on demonstrations by the environment's scripted expert ('expert'), or on the run's own successful
// episodes ('successes': filtered BC, for environments without an expert). With the expert, the
// states come from the expert's own episodes (no DAgger-style relabelling).
import { episodeMetrics, episodeSeeds, lossMetrics, usable, type Algorithm, type UpdateContext, type UpdateResult } from './algorithm.ts';
import { defaultsOf, enumSetting, type SettingsOf, type SettingsSchema } from '../common/settings.ts';
import { annealLearningRateSetting, episodesPerUpdateSetting, learningRateSetting } from './settings.ts';

export const BC_SETTINGS = {
  source: enumSetting('expert', ['expert', 'successes'], 'Imitate the scripted expert (every built-in has one; a custom environment needs expertAction()), or the run’s own successful episodes.'),
  episodesPerUpdate: episodesPerUpdateSetting(8),
  learningRate: learningRateSetting(3e-3),
  annealLearningRate: annealLearningRateSetting(true),
} satisfies SettingsSchema;

export type BcConfig = SettingsOf<typeof BC_SETTINGS>;
export const BC_DEFAULTS: BcConfig = defaultsOf(BC_SETTINGS);

export function bc(config: BcConfig = BC_DEFAULTS): Algorithm {
  return {
    name: 'bc',
    modes: ['choice', 'text'],
    episodesPerUpdate: config.episodesPerUpdate,
    learningRate: config.learningRate,
    annealLearningRate: config.annealLearningRate,

    async update({ policy, trainer, seed, onEpisode }: UpdateContext): Promise<UpdateResult> {
      const played = await policy.play(episodeSeeds(seed, config.episodesPerUpdate).map((s) => ({ seed: s })), { expert: config.source === 'expert', onEpisode });
      const imitated = usable(played).filter((e) => e.success);
      const metrics = { ...episodeMetrics(played), 'bc/imitated_episodes': imitated.length };
      // Nothing succeeded yet (filtered BC early on): no step this update rather than cloning failures.
      if (imitated.length === 0) return { episodes: played, metrics };
      const items = imitated.flatMap((e) => e.steps.map((step) => ({ step, advantage: 0 })));
      const step = await policy.update(trainer, items, { objective: 'nll' });
      return { episodes: played, metrics: { ...metrics, ...lossMetrics(step, 'losses/nll', false), 'losses/nll': -step.logProb } };
    },

    state: () => null,
    restore() {},
  };
}
