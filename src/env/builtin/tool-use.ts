// tool-use: answer a question by calling tools over several steps (call, observe, answer).
//
// Tools: a lookup table of seeded fictional items (prices of fruits, populations of towns, ages of
// people) and a calculator (+ - * / and parentheses, evaluated by a small recursive-descent parser,
// never eval). Difficulty 1 needs one tool call, 2 needs a lookup and a calculation, 3 needs two
// lookups and a calculation.
//
// Actions (free text, parsed with text-actions.ts; case, quotes, markdown and trailing full stops
// do not matter, and the first line that names a verb is used):
//   lookup: KEY        also `look up KEY`, `search KEY`; plurals and "the price of" are tolerated
//   calc: EXPRESSION   also `calculate`, `compute`; `x`, `×`, `÷` are accepted as operators
//   answer: NUMBER     also `answer 19.`, `The answer is 19`, `Final answer: 1,200`, or a bare number
// Rewards: +1 for a correct answer (terminated, success), 0 for a wrong one (terminated, failure),
// +0.1 for a tool call that makes progress (the first lookup of each key the question needs, the
// first calculation whose value is the answer), 0 for other tool calls, -0.05 for an action that
// cannot be parsed (the episode goes on). Episodes are truncated after maxEpisodeSteps steps
// (success false).
//
// Why progress pays and other calls are free: if every call cost something, answering at once (a
// wrong answer, 0) would beat the first call of an agent that has not yet found the answer by
// chance, and advantage normalisation turns even a hundredth into a strong push away from the
// tools. Each progress reward is paid once and the expert earns all of them, so the best policy is
// unchanged: use the tools, then answer right. The step limit bounds aimless calls.
import { normalizeText, parseCommand, parseNumber } from '../text-actions.ts';
import type { BuiltinEnvModule, Env, EnvInfo, ExpertEnv, ResetOptions, ResetResult, Split, StepResult } from '../types.ts';
import { hashString, mulberry32 } from '../../common/random.ts';
import { instanceId } from './instance-id.ts';

const MAX_STEPS = 8;
const PROGRESS_REWARD = 0.1;
const INVALID_COST = -0.05;
const TABLE_SIZE = 6;

// ---------------------------------------------------------------------------------------------
// The calculator.

export type CalcResult = { ok: true; value: number } | { ok: false; error: string };

const MAX_EXPRESSION_CHARS = 200;
const MAX_DEPTH = 32;

/** Evaluates + - * / with parentheses and unary minus. Never throws; never uses eval. */
export function evaluateExpression(text: string): CalcResult {
  const source = String(text ?? '').trim().replace(/[=?]+$/, '').trim();
  if (source === '') return { ok: false, error: 'empty expression' };
  if (source.length > MAX_EXPRESSION_CHARS) return { ok: false, error: `expression longer than ${MAX_EXPRESSION_CHARS} characters` };
  const tokens: string[] = [];
  const re = /\s*(\d+(?:\.\d*)?|\.\d+|[-+*/()x×÷])/gy;
  let at = 0;
  while (at < source.length) {
    re.lastIndex = at;
    const m = re.exec(source);
    if (!m) {
      if (/^\s*$/.test(source.slice(at))) break;
      return { ok: false, error: `unexpected "${source.slice(at).trim()[0]}"` };
    }
    tokens.push(m[1] === 'x' || m[1] === '×' ? '*' : m[1] === '÷' ? '/' : m[1]);
    at = re.lastIndex;
  }
  let i = 0;
  let error: string | null = null;
  const fail = (message: string): number => {
    error ??= message;
    return NaN;
  };
  const expr = (depth: number): number => {
    if (depth > MAX_DEPTH) return fail('too deeply nested');
    let value = term(depth);
    while (error === null && (tokens[i] === '+' || tokens[i] === '-')) {
      const op = tokens[i++];
      const right = term(depth);
      value = op === '+' ? value + right : value - right;
    }
    return value;
  };
  const term = (depth: number): number => {
    let value = factor(depth);
    while (error === null && (tokens[i] === '*' || tokens[i] === '/')) {
      const op = tokens[i++];
      const right = factor(depth);
      if (op === '/' && right === 0 && error === null) return fail('division by zero');
      value = op === '*' ? value * right : value / right;
    }
    return value;
  };
  const factor = (depth: number): number => {
    if (depth > MAX_DEPTH) return fail('too deeply nested');
    const token = tokens[i++];
    if (token === undefined) return fail('expression ends too early');
    if (token === '-') return -factor(depth + 1);
    if (token === '+') return factor(depth + 1);
    if (token === '(') {
      const value = expr(depth + 1);
      if (error !== null) return NaN;
      if (tokens[i++] !== ')') return fail('missing ")"');
      return value;
    }
    if (/^[\d.]/.test(token)) return Number(token);
    return fail(`unexpected "${token}"`);
  };
  const value = expr(0);
  if (error === null && i < tokens.length) fail(`unexpected "${tokens[i]}"`);
  if (error !== null) return { ok: false, error };
  if (!Number.isFinite(value)) return { ok: false, error: 'result out of range' };
  return { ok: true, value };
}

