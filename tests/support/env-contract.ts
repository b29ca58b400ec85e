// The properties every built-in environment must have, checked the same way for each:
// a scripted expert that succeeds, a random policy that does clearly worse, exact reproducibility
// by seed, disjoint train and test instances, robustness to malformed actions, and hidden state
// that no frame of the OpenEnv wire format shows before the episode ends.
import { expect } from 'vitest';
import { mulberry32 } from '../../src/common/random.ts';
import type { BuiltinEnvModule, Env, EnvModule, ExpertEnv, ResetOptions, StepResult } from '../../src/env/types.ts';
import { OpenEnvSession, type OpenEnvResult } from '../../src/serve/openenv.ts';

export interface EpisodeLog {
  instance: unknown;
  observations: string[];
  actions: string[];
  rewards: number[];
  success: boolean;
  steps: number;
}

type Policy = (env: ExpertEnv, observation: string, random: () => number) => Promise<string> | string;

export const expertPolicy: Policy = (env) => env.expertAction();

/** Uniform over validActions() (every built-in has them). */
export const randomPolicy: Policy = async (env, _obs, random) => {
  const actions = await env.validActions!();
  return actions[Math.floor(random() * actions.length)];
};

export async function runEpisode(module: BuiltinEnvModule, seed: number, options: ResetOptions, policy: Policy): Promise<EpisodeLog> {
  const env = module.make();
  const random = mulberry32(seed * 7 + 1);
  const reset = await env.reset({ seed, options });
  const log: EpisodeLog = { instance: env.hiddenState(), observations: [reset.observation], actions: [], rewards: [], success: false, steps: 0 };
  let observation = reset.observation;
  for (let t = 0; t < module.maxEpisodeSteps; t++) {
    const action = await policy(env, observation, random);
    const result: StepResult = await env.step(action);
    expect(typeof result.observation).toBe('string');
    expect(Number.isFinite(result.reward)).toBe(true);
    log.actions.push(action);
    log.observations.push(result.observation);
    log.rewards.push(result.reward);
    log.steps++;
    observation = result.observation;
    if (result.terminated || result.truncated) {
      expect(typeof result.info.success).toBe('boolean');
      log.success = result.info.success === true;
      break;
    }
  }
  await env.close?.();
  return log;
}

export async function successRate(module: BuiltinEnvModule, policy: Policy, options: ResetOptions, episodes: number, firstSeed = 1000): Promise<number> {
  let wins = 0;
  for (let i = 0; i < episodes; i++) if ((await runEpisode(module, firstSeed + i, options, policy)).success) wins++;
  return wins / episodes;
}

/** The checks of issue 4 for one built-in environment, at every difficulty. */
export async function checkBuiltinEnvironment(module: BuiltinEnvModule, episodes = 60): Promise<void> {
  expect(module.id).toMatch(/^[a-z][a-z0-9-]*$/);
  expect(module.description.length).toBeGreaterThan(20);
  for (const difficulty of [1, 2, 3]) {
    const test = { split: 'test' as const, difficulty };
    const expert = await successRate(module, expertPolicy, test, episodes);
    const random = await successRate(module, randomPolicy, test, episodes);
    expect(expert, `expert success at difficulty ${difficulty}`).toBeGreaterThanOrEqual(0.95);
    expect(random, `random success at difficulty ${difficulty} (expert ${expert})`).toBeLessThanOrEqual(expert - 0.3);
  }
  await checkHiddenStateStaysHidden(module);
  // Same seed, same episode; train and test instances (the hidden state, all of it) never coincide.
  const a = await runEpisode(module, 42, { split: 'train' }, randomPolicy);
  const b = await runEpisode(module, 42, { split: 'train' }, randomPolicy);
  expect(b).toEqual(a);
  const train = new Set<string>();
  const testInstances = new Set<string>();
  for (let seed = 0; seed < 200; seed++) {
    train.add(JSON.stringify((await runEpisode(module, seed, { split: 'train' }, expertPolicy)).instance));
    testInstances.add(JSON.stringify((await runEpisode(module, seed, { split: 'test' }, expertPolicy)).instance));
  }
  expect([...testInstances].filter((i) => train.has(i))).toEqual([]);
  // Malformed agent output is an ordinary (bad) action: no throw, a finite reward, the episode goes on or ends.
  for (const junk of ['', '   ', '\u0000\u0001', 'x'.repeat(5000), '{"unclosed": ', 'DROP TABLE orders;', '42', '<|endoftext|>']) {
    const env = module.make();
    await env.reset({ seed: 7, options: { split: 'test' } });
    const result = await env.step(junk);
    expect(Number.isFinite(result.reward)).toBe(true);
    expect(typeof result.observation).toBe('string');
  }
}

