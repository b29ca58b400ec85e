// The reasoning built-in (guess the number): the shared contract and hand-played episodes.
import { describe, expect, test } from 'vitest';
import reasoning, { candidateGuesses, splitOf, type ReasoningEnv } from '../../src/env/builtin/reasoning.ts';
import { checkBuiltinEnvironment } from '../support/env-contract.ts';

function start(seed: number, difficulty = 1, split: 'train' | 'test' = 'train') {
  const env = reasoning.make() as ReasoningEnv;
  const reset = env.reset({ seed, options: { split, difficulty } });
  return { env, reset, instance: env.hiddenState() };
}

describe('reasoning environment', () => {
  test('meets the built-in environment contract', async () => {
    await checkBuiltinEnvironment(reasoning);
  });

  test('a known seed: the first observation and feedback', () => {
    const { env, reset, instance } = start(1, 1);
    expect(reset.observation.split('\n')[0]).toBe('I am thinking of a whole number from 1 to 30. Find it in at most 5 guesses.');
    expect(reset.info).toMatchObject({ split: 'train', difficulty: 1, budget: 5 });
    expect(splitOf(instance.n, instance.secret)).toBe('train');
    const low = instance.secret === 1 ? 2 : 1;
    const first = env.step(`guess: ${low}`);
    expect(first.observation).toBe(`${low}: ${low < instance.secret ? 'higher' : 'lower'}. 4 guesses left.`);
    expect(first).toMatchObject({ reward: 0, terminated: false, truncated: false });
    const win = env.step(`My guess is ${instance.secret}.`);
    expect(win).toMatchObject({ reward: 1, terminated: true, info: { success: true, guesses: 2 } });
  });

  test('running out of guesses fails; out-of-range and junk guesses cost a little and use no guess', () => {
    const { env, instance } = start(4, 2);
    expect(env.step('guess: 0')).toMatchObject({ reward: -0.05, terminated: false });
    expect(env.step('guess: 101').observation).toContain('not a whole number from 1 to 100');
    expect(env.step('guess: 2.5').reward).toBe(-0.05);
    expect(env.step('no idea').reward).toBe(-0.05);
    const wrong = instance.secret === 50 ? 51 : 50;
    let last = env.step(String(wrong));
    for (let i = 1; i < 7; i++) last = env.step(`GUESS ${wrong}`);
    expect(last).toMatchObject({ reward: 0, terminated: true, info: { success: false } });
    expect(last.observation).toContain(`the number was ${instance.secret}`);
  });

  test('valid actions are consistent with the feedback and include the midpoint', () => {
    expect(candidateGuesses(1, 5)).toEqual([1, 2, 3, 4, 5]);
    const c = candidateGuesses(1, 100);
    expect(c.length).toBeLessThanOrEqual(8);
    expect(c).toContain(50);
    const { env, instance } = start(8, 3);
    env.step(`guess: ${instance.secret > 250 ? 100 : 400}`);
    for (const action of env.validActions()) {
      const k = Number(action.split(': ')[1]);
      expect(instance.secret > 250 ? k > 100 : k < 400).toBe(true);
    }
    expect(env.validActions()).toContain(env.expertAction());
  });
});
