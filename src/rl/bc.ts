// Behaviour cloning: supervised learning of the actions in good episodes,
//   loss = −mean_t log π(a_t|s_t)
// on demonstrations by the environment's scripted expert ('expert'), or on the run's own successful
// episodes ('successes': filtered BC, for environments without an expert). With the expert, the
// states come from the expert's own episodes (no DAgger-style relabelling).
import { episodeMetrics, episodeSeeds, lossMetrics, usable, type Algorithm, type UpdateContext, type UpdateResult } from './algorithm.ts';

export interface BcConfig {
  /** Whose episodes are imitated. */
  source: 'expert' | 'successes';
  /** Episodes played per update. */
  episodesPerUpdate: number;
  learningRate: number;
  /** Decay the learning rate linearly over the run's updates (see updateLearningRate in run.ts). */
  annealLearningRate: boolean;
}

export const BC_DEFAULTS: BcConfig = {
  source: 'expert',
  episodesPerUpdate: 8,
  learningRate: 3e-3,
  annealLearningRate: true,
};

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
