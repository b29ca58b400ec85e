// The properties every built-in environment must have, checked the same way for each:
// a scripted expert that succeeds, a random policy that does clearly worse, exact reproducibility
// by seed, disjoint train and test instances, and robustness to malformed actions.
import { expect } from 'vitest';
import { mulberry32 } from '../../src/common/random.ts';
import type { BuiltinEnvModule, Env, ExpertEnv, ResetOptions, StepResult } from '../../src/env/types.ts';

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
  const log: EpisodeLog = { instance: reset.info.instance, observations: [reset.observation], actions: [], rewards: [], success: false, steps: 0 };
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
  // Same seed, same episode; train and test instances never coincide.
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
