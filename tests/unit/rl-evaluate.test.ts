import { describe, expect, test } from 'vitest';
import { meanInterval, wilsonInterval } from '../../src/rl/evaluate.ts';

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
});
