// The code-gen built-in and the QuickJS sandbox: the shared contract, sandbox limits and isolation,
// code extraction, and hand-played episodes.
import { describe, expect, test } from 'vitest';
import codeGen, { CODE_GEN_FAMILIES, extractCode, type CodeGenEnv } from '../../src/env/builtin/code-gen.ts';
import { runInSandbox, type SandboxTest } from '../../src/env/sandbox.ts';
import { checkBuiltinEnvironment, expertPolicy, successRate } from '../support/env-contract.ts';

const LIMITS = { timeMs: 300, memoryBytes: 24 * 1024 * 1024 };
const SUM_TESTS: SandboxTest[] = [
  { args: [[1, 2, 3]], expected: 6 },
  { args: [[]], expected: 0 },
  { args: [[-4, 4, 10]], expected: 10 },
  { args: [[5]], expected: 5 },
];

function start(seed: number, difficulty = 1, split: 'train' | 'test' = 'train') {
  const env = codeGen.make() as CodeGenEnv;
  const reset = env.reset({ seed, options: { split, difficulty } });
  return { env, reset, instance: env.hiddenState().instance };
}

describe('QuickJS sandbox', () => {
  test('runs a correct function and reports per-test results', async () => {
    const result = await runInSandbox('function solve(xs) { return xs.reduce((a, b) => a + b, 0); }', SUM_TESTS, LIMITS);
    expect(result).toMatchObject({ status: 'ok', passed: 4, total: 4 });
    expect(result.tests.every((t) => t.passed && t.status === 'passed')).toBe(true);
  });

  test('a partially correct function passes some tests; thrown errors are per test', async () => {
    const partial = await runInSandbox('function solve(xs) { let s = 0; for (let i = 1; i < xs.length; i++) s += xs[i]; return s; }', SUM_TESTS, LIMITS);
    expect(partial).toMatchObject({ status: 'ok', passed: 1, total: 4 });
    expect(partial.tests[0]).toMatchObject({ passed: false, status: 'wrong', actual: '5' });
    const throwing = await runInSandbox("function solve(xs) { if (xs.length === 0) throw new Error('empty!'); return xs.reduce((a, b) => a + b); }", SUM_TESTS, LIMITS);
    expect(throwing).toMatchObject({ status: 'ok', passed: 3, total: 4 });
    expect(throwing.tests[1]).toMatchObject({ passed: false, status: 'error', error: 'Error: empty!' });
  });

  test('an infinite loop is stopped at the time limit', async () => {
    const began = Date.now();
    const result = await runInSandbox('function solve(xs) { while (true) {} }', SUM_TESTS, LIMITS);
    const elapsed = Date.now() - began;
    expect(result.status).toBe('timeout');
    expect(result.error).toContain('time limit exceeded');
    expect(result.passed).toBe(0);
    expect(result.tests.map((t) => t.status)).toEqual(['timeout', 'not-run', 'not-run', 'not-run']);
    expect(elapsed).toBeLessThan(LIMITS.timeMs + 1500);
    // Top-level code that never ends is stopped too.
    expect((await runInSandbox('for (;;) {}', SUM_TESTS, LIMITS)).status).toBe('timeout');
  });

  test('a memory bomb is stopped at the memory limit', async () => {
    const result = await runInSandbox('function solve(xs) { const a = []; for (;;) a.push([xs, a.length]); }', SUM_TESTS, { timeMs: 5000, memoryBytes: 24 * 1024 * 1024 });
    expect(result.status).toBe('out-of-memory');
    expect(result.error).toContain('memory limit exceeded (24 MiB)');
    const strings = await runInSandbox("let s = 'x'; for (;;) s += s + s;", SUM_TESTS, { timeMs: 5000, memoryBytes: 24 * 1024 * 1024 });
    expect(['out-of-memory', 'runtime-error']).toContain(strings.status);
    // QuickJS throws null when memory runs out; code that throws null itself is an ordinary error.
    const thrown = await runInSandbox('function solve() { throw null; }', SUM_TESTS, LIMITS);
    expect(thrown.tests[0]).toMatchObject({ status: 'error', error: 'threw null' });
  });

  test('the memory limit holds for all the code allocates, ArrayBuffers included, and the host keeps none of it', async () => {
    const limits = { timeMs: 250, memoryBytes: 32 * 1024 * 1024 };
    // Each keeps 1 MiB blocks until an allocation fails, then returns how many it holds.
    const hoarders = [
      'function solve() { const a = []; try { for (;;) a.push(new ArrayBuffer(1 << 20)); } catch (e) { return a.length; } }',
      "function solve() { const a = []; try { for (;;) a.push('x'.repeat(1 << 20) + a.length); } catch (e) { return a.length; } }",
    ];
    const rssBefore = process.memoryUsage().rss;
    for (const code of [...hoarders, ...hoarders]) {
      const began = Date.now();
      const result = await runInSandbox(code, [{ args: [], expected: 0 }], limits);
      expect(Date.now() - began).toBeLessThan(1500);
      expect(result.status).toBe('ok');
      expect(Number(result.tests[0].actual)).toBeGreaterThan(0);
      expect(Number(result.tests[0].actual)).toBeLessThan(32);
    }
    expect(process.memoryUsage().rss - rssBefore).toBeLessThan(128 * 1024 * 1024);
    const typed = await runInSandbox('function solve() { const a = []; for (;;) a.push(new Float64Array(1 << 17)); }', [{ args: [], expected: 0 }], limits);
    expect(typed).toMatchObject({ status: 'out-of-memory', error: 'memory limit exceeded (32 MiB)', passed: 0 });
  }, 60_000);

  test('huge strings, arrays and backtracking regexes stop within the limits as failed tests', async () => {
    const limits = { timeMs: 250, memoryBytes: 32 * 1024 * 1024 };
    const hostile = [
      "function solve() { return 'ab'.repeat(1e9).length; }",
      "function solve() { return ''.padStart(2 ** 30, 'x').length; }",
      'function solve() { return Array(1e9).fill(0).length; }',
      'function solve() { return new Array(2 ** 31).fill(1).length; }',
      "function solve() { return /^(a+)+$/.test('a'.repeat(40) + 'b'); }",
      "function solve() { return 'x'.repeat(1 << 22).replace(/x/g, 'yy').length; }",
    ];
    for (const code of hostile) {
      const began = Date.now();
      const result = await runInSandbox(code, [{ args: [], expected: 0 }], limits);
      expect(Date.now() - began, code).toBeLessThan(1500);
      expect(result.passed, code).toBe(0);
      expect(['ok', 'timeout', 'out-of-memory'], code).toContain(result.status);
      expect(['error', 'timeout', 'out-of-memory'], code).toContain(result.tests[0].status);
    }
  }, 60_000);

  test('a memory limit without room above the interpreter\'s own memory is refused', async () => {
    await expect(runInSandbox('function solve() {}', SUM_TESTS, { timeMs: 250, memoryBytes: 16 * 1024 * 1024 })).rejects.toThrow(
      "runInSandbox: memoryBytes 16777216 is out of range; give 24 MiB (the interpreter's own 16 MiB and room to grow) to 2048 MiB",
    );
  });

  test('deep recursion is an ordinary error, and the sandbox keeps working', async () => {
    const result = await runInSandbox('function solve(xs) { return solve(xs) + 1; }', SUM_TESTS, LIMITS);
    expect(result.status).toBe('ok');
    expect(result.tests[0]).toMatchObject({ status: 'error' });
    expect(result.tests[0].error).toContain('stack overflow');
    const nested = await runInSandbox('JSON.parse("[".repeat(100000))', SUM_TESTS, LIMITS);
    expect(nested.status).not.toBe('sandbox-failure');
    expect((await runInSandbox('function solve(xs) { return 6; }', SUM_TESTS, LIMITS)).passed).toBe(1);
  });

  test('the code sees no host: no require, process, fetch, console, timers or storage', async () => {
    const probe = `function solve() {
      return [typeof require, typeof process, typeof fetch, typeof globalThis.process, typeof console, typeof setTimeout,
        typeof XMLHttpRequest, typeof localStorage, typeof document, typeof window, typeof module, typeof Deno, typeof importScripts,
        typeof WebAssembly, typeof std, typeof os];
    }`;
    const result = await runInSandbox(probe, [{ args: [], expected: Array(16).fill('undefined') }], LIMITS);
    expect(result.status).toBe('ok');
    expect(JSON.parse(result.tests[0].actual!)).toEqual(Array(16).fill('undefined'));
    const imports = await runInSandbox("import fs from 'fs'; function solve() { return 1; }", SUM_TESTS, LIMITS);
    expect(imports.status).toBe('runtime-error');
    expect(imports.error).toContain("could not load module 'fs'");
    const dynamic = await runInSandbox("function solve() { return import('fs').then(() => 1); }", [{ args: [], expected: 1 }], LIMITS);
    expect(dynamic.passed).toBe(0);
  });

  test('the harness cannot be subverted by replacing globals', async () => {
    const code = 'JSON.stringify = () => "6"; JSON.parse = () => [[1, 2, 3]]; Reflect.apply = () => 6; function solve(xs) { return 0; }';
    const result = await runInSandbox(code, SUM_TESTS, LIMITS);
    expect(result).toMatchObject({ status: 'ok', passed: 1 }); // only the empty array sums to 0
    expect(result.tests.map((t) => t.actual)).toEqual(['0', '0', '0', '0']);
  });

  test('syntax errors, missing functions and odd return values are reported', async () => {
    const syntax = await runInSandbox('function solve(xs) { return xs.reduce((a, b) => a + b, 0); ', SUM_TESTS, LIMITS);
    expect(syntax.status).toBe('syntax-error');
    expect(syntax.error).toMatch(/^SyntaxError: /);
    expect(syntax.tests.every((t) => t.status === 'not-run')).toBe(true);
    const missing = await runInSandbox('function answer(xs) { return 1; }', SUM_TESTS, LIMITS);
    expect(missing).toMatchObject({ status: 'missing-function', passed: 0 });
    const thrownAtLoad = await runInSandbox("throw 'nope';", SUM_TESTS, LIMITS);
    expect(thrownAtLoad.status).toBe('runtime-error');
    const arrow = await runInSandbox('const solve = (xs) => xs.length;', [{ args: [[1, 2]], expected: 2 }], LIMITS);
    expect(arrow.passed).toBe(1);
    const undef = await runInSandbox('function solve() {}', [{ args: [], expected: null }], LIMITS);
    expect(undef.tests[0]).toMatchObject({ passed: false, actual: 'undefined' });
  });
});

