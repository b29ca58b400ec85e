// Group-relative advantages (GRPO, DeepSeekMath; Dr. GRPO, Liu et al. 2025).
//
//   Episodes started from the same reset seed form a group g (same start state, different samples).
//   GRPO       A_i = (r_i − mean_g) / (std_g + ε)
//   Dr. GRPO   A_i =  r_i − mean_g                 (no std division: no bias toward easy/hard groups)
//   std_g is the population std of the group's rewards.
//
// A group of one episode, or one whose rewards are all equal, gives every member advantage 0
// (set exactly, not left to rounding in the mean): it carries no signal about which sample was better.

import { mean } from '../common/stats.ts';

/** One finished episode: the reset seed it started from and its total (episode-level) reward. */
export interface GroupedEpisode {
  /** Reset seed shared by the members of a group. */
  seed: number | string;
  reward: number;
}

export interface GroupAdvantageOptions {
  /** Divide by the group's std (GRPO); false subtracts the mean only (Dr. GRPO). Default true. */
  scaleByStd?: boolean;
  /** Added to the std before dividing. Default 1e-6. */
  eps?: number;
}

/** Group-normalised advantage of every episode, in the input order. */
export function groupAdvantages(episodes: readonly GroupedEpisode[], options: GroupAdvantageOptions = {}): number[] {
  const { scaleByStd = true, eps = 1e-6 } = options;
  const groups = new Map<number | string, number[]>();
  episodes.forEach((episode, i) => {
    if (!Number.isFinite(episode.reward)) throw new RangeError(`episode ${i} has reward ${episode.reward}; rewards must be finite`);
    const members = groups.get(episode.seed);
    if (members) members.push(i);
    else groups.set(episode.seed, [i]);
  });
  const advantages = new Array<number>(episodes.length);
  for (const members of groups.values()) {
    const rewards = members.map((i) => episodes[i].reward);
    if (rewards.every((r) => r === rewards[0])) {
      for (const i of members) advantages[i] = 0;
      continue;
    }
    const centre = mean(rewards);
    const std = Math.sqrt(mean(rewards.map((r) => (r - centre) ** 2)));
    members.forEach((i, k) => {
      const centred = rewards[k] - centre;
      advantages[i] = scaleByStd ? centred / (std + eps) : centred;
    });
  }
  return advantages;
}
