// The algorithms by name, with their settings schemas and defaults, for the CLI, the app and the benchmarks.
import { a2c, A2C_DEFAULTS, A2C_SETTINGS } from './a2c.ts';
import { ALGORITHMS, type Algorithm, type AlgorithmName } from './algorithm.ts';
import { bc, BC_DEFAULTS, BC_SETTINGS } from './bc.ts';
import { dqn, DQN_DEFAULTS, DQN_SETTINGS } from './dqn.ts';
import { grpo, GRPO_DEFAULTS, GRPO_SETTINGS } from './grpo.ts';
import { ppo, PPO_DEFAULTS, PPO_SETTINGS } from './ppo.ts';
import { reinforce, REINFORCE_DEFAULTS, REINFORCE_SETTINGS } from './reinforce.ts';
import { checkSettings, closestName, SettingError, type SettingsSchema } from '../common/settings.ts';

export { ALGORITHMS, type AlgorithmName } from './algorithm.ts';

export const ALGORITHM_DEFAULTS = {
  ppo: PPO_DEFAULTS,
  a2c: A2C_DEFAULTS,
  reinforce: REINFORCE_DEFAULTS,
  grpo: GRPO_DEFAULTS,
  dqn: DQN_DEFAULTS,
  bc: BC_DEFAULTS,
} as const;

/** Each algorithm's settings: default, doc, type and range (src/rl/settings.ts). */
export const ALGORITHM_SETTINGS: Record<AlgorithmName, SettingsSchema> = {
  ppo: PPO_SETTINGS,
  a2c: A2C_SETTINGS,
  reinforce: REINFORCE_SETTINGS,
  grpo: GRPO_SETTINGS,
  dqn: DQN_SETTINGS,
  bc: BC_SETTINGS,
};

/**
 * Version of the defaults above and of the settings' names. A run and a share link record only the
 * settings that differ from the defaults of their day, under the names of their day, so when a
 * default changes or a setting is renamed this goes up: EARLIER_DEFAULTS keeps, for each earlier
 * version, its defaults that differ from today's, and RENAMED_SETTINGS the names each version
 * changed. A run made before resumes, and a link made before opens, as it was made.
 */
export const DEFAULTS_VERSION = 3;
/** In today's names. */
const EARLIER_DEFAULTS: Record<number, Partial<Record<AlgorithmName, Record<string, unknown>>>> = {
  // Before learning-rate annealing, and PPO's rate was 3e-3.
  1: {
    ppo: { learningRate: 3e-3, annealLearningRate: false },
    a2c: { annealLearningRate: false },
    reinforce: { annealLearningRate: false },
    grpo: { annealLearningRate: false },
    bc: { annealLearningRate: false },
  },
  // Version 3 renamed settings and changed no default.
  2: {},
};
/** The settings each version renamed, old name → new name, by algorithm. */
const RENAMED_SETTINGS: Record<number, Partial<Record<AlgorithmName, Record<string, string>>>> = {
  // PPO's two KL targets differed only in word order; GRPO's β had another name than PPO's.
  3: { ppo: { klTarget: 'adaptiveKlTarget', targetKl: 'earlyStopKl' }, grpo: { klCoefficient: 'klCoef' } },
};

/** `overrides` made under defaults `version`, with the settings renamed since under today's names. */
export function settingsNamedToday(algo: string, version: number, overrides: Record<string, unknown>): Record<string, unknown> {
  let named = overrides;
  for (const [renamedAt, byAlgorithm] of Object.entries(RENAMED_SETTINGS)) {
    const renames = byAlgorithm[algo as AlgorithmName];
    if (version >= Number(renamedAt) || !renames) continue;
    named = Object.fromEntries(Object.entries(named).map(([name, value]) => [Object.hasOwn(renames, name) ? renames[name] : name, value]));
  }
  return named;
}

/** The overrides of today's defaults, under today's names, that mean what `overrides` meant under defaults `version`. */
export function settingsAsOf(algo: string, version: number, overrides: Record<string, unknown>): Record<string, unknown> {
  if (version === DEFAULTS_VERSION) return overrides;
  const earlier = EARLIER_DEFAULTS[version];
  if (!earlier) throw new RangeError(`algorithm defaults version ${version} is unknown to this rlplay, which knows ${[...Object.keys(EARLIER_DEFAULTS), DEFAULTS_VERSION].join(', ')}: update rlplay`);
  return { ...earlier[algo as AlgorithmName], ...settingsNamedToday(algo, version, overrides) };
}

/**
 * Refuses an unknown algorithm, an unknown setting (naming the closest) and a value of the wrong type
 * or out of range (naming the range and the fix), wherever the settings come from: `--set`, a run's
 * run.json, a share link, the app's Train card.
 */
export function checkAlgorithmSettings(name: string, overrides: Record<string, unknown>): asserts name is AlgorithmName {
  if (!Object.hasOwn(ALGORITHM_SETTINGS, name)) {
    const closest = closestName(name, ALGORITHMS);
    throw new SettingError(`unknown algorithm ${JSON.stringify(name)}${closest ? `; did you mean ${closest}?` : ''} (choose one of ${ALGORITHMS.join(', ')})`);
  }
  for (const byAlgorithm of Object.values(RENAMED_SETTINGS)) {
    const renamed = Object.keys(overrides).find((setting) => Object.hasOwn(byAlgorithm[name as AlgorithmName] ?? {}, setting));
    if (renamed) throw new SettingError(`${name} setting ${renamed} is now called ${byAlgorithm[name as AlgorithmName]![renamed]}: set ${byAlgorithm[name as AlgorithmName]![renamed]}=${JSON.stringify(overrides[renamed])} instead`);
  }
  checkSettings(name, ALGORITHM_SETTINGS[name as AlgorithmName], overrides);
}

/** An algorithm with its defaults, some overridden (checked by checkAlgorithmSettings). */
export function makeAlgorithm(name: AlgorithmName, overrides: Record<string, unknown> = {}): Algorithm {
  checkAlgorithmSettings(name, overrides);
  // Checked above setting by setting against the schema.
  const config = { ...ALGORITHM_DEFAULTS[name], ...overrides } as never;
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
      // DQN acts on listed actions only; it checks at its first update that the policy can score them.
      return dqn(config);
    case 'bc':
      return bc(config);
  }
}
