// code-gen: write a short JavaScript function that passes hidden unit tests.
//
// Each episode is one seeded task: a family (difficulty 1: one-liners such as the sum of an array;
// 2: small loops and string processing such as counting vowels or a FizzBuzz list; 3: a bit more,
// such as run-length encoding, balanced brackets or Roman numerals), its parameters, visible examples
// and hidden tests with seeded inputs. The observation shows the signature (`function solve(xs) { ... }`).
//
// Action: the code, as plain text or in a fenced ```js block (the block that defines `solve` is used;
// prose before the code and after the function is dropped). The code runs in the QuickJS sandbox
// (src/env/sandbox.ts: no console, no require, no network; a time and a memory limit).
// Up to 2 submissions (maxEpisodeSteps): a submission that passes every hidden test ends the episode
// with success; a failing first one gets feedback (which tests failed, the error) and one more try.
// The reward of a step is the rise in the best fraction of hidden tests passed so far, so an
// episode's return is the best fraction it reached (1 on success). The listed candidates are near
// misses that look like the reference, so that a policy must read the task to tell them apart
// (docs/environments.md, "code-gen", says what chance gets).
import { checkSandboxLimits, runInSandbox, type SandboxLimits, type SandboxResult, type SandboxTest } from '../sandbox.ts';
import type { BuiltinEnvModule, Env, ExpertEnv, ResetOptions, ResetResult, Split, StepResult } from '../types.ts';
import { hashString, mulberry32 } from '../../common/random.ts';
import { FAMILIES, pick, type Family, type Params, type Rand } from './code-gen-tasks.ts';
import { instanceId } from './instance-id.ts';

const MAX_ATTEMPTS = 2;
const HIDDEN_TESTS = 8;
const MAX_CODE_CHARS = 8000;
const DEFAULT_LIMITS: SandboxLimits = { timeMs: 250, memoryBytes: 32 * 1024 * 1024 };

export { CODE_GEN_FAMILIES } from './code-gen-tasks.ts';

// ---------------------------------------------------------------------------------------------
// Seeded instances.

/** What one episode is about, hidden tests included: the hidden state (hiddenState()); info.instance has only its id, family and difficulty. */
export interface CodeGenInstance {
  family: string;
  difficulty: number;
  params: Params;
  /** Arguments of the hidden tests. */
  inputs: unknown[][];
}

interface Task {
  instance: CodeGenInstance;
  family: Family;
  examples: SandboxTest[];
  tests: SandboxTest[];
}

function makeTask(random: Rand, difficulty: number): Task {
  const family = pick(random, FAMILIES.filter((f) => f.difficulty === difficulty));
  const params = family.params(random);
  const call = (args: unknown[]): SandboxTest => ({ args, expected: family.reference(params, ...structuredClone(args)) });
  const distinct = (n: number, avoid: Set<string>): SandboxTest[] => {
    const out: SandboxTest[] = [];
    for (let tries = 0; out.length < n && tries < 200; tries++) {
      const args = family.input(random, params);
      const key = JSON.stringify(args);
      if (avoid.has(key)) continue;
      avoid.add(key);
      out.push(call(args));
    }
    return out;
  };
  const seen = new Set<string>();
  const examples = distinct(2, seen);
  const tests = distinct(HIDDEN_TESTS, seen);
  return { instance: { family: family.id, difficulty, params, inputs: tests.map((t) => t.args) }, family, examples, tests };
}

/** Train instances hash to class 0, test instances to class 1: the splits never share an instance. */
function splitClass(instance: CodeGenInstance): number {
  return hashString(JSON.stringify(instance)) & 1;
}

// ---------------------------------------------------------------------------------------------
// Reading the code out of an action.

/**
 * The program an action means: the fenced code block that defines `solve` (or the first block),
 * else the text from its first line that looks like code; in either case anything after the end of
 * the `solve` function (an explanation) is dropped. Never throws.
 */
