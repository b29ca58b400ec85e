// PPO (Schulman et al. 2017) for LLM agents, CleanRL's ppo.py in structure: collect a batch of
// episodes with values, compute GAE, then several epochs of shuffled minibatch updates of the
// clipped surrogate, the clipped value loss and an entropy bonus, with a KL penalty to the reference
// model (the adapter off) whose coefficient is fixed or adapts to a target.
//
// Where CleanRL shuffles single transitions, a minibatch here holds whole episodes: each state of an
// episode is the one before it plus an action and an observation, so an episode's steps train as one
// sequence (one transcript; in choice mode a tree of its candidates). Shuffled one by one, the steps
// of an episode would land in every minibatch, and each minibatch would run its transcript again.
//
//   δ_t   = r_t + γ V(s_{t+1}) − V(s_t);   A_t = Σ_k (γλ)^k δ_{t+k};   R_t = A_t + V(s_t)
//   ρ_t   = π(a_t|s_t) / π_old(a_t|s_t)
//   loss  = −min(ρ A, clip(ρ, 1 ± ε) A) + c_V ½ max((V − R)², (V_clip − R)²) − c_H H(π) + β k3(π, π_ref)
//   adaptive β (Ziegler et al. 2019): e = clip(KL / KL_target − 1, ±0.2), β ← β (1 + e), KL being the
//   mean per-episode KL to the reference of the batch just played (k3, referenceKlPerEpisode)
//   early stop: an epoch ends the update once the minibatch's approx KL(π_old‖π) per action (k3,
//   actionKl in src/agent/policy.ts) exceeds 1.5 · target_kl
import { mulberry32 } from '../common/random.ts';
import { normalizeAdvantages } from './advantages.ts';
import { episodeMetrics, episodeSeeds, gaeItems, lossMetrics, referenceKlPerEpisode, usable, type Algorithm, type UpdateContext, type UpdateResult } from './algorithm.ts';
import { defaultsOf, integerSetting, numberSetting, optionalNumberSetting, type SettingsOf, type SettingsSchema } from '../common/settings.ts';
import { annealLearningRateSetting, entropyCoefSetting, klCoefSetting, episodesPerUpdateSetting, gaeLambdaSetting, gammaSetting, learningRateSetting, normalizeAdvantagesSetting, valueCoefSetting } from './settings.ts';
import { mean } from '../common/stats.ts';

export const PPO_SETTINGS = {
  episodesPerUpdate: episodesPerUpdateSetting(8),
  updateEpochs: integerSetting(2, 'Passes over the same episodes in each update.', { min: 1, unit: 'passes' }),
  numMinibatches: integerSetting(2, 'Pieces each pass is split into, one optimiser step each; each holds whole episodes (so at most one per episode).', { min: 1, unit: 'minibatches' }),
  gamma: gammaSetting(1),
  gaeLambda: gaeLambdaSetting(0.95),
  clipCoef: numberSetting(0.2, 'Surrogate clipping ε: how far one update may move an action’s probability ratio.', { min: 0, exclusiveMin: true }),
  valueClip: numberSetting(0.2, 'How far one update may move the value estimate from the old one (0: no clipping).', { min: 0 }),
  valueCoef: valueCoefSetting(0.5),
  entropyCoef: entropyCoefSetting(0.01),
  klCoef: klCoefSetting(0.02),
  adaptiveKlTarget: optionalNumberSetting(null, 'Adaptive KL: β is tuned to keep the per-episode KL to the base model near this.', 'β stays fixed', { min: 0, exclusiveMin: true, unit: 'nats per episode' }),
  earlyStopKl: optionalNumberSetting(0.05, 'Stop an update’s passes early once a minibatch’s approx KL to the old policy exceeds 1.5 × this.', 'never stop early', { min: 0, exclusiveMin: true, unit: 'nats per action' }),
  normalizeAdvantages: normalizeAdvantagesSetting(true),
  // A third of REINFORCE's and GRPO's: PPO takes updateEpochs × numMinibatches optimiser steps per
  // update where they take one, so at their rate it would move four times as far on the same noisy
  // gradients (docs/training.md, "What a tiny model learns", measures both rates).
  learningRate: learningRateSetting(1e-3),
  annealLearningRate: annealLearningRateSetting(true),
} satisfies SettingsSchema;

export type PpoConfig = SettingsOf<typeof PPO_SETTINGS>;
export const PPO_DEFAULTS: PpoConfig = defaultsOf(PPO_SETTINGS);

