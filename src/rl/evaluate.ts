// Evaluation of a policy (either mode) on held-out instances: success rate, mean return and episode
// length, each with a 95% confidence interval (Wilson for the success rate, normal approximation of
// the mean otherwise).
//
// Before and after training are evaluated on the same seeds, so the change is measured pair by pair
// (pairedChange): the interval of the mean per-episode difference, after minus before, is narrower
// than comparing two independent intervals suggests (they can overlap while the paired change
// excludes zero), since an episode won or lost both times differs by nothing.
import type { PlayedEpisode, Policy } from '../agent/policy.ts';
import type { Split } from '../env/types.ts';
import { mean } from '../common/stats.ts';

export interface Estimate {
  value: number;
  /** 95% confidence interval. */
  low: number;
  high: number;
}

export interface EvaluationReport {
  env: string;
  split: Split;
  difficulty: number;
  /** Episodes evaluated, failed ones included. */
  episodes: number;
  /**
   * Episodes that could not be played: their environment failed (threw, malformed result, time limit)
   * or the policy could not act (too many valid actions, no room in the context). Each counts as a
   * failure in the success rate; the mean return and length are over the others.
   */
  failedEpisodes: number;
  firstError?: string;
  /** Over every episode, a failed one counting as no success. */
  successRate: Estimate;
  /** Over the episodes that did not fail. */
  meanReturn: Estimate;
  meanLength: Estimate;
  /**
   * Each episode that did not fail, for a paired comparison with another evaluation on the same seeds
   * (absent from reports stored before rlplay kept them).
   */
  outcomes?: EpisodeOutcome[];
}

export interface EpisodeOutcome {
  seed: number;
  success: boolean;
  totalReward: number;
}

/** After against before, episode by episode over the seeds both evaluated. */
export interface PairedChange {
  /** Seeds in both evaluations (an environment failure in either leaves the seed out). */
  pairs: number;
  /** Episodes that failed before and succeeded after, and the reverse. */
  gained: number;
  lost: number;
  /** The change in success rate and in mean return, with 95% intervals of the mean paired difference. */
  successRate: Estimate;
  meanReturn: Estimate;
}

const Z95 = 1.959963984540054;

/** Wilson score interval of a proportion: stays inside [0, 1] and behaves at 0 and n successes. */
export function wilsonInterval(successes: number, n: number): Estimate {
  if (n === 0) return { value: NaN, low: NaN, high: NaN };
  const p = successes / n;
  const denominator = 1 + (Z95 * Z95) / n;
  const centre = (p + (Z95 * Z95) / (2 * n)) / denominator;
  const half = (Z95 * Math.sqrt((p * (1 - p)) / n + (Z95 * Z95) / (4 * n * n))) / denominator;
  return { value: p, low: Math.max(0, centre - half), high: Math.min(1, centre + half) };
}

/** Mean with the normal-approximation 95% interval (sample standard deviation). */
export function meanInterval(values: readonly number[]): Estimate {
  const n = values.length;
  if (n === 0) return { value: NaN, low: NaN, high: NaN };
  const centre = mean(values);
  const variance = n > 1 ? values.reduce((s, v) => s + (v - centre) ** 2, 0) / (n - 1) : 0;
  const half = Z95 * Math.sqrt(variance / n);
  return { value: centre, low: centre - half, high: centre + half };
}

export interface EvaluationOptions {
  episodes: number;
  /** First reset seed; episode i uses firstSeed + i. */
  firstSeed: number;
  /** Episodes played side by side (default 16). */
  parallel?: number;
  onEpisode?: (done: number) => void;
  /** Each played episode, e.g. to keep sample transcripts. */
  onPlayed?: (episode: PlayedEpisode) => void;
}

