// reasoning: guess the secret number in 1..N with "higher"/"lower" feedback, within a guess budget.
//
// N is 30, 100 or 500 at difficulty 1, 2, 3; the budget is ceil(log2(N + 1)) guesses (5, 7, 9),
// exactly what bisection needs in the worst case, so only a policy that uses the feedback well wins.
//
// Actions (free text, parsed with text-actions.ts): `guess: K`, also `guess K`, `My guess is K.`,
// `I'll try K`, `answer: K`, or a bare number `K`. A guess outside 1..N, or text without a number,
// is invalid: -0.05, it explains the format and does not use up a guess.
// Rewards: +1 for finding the number (terminated, success true); 0 for every other guess (no
// shaping); when the budget runs out the episode terminates with success false. Episodes are also
// truncated after maxEpisodeSteps steps (invalid actions count as steps).
import { parseCommand, parseNumber } from '../text-actions.ts';
import type { BuiltinEnvModule, Env, ExpertEnv, ResetOptions, ResetResult, Split, StepResult } from '../types.ts';
import { hashString, mulberry32 } from '../../common/random.ts';
import { instanceId } from './instance-id.ts';

const RANGES = [30, 100, 500];
const MAX_STEPS = 16;
const INVALID_COST = -0.05;
const MAX_CANDIDATES = 8;



/** Train secrets hash to class 0 and test secrets to class 1, so (N, secret) pairs never coincide across splits. */
export function splitOf(n: number, secret: number): Split {
  return (hashString(`reasoning|${n}|${secret}`) & 1) === 0 ? 'train' : 'test';
}

/** The guesses a policy may take now: the bisection midpoint and points spread over the feasible interval. */
export function candidateGuesses(lo: number, hi: number): number[] {
  const size = hi - lo + 1;
  if (size <= 0) return [];
  if (size <= MAX_CANDIDATES) return Array.from({ length: size }, (_, i) => lo + i);
  const set = new Set([Math.floor((lo + hi) / 2)]);
  for (let i = 0; i < MAX_CANDIDATES - 1; i++) set.add(lo + Math.round((i * (size - 1)) / (MAX_CANDIDATES - 2)));
  return [...set].sort((a, b) => a - b).slice(0, MAX_CANDIDATES);
}

const VERBS = { guess: ['guess', 'try', 'answer', 'pick', 'choose'] };

export class ReasoningEnv implements Env, ExpertEnv {
  private n = 0;
  private secret = 0;
  private budget = 0;
  private guesses = 0;
  private steps = 0;
  private lo = 1;
  private hi = 0;
  private done = false;
  private success = false;

  reset({ seed, options }: { seed: number; options?: ResetOptions }): ResetResult {
    const split: Split = options?.split === 'test' ? 'test' : 'train';
    const difficulty = Math.min(3, Math.max(1, Math.round(Number(options?.difficulty ?? 1)) || 1));
    const instanceSeed = hashString(`reasoning|${seed}|${split}|${difficulty}`);
    const random = mulberry32(instanceSeed);
    this.n = RANGES[difficulty - 1];
    do this.secret = 1 + Math.floor(random() * this.n);
    while (splitOf(this.n, this.secret) !== split);
    this.budget = Math.ceil(Math.log2(this.n + 1));
    this.guesses = 0;
    this.steps = 0;
    this.lo = 1;
    this.hi = this.n;
    this.done = false;
    this.success = false;
    const observation = [
      `I am thinking of a whole number from 1 to ${this.n}. Find it in at most ${this.budget} guesses.`,
      'After each guess I say "higher" (the number is larger) or "lower" (it is smaller).',
      'Reply with one action: `guess: K`, for example `guess: 7`.',
    ].join('\n');
    // The instance is its secret number, so info names it only by the seed it is drawn from.
    return { observation, info: { instance: { id: instanceId(instanceSeed), n: this.n }, split, difficulty, budget: this.budget } };
  }

  step(action: string): StepResult {
    if (this.n === 0) throw new Error('reasoning: call reset() before step()');
    if (this.done) return { observation: 'The episode is over; call reset().', reward: 0, terminated: true, truncated: false, info: { success: this.success } };
    this.steps++;
    const result = this.act(typeof action === 'string' ? action : String(action));
    if (result.terminated) {
      this.done = true;
      this.success = result.info.success === true;
    } else if (this.steps >= MAX_STEPS) {
      this.done = true;
      result.truncated = true;
      result.info.success = false;
      result.observation += `\nOut of steps: the number was ${this.secret}.`;
    }
    return result;
  }

  private act(action: string): StepResult {
    const command = parseCommand(action, VERBS);
    const value = parseNumber(command ? command.argument : action);
    if (value === null || !Number.isInteger(value) || value < 1 || value > this.n) {
      const why = value === null ? 'Could not read a guess.' : `${value} is not a whole number from 1 to ${this.n}.`;
      return { observation: `${why} Reply with \`guess: K\` where K is a whole number from 1 to ${this.n}.`, reward: INVALID_COST, terminated: false, truncated: false, info: { invalid: true } };
    }
    this.guesses++;
    const left = this.budget - this.guesses;
    if (value === this.secret) {
      return { observation: `${value} is correct! Found in ${this.guesses} guesses.`, reward: 1, terminated: true, truncated: false, info: { success: true, guesses: this.guesses } };
    }
    const direction = value < this.secret ? 'higher' : 'lower';
    if (direction === 'higher') this.lo = Math.max(this.lo, value + 1);
    else this.hi = Math.min(this.hi, value - 1);
    if (left === 0) {
      return { observation: `${value}: ${direction}. No guesses left: the number was ${this.secret}.`, reward: 0, terminated: true, truncated: false, info: { success: false, guesses: this.guesses } };
    }
    return { observation: `${value}: ${direction}. ${left} guess${left === 1 ? '' : 'es'} left.`, reward: 0, terminated: false, truncated: false, info: { guesses: this.guesses } };
  }

  validActions(): string[] {
    if (this.n === 0 || this.done) return [];
    return candidateGuesses(this.lo, this.hi).map((k) => `guess: ${k}`);
  }

  /** Bisection over the interval the feedback allows. */
  expertAction(): string {
    return `guess: ${Math.floor((this.lo + this.hi) / 2)}`;
  }

  hiddenState(): { n: number; secret: number } {
    return { n: this.n, secret: this.secret };
  }

  close(): void {}
}

const reasoning: BuiltinEnvModule = {
  id: 'reasoning',
  description: 'Guess the secret number from 1 to N with "higher"/"lower" feedback within a tight guess budget: rewards reasoning over several turns.',
  maxEpisodeSteps: MAX_STEPS,
  make: () => new ReasoningEnv(),
};

export default reasoning;