export function ppo(config: PpoConfig = PPO_DEFAULTS): Algorithm {
  let klCoef = config.klCoef;
  return {
    name: 'ppo',
    modes: ['choice', 'text'],
    episodesPerUpdate: config.episodesPerUpdate,
    learningRate: config.learningRate,
    annealLearningRate: config.annealLearningRate,

    async update({ policy, trainer, seed, onEpisode }: UpdateContext): Promise<UpdateResult> {
      // 1. Rollouts with V(s) and, for the KL penalty, the reference log-probs.
      const played = await policy.play(episodeSeeds(seed, config.episodesPerUpdate).map((s) => ({ seed: s })), { values: true, reference: klCoef > 0, onEpisode });
      const episodes = usable(played);
      if (episodes.length === 0) return { episodes: played, metrics: episodeMetrics(played) };
      // 2. GAE per episode; a truncated episode bootstraps from the value of where it stopped.
      const episodeItems = episodes.map((e) => gaeItems([e], { gamma: config.gamma, lambda: config.gaeLambda }));
      const items = episodeItems.flat();
      // 3. Epochs of shuffled minibatches of whole episodes.
      const random = mulberry32(seed ^ 0x2545f491);
      const size = Math.max(1, Math.ceil(episodeItems.length / config.numMinibatches));
      let last: Awaited<ReturnType<typeof policy.update>> | undefined;
      let stoppedEarly = 0;
      const clipFractions: number[] = [];
      epochs: for (let epoch = 0; epoch < config.updateEpochs; epoch++) {
        const order = shuffle(episodeItems.length, random);
        for (let start = 0; start < episodeItems.length; start += size) {
          const minibatch = order.slice(start, start + size).flatMap((i) => episodeItems[i]);
          const advantages = minibatch.map((m) => m.advantage);
          const normalized = config.normalizeAdvantages && minibatch.length > 1 ? normalizeAdvantages(advantages) : advantages;
          last = await policy.update(
            trainer,
            minibatch.map((m, i) => ({ ...m, advantage: normalized[i] })),
            { objective: 'ppo', clip: config.clipCoef, value: config.valueCoef, valueClip: config.valueClip, entropy: config.entropyCoef, kl: klCoef },
          );
          clipFractions.push(last.clipFraction);
          if (config.earlyStopKl !== null && last.approxKl > 1.5 * config.earlyStopKl) {
            stoppedEarly = 1;
            break epochs;
          }
        }
      }
      // 4. The KL coefficient follows its target.
      const klToReference = referenceKlPerEpisode(episodes);
      const usedKlCoef = klCoef;
      if (config.adaptiveKlTarget !== null && klCoef > 0) klCoef *= 1 + Math.min(Math.max(klToReference / config.adaptiveKlTarget - 1, -0.2), 0.2);
      const values = items.map((i) => i.step.value!);
      const returns = items.map((i) => i.return!);
      return {
        episodes: played,
        metrics: {
          ...episodeMetrics(played),
          ...lossMetrics(last!, 'losses/ppo', true),
          'losses/entropy': last!.entropy,
          'losses/approx_kl': last!.approxKl,
          'losses/clipfrac': mean(clipFractions),
          'losses/explained_variance': explainedVariance(values, returns),
          ...(usedKlCoef > 0 ? { 'losses/kl': klToReference } : {}),
          'ppo/kl_coef': usedKlCoef,
          'ppo/stopped_early': stoppedEarly,
        },
      };
    },

    state: () => ({ klCoef }),
    restore(state) {
      const saved = (state as { klCoef?: unknown } | null)?.klCoef;
      if (typeof saved !== 'number') throw new RangeError(`not a PPO state: ${JSON.stringify(state)}`);
      klCoef = saved;
    },
  };
}

/** Fisher–Yates over 0..n-1 from a seeded stream. */
function shuffle(n: number, random: () => number): number[] {
  const order = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  return order;
}

/** 1 − Var(R − V) / Var(R): how much of the returns' variance the value head explains (CleanRL's chart). */
export function explainedVariance(values: readonly number[], returns: readonly number[]): number {
  const variance = (xs: readonly number[]) => {
    const m = mean(xs);
    return mean(xs.map((x) => (x - m) ** 2));
  };
  const v = variance(returns);
  return v === 0 ? NaN : 1 - variance(returns.map((r, i) => r - values[i])) / v;
}
