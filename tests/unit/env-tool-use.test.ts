// The tool-use built-in: the shared contract, the calculator, and hand-played episodes.
import { describe, expect, test } from 'vitest';
import toolUse, { evaluateExpression, formatNumber, type ToolUseEnv } from '../../src/env/builtin/tool-use.ts';
import { firstLine, matchAction, normalizeText, parseCommand, parseNumber } from '../../src/env/text-actions.ts';
import { checkBuiltinEnvironment, expertPolicy, randomPolicy, successRate } from '../support/env-contract.ts';

function start(seed: number, difficulty = 1, split: 'train' | 'test' = 'train') {
  const env = toolUse.make() as ToolUseEnv;
  const reset = env.reset({ seed, options: { split, difficulty } });
  return { env, reset, instance: env.hiddenState() };
}

describe('tool-use environment', () => {
  test('meets the built-in environment contract', async () => {
    await checkBuiltinEnvironment(toolUse);
  });

  test('the calculator parses precedence, parentheses and unary minus, and rejects junk', () => {
    expect(evaluateExpression('3 * 4 + 2 * 5')).toEqual({ ok: true, value: 22 });
    expect(evaluateExpression('(3 + 4) * 2')).toEqual({ ok: true, value: 14 });
    expect(evaluateExpression('-(2 - 5) * -2')).toEqual({ ok: true, value: -6 });
    expect(evaluateExpression('10 / 4')).toEqual({ ok: true, value: 2.5 });
    expect(evaluateExpression('2 x 3 ÷ 4 =')).toEqual({ ok: true, value: 1.5 });
    expect(evaluateExpression('8 - 2 - 1')).toEqual({ ok: true, value: 5 });
    expect(evaluateExpression('1 / 0')).toEqual({ ok: false, error: 'division by zero' });
    expect(evaluateExpression('5 / (2 - 2)')).toEqual({ ok: false, error: 'division by zero' });
    for (const junk of ['', '   ', '2 +', '(1 + 2', '1 + 2)', '3 4', 'alert(1)', 'process.exit()', '2 ** 3', '1e400 * 1e400', '('.repeat(100) + '1' + ')'.repeat(100), '9'.repeat(400)]) {
      const result = evaluateExpression(junk);
      expect(result.ok, junk.slice(0, 20)).toBe(false);
    }
    expect(formatNumber(1 / 3)).toBe('0.333333');
    expect(formatNumber(12)).toBe('12');
  });

  test('a known seed: the first observation, the tools, and a correct answer', () => {
    const { env, reset, instance } = start(5, 3);
    expect(reset.observation).toContain(`Question: ${instance.question}`);
    expect(reset.observation).toContain('`lookup: KEY`');
    expect(reset.observation).toContain('`answer: NUMBER`');
    expect(instance.needed).toHaveLength(2);
    const [a, b] = instance.needed;
    const first = env.step(`Lookup: ${a.toUpperCase()}.`);
    expect(first.observation).toBe(`lookup ${a} → ${instance.table[a]}${first.observation.slice(`lookup ${a} → ${instance.table[a]}`.length)}`);
    expect(first.reward).toBe(0.1);
    expect(first.terminated).toBe(false);
    expect(env.step(`look up ${b}`).observation).toContain(`→ ${instance.table[b]}`);
    expect(env.validActions()).toContain(`calc: ${instance.expression}`);
    expect(env.validActions().length).toBeLessThanOrEqual(8);
    const calc = env.step(`calc: ${instance.expression}`);
    expect(calc.observation).toContain(`→ ${instance.answer}`);
    expect(env.validActions()).toContain(`answer: ${instance.answer}`);
    const done = env.step(`I think the answer is ${instance.answer}.`);
    expect(done).toMatchObject({ reward: 1, terminated: true, truncated: false, info: { success: true } });
  });

  test('a tool call earns 0.1 when it makes progress, once per needed key and once for the answer\'s value, and nothing otherwise', () => {
    const { env, instance } = start(5, 3);
    const [a, b] = instance.needed;
    const distractor = Object.keys(instance.table).find((k) => !instance.needed.includes(k))!;
    const rewards = [`lookup: ${distractor}`, `lookup: ${a}`, `lookup: ${a}`, `calc: ${instance.expression}`, `lookup: ${b}`, `calc: ${instance.expression}`, `calc: ${instance.expression}`].map((action) => env.step(action).reward);
    // The calculation before b is known already gives the answer's value: the reward is for the value, not the order.
    expect(rewards).toEqual([0, 0.1, 0, 0.1, 0.1, 0, 0]);
    const { env: wrongFirst } = start(5, 3);
    expect(wrongFirst.step('calc: 1 + 1').reward).toBe(0);
    expect(wrongFirst.step(`answer: ${instance.answer}`).reward).toBe(1);
  });

  test('the same seed gives the same question; a wrong answer ends the episode without success', () => {
    const { reset: r1, instance } = start(11, 1);
    const { env, reset: r2 } = start(11, 1);
    expect(r2).toEqual(r1);
    const wrong = env.step(`answer: ${instance.answer + 1}`);
    expect(wrong).toMatchObject({ reward: 0, terminated: true, info: { success: false } });
    expect(wrong.observation).toContain(`the answer was ${instance.answer}`);
  });

  test('free-text answers and malformed actions', () => {
    for (const text of ['Answer: {n}', 'answer {n}.', 'The answer is {n}', '**Final answer:** {n}\nbecause I computed it', '{n}']) {
      const { env, instance } = start(3, 1);
      const result = env.step(text.replace('{n}', String(instance.answer)));
      expect(result.info.success, text).toBe(true);
    }
    const { env } = start(3, 1);
    const bad = env.step('hello there');
    expect(bad).toMatchObject({ reward: -0.05, terminated: false, truncated: false });
    expect(bad.observation).toContain('`calc: EXPRESSION`');
    expect(env.step('answer: lots').reward).toBe(-0.05);
    expect(env.step('lookup: nothing-here').observation).toContain('no such key');
    expect(env.step('calc: 1/0').observation).toContain('division by zero');
  });

  test('episodes are truncated at maxEpisodeSteps', () => {
    const { env } = start(9, 2);
    let last = env.step('calc: 1 + 1');
    for (let i = 1; i < toolUse.maxEpisodeSteps; i++) last = env.step('calc: 1 + 1');
    expect(last).toMatchObject({ terminated: false, truncated: true, info: { success: false } });
  });

  test('expert and random success rates on the train split', async () => {
    for (const difficulty of [1, 2, 3]) {
      expect(await successRate(toolUse, expertPolicy, { difficulty }, 40)).toBe(1);
      expect(await successRate(toolUse, randomPolicy, { difficulty }, 100)).toBeLessThan(0.5);
    }
  });
});