// ---------------------------------------------------------------------------------------------
// Hidden state: what solves an instance never leaves the environment before the episode ends.

/** A hidden value to look for in what an environment sends: a number (also as a whole number inside text) or a string. */
export type HiddenValue = number | string;

/**
 * The values of each built-in's hidden state (hiddenState()) that solve its instance, or that the
 * agent may only find out by acting: the tool-use answer and the table values it needs, the secret number, the hidden tests'
 * inputs, the support-desk case's kind and the records not yet looked up, the web-shop order
 * number. Values too short to tell from a coincidence (numbers below 100, strings under 4
 * characters) are left out by `distinctive`.
 */
export const HIDDEN_VALUES: Record<string, (hidden: any) => HiddenValue[]> = {
  'tool-use': (instance: { answer: number; table: Record<string, number>; needed: string[] }) => [instance.answer, ...instance.needed.map((key) => instance.table[key])],
  reasoning: (state: { secret: number }) => [state.secret],
  'code-gen': (state: { tests: Array<{ args: unknown[] }> }) => state.tests.flatMap((test) => test.args.map((arg) => JSON.stringify(arg).slice(0, 100))),
  'support-desk': (c: { kind: string; orders: Array<{ id: string; email: string; address: string }>; claimedEmail: string; newAddress?: string; given: { address: boolean } }) => [
    // The plain kinds (refund, status, address) are words of the rules; the others say how the case must end.
    ...(c.kind.includes('-') ? [c.kind] : []),
    ...c.orders.map((order) => order.address),
    c.orders[2].id, // another customer's order: nothing the agent sees names it
    ...c.orders.filter((order) => order.email !== c.claimedEmail).map((order) => order.email),
    ...(c.newAddress !== undefined && !c.given.address ? [c.newAddress] : []),
  ],
  'web-shop': (state: { orderNumber: number }) => [state.orderNumber],
};

export function distinctive(values: HiddenValue[]): HiddenValue[] {
  return [...new Set(values)].filter((value) => (typeof value === 'number' ? Math.abs(value) >= 100 : value.length >= 4));
}

/** The JSON paths of the leaves of `frame` that hold `value` (equal to it, or text that contains it; a number only whole). */
export function pathsHolding(frame: unknown, value: HiddenValue, path = '$'): string[] {
  if (typeof frame === 'number' || typeof frame === 'string') {
    if (frame === value) return [path];
    if (typeof frame !== 'string') return [];
    const holds = typeof value === 'number' ? new RegExp(`(?<![\\d.])${String(value).replace('.', '\\.')}(?![\\d]|\\.\\d)`).test(frame) : frame.includes(value);
    return holds ? [path] : [];
  }
  if (Array.isArray(frame)) return frame.flatMap((item, i) => pathsHolding(item, value, `${path}[${i}]`));
  if (typeof frame === 'object' && frame !== null) return Object.entries(frame).flatMap(([key, item]) => pathsHolding(item, value, `${path}.${key}`));
  return [];
}

/**
 * Watches the frames of one episode as they are sent (observations, state and error messages,
 * HTTP bodies) and records each hidden value that one shows before the episode ends. A value that a
 * step's observation text shows is what the agent found out by acting (a lookup that reads the
 * table): from that frame on it may show anywhere.
 */
export class HiddenStateWatch {
  readonly leaks: string[] = [];
  private readonly revealed = new Set<HiddenValue>();

  /**
   * @param hidden the values to watch for (already `distinctive`)
   * @param listsMayHold valid_actions may hold them: reasoning's guesses span the interval the
   *   feedback leaves, which holds the secret by construction (in numeric order, so the list's order says nothing)
   */
  constructor(
    private readonly hidden: HiddenValue[],
    private readonly listsMayHold = false,
  ) {}