/** A number as the calculator prints it: integers plainly, fractions to at most 6 decimals. */
export function formatNumber(value: number): string {
  if (Number.isInteger(value)) return String(value);
  return String(Number(value.toFixed(6)));
}

// ---------------------------------------------------------------------------------------------
// Seeded instances.



type Kind = 'price' | 'population' | 'age' | 'arithmetic';

/** What one episode is about: the hidden state (hiddenState()); info.instance has only its id, difficulty and kind. */
export interface ToolUseInstance {
  difficulty: number;
  kind: Kind;
  /** What the table holds (for arithmetic questions the table is only a distraction). */
  tableKind: Exclude<Kind, 'arithmetic'>;
  question: string;
  /** Lookup table: key → value. */
  table: Record<string, number>;
  /** Keys the question needs, in order. */
  needed: string[];
  /** The calculation to make once the needed values are known, or null. */
  expression: string | null;
  answer: number;
}

const PREFIXES = ['glim', 'dor', 'quen', 'vash', 'tril', 'mop', 'zan', 'bex', 'ful', 'kor', 'pim', 'sul', 'yar', 'nev', 'ob', 'rint'];
const SUFFIXES: Record<Exclude<Kind, 'arithmetic'>, string[]> = {
  price: ['nut', 'melon', 'plum', 'root', 'bean', 'pod'],
  population: ['ford', 'ton', 'haven', 'mere', 'wick', 'stead'],
  age: ['a', 'o', 'in', 'el', 'ira', 'us'],
};

function makeInstance(random: () => number, difficulty: number): ToolUseInstance {
  const int = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)];
  const kinds: Kind[] = difficulty === 1 ? ['price', 'population', 'age', 'arithmetic'] : ['price', 'population', 'age'];
  const kind = pick(kinds);
  const tableKind = kind === 'arithmetic' ? pick(['price', 'population', 'age'] as const) : kind;
  const table: Record<string, number> = {};
  while (Object.keys(table).length < TABLE_SIZE) {
    const key = pick(PREFIXES) + pick(SUFFIXES[tableKind]);
    if (key in table) continue;
    table[key] = tableKind === 'price' ? int(2, 19) : tableKind === 'population' ? 100 * int(10, 99) : int(8, 90);
  }
  const keys = Object.keys(table);
  const title = (k: string) => (tableKind === 'price' ? k : k[0].toUpperCase() + k.slice(1));
  const [a, b] = keys;
  let question: string;
  let needed: string[] = [];
  let expression: string | null = null;
  if (kind === 'arithmetic') {
    const [x, y, z] = [int(2, 30), int(2, 30), int(2, 12)];
    expression = pick([`(${x} + ${y}) * ${z}`, `${x} * ${z} - ${y}`, `${x} + ${y} * ${z}`]);
    question = `What is ${expression}?`;
  } else if (difficulty === 1) {
    needed = [a];
    question = { price: `What is the price of one ${a}, in coins?`, population: `What is the population of ${title(a)}?`, age: `How old is ${title(a)}?` }[kind];
  } else if (difficulty === 2) {
    needed = [a];
    if (kind === 'price') {
      const q = int(3, 9);
      question = `What do ${q} ${a}s cost, in coins?`;
      expression = `${q} * ${table[a]}`;
    } else if (kind === 'population') {
      const q = int(12, 98) * 5;
      question = `If ${q} people move away from ${title(a)}, how many people will live there?`;
      expression = `${table[a]} - ${q}`;
    } else {
      const q = int(3, 25);
      question = `How old will ${title(a)} be in ${q} years?`;
      expression = `${table[a]} + ${q}`;
    }
  } else {
    needed = [a, b];
    if (kind === 'price') {
      const [q1, q2] = [int(2, 9), int(2, 9)];
      question = `What do ${q1} ${a}s and ${q2} ${b}s cost together, in coins?`;
      expression = `${q1} * ${table[a]} + ${q2} * ${table[b]}`;
    } else if (kind === 'population') {
      if (table[a] === table[b]) table[b] += 100;
      const [big, small] = table[a] > table[b] ? [a, b] : [b, a];
      question = `How many more people live in ${title(big)} than in ${title(small)}?`;
      needed = [big, small];
      expression = `${table[big]} - ${table[small]}`;
    } else {
      question = `What is the combined age of ${title(a)} and ${title(b)}?`;
      expression = `${table[a]} + ${table[b]}`;
    }
  }
  const answer = expression === null ? table[needed[0]] : (evaluateExpression(expression) as { value: number }).value;
  // Shuffle the table so the needed keys are not always listed first.
  const shuffled: Record<string, number> = {};
  const order = keys.map((k) => [random(), k] as const).sort((p, q) => p[0] - q[0]);
  for (const [, k] of order) shuffled[k] = table[k];
  return { difficulty, kind, tableKind, question, table: shuffled, needed, expression, answer };
}

