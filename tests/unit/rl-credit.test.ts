// Spreading per-step values onto action tokens of a multi-turn transcript.
import { describe, expect, test } from 'vitest';
import { actionSpans, checkSpans, spreadColumnsToTokens, spreadToTokens } from '../../src/rl/credit.ts';

// token:   0  1  2  3  4  5  6  7  8  9  10
// role:    p  p  a  a  o  o  a  o  a  a  a      (p prompt, o observation, a action)
const mask = [0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1];
const spans = [
  { start: 2, end: 4 },
  { start: 6, end: 7 },
  { start: 8, end: 11 },
];

describe('actionSpans', () => {
  test('the runs of 1s of a non-contiguous mask', () => {
    expect(actionSpans(mask)).toEqual(spans);
    expect(actionSpans([1, 1, 0])).toEqual([{ start: 0, end: 2 }]);
    expect(actionSpans([0, 0])).toEqual([]);
    expect(() => actionSpans([0, 2])).toThrow(/must be 0 or 1/);
  });
});

describe('spreadToTokens', () => {
  test('step k’s value on step k’s action tokens, 0 on context', () => {
    expect(spreadToTokens(mask, spans, [0.5, -1, 2])).toEqual([0, 0, 0.5, 0.5, 0, 0, -1, 0, 2, 2, 2]);
  });
  test('an episode-level value on every action token', () => {
    expect(spreadToTokens(mask, spans, 3)).toEqual([0, 0, 3, 3, 0, 0, 3, 0, 3, 3, 3]);
  });
  test('several columns at once, ready for a TrainBatch row', () => {
    const columns = spreadColumnsToTokens(mask, spans, { advantages: [1, 2, 3], returns: 4, oldValues: [0, 0.5, 0] });
    expect(columns).toEqual({
      advantages: [0, 0, 1, 1, 0, 0, 2, 0, 3, 3, 3],
      returns: [0, 0, 4, 4, 0, 0, 4, 0, 4, 4, 4],
      oldValues: [0, 0, 0, 0, 0, 0, 0.5, 0, 0, 0, 0],
    });
  });
  test('a transcript without actions gives zeros', () => {
    expect(spreadToTokens([0, 0, 0], [], [])).toEqual([0, 0, 0]);
  });
});

describe('mask and span consistency', () => {
  test('one value per span', () => {
    expect(() => spreadToTokens(mask, spans, [1, 2])).toThrow(/2 per-step values for 3 action spans/);
    expect(() => spreadColumnsToTokens(mask, spans, { returns: [1] })).toThrow(/returns: 1 per-step values/);
  });
  test('a span over a context token', () => {
    expect(() => checkSpans(mask, [{ start: 2, end: 5 }, spans[1], spans[2]])).toThrow(/token 4 of action span 0 \[2, 5\) has action mask 0/);
  });
  test('an action token outside every span', () => {
    expect(() => checkSpans(mask, [spans[0], spans[2]])).toThrow(/token 6 is marked as an action but lies in no action span/);
    expect(() => checkSpans(mask, [spans[0], spans[1]])).toThrow(/token 8 .*after the last span/);
    expect(() => checkSpans(mask, [spans[0], { start: 6, end: 7 }, { start: 9, end: 11 }])).toThrow(/token 8 .* precedes span 2/);
  });
  test('overlapping, out-of-order, empty or out-of-range spans', () => {
    expect(() => checkSpans(mask, [spans[1], spans[0], spans[2]])).toThrow(/in order and disjoint/);
    expect(() => checkSpans(mask, [{ start: 2, end: 4 }, { start: 3, end: 4 }])).toThrow(/in order and disjoint/);
    expect(() => checkSpans(mask, [{ start: 2, end: 2 }])).toThrow(/non-empty/);
    expect(() => checkSpans(mask, [{ start: -1, end: 1 }])).toThrow(/outside the transcript/);
    expect(() => checkSpans(mask, [spans[0], spans[1], { start: 8, end: 12 }])).toThrow(/outside the transcript's 11 tokens/);
  });
  test('non-finite values', () => {
    expect(() => spreadToTokens(mask, spans, [1, NaN, 2])).toThrow(/step 1 is NaN/);
  });
});