  /** One frame sent before the episode ended; `stepText` is the observation text a step answered with. */
  see(where: string, frame: unknown, stepText?: string): void {
    for (const value of this.hidden) {
      if (this.revealed.has(value)) continue;
      if (stepText !== undefined && pathsHolding(stepText, value).length > 0) {
        this.revealed.add(value);
        continue;
      }
      const paths = pathsHolding(frame, value).filter((p) => !(this.listsMayHold && p.includes('.valid_actions[')));
      if (paths.length > 0) this.leaks.push(`${where}: ${JSON.stringify(value)} at ${paths.join(', ')}`);
    }
  }
}

/** What a client received for one reset or step: the result, and every frame that came with it (messages, bodies), each named. */
export interface PlayedFrames {
  result: OpenEnvResult;
  frames: Array<{ what: string; frame: unknown }>;
}

/**
 * One way of playing an episode as a client of `rlplay serve` does. After each call the `twin`
 * it was opened with (an in-process instance of the same module) is in the state of the played
 * instance, so that the expert can choose the next action.
 */
export interface PlayChannel {
  reset(seed: number, options: ResetOptions): Promise<PlayedFrames>;
  step(action: string): Promise<PlayedFrames>;
  close(): Promise<void>;
}

/** The OpenEnv session itself, before any transport, playing the twin (what server.ts carries). */
export async function openSessionChannel(module: BuiltinEnvModule, twin: ExpertEnv): Promise<PlayChannel> {
  const session = new OpenEnvSession({ ...module, make: () => twin } satisfies EnvModule);
  await session.open();
  const played = (what: string) => (result: OpenEnvResult): PlayedFrames => ({ result, frames: [{ what, frame: result }, { what: `${what} state`, frame: session.state() }] });
  return {
    reset: async (seed, options) => played('reset')(await session.reset({ seed, options, episodeId: 'e' })),
    step: async (action) => played('step')(await session.step(action)),
    close: () => session.close(),
  };
}

export interface HiddenStateCheck {
  open(module: BuiltinEnvModule, twin: ExpertEnv): Promise<PlayChannel>;
  seeds?: number[];
  difficulties?: number[];
  /** Steps per episode at most (the HTTP side plays one step per fresh instance). */
  maxSteps?: number;
}

/**
 * Plays `module` with the expert and a random policy on both splits through `check.open` (by
 * default the OpenEnv session, the frames `rlplay serve` sends before transport) and fails on any
 * frame that shows hidden state before the episode ends.
 */
export async function checkHiddenStateStaysHidden(module: BuiltinEnvModule, check: HiddenStateCheck = { open: openSessionChannel }): Promise<void> {
  const hiddenValues = HIDDEN_VALUES[module.id];
  expect(hiddenValues, `HIDDEN_VALUES has no entry for ${module.id}`).toBeDefined();
  const leaks: string[] = [];
  let watched = 0;
  for (const split of ['train', 'test'] as const) {
    for (const difficulty of check.difficulties ?? [1, 2, 3]) {
      for (const seed of check.seeds ?? [0, 1, 2, 3]) {
        for (const policy of ['expert', 'random'] as const) {
          const twin = module.make();
          const channel = await check.open(module, twin);
          const random = mulberry32(seed * 7 + 1);
          const where = `${module.id} ${split} difficulty ${difficulty} seed ${seed} ${policy}`;
          let played = await channel.reset(seed, { split, difficulty });
          const hidden = distinctive(hiddenValues(twin.hiddenState()));
          watched += hidden.length;
          const watch = new HiddenStateWatch(hidden, module.id === 'reasoning');
          for (const { what, frame } of played.frames) watch.see(`${where} ${what}`, frame);
          for (let t = 1; !played.result.done && t <= (check.maxSteps ?? Infinity); t++) {
            const actions = played.result.observation.valid_actions ?? [];
            const action = policy === 'expert' ? twin.expertAction() : actions[Math.floor(random() * actions.length)];
            played = await channel.step(action);
            if (played.result.done) break;
            for (const { what, frame } of played.frames) watch.see(`${where} ${what} ${t}`, frame, played.result.observation.text);
          }
          await channel.close();
          leaks.push(...watch.leaks);
        }
      }
    }
  }
  expect(leaks).toEqual([]);
  expect(watched, `no distinctive hidden values of ${module.id} were watched`).toBeGreaterThan(0);
}