/** Train instances hash to class 0, test instances to class 1: the splits never share an instance. */
function splitClass(instance: ToolUseInstance): number {
  return hashString(JSON.stringify([instance.difficulty, instance.question, instance.table])) & 1;
}

// ---------------------------------------------------------------------------------------------
// The environment.

const VERBS = {
  lookup: ['lookup', 'look up', 'search'],
  calc: ['calc', 'calculate', 'calculator', 'compute'],
  answer: ['answer'],
};

const FORMATS = 'Reply with exactly one action: `lookup: KEY`, `calc: EXPRESSION` (+ - * / and parentheses) or `answer: NUMBER`.';

export class ToolUseEnv implements Env, ExpertEnv {
  private instance: ToolUseInstance | null = null;
  private looked = new Set<string>();
  private computed = false;
  private steps = 0;
  private done = false;
  private success = false;
  private wrongCalcs: string[] = [];
  private decoys: number[] = [];
  private blindGuesses: number[] = [];

  reset({ seed, options }: { seed: number; options?: ResetOptions }): ResetResult {
    const split: Split = options?.split === 'test' ? 'test' : 'train';
    const difficulty = Math.min(3, Math.max(1, Math.round(Number(options?.difficulty ?? 1)) || 1));
    const instanceSeed = hashString(`tool-use|${seed}|${split}|${difficulty}`);
    const random = mulberry32(instanceSeed);
    const want = split === 'train' ? 0 : 1;
    let instance = makeInstance(random, difficulty);
    while (splitClass(instance) !== want) instance = makeInstance(random, difficulty);
    this.instance = instance;
    this.looked = new Set();
    this.computed = false;
    this.steps = 0;
    this.done = false;
    this.success = false;
    this.wrongCalcs = wrongVariants(instance.expression, instance.answer);
    this.decoys = makeDecoys(instance, this.wrongCalcs, random);
    const distractorValues = Object.entries(instance.table).filter(([k]) => !instance.needed.includes(k)).map(([, v]) => v);
    // Blind guesses are values the question does not need, so that none is the answer or one of its terms.
    const neededValues = new Set([instance.answer, ...instance.needed.map((key) => instance.table[key])]);
    this.blindGuesses = [...new Set(distractorValues.filter((v) => !neededValues.has(v)))].slice(0, 2);
    const keys = Object.keys(instance.table).join(', ');
    const observation = [
      `Question: ${instance.question}`,
      `Tools: \`lookup: KEY\` reads a table with the keys ${keys}; \`calc: EXPRESSION\` is a calculator.`,
      FORMATS,
      `You have ${MAX_STEPS} steps.`,
    ].join('\n');
    // What identifies the instance (the seed it is drawn from), never what solves it: the table and the answer stay here.
    return { observation, info: { instance: { id: instanceId(instanceSeed), difficulty, kind: instance.kind }, split, difficulty } };
  }