/** Plays `episodes` greedy episodes of the policy (on the split and difficulty of its reset options). */
export async function evaluatePolicy(policy: Policy, options: EvaluationOptions): Promise<EvaluationReport> {
  const { env, reset } = policy.options;
  const parallel = options.parallel ?? 16;
  const played: PlayedEpisode[] = [];
  let done = 0;
  for (let start = 0; start < options.episodes; start += parallel) {
    const seeds = Array.from({ length: Math.min(parallel, options.episodes - start) }, (_, i) => ({ seed: options.firstSeed + start + i }));
    played.push(...(await policy.play(seeds, { greedy: true, onEpisode: () => options.onEpisode?.(++done) })));
  }
  for (const episode of played) options.onPlayed?.(episode);
  const episodes = played.filter((e) => !e.error);
  return {
    env: env.id,
    split: reset.split ?? 'train',
    difficulty: reset.difficulty ?? 1,
    episodes: played.length,
    failedEpisodes: played.length - episodes.length,
    ...(played.some((e) => e.error) ? { firstError: played.find((e) => e.error)!.error } : {}),
    successRate: wilsonInterval(successes(played), played.length),
    meanReturn: meanInterval(episodes.map((e) => e.totalReward)),
    meanLength: meanInterval(episodes.map((e) => e.steps.length)),
    outcomes: episodes.map((e) => ({ seed: e.seed, success: e.success, totalReward: e.totalReward })),
  };
}

/** Episodes that succeeded: one that failed (its environment or the policy threw) never counts, whatever it had reached. */
export function successes(episodes: readonly Pick<PlayedEpisode, 'success' | 'error'>[]): number {
  return episodes.filter((e) => e.success && !e.error).length;
}

/** What failed, in words ("3 of 10 episodes could not be played (…); the first: …"), or null when none did. */
export function describeFailures(report: Pick<EvaluationReport, 'episodes' | 'failedEpisodes' | 'firstError'>): string | null {
  if (report.failedEpisodes === 0) return null;
  return `${report.failedEpisodes} of ${report.episodes} episodes could not be played (an environment or policy error); the first: ${report.firstError}`;
}

/** Refuses an evaluation or a run in which no episode could be played (after describeFailures has said why): its figures would mean nothing. */
export function checkSomethingPlayed(report: Pick<EvaluationReport, 'env' | 'episodes' | 'failedEpisodes'>): void {
  if (report.episodes > 0 && report.failedEpisodes === report.episodes) {
    throw new Error(`no episode of ${report.env} could be played: all ${report.episodes} failed (the first error is above); fix the environment or the policy settings and try again`);
  }
}

/**
 * The paired change from `before` to `after` (evaluated on the same seeds); null when either report
 * has no outcomes (one stored before reports kept them) or no seed is in both.
 */
export function pairedChange(before: Pick<EvaluationReport, 'outcomes'>, after: Pick<EvaluationReport, 'outcomes'>): PairedChange | null {
  if (!before.outcomes || !after.outcomes) return null;
  const earlier = new Map(before.outcomes.map((o) => [o.seed, o]));
  const pairs = after.outcomes.flatMap((o) => (earlier.has(o.seed) ? [[earlier.get(o.seed)!, o] as const] : []));
  if (pairs.length === 0) return null;
  return {
    pairs: pairs.length,
    gained: pairs.filter(([b, a]) => !b.success && a.success).length,
    lost: pairs.filter(([b, a]) => b.success && !a.success).length,
    successRate: meanInterval(pairs.map(([b, a]) => Number(a.success) - Number(b.success))),
    meanReturn: meanInterval(pairs.map(([b, a]) => a.totalReward - b.totalReward)),
  };
}

/** A change with its sign (none for a zero at this precision). */
function signed(x: number, digits: number): string {
  const rounded = Math.abs(x).toFixed(digits);
  return Number(rounded) === 0 ? rounded : `${x > 0 ? '+' : '−'}${rounded}`;
}

/** The paired change in words, e.g. "+7 pp [−1, +15] in success, +0.095 [+0.012, +0.178] in mean return (paired over …)". */
export function describeChange(c: PairedChange): string {
  const pp = (e: Estimate) => `${signed(100 * e.value, 0)} pp [${signed(100 * e.low, 0)}, ${signed(100 * e.high, 0)}]`;
  const ret = (e: Estimate) => `${signed(e.value, 3)} [${signed(e.low, 3)}, ${signed(e.high, 3)}]`;
  return `${pp(c.successRate)} in success, ${ret(c.meanReturn)} in mean return (paired over the same ${c.pairs} episodes: ${c.gained} went from failure to success, ${c.lost} the other way)`;
}