describe('text-actions helpers', () => {
  test('commands, numbers and valid-action matching from free text', () => {
    const verbs = { answer: ['answer'], lookup: ['lookup', 'look up'] };
    expect(parseCommand('Answer: 19', verbs)).toEqual({ verb: 'answer', argument: '19' });
    expect(parseCommand('I think the answer is 19.', verbs)).toEqual({ verb: 'answer', argument: '19' });
    expect(parseCommand('Sure!\n`look up: Apple`\nthen answer', verbs)).toEqual({ verb: 'lookup', argument: 'Apple' });
    expect(parseCommand('answer -5', verbs)).toEqual({ verb: 'answer', argument: '-5' });
    expect(parseCommand('nothing to see', verbs)).toBeNull();
    expect(parseNumber('about 1,200 people')).toBe(1200);
    expect(parseNumber('19, I believe')).toBe(19);
    expect(parseNumber('-2.5')).toBe(-2.5);
    expect(parseNumber('none')).toBeNull();
    expect(normalizeText('  "**Answer:   19.**" ')).toBe('answer: 19');
    expect(firstLine('\n\n  go north \nwhy')).toBe('  go north ');
    expect(matchAction('LOOKUP:apple.', ['lookup: apple', 'lookup: pear'])).toBe('lookup: apple');
    expect(matchAction('I choose lookup: pear', ['lookup: apple', 'lookup: pear'])).toBe('lookup: pear');
    expect(matchAction('banana', ['lookup: apple'])).toBeNull();
  });
});
