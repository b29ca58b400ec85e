// The algorithms by name, with their defaults, for the CLI, the app and the benchmarks.
import { a2c, A2C_DEFAULTS } from './a2c.ts';
import type { Algorithm, AlgorithmName } from './algorithm.ts';
import { bc, BC_DEFAULTS } from './bc.ts';
import { dqn, DQN_DEFAULTS } from './dqn.ts';
import { grpo, GRPO_DEFAULTS } from './grpo.ts';
import { ppo, PPO_DEFAULTS } from './ppo.ts';
import { reinforce, REINFORCE_DEFAULTS } from './reinforce.ts';

export { ALGORITHMS, type AlgorithmName } from './algorithm.ts';

export const ALGORITHM_DEFAULTS = {
  ppo: PPO_DEFAULTS,
  a2c: A2C_DEFAULTS,
  reinforce: REINFORCE_DEFAULTS,
  grpo: GRPO_DEFAULTS,
  dqn: DQN_DEFAULTS,
  bc: BC_DEFAULTS,
} as const;

/**
 * Version of the defaults above. A run and a share link record only the settings that differ from
 * the defaults of their day, so when a default changes this goes up and EARLIER_DEFAULTS keeps, for
 * each earlier version, its defaults that differ from today's: a run made before resumes, and a link
 * made before opens, as it was made.
 */
export const DEFAULTS_VERSION = 2;
const EARLIER_DEFAULTS: Record<number, Partial<Record<AlgorithmName, Record<string, unknown>>>> = {
  // Before learning-rate annealing, and PPO's rate was 3e-3.
  1: {
    ppo: { learningRate: 3e-3, annealLearningRate: false },
    a2c: { annealLearningRate: false },
    reinforce: { annealLearningRate: false },
    grpo: { annealLearningRate: false },
    bc: { annealLearningRate: false },
  },
};

/** The overrides of today's defaults that mean what `overrides` meant under defaults `version`. */
export function settingsAsOf(algo: string, version: number, overrides: Record<string, unknown>): Record<string, unknown> {
  if (version === DEFAULTS_VERSION) return overrides;
  const earlier = EARLIER_DEFAULTS[version];
  if (!earlier) throw new RangeError(`algorithm defaults version ${version} is unknown to this rlplay, which knows ${[...Object.keys(EARLIER_DEFAULTS), DEFAULTS_VERSION].join(', ')}: update rlplay`);
  return { ...earlier[algo as AlgorithmName], ...overrides };
}

/** An algorithm with its defaults, some overridden (unknown or mistyped settings are errors). */
export function makeAlgorithm(name: AlgorithmName, overrides: Record<string, unknown> = {}): Algorithm {
  const defaults = ALGORITHM_DEFAULTS[name] as unknown as Record<string, unknown>;
  if (!defaults) throw new RangeError(`unknown algorithm ${JSON.stringify(name)}; choose one of ${Object.keys(ALGORITHM_DEFAULTS).join(', ')}`);
  for (const [key, value] of Object.entries(overrides)) {
    if (!(key in defaults)) throw new RangeError(`${name} has no setting ${JSON.stringify(key)}; its settings: ${Object.keys(defaults).join(', ')}`);
    const expected = defaults[key] === null ? typeof value : typeof defaults[key];
    if (typeof value !== expected && !(value === null && defaults[key] === null)) throw new RangeError(`${name} setting ${key} must be a ${expected}, got ${JSON.stringify(value)}`);
  }
  // Checked above key by key against the defaults' types.
  const config = { ...defaults, ...overrides } as never;
  switch (name) {
    case 'ppo':
      return ppo(config);
    case 'a2c':
      return a2c(config);
    case 'reinforce':
      return reinforce(config);
    case 'grpo':
      return grpo(config);
    case 'dqn':
      // DQN acts on listed actions only; it checks at its first update that the policy is a choice policy.
      return dqn(config) as unknown as Algorithm;
    case 'bc':
      return bc(config);
  }
}
