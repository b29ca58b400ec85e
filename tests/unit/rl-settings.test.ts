// The settings schema (src/rl/settings.ts): every algorithm's and the run's settings are checked
// against their type and range at their edges, an unknown name is refused with the closest valid one,
// and a name means one thing (one doc) in every algorithm that has it.
import { describe, expect, test } from 'vitest';
import { ALGORITHM_DEFAULTS, ALGORITHM_SETTINGS, ALGORITHMS, checkAlgorithmSettings, DEFAULTS_VERSION, makeAlgorithm, settingsAsOf, type AlgorithmName } from '../../src/rl/index.ts';
import { RUN_SETTINGS, TRAIN_DEFAULTS } from '../../src/rl/run.ts';
import { checkSettings, type Setting, type SettingsSchema } from '../../src/common/settings.ts';
import { SETTING_CHOICES, SETTING_HELP } from '../../src/app/hyperparameters.ts';

/** Values at and just past a setting's edges: those it must accept and those it must refuse. */
function edges(setting: Setting): { accepted: unknown[]; refused: unknown[] } {
  const accepted: unknown[] = [setting.default];
  const refused: unknown[] = [undefined, [], {}];
  if (setting.nullMeans) accepted.push(null);
  else refused.push(null);
  switch (setting.type) {
    case 'boolean':
      accepted.push(true, false);
      refused.push('true', 0, 1);
      break;
    case 'enum':
      accepted.push(...setting.choices!);
      refused.push('no such choice', setting.choices![0].toUpperCase(), 0);
      break;
    case 'integer':
    case 'number': {
      const step = setting.type === 'integer' ? 1 : 1e-9;
      refused.push(NaN, Infinity, -Infinity, String(setting.default ?? 1), true);
      if (setting.type === 'integer') refused.push((setting.default as number ?? 1) + 0.5, 2 ** 53);
      if (setting.min !== undefined) {
        (setting.exclusiveMin ? refused : accepted).push(setting.min);
        refused.push(setting.min - step);
        accepted.push(setting.min + step);
      }
      if (setting.max !== undefined) {
        (setting.exclusiveMax ? refused : accepted).push(setting.max);
        refused.push(setting.max + step);
        accepted.push(setting.max - step);
      }
      break;
    }
  }
  return { accepted, refused };
}

const schemas: [string, SettingsSchema][] = [...Object.entries(ALGORITHM_SETTINGS), ['run', RUN_SETTINGS]];
const cases = schemas.flatMap(([owner, schema]) => Object.entries(schema).map(([name, setting]) => ({ owner, schema, name, setting })));

describe('every setting at its edges', () => {
  test.each(cases)('$owner $name', ({ owner, schema, name, setting }) => {
    const { accepted, refused } = edges(setting);
    for (const value of accepted) expect(() => checkSettings(owner, schema, { [name]: value }), `${name}=${String(value)}`).not.toThrow();
    for (const value of refused) {
      expect(() => checkSettings(owner, schema, { [name]: value }), `${name}=${String(value)}`).toThrow(new RegExp(`^${owner} setting ${name} must be .* \\(got .*\\): set .*${name}=`));
    }
    // An algorithm is made at every accepted edge: its own code has no tighter limit than its schema.
    if (owner !== 'run') for (const value of accepted) makeAlgorithm(owner as AlgorithmName, { [name]: value }).dispose?.();
  });

  test('every number has a range: none is open at both ends', () => {
    const unbounded = cases.filter(({ setting }) => (setting.type === 'number' || setting.type === 'integer') && setting.min === undefined && setting.max === undefined);
    expect(unbounded.map(({ owner, name }) => `${owner} ${name}`)).toEqual([]);
  });
});