export function extractCode(action: string): string {
  const text = String(action ?? '').slice(0, MAX_CODE_CHARS).replace(/\r\n?/g, '\n');
  const blocks = [...text.matchAll(/```[\w+-]*[^\S\n]*\n?([\s\S]*?)(?:```|$)/g)].map((m) => m[1]);
  let code: string;
  if (blocks.length > 0) {
    code = blocks.find((b) => /\bsolve\b/.test(b)) ?? blocks[0];
  } else {
    const lines = text.split('\n');
    const start = lines.findIndex((l) => /^\s*(?:function\b|async\s+function\b|const\b|let\b|var\b|\/\/|\/\*|['"]use strict)/.test(l));
    code = start >= 0 ? lines.slice(start).join('\n') : text;
  }
  const at = code.search(/\bfunction\s+solve\s*\(/);
  if (at >= 0) {
    const end = closingBrace(code, at);
    if (end !== null) code = code.slice(0, end + 1);
  }
  return code.trim();
}

/** Index of the brace that closes the first `{` at or after `from`, skipping strings and comments; null if none. */
function closingBrace(code: string, from: number): number | null {
  let depth = 0;
  let opened = false;
  for (let i = from; i < code.length; i++) {
    const c = code[i];
    if (c === '/' && code[i + 1] === '/') {
      const nl = code.indexOf('\n', i);
      if (nl < 0) return null;
      i = nl;
    } else if (c === '/' && code[i + 1] === '*') {
      const close = code.indexOf('*/', i + 2);
      if (close < 0) return null;
      i = close + 1;
    } else if (c === '"' || c === "'" || c === '`') {
      for (i++; i < code.length && code[i] !== c; i++) if (code[i] === '\\') i++;
    } else if (c === '{') {
      depth++;
      opened = true;
    } else if (c === '}') {
      depth--;
      if (opened && depth === 0) return i;
    }
  }
  return null;
}

// ---------------------------------------------------------------------------------------------
// The environment.

function show(value: unknown): string {
  const text = JSON.stringify(value) ?? 'undefined';
  return text.length > 120 ? `${text.slice(0, 120)}…` : text;
}

function showCall(args: unknown[]): string {
  return `solve(${args.map(show).join(', ')})`;
}

export class CodeGenEnv implements Env, ExpertEnv {
  private task: Task | null = null;
  private candidates: string[] = [];
  /** The reference solution as the candidates list it (fenced or plain): the expert's action. */
  private reference = '';
  private attempts = 0;
  private best = 0;
  private done = false;
  private success = false;

  constructor(private readonly limits: SandboxLimits = DEFAULT_LIMITS) {}

  reset({ seed, options }: { seed: number; options?: ResetOptions }): ResetResult {
    const split: Split = options?.split === 'test' ? 'test' : 'train';
    const difficulty = Math.min(3, Math.max(1, Math.round(Number(options?.difficulty ?? 1)) || 1));
    const instanceSeed = hashString(`code-gen|${seed}|${split}|${difficulty}`);
    const random = mulberry32(instanceSeed);
    const want = split === 'train' ? 0 : 1;
    let task = makeTask(random, difficulty);
    while (splitClass(task.instance) !== want) task = makeTask(random, difficulty);
    this.task = task;
    this.attempts = 0;
    this.best = 0;
    this.done = false;
    this.success = false;
    ({ candidates: this.candidates, reference: this.reference } = makeCandidates(task, random));
    const { family, instance } = task;
    const observation = [
      `Write a JavaScript function that ${family.describe(instance.params)}.`,
      '',
      `function solve(${family.signature}) { ... }`,
      '',
      'Examples:',
      ...task.examples.map((e) => `  ${showCall(e.args)} → ${show(e.expected)}`),
      '',
      `Your function is run on ${task.tests.length} hidden tests in a sandbox (plain JavaScript, no console, no require, no network; ` +
        `${this.limits.timeMs} ms and ${Math.round(this.limits.memoryBytes / (1 << 20))} MiB in all).`,
      `Reply with the complete function, for example in a \`\`\`js code block. You have ${MAX_ATTEMPTS} attempts.`,
    ].join('\n');
    // The hidden tests' inputs and expected values stay here: info identifies the task only.
    return { observation, info: { instance: { id: instanceId(instanceSeed), family: instance.family, difficulty }, split, difficulty } };
  }

  async step(action: string): Promise<StepResult> {
    const task = this.requireTask();
    if (this.done) return { observation: 'The episode is over; call reset().', reward: 0, terminated: true, truncated: false, info: { success: this.success } };
    this.attempts++;
    const code = extractCode(typeof action === 'string' ? action : String(action));
    const result: SandboxResult =
      code === ''
        ? { status: 'missing-function', error: 'no code found', tests: [], passed: 0, total: task.tests.length }
        : await runInSandbox(code, task.tests, this.limits);
    const fraction = result.total > 0 ? result.passed / result.total : 0;
    const reward = Math.max(0, fraction - this.best);
    this.best = Math.max(this.best, fraction);
    const solved = result.status === 'ok' && result.passed === result.total;
    const terminated = solved || this.attempts >= MAX_ATTEMPTS;
    if (terminated) {
      this.done = true;
      this.success = solved;
    }
    const lines = [`Attempt ${this.attempts}: ${result.passed}/${result.total} hidden tests passed.`];
    if (result.status !== 'ok') lines.push(`Error: ${result.error ?? result.status}.`);
    const failures = result.tests.map((t, i) => ({ t, test: task.tests[i] })).filter(({ t }) => !t.passed && t.status !== 'not-run');
    for (const { t, test } of failures.slice(0, 3)) {
      const got = t.status === 'wrong' ? `returned ${t.actual}` : `failed: ${t.error}`;
      lines.push(`  ${showCall(test.args)} ${got}; expected ${show(test.expected)}`);
    }
    if (failures.length > 3) lines.push(`  (${failures.length - 3} more failed)`);
    if (solved) lines.push('All tests pass.');
    else if (terminated) lines.push('No attempts left.');
    else lines.push(`Fix the function and submit it again (${MAX_ATTEMPTS - this.attempts} attempt${MAX_ATTEMPTS - this.attempts === 1 ? '' : 's'} left).`);
    const info = { passed: result.passed, total: result.total, status: result.status, ...(terminated ? { success: solved } : {}) };
    return { observation: lines.join('\n'), reward, terminated, truncated: false, info };
  }

  /** Six candidate programs: the reference solution and plausible wrong ones, in a seeded order. */
  validActions(): string[] {
    this.requireTask();
    return this.done ? [] : [...this.candidates];
  }

  expertAction(): string {
    this.requireTask();
    return this.reference;
  }

  hiddenState(): { instance: CodeGenInstance; tests: SandboxTest[] } {
    const { instance, tests } = this.requireTask();
    return { instance, tests };
  }

  close(): void {
    this.task = null;
  }

  private requireTask(): Task {
    if (this.task === null) throw new Error('code-gen: call reset() before step()');
    return this.task;
  }
}

/**
 * Six candidates: the reference, two task-specific mistakes and three near misses,
 * the reference with one of its numbers off by one to three (each fails a hidden test). A task with
 * fewer numeric parameters to shift fills the rest with a constant, a syntax error and an infinite loop.
 * Near misses look like the reference, so a policy must read the task's numbers to tell them apart.
 */
function makeCandidates(task: Task, random: Rand): { candidates: string[]; reference: string } {
  const { family, instance } = task;
  const sig = family.signature;
  const solution = family.solution(instance.params);
  const shuffled = <T>(xs: readonly T[]) => xs.map((x) => [random(), x] as const).sort((a, b) => a[0] - b[0]).map(([, x]) => x);
  const wrong = shuffled(family.wrong(instance.params));
  const loopVar = sig === 'n' ? 'n' : `${sig}.length`;
  const brokenOnSight = [
    `function solve(${sig}) {\n  return ${family.constant};\n}`,
    solution.replace(/\}\s*$/, ''), // a missing closing brace: a syntax error
    `function solve(${sig}) {\n  let i = 0;\n  while (i < ${loopVar} || true) i++;\n  return i;\n}`,
  ];
  const misses = nearMisses(task, solution, shuffled([1, -1, 2, -2, 3, -3]), 3);
  // Each candidate is fenced or plain at random, so that the fence says nothing about which is right.
  const [reference, ...others] = [solution, ...wrong.slice(0, 2), ...misses, ...brokenOnSight.slice(0, 3 - misses.length)].map((code) =>
    random() < 0.5 ? code : '```js\n' + code + '\n```',
  );
  return { candidates: shuffled([reference, ...others]), reference };
}

/** Up to `count` variants of `solution` with one numeric parameter shifted by one of `shifts`, each failing a hidden test. */
function nearMisses({ family, instance, tests }: Task, solution: string, shifts: number[], count: number): string[] {
  const numeric = Object.keys(instance.params).filter((name) => typeof instance.params[name] === 'number');
  const misses: string[] = [];
  for (const shift of shifts) {
    for (const name of numeric) {
      const value = Number(instance.params[name]) + shift;
      if (value < 0 && Number(instance.params[name]) >= 0) continue; // a negative count or width reads as broken on sight
      const params = { ...instance.params, [name]: value };
      const code = family.solution(params);
      if (code === solution || misses.includes(code) || !failsATest(family, params, tests)) continue;
      misses.push(code);
      if (misses.length === count) return misses;
    }
  }
  return misses;
}

function failsATest(family: Family, params: Params, tests: SandboxTest[]): boolean {
  return tests.some((test) => {
    try {
      return JSON.stringify(family.reference(params, ...structuredClone(test.args))) !== JSON.stringify(test.expected);
    } catch {
      return true;
    }
  });
}

const codeGen: BuiltinEnvModule = {
  id: 'code-gen',
  description: 'Write a short JavaScript function that passes hidden unit tests, run in a QuickJS WebAssembly sandbox; up to two attempts with feedback.',
  maxEpisodeSteps: MAX_ATTEMPTS,
  make: (options?: Record<string, unknown>) => {
    const limits: SandboxLimits = { ...DEFAULT_LIMITS, ...((options?.limits as Partial<SandboxLimits> | undefined) ?? {}) };
    // Refused here, when the environment is made, not at the first submission.
    checkSandboxLimits(limits, 'code-gen option limits');
    return new CodeGenEnv(limits);
  },
};

export default codeGen;