  step(action: string): StepResult {
    const instance = this.requireInstance();
    if (this.done) return { observation: 'The episode is over; call reset().', reward: 0, terminated: true, truncated: false, info: { success: this.success } };
    this.steps++;
    const result = this.act(instance, typeof action === 'string' ? action : String(action));
    if (result.terminated) {
      this.done = true;
      this.success = result.info.success === true;
    } else if (this.steps >= MAX_STEPS) {
      this.done = true;
      result.truncated = true;
      result.info.success = false;
      result.observation += `\nOut of steps: the answer was ${formatNumber(instance.answer)}.`;
    }
    return result;
  }

  private act(instance: ToolUseInstance, action: string): StepResult {
    const reply = (observation: string, reward: number, info: EnvInfo = {}, terminated = false): StepResult => ({ observation, reward, terminated, truncated: false, info });
    const invalid = (why: string) => reply(`${why}\n${FORMATS}`, INVALID_COST, { invalid: true });
    let command = parseCommand(action, VERBS);
    if (command === null && /^-?[\d,]*\.?\d+$/.test(normalizeText(action))) command = { verb: 'answer', argument: normalizeText(action) };
    if (command === null) return invalid('Could not read an action.');
    if (command.verb === 'lookup') {
      const key = resolveKey(command.argument, instance.table);
      if (key === null) {
        const asked = normalizeText(command.argument).slice(0, 40);
        return reply(`lookup "${asked}": no such key. Keys: ${Object.keys(instance.table).join(', ')}.`, 0, { tool: 'lookup' });
      }
      const progress = instance.needed.includes(key) && !this.looked.has(key);
      this.looked.add(key);
      return reply(`lookup ${key} → ${instance.table[key]}${describeValue(instance, key)}`, progress ? PROGRESS_REWARD : 0, { tool: 'lookup' });
    }
    if (command.verb === 'calc') {
      const result = evaluateExpression(command.argument);
      const shown = command.argument.slice(0, 60);
      if (!result.ok) return reply(`calc ${shown} → error: ${result.error}`, 0, { tool: 'calc' });
      const progress = instance.expression !== null && !this.computed && Math.abs(result.value - instance.answer) < 1e-9;
      if (progress) this.computed = true;
      return reply(`calc ${shown} → ${formatNumber(result.value)}`, progress ? PROGRESS_REWARD : 0, { tool: 'calc' });
    }
    const value = parseNumber(command.argument);
    if (value === null) return invalid('An answer must be a number, e.g. `answer: 19`.');
    const correct = Math.abs(value - instance.answer) < 1e-6;
    const observation = correct ? `Correct: ${formatNumber(instance.answer)}.` : `Wrong: you answered ${formatNumber(value)}, the answer was ${formatNumber(instance.answer)}.`;
    return reply(observation, correct ? 1 : 0, { success: correct }, true);
  }

  /** Needed lookups, plausible distractors, the calculation (and near misses) once its numbers are known, answer candidates. */
  validActions(): string[] {
    const instance = this.requireInstance();
    if (this.done) return [];
    const actions: string[] = [];
    const remaining = instance.needed.filter((k) => !this.looked.has(k));
    const distractors = Object.keys(instance.table).filter((k) => !instance.needed.includes(k) && !this.looked.has(k));
    for (const key of [...remaining, ...distractors.slice(0, remaining.length > 0 ? 3 - remaining.length : 1)]) actions.push(`lookup: ${key}`);
    const canCalc = instance.expression !== null && remaining.length === 0 && !this.computed;
    if (canCalc) actions.push(`calc: ${instance.expression}`, ...this.wrongCalcs.map((e) => `calc: ${e}`));
    const known = remaining.length === 0 && (instance.expression === null || this.computed);
    // Before the tools have been used, the answer candidates are distractor values (they reveal nothing).
    const answers = known ? [instance.answer, ...this.decoys] : this.blindGuesses;
    for (const n of answers) actions.push(`answer: ${formatNumber(n)}`);
    return actions.sort();
  }

