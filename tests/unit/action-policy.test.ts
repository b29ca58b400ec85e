// The action-level policy against hand-computed distributions.
import { describe, expect, test } from 'vitest';
import { actionEntropy, actionLogProbs, logSoftmax, sampleAction } from '../../src/agent/action-policy.ts';

const LN_QUARTER = -1.3862943611198906; // ln 0.25
const LN_THREE_QUARTERS = -0.2876820724517809; // ln 0.75
const LN_HALF = -0.6931471805599453; // ln 0.5

const close = (actual: number[], expected: number[]) => {
  expect(actual).toHaveLength(expected.length);
  actual.forEach((a, i) => (expected[i] === -Infinity ? expect(a).toBe(-Infinity) : expect(a).toBeCloseTo(expected[i], 9)));
};

describe('logSoftmax', () => {
  test('scores 0 and ln 3 give probabilities 1/4 and 3/4', () => {
    close(logSoftmax([0, Math.log(3)]), [LN_QUARTER, LN_THREE_QUARTERS]);
  });
  test('stable far from 0 (exp would overflow or underflow)', () => {
    close(logSoftmax([1000, 1000 + Math.log(3)]), [LN_QUARTER, LN_THREE_QUARTERS]);
    close(logSoftmax([-1000, -1000 + Math.log(3)]), [LN_QUARTER, LN_THREE_QUARTERS]);
  });
  test('−Infinity padding gets probability 0', () => {
    close(logSoftmax([0, -Infinity, Math.log(3)]), [LN_QUARTER, -Infinity, LN_THREE_QUARTERS]);
  });
  test('no real action, NaN or +Infinity are errors', () => {
    expect(() => logSoftmax([-Infinity, -Infinity])).toThrow(/at least one action/);
    expect(() => logSoftmax([])).toThrow(/at least one action/);
    expect(() => logSoftmax([0, NaN])).toThrow(/finite/);
    expect(() => logSoftmax([Infinity])).toThrow(/finite/);
  });
});

describe('actionLogProbs', () => {
  // State 0: actions of 1 and 2 tokens with summed log-probs −2 and −4, plus one padded slot.
  // State 1: two actions of 1 token, −1 and −1 + ln 3.
  const summed = [
    [-2, -4, -Infinity],
    [-1, -1 + Math.log(3), -Infinity],
  ];
  const counts = [
    [1, 2, 0],
    [1, 1, 0],
  ];
  test('summed: the longer action is penalised', () => {
    // state 0: p = σ(2) = 0.8807970780, 1 − p = 0.1192029220 → logs −0.1269280110, −2.1269280110
    const [s0, s1] = actionLogProbs(summed, counts, { lengthNormalize: false });
    close(s0, [-0.126928011, -2.126928011, -Infinity]);
    close(s1, [LN_QUARTER, LN_THREE_QUARTERS, -Infinity]);
  });
  test('length-normalised: −2/1 and −4/2 tie at 1/2 each', () => {
    const [s0, s1] = actionLogProbs(summed, counts, { lengthNormalize: true });
    close(s0, [LN_HALF, LN_HALF, -Infinity]);
    close(s1, [LN_QUARTER, LN_THREE_QUARTERS, -Infinity]);
  });
  test('temperature τ divides the scores: ½ turns odds of 3 into 9, 2 halves a gap of 2 nats', () => {
    const [, sharp] = actionLogProbs(summed, counts, { lengthNormalize: true, temperature: 0.5 });
    close(sharp, [Math.log(0.1), Math.log(0.9), -Infinity]);
    // state 0 summed at τ = 2: scores −1 and −2, p = σ(1) = 0.7310585786 → logs −0.3132616875, −1.3132616875
    const [flat] = actionLogProbs(summed, counts, { lengthNormalize: false, temperature: 2 });
    close(flat, [-0.3132616875, -1.3132616875, -Infinity]);
    for (const temperature of [0, -1, NaN, Infinity]) expect(() => actionLogProbs(summed, counts, { lengthNormalize: true, temperature })).toThrow(/temperature must be a positive number/);
  });
  test('shape errors and a real action without tokens', () => {
    expect(() => actionLogProbs(summed, [counts[0]], { lengthNormalize: true })).toThrow(/2 states/);
    expect(() => actionLogProbs([[-1, -2]], [[1]], { lengthNormalize: true })).toThrow(/2 log-probs but 1 token counts/);
    expect(() => actionLogProbs([[-1]], [[0]], { lengthNormalize: true })).toThrow(/token count 0/);
  });
});

describe('actionEntropy, sampleAction', () => {
  const policy = [LN_QUARTER, -Infinity, LN_THREE_QUARTERS];
  test('entropy: ln 2 for a fair pair; −(¼ ln ¼ + ¾ ln ¾) = 0.5623351446; 0 for a single action', () => {
    expect(actionEntropy([LN_HALF, LN_HALF, -Infinity])).toBeCloseTo(Math.LN2, 12);
    expect(actionEntropy(policy)).toBeCloseTo(0.5623351446, 9);
    expect(actionEntropy([0, -Infinity])).toBe(0);
  });
  test('sampling by the cumulative distribution, skipping padding', () => {
    // cumulative: action 0 up to 0.25, action 2 up to 1
    expect(sampleAction(policy, () => 0.2)).toBe(0);
    expect(sampleAction(policy, () => 0.25)).toBe(2);
    expect(sampleAction(policy, () => 0.9)).toBe(2);
    expect(sampleAction(policy, () => 1 - 1e-17)).toBe(2);
    expect(() => sampleAction([-Infinity], () => 0.5)).toThrow(/no valid actions/);
  });
});
