// DQN pieces against hand-computed targets and seeded draws.
import { describe, expect, test } from 'vitest';
import { mulberry32 } from '../../src/common/random.ts';
import { epsilonGreedy, greedyAction, linearSchedule, ReplayBuffer, tdTargets } from '../../src/rl/td.ts';

/** A stream that returns the given numbers in order. */
const scripted = (...draws: number[]) => () => {
  const u = draws.shift();
  if (u === undefined) throw new Error('scripted stream exhausted');
  return u;
};

describe('tdTargets', () => {
  test('r + γ (1 − terminated) max Q(s′, ·), γ = 0.9', () => {
    const y = tdTargets(
      [
        { reward: 1, terminated: false, nextQ: [2, 5, -Infinity] }, // 1 + 0.9·5 = 5.5
        { reward: 1, terminated: true, nextQ: [10] }, // terminated: 1
        { reward: 2, terminated: false, nextQ: [] }, // no next actions: terminal, 2
        { reward: 0, terminated: false, nextQ: [-Infinity, -Infinity] }, // all padding: terminal, 0
        { reward: -1, terminated: false, nextQ: [-3, -2] }, // −1 + 0.9·(−2) = −2.8
      ],
      0.9,
    );
    [5.5, 1, 2, 0, -2.8].forEach((x, i) => expect(y[i]).toBeCloseTo(x, 12));
  });
  test('NaN Q-values and γ outside [0, 1] are errors', () => {
    expect(() => tdTargets([{ reward: 0, terminated: false, nextQ: [NaN] }], 0.9)).toThrow(/NaN/);
    expect(() => tdTargets([], 1.1)).toThrow(/gamma/);
  });
});

describe('greedyAction and epsilonGreedy', () => {
  test('argmax over finite values, lowest index on ties, −1 without actions', () => {
    expect(greedyAction([1, 3, 3])).toBe(1);
    expect(greedyAction([-Infinity, -5, -Infinity])).toBe(1);
    expect(greedyAction([-Infinity])).toBe(-1);
    expect(greedyAction([])).toBe(-1);
  });
  test('explores with probability ε over the valid actions only', () => {
    const q = [5, -Infinity, 0, 2]; // valid actions [0, 2, 3], greedy 0
    // 0.05 < 0.1: explore; ⌊0.7 · 3⌋ = 2 → valid[2] = action 3
    expect(epsilonGreedy(q, 0.1, scripted(0.05, 0.7))).toBe(3);
    // ⌊0.4 · 3⌋ = 1 → action 2 (never the padded action 1)
    expect(epsilonGreedy(q, 0.1, scripted(0.05, 0.4))).toBe(2);
    // 0.5 ≥ 0.1: exploit
    expect(epsilonGreedy(q, 0.1, scripted(0.5))).toBe(0);
  });
  test('seeded: the same seed gives the same actions; ε = 1 never picks padding', () => {
    const q = [1, -Infinity, 0];
    const draw = (seed: number) => {
      const random = mulberry32(seed);
      return Array.from({ length: 50 }, () => epsilonGreedy(q, 1, random));
    };
    expect(draw(3)).toEqual(draw(3));
    expect(new Set(draw(3))).toEqual(new Set([0, 2]));
    expect(() => epsilonGreedy([-Infinity], 0.5, mulberry32(1))).toThrow(/no valid actions/);
  });
});

describe('linearSchedule', () => {
  test('ε from 1 to 0.1 over 100 steps, then constant', () => {
    const epsilon = linearSchedule({ start: 1, end: 0.1, duration: 100 });
    expect(epsilon(0)).toBe(1);
    expect(epsilon(50)).toBeCloseTo(0.55, 12); // 1 − 0.9 · 0.5
    expect(epsilon(100)).toBeCloseTo(0.1, 12);
    expect(epsilon(1000)).toBeCloseTo(0.1, 12);
    expect(() => linearSchedule({ start: 1, end: 0, duration: 0 })).toThrow(/duration/);
  });
});

describe('ReplayBuffer', () => {
  test('a ring: the oldest transition is overwritten once full', () => {
    const buffer = new ReplayBuffer<number>({ capacity: 3, seed: 42 });
    for (const x of [1, 2, 3, 4, 5]) buffer.push(x);
    expect(buffer.size).toBe(3);
    // slots after 1, 2, 3: [1, 2, 3]; 4 overwrites slot 0, 5 slot 1 → [4, 5, 3]
    // mulberry32(42) draws 0.6011, 0.4483, 0.8525, 0.6697, 0.1748 → ⌊u · 3⌋ = 1, 1, 2, 2, 0
    expect(buffer.sample(5)).toEqual([5, 5, 3, 3, 4]);
  });
  test('the same seed gives the same minibatches', () => {
    const fill = () => {
      const buffer = new ReplayBuffer<number>({ capacity: 10, seed: 9 });
      for (let i = 0; i < 10; i++) buffer.push(i);
      return [buffer.sample(4), buffer.sample(4)];
    };
    expect(fill()).toEqual(fill());
  });
  test('errors: bad capacity, sampling an empty buffer', () => {
    expect(() => new ReplayBuffer({ capacity: 0, seed: 1 })).toThrow(/capacity/);
    expect(() => new ReplayBuffer({ capacity: 2, seed: 1 }).sample(1)).toThrow(/empty/);
  });
});