  expertAction(): string {
    const instance = this.requireInstance();
    const next = instance.needed.find((k) => !this.looked.has(k));
    if (next !== undefined) return `lookup: ${next}`;
    if (instance.expression !== null && !this.computed) return `calc: ${instance.expression}`;
    return `answer: ${formatNumber(instance.answer)}`;
  }

  hiddenState(): ToolUseInstance {
    return this.requireInstance();
  }

  close(): void {
    this.instance = null;
  }

  private requireInstance(): ToolUseInstance {
    if (this.instance === null) throw new Error('tool-use: call reset() before step()');
    return this.instance;
  }
}

function describeValue(instance: ToolUseInstance, key: string): string {
  const k = instance.tableKind;
  const name = key[0].toUpperCase() + key.slice(1);
  return k === 'price' ? ` (price of one ${key}, in coins)` : k === 'population' ? ` (population of ${name})` : ` (age of ${name}, in years)`;
}

/** The table key that a lookup argument names: exact, or after dropping "the price of", "the", a plural "s". */
function resolveKey(argument: string, table: Record<string, number>): string | null {
  let key = normalizeText(argument).replace(/^(?:the )?(?:(?:price|population|age|cost) of )?(?:the |one |a |an )?/, '').trim();
  key = key.split(/[\s:,]/)[0] ?? '';
  if (key in table) return key;
  if (key.endsWith('s') && key.slice(0, -1) in table) return key.slice(0, -1);
  return null;
}

/** Near-miss calculations: the right expression with one operator changed, giving a different value. */
function wrongVariants(expression: string | null, answer: number): string[] {
  if (expression === null) return [];
  const swaps: Record<string, string[]> = { '+': ['*', '-'], '-': ['+', '*'], '*': ['+', '-'] };
  const variants: string[] = [];
  const positions = [...expression.matchAll(/ ([-+*]) /g)].map((m) => m.index!);
  for (let round = 0; round < 2; round++) {
    for (const at of round === 0 ? positions : [...positions].reverse()) {
      const op = expression[at + 1];
      const variant = expression.slice(0, at + 1) + swaps[op][round] + expression.slice(at + 2);
      const result = evaluateExpression(variant);
      if (result.ok && result.value !== answer && !variants.includes(variant)) variants.push(variant);
      if (variants.length === 2) return variants;
    }
  }
  return variants;
}

/**
 * Wrong but plausible answers that do not mark the answer out: the near-miss results when there is
 * a calculation; else a distractor value, with a near miss beside it and one beside the answer
 * (above or below at random), so that every value offered has a neighbour and the answer is as
 * likely the smaller of its pair as the larger.
 */
function makeDecoys(instance: ToolUseInstance, wrongCalcs: string[], random: () => number): number[] {
  const misses = wrongCalcs.map((e) => (evaluateExpression(e) as { value: number }).value);
  const others = Object.entries(instance.table).filter(([k]) => !instance.needed.includes(k)).map(([, v]) => v);
  const distractor = others[Math.floor(random() * others.length)];
  const pool = misses.length >= 2 ? misses : [...misses, distractor, nearMiss(instance.answer, random), nearMiss(distractor, random)];
  const decoys: number[] = [];
  for (const n of pool) if (n !== instance.answer && !decoys.includes(n)) decoys.push(n);
  return decoys;
}

/** A value a little above or below `n` (by 1 to 5, or 100 to 500 from 1000 on), never below 1. */
function nearMiss(n: number, random: () => number): number {
  const offset = (n >= 1000 ? 100 : 1) * (1 + Math.floor(random() * 5));
  const below = random() < 0.5 && n - offset >= 1;
  return below ? n - offset : n + offset;
}

const toolUse: BuiltinEnvModule = {
  id: 'tool-use',
  description: 'Answer a question by calling tools over several steps: look up values in a table of fictional items, compute with a calculator, then answer with a number.',
  maxEpisodeSteps: MAX_STEPS,
  make: () => new ToolUseEnv(),
};

export default toolUse;
