// Returns, GAE and baselines against hand-computed episodes (the arithmetic is in the comments).
import { describe, expect, test } from 'vitest';
import { discountedReturns, gae, normalizeAdvantages, RunningMean } from '../../src/rl/advantages.ts';

const close = (actual: number[], expected: number[]) => {
  expect(actual).toHaveLength(expected.length);
  actual.forEach((a, i) => expect(a).toBeCloseTo(expected[i], 9));
};

describe('discountedReturns', () => {
  test('G_t = r_t + γ G_{t+1} from the end, γ = 0.5', () => {
    // G2 = 3, G1 = 2 + 0.5·3 = 3.5, G0 = 1 + 0.5·3.5 = 2.75
    close(discountedReturns([1, 2, 3], 0.5), [2.75, 3.5, 3]);
  });
  test('bootstraps from a final value', () => {
    // G2 = 3 + 0.5·4 = 5, G1 = 2 + 2.5 = 4.5, G0 = 1 + 2.25 = 3.25
    close(discountedReturns([1, 2, 3], 0.5, 4), [3.25, 4.5, 5]);
  });
  test('an empty episode has no returns', () => expect(discountedReturns([], 0.9)).toEqual([]));
});

describe('gae', () => {
  const rewards = [1, 0, 2];
  const values = [0.5, 1, 1.5];
  const options = { gamma: 0.5, lambda: 0.5 }; // γλ = 0.25

  test('terminated: bootstraps from 0', () => {
    // δ2 = 2 + 0.5·0 − 1.5 = 0.5          A2 = 0.5
    // δ1 = 0 + 0.5·1.5 − 1 = −0.25        A1 = −0.25 + 0.25·0.5 = −0.125
    // δ0 = 1 + 0.5·1 − 0.5 = 1            A0 = 1 + 0.25·(−0.125) = 0.96875
    const { advantages, returns } = gae(rewards, values, { terminated: true, finalValue: 99 }, options);
    close(advantages, [0.96875, -0.125, 0.5]);
    close(returns, [1.46875, 0.875, 2]); // A + V
  });

  test('truncated: bootstraps from the value of the final observation', () => {
    // V3 = 2:  δ2 = 2 + 0.5·2 − 1.5 = 1.5   A2 = 1.5
    //          A1 = −0.25 + 0.25·1.5 = 0.125
    //          A0 = 1 + 0.25·0.125 = 1.03125
    const { advantages, returns } = gae(rewards, values, { terminated: false, finalValue: 2 }, options);
    close(advantages, [1.03125, 0.125, 1.5]);
    close(returns, [1.53125, 1.125, 3]);
  });

  test('λ = 1 is the Monte-Carlo advantage G_t − V_t', () => {
    // G = [1 + 0.5·(0 + 0.5·2), 0 + 0.5·2, 2] = [1.5, 1, 2];  G − V = [1, 0, 0.5]
    close(gae(rewards, values, { terminated: true }, { gamma: 0.5, lambda: 1 }).advantages, [1, 0, 0.5]);
  });

  test('λ = 0 is the one-step TD error', () => {
    close(gae(rewards, values, { terminated: true }, { gamma: 0.5, lambda: 0 }).advantages, [1, -0.25, 0.5]);
  });

  test('a truncated episode without its final value is an error', () => {
    expect(() => gae(rewards, values, { terminated: false }, options)).toThrow(/finalValue/);
  });

  test('mismatched lengths and out-of-range γ, λ are errors', () => {
    expect(() => gae([1, 2], [0], { terminated: true }, options)).toThrow(/2 rewards but 1 values/);
    expect(() => gae(rewards, values, { terminated: true }, { gamma: 1.5, lambda: 0.5 })).toThrow(/gamma/);
    expect(() => gae(rewards, values, { terminated: true }, { gamma: 0.5, lambda: -1 })).toThrow(/lambda/);
  });
});

describe('normalizeAdvantages', () => {
  test('(A − mean) / std with the population std', () => {
    // mean 2.5, var = (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25, std = 1.1180339887
    close(normalizeAdvantages([1, 2, 3, 4], { eps: 0 }), [-1.3416407865, -0.4472135955, 0.4472135955, 1.3416407865]);
  });
  test('masked-out entries neither count nor change: they come back as 0', () => {
    // counted [1, 2, 3]: mean 2, var 2/3, std 0.8164965809; 1 / 0.8164965809 = 1.2247448714
    close(normalizeAdvantages([1, 2, 100, 3], { eps: 0, mask: [1, 1, 0, 1] }), [-1.2247448714, 0, 0, 1.2247448714]);
  });
  test('a constant batch gives zeros thanks to ε, an all-masked one zeros too', () => {
    expect(normalizeAdvantages([5, 5, 5])).toEqual([0, 0, 0]);
    expect(normalizeAdvantages([1, 2], { mask: [0, 0] })).toEqual([0, 0]);
  });
  test('the default ε = 1e-8 is added to the std', () => {
    // [0, 2]: mean 1, std 1 → ±1 / (1 + 1e-8)
    close(normalizeAdvantages([0, 2]), [-1 / (1 + 1e-8), 1 / (1 + 1e-8)]);
  });
  test('a mask of the wrong length is an error', () => {
    expect(() => normalizeAdvantages([1, 2], { mask: [1] })).toThrow(/2 advantages but 1 mask/);
  });
});

describe('REINFORCE with a baseline', () => {
  test('running mean of every return seen', () => {
    const baseline = new RunningMean();
    expect(baseline.mean).toBe(0);
    baseline.update([2, 4]); // (2 + 4) / 2
    expect(baseline.mean).toBe(3);
    baseline.update([6]); // (2 + 4 + 6) / 3
    expect(baseline.mean).toBe(4);
  });
  test('exponential moving average', () => {
    const baseline = new RunningMean({ decay: 0.5 });
    baseline.update([2]); // 0.5·0 + 0.5·2 = 1
    expect(baseline.mean).toBe(1);
    baseline.update([4]); // 0.5·1 + 0.5·4 = 2.5
    expect(baseline.mean).toBe(2.5);
    expect(() => new RunningMean({ decay: 2 })).toThrow(/decay/);
  });
});