describe('code extraction', () => {
  test('fenced blocks, preambles and trailing explanations', () => {
    const fn = 'function solve(xs) {\n  return xs.length;\n}';
    expect(extractCode(fn)).toBe(fn);
    expect(extractCode('```js\n' + fn + '\n```')).toBe(fn);
    expect(extractCode('Here is my solution:\n\n```javascript\n' + fn + '\n```\nIt counts the items.')).toBe(fn);
    expect(extractCode('Sure! Here it is:\n' + fn + '\nThis works because "}" ends it.')).toBe(fn);
    expect(extractCode('```\nconst helper = 1;\n```\n```js\n' + fn + '\n```')).toBe(fn);
    expect(extractCode("function solve(s) {\n  // a } in a comment\n  return s + '}';\n}\nexplanation")).toBe("function solve(s) {\n  // a } in a comment\n  return s + '}';\n}");
    expect(extractCode('const solve = (xs) => xs.length;')).toBe('const solve = (xs) => xs.length;');
    expect(extractCode('')).toBe('');
  });
});

describe('code-gen environment', () => {
  test('limits it cannot keep are refused when the environment is made, not at the first submission', () => {
    expect(() => codeGen.make({ limits: { memoryBytes: 8 << 20 } })).toThrow(/^code-gen option limits: memoryBytes 8388608 is out of range; give 24 MiB/);
    expect(() => codeGen.make({ limits: { timeMs: 0 } })).toThrow('code-gen option limits: timeMs 0 is out of range');
    expect(() => codeGen.make({ limits: { memoryBytes: 64 << 20, timeMs: 500 } })).not.toThrow();
  });

  test('meets the built-in environment contract', async () => {
    await checkBuiltinEnvironment(codeGen);
  }, 120_000);

  test('every family appears at its difficulty, and the expert solves every family on the train split', async () => {
    const seen = new Set<string>();
    for (const difficulty of [1, 2, 3]) {
      for (let seed = 0; seed < 40; seed++) seen.add(start(seed, difficulty).instance.family);
      expect(await successRate(codeGen, expertPolicy, { difficulty }, 20)).toBe(1);
    }
    expect([...seen].sort()).toEqual(CODE_GEN_FAMILIES.map((f) => f.id).sort());
  }, 60_000);

  test("the expert's action is one of the listed candidates, fenced or plain as listed (an action-level expert picks from the list)", () => {
    const fences = new Set<boolean>();
    for (let seed = 0; seed < 12; seed++) {
      const { env } = start(seed, 1);
      expect(env.validActions()).toContain(env.expertAction());
      fences.add(env.expertAction().startsWith('```'));
    }
    expect(fences).toEqual(new Set([true, false]));
  });

  test('a known seed: the observation, a partial submission, feedback and a second attempt', async () => {
    const { env, reset } = start(3, 1);
    expect(reset.observation).toMatch(/function solve\((xs|s|n)\) \{ \.\.\. \}/);
    expect(reset.observation).toContain('Examples:');
    expect(reset.observation).toContain('2 attempts');
    const candidates = env.validActions();
    expect(candidates).toHaveLength(6);
    expect(candidates).toContain(env.expertAction());
    const first = await env.step('function solve() { return 0; }');
    expect(first.terminated).toBe(false);
    expect(first.observation).toMatch(/^Attempt 1: \d+\/8 hidden tests passed\./);
    expect(first.observation).toContain('expected');
    expect(first.observation).toContain('1 attempt left');
    const second = await env.step('Here you go:\n' + env.expertAction() + '\nDone.');
    expect(second).toMatchObject({ terminated: true, truncated: false, info: { success: true, passed: 8, total: 8 } });
    expect(first.reward + second.reward).toBeCloseTo(1, 10);
  });

  test('a partially correct function gets a fractional reward; two failures end the episode', async () => {
    // Find a sum task: an off-by-one loop passes only the tests whose first element is 0 or that are empty.
    let found: ReturnType<typeof start> | null = null;
    for (let seed = 0; seed < 100 && found === null; seed++) {
      const s = start(seed, 1);
      if (s.instance.family === 'sum') found = s;
    }
    const { env, instance } = found!;
    const offByOne = `function solve(xs) { let s = ${instance.params.k}; for (let i = 1; i < xs.length; i++) s += xs[i]; return s; }`;
    const first = await env.step(offByOne);
    const passed = first.info.passed as number;
    expect(passed).toBeLessThan(8);
    expect(first.reward).toBeCloseTo(passed / 8, 10);
    expect(first.terminated).toBe(false);
    const second = await env.step('function solve(xs) { while (true) {} }');
    expect(second.observation).toContain('time limit exceeded');
    expect(second.reward).toBe(0);
    expect(second).toMatchObject({ terminated: true, truncated: false, info: { success: false } });
    expect(second.observation).toContain('No attempts left');
    expect((await env.step(offByOne)).terminated).toBe(true);
  });

  test('near misses: at difficulty 1 three candidates are the reference with a number shifted, and each fails a hidden test', async () => {
    const [referenceFences, wrongFences] = [new Set<boolean>(), new Set<boolean>()];
    for (let seed = 0; seed < 10; seed++) {
      const { env, instance } = start(seed, 1, 'test');
      const candidates = env.validActions();
      const code = candidates.map(extractCode);
      const reference = extractCode(env.expertAction());
      expect(new Set(code).size).toBe(6);
      for (const c of candidates) if (c !== env.expertAction()) wrongFences.add(c.startsWith('```'));
      referenceFences.add(env.expertAction().startsWith('```'));
      // A near miss differs from the reference in its numbers only.
      const shape = (text: string) => text.replace(/-?\d+/g, '#');
      const misses = code.filter((c) => c !== reference && shape(c) === shape(reference));
      expect(misses, `seed ${seed} (${instance.family})`).toHaveLength(3);
      for (const miss of misses) {
        const step = await start(seed, 1, 'test').env.step(miss);
        expect(step.info.status).toBe('ok');
        expect(step.info.passed as number, `seed ${seed}: ${miss}`).toBeLessThan(8);
      }
    }
    // Fenced or plain at random, the right one and the wrong ones alike: the fence says nothing.
    expect(referenceFences).toEqual(new Set([true, false]));
    expect(wrongFences).toEqual(new Set([true, false]));
  }, 60_000);

  test('a task without numbers to shift lists a constant, a syntax error and an infinite loop, and they score below 1', async () => {
    let found: ReturnType<typeof start> | null = null;
    for (let seed = 0; seed < 50 && found === null; seed++) {
      const s = start(seed, 2);
      if (Object.keys(s.instance.params).length === 0) found = s;
    }
    const { env } = found!;
    const candidates = env.validActions().map(extractCode);
    const loop = candidates.find((c) => c.includes('|| true'))!;
    const syntax = candidates.find((c) => !/\}\s*$/.test(c))!;
    expect(candidates.some((c) => /^function solve\(\w+\) \{\n {2}return (0|''|\[\]|true);\n\}$/.test(c))).toBe(true);
    const began = Date.now();
    const loopResult = await env.step(loop);
    expect(Date.now() - began).toBeLessThan(2000);
    expect(loopResult.reward).toBe(0);
    expect(loopResult.info.status).toBe('timeout');
    const syntaxResult = await env.step(syntax);
    expect(syntaxResult.info.status).toBe('syntax-error');
    expect(syntaxResult.observation).toContain('SyntaxError');
  });
});
