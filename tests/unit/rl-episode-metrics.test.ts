// The figures every training update reports about its episodes (episodeMetrics): a failed episode
// counts as a failure in the success rate, as it does in evaluation, and is left out of return and
// length, which it did not finish.
import { describe, expect, test } from 'vitest';
import type { PlayedEpisode, PolicyStep } from '../../src/agent/policy.ts';
import { episodeMetrics } from '../../src/rl/algorithm.ts';

const step = { reward: 1 } as unknown as PolicyStep;
const episode = (success: boolean, error?: string): PlayedEpisode => ({ seed: 0, samplingSeed: 0, steps: [step, step], totalReward: success ? 1 : 0, success, ...(error ? { error } : {}) });

describe('episodeMetrics', () => {
  test('a failed episode lowers the success rate and is left out of return and length', () => {
    const metrics = episodeMetrics([episode(true), episode(true), episode(false), episode(false, 'step() threw')]);
    expect(metrics['charts/success_rate']).toBe(0.5);
    expect(metrics['charts/episodic_return']).toBeCloseTo(2 / 3);
    expect(metrics['charts/episodic_length']).toBe(2);
    expect(metrics['charts/failed_episodes']).toBe(1);
  });

  test('an update whose every episode failed has a success rate of 0, not NaN', () => {
    const metrics = episodeMetrics([episode(false, 'timeout'), episode(false, 'timeout')]);
    expect(metrics['charts/success_rate']).toBe(0);
    expect(metrics['charts/failed_episodes']).toBe(2);
  });
});