describe('the messages name the setting, the value, the range and the fix', () => {
  test.each([
    ['reinforce', { episodesPerUpdate: 0 }, 'reinforce setting episodesPerUpdate must be an integer ≥ 1 (got 0): set episodesPerUpdate=1 or more'],
    ['reinforce', { episodesPerUpdate: 2.5 }, 'reinforce setting episodesPerUpdate must be an integer ≥ 1 (got 2.5): set a whole number, e.g. episodesPerUpdate=3'],
    ['grpo', { groupsPerUpdate: 0 }, 'grpo setting groupsPerUpdate must be an integer ≥ 1 (got 0): set groupsPerUpdate=1 or more'],
    ['grpo', { groupSize: 1 }, 'grpo setting groupSize must be an integer ≥ 2 (got 1): set groupSize=2 or more'],
    ['ppo', { updateEpochs: 0 }, 'ppo setting updateEpochs must be an integer ≥ 1 (got 0): set updateEpochs=1 or more'],
    ['ppo', { clipCoef: 0 }, 'ppo setting clipCoef must be a number > 0 (got 0): set clipCoef=0 or a little more'],
    ['ppo', { earlyStopKl: 'off' }, 'ppo setting earlyStopKl must be a number > 0 (or null: never stop early) (got "off"): set a number, e.g. earlyStopKl=0.05, or earlyStopKl=null'],
    ['ppo', { gamma: 1.5 }, 'ppo setting gamma must be a number ≥ 0 and ≤ 1 (got 1.5): set gamma=1 or less'],
    ['bc', { source: 'experts' }, 'bc setting source must be one of expert, successes (got "experts"): set source to one of source=expert, source=successes'],
    ['a2c', { normalizeAdvantages: 'yes' }, 'a2c setting normalizeAdvantages must be true or false (got "yes"): set normalizeAdvantages=true or normalizeAdvantages=false'],
  ] as const)('%s %j', (algo, overrides, message) => {
    expect(() => makeAlgorithm(algo, overrides)).toThrow(message);
  });

  test('a renamed setting is refused with its new name; runs and links made before the rename read it under the new one', () => {
    expect(() => makeAlgorithm('ppo', { targetKl: 0.1 })).toThrow('ppo setting targetKl is now called earlyStopKl: set earlyStopKl=0.1 instead');
    expect(() => makeAlgorithm('grpo', { klCoefficient: 0 })).toThrow('grpo setting klCoefficient is now called klCoef: set klCoef=0 instead');
    expect(settingsAsOf('ppo', 2, { targetKl: null, klTarget: 3, clipCoef: 0.1 })).toEqual({ earlyStopKl: null, adaptiveKlTarget: 3, clipCoef: 0.1 });
    expect(settingsAsOf('grpo', 1, { klCoefficient: 0 })).toEqual({ annealLearningRate: false, klCoef: 0 });
    expect(settingsAsOf('ppo', DEFAULTS_VERSION, { earlyStopKl: 0.2 })).toEqual({ earlyStopKl: 0.2 });
    expect(() => makeAlgorithm('ppo', settingsAsOf('ppo', 2, { targetKl: 0.1 }))).not.toThrow();
  });

  test('an unknown name is refused with the closest valid one', () => {
    expect(() => makeAlgorithm('ppo', { episodesPerUpdat: 4 })).toThrow(/^ppo has no setting "episodesPerUpdat"; did you mean episodesPerUpdate\? \(its settings: episodesPerUpdate, /);
    expect(() => makeAlgorithm('ppo', { kl_coef: 0.1 })).toThrow(/did you mean klCoef\?/);
    expect(() => makeAlgorithm('grpo', { klCoeff: 0.1 })).toThrow(/^grpo has no setting "klCoeff"; did you mean klCoef\?/);
    expect(() => makeAlgorithm('ppo', { somethingElse: 1 })).toThrow(/^ppo has no setting "somethingElse" \(its settings: /);
    expect(() => makeAlgorithm('ppo', { toString: 1 })).toThrow(/^ppo has no setting "toString"/);
    expect(() => checkAlgorithmSettings('grp', {})).toThrow('unknown algorithm "grp"; did you mean grpo? (choose one of ppo, a2c, reinforce, grpo, dqn, bc)');
  });
});

describe('one home for each setting', () => {
  test('the defaults are the schema\'s, and the run\'s defaults are its schema\'s', () => {
    for (const algo of ALGORITHMS) {
      expect(ALGORITHM_DEFAULTS[algo]).toEqual(Object.fromEntries(Object.entries(ALGORITHM_SETTINGS[algo]).map(([name, s]) => [name, s.default])));
    }
    for (const [name, setting] of Object.entries(RUN_SETTINGS)) if (name !== 'episodes') expect(TRAIN_DEFAULTS[name as keyof typeof TRAIN_DEFAULTS]).toEqual(setting.default);
  });

  test("a name has one doc in every algorithm that has it, which is the app's help", () => {
    const docs = new Map<string, Set<string>>();
    for (const schema of Object.values(ALGORITHM_SETTINGS)) for (const [name, s] of Object.entries(schema)) docs.set(name, (docs.get(name) ?? new Set()).add(s.doc));
    expect([...docs].filter(([, d]) => d.size > 1).map(([name]) => name)).toEqual([]);
    expect(SETTING_HELP).toEqual(Object.fromEntries([...docs].map(([name, d]) => [name, [...d][0]])));
    expect(SETTING_CHOICES).toEqual({ source: ['expert', 'successes'] });
  });
});
