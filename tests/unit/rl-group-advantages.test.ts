// Group-relative advantages against hand-computed groups.
import { describe, expect, test } from 'vitest';
import { groupAdvantages } from '../../src/rl/group-advantages.ts';

describe('groupAdvantages', () => {
  test('normalises within the groups of a shared reset seed, keeping the input order', () => {
    const episodes = [
      { seed: 7, reward: 1 },
      { seed: 8, reward: 0 },
      { seed: 7, reward: 3 },
      { seed: 8, reward: 0 },
      { seed: 8, reward: 1 },
    ];
    // seed 7: [1, 3], mean 2, std 1 → [−1, 1]
    // seed 8: [0, 0, 1], mean 1/3, var = (1/9 + 1/9 + 4/9) / 3 = 2/9, std = √2/3
    //         (−1/3) / (√2/3) = −0.7071067812, (2/3) / (√2/3) = 1.4142135624
    const a = groupAdvantages(episodes, { eps: 0 });
    [-1, -0.7071067812, 1, -0.7071067812, 1.4142135624].forEach((x, i) => expect(a[i]).toBeCloseTo(x, 9));
  });

  test('the default ε = 1e-6 is added to the std', () => {
    const a = groupAdvantages([{ seed: 'x', reward: 1 }, { seed: 'x', reward: 3 }]);
    expect(a[0]).toBeCloseTo(-1 / (1 + 1e-6), 12);
    expect(a[1]).toBeCloseTo(1 / (1 + 1e-6), 12);
  });

  test('Dr. GRPO: centred only, not divided by the std', () => {
    const a = groupAdvantages([{ seed: 8, reward: 0 }, { seed: 8, reward: 0 }, { seed: 8, reward: 1 }], { scaleByStd: false });
    [-1 / 3, -1 / 3, 2 / 3].forEach((x, i) => expect(a[i]).toBeCloseTo(x, 12));
  });

  test('a group of one, or with equal rewards, gives exactly 0', () => {
    // 0.1 · 3 / 3 is not exactly 0.1 in floating point; the advantages must still be 0.
    const a = groupAdvantages([
      { seed: 1, reward: 5 },
      { seed: 2, reward: 0.1 },
      { seed: 2, reward: 0.1 },
      { seed: 2, reward: 0.1 },
    ]);
    expect(a).toEqual([0, 0, 0, 0]);
    expect(groupAdvantages([{ seed: 1, reward: 5 }], { scaleByStd: false })).toEqual([0]);
  });

  test('non-finite rewards are errors', () => {
    expect(() => groupAdvantages([{ seed: 1, reward: NaN }])).toThrow(/finite/);
  });
});
