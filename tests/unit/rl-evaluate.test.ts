import { describe, expect, test } from 'vitest';
import type { PlayedEpisode, Policy } from '../../src/agent/policy.ts';
import type { EnvModule } from '../../src/env/types.ts';
import { checkSomethingPlayed, describeChange, describeFailures, evaluatePolicy, meanInterval, pairedChange, wilsonInterval } from '../../src/rl/evaluate.ts';

describe('evaluation intervals (95%)', () => {
  test('Wilson interval of 3 successes in 10: [0.1078, 0.6032]', () => {
    // p = 0.3, z² = 3.8415: centre (0.3 + 0.19207) / 1.38415 = 0.35551,
    // half = 1.95996 sqrt(0.021 + 0.0096036) / 1.38415 = 0.24772
    const e = wilsonInterval(3, 10);
    expect(e.value).toBe(0.3);
    expect(e.low).toBeCloseTo(0.1078, 4);
    expect(e.high).toBeCloseTo(0.6032, 4);
  });

  test('Wilson interval with no successes starts at 0 and is not empty', () => {
    // high = (z²/n) / (1 + z²/n) = 0.76829 / 1.76829
    const e = wilsonInterval(0, 5);
    expect(e.low).toBe(0);
    expect(e.high).toBeCloseTo(0.43449, 4);
  });

  test('mean of 1, 2, 3, 4: 2.5 ± 1.96 · 1.29099 / 2', () => {
    const e = meanInterval([1, 2, 3, 4]);
    expect(e.value).toBe(2.5);
    expect(e.low).toBeCloseTo(1.23483, 4);
    expect(e.high).toBeCloseTo(3.76517, 4);
  });

  test('paired change over the seeds both evaluated: hand-computed differences, gains and losses', () => {
    const outcomes = (rows: [number, boolean, number][]) => rows.map(([seed, success, totalReward]) => ({ seed, success, totalReward }));
    const before = { outcomes: outcomes([[1, true, 1], [2, false, 0], [3, false, 0], [4, true, 1], [5, false, 0.5]]) };
    // Seed 6 was not evaluated before (an environment failure then): it is left out.
    const after = { outcomes: outcomes([[5, true, 1], [4, false, 0], [3, false, 0.2], [2, true, 1], [1, true, 1], [6, true, 1]]) };
    const change = pairedChange(before, after)!;
    expect(change).toMatchObject({ pairs: 5, gained: 2, lost: 1 });
    // Success differences 0, 1, 0, -1, 1: mean 0.2, sample variance 0.7, half-width 1.96 * sqrt(0.7 / 5).
    expect(change.successRate.value).toBeCloseTo(0.2, 12);
    expect(change.successRate.low).toBeCloseTo(0.2 - 0.7333514, 5);
    expect(change.successRate.high).toBeCloseTo(0.2 + 0.7333514, 5);
    // Return differences 0, 1, 0.2, -1, 0.5: mean 0.14, sample variance 0.548.
    expect(change.meanReturn.value).toBeCloseTo(0.14, 12);
    expect(change.meanReturn.high - change.meanReturn.value).toBeCloseTo(1.959964 * Math.sqrt(0.548 / 5), 5);
    expect(describeChange(change)).toBe('+20 pp [−53, +93] in success, +0.140 [−0.509, +0.789] in mean return (paired over the same 5 episodes: 2 went from failure to success, 1 the other way)');
    // Reports stored before outcomes were kept, or with no seed in common, have no paired change.
    expect(pairedChange({}, after)).toBeNull();
    expect(pairedChange(before, { outcomes: outcomes([[9, true, 1]]) })).toBeNull();
  });
});


describe('an evaluation with failed episodes', () => {
  const env: EnvModule = { id: 'coin', description: 'Flip.', maxEpisodeSteps: 1, make: () => ({ reset: () => ({ observation: '', info: {} }), step: () => ({ observation: '', reward: 0, terminated: true, truncated: false, info: {} }) }) };
  /** A policy whose episode of each seed is given: `success`, `totalReward` and `error` as listed, one step each unless it failed at once. */
  const scripted = (outcomes: Record<number, Partial<PlayedEpisode>>): Policy =>
    ({
      mode: 'choice',
      options: { env, reset: { split: 'test' }, format: 'plain', adapter: null, microBatch: 1 },
      play: async (requests) =>
        requests.map(({ seed }): PlayedEpisode => ({ seed, samplingSeed: seed, steps: [], totalReward: 0, success: false, ...outcomes[seed - 100] })),
      update: async () => {
        throw new Error('not trained here');
      },
    }) as Policy;

  test('counts each failed episode as a failure in the success rate, and says how many failed', async () => {
    // Seeds 100..103: a success (return 1), a failure (return 0.5), and two environment errors, one of them after reaching success.
    const report = await evaluatePolicy(
      scripted({ 0: { success: true, totalReward: 1 }, 1: { totalReward: 0.5 }, 2: { error: 'step() threw: Error: broke' }, 3: { success: true, totalReward: 1, error: 'step() threw: Error: late' } }),
      { episodes: 4, firstSeed: 100 },
    );
    expect(report).toMatchObject({ episodes: 4, failedEpisodes: 2, firstError: 'step() threw: Error: broke' });
    expect(report.successRate).toEqual(wilsonInterval(1, 4));
    expect(report.meanReturn).toEqual(meanInterval([1, 0.5]));
    expect(report.outcomes!.map((o) => o.seed)).toEqual([100, 101]);
    expect(describeFailures(report)).toBe('2 of 4 episodes could not be played (an environment or policy error); the first: step() threw: Error: broke');
    expect(() => checkSomethingPlayed(report)).not.toThrow();
  });

  test('none failed: nothing to say; all failed: refused, with how many', async () => {
    const clean = await evaluatePolicy(scripted({ 0: { success: true, totalReward: 1 } }), { episodes: 1, firstSeed: 100 });
    expect(describeFailures(clean)).toBeNull();
    const broken = await evaluatePolicy(scripted({ 0: { error: 'broke' }, 1: { error: 'broke again' }, 2: { error: 'and again' } }), { episodes: 3, firstSeed: 100 });
    expect(broken).toMatchObject({ episodes: 3, failedEpisodes: 3 });
    expect(broken.successRate).toEqual(wilsonInterval(0, 3));
    expect(Number.isNaN(broken.meanReturn.value)).toBe(true);
    expect(() => checkSomethingPlayed(broken)).toThrow('no episode of coin could be played: all 3 failed (the first error is above); fix the environment or the policy settings and try again');
  });
});
