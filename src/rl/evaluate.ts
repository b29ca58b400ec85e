// Evaluation of an action-level policy on held-out instances: success rate, mean return and episode
// length, each with a 95% confidence interval (Wilson for the success rate, normal approximation of
// the mean otherwise).
import type { Model } from '../engine/model.ts';
import type { GpuLoraAdapter } from '../engine/lora/gpu-adapter.ts';
import type { EnvModule, Split } from '../env/types.ts';
import { playActionEpisode } from '../agent/rollout.ts';
import type { PromptFormat } from '../agent/transcript.ts';

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
  episodes: number;
  successRate: Estimate;
  meanReturn: Estimate;
  meanLength: Estimate;
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
  const mean = values.reduce((s, v) => s + v, 0) / n;
  const variance = n > 1 ? values.reduce((s, v) => s + (v - mean) ** 2, 0) / (n - 1) : 0;
  const half = Z95 * Math.sqrt(variance / n);
  return { value: mean, low: mean - half, high: mean + half };
}

export interface EvaluationOptions {
  episodes: number;
  split: Split;
  difficulty: number;
  format: PromptFormat;
  lengthNormalize: boolean;
  adapter?: GpuLoraAdapter | null;
  /** First reset seed; episode i uses firstSeed + i. */
  firstSeed: number;
  onEpisode?: (done: number) => void;
}

/** Plays `episodes` greedy episodes of the action-level policy. */
export async function evaluateActionPolicy(model: Model, env: EnvModule, options: EvaluationOptions): Promise<EvaluationReport> {
  let successes = 0;
  const returns: number[] = [];
  const lengths: number[] = [];
  for (let i = 0; i < options.episodes; i++) {
    const episode = await playActionEpisode(model, options.firstSeed + i, {
      env, reset: { split: options.split, difficulty: options.difficulty }, format: options.format, lengthNormalize: options.lengthNormalize, greedy: true, adapter: options.adapter,
    });
    if (episode.error) throw new Error(`evaluation episode with seed ${options.firstSeed + i} failed: ${episode.error}`);
    if (episode.success) successes++;
    returns.push(episode.totalReward);
    lengths.push(episode.steps.length);
    options.onEpisode?.(i + 1);
  }
  return {
    env: env.id,
    split: options.split,
    difficulty: options.difficulty,
    episodes: options.episodes,
    successRate: wilsonInterval(successes, options.episodes),
    meanReturn: meanInterval(returns),
    meanLength: meanInterval(lengths),
  };
}
