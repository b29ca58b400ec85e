// Every algorithm end to end on the GPU through the run driver, on a one-step environment whose right
// answer is known: the action-level policy (or, for DQN, the greedy action of Q) must move towards
// the rewarded action. And a run stopped after an update and resumed ends bit-identical to one that
// ran straight through, with every stored episode kept. PPO's minibatching is checked on its own.
import { mkdtempSync, rmSync, truncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { ChoicePolicy } from '../../src/agent/choice-policy.ts';
import type { PlayedEpisode, Policy, PolicyOptions, UpdateItem, UpdateMetrics } from '../../src/agent/policy.ts';
import { Transcript } from '../../src/agent/transcript.ts';
import type { HostLoraAdapter } from '../../src/engine/lora/adapter.ts';
import type { GpuLoraAdapter } from '../../src/engine/lora/gpu-adapter.ts';
import { loadModel, type Model } from '../../src/engine/model.ts';
import { MemoryModelSource } from '../../src/engine/model/memory-source.ts';
import { readCheckpoint } from '../../src/engine/train/checkpoint.ts';
import type { EnvModule, ResetResult } from '../../src/env/types.ts';
import type { AlgorithmName } from '../../src/rl/index.ts';
import { PPO_DEFAULTS, ppo } from '../../src/rl/ppo.ts';
import { TRAIN_DEFAULTS, trainRun, updateLearningRate, type TrainConfig } from '../../src/rl/run.ts';
import { FileTrajectoryStore } from '../../src/store/files.ts';
import { tinyModelFiles } from '../shared/tiny-model.ts';
import { nodeGpu } from '../support/node-gpu.ts';

const ACTIONS = ['yes', 'no way'];

/** One question, two answers; "yes" earns 1. */
const yesOrNo: EnvModule = {
  id: 'yes-or-no',
  description: 'Answer the question.',
  maxEpisodeSteps: 1,
  make: () => ({
    reset: () => ({ observation: 'is it raining?', info: {} }),
    validActions: () => ACTIONS,
    step: (action: string) => ({ observation: 'ok', reward: action === 'yes' ? 1 : 0, terminated: true, truncated: false, info: { success: action === 'yes' } }),
  }),
};

const root = mkdtempSync(join(tmpdir(), 'rlplay-algorithms-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

let modelPromise: Promise<Model> | undefined;
const tinyModel = () => (modelPromise ??= nodeGpu().then((gpu) => loadModel(gpu, new MemoryModelSource(tinyModelFiles({ vocabSize: 96, seed: 3 }).files))));

function config(algo: AlgorithmName, episodes: number, algorithm: Record<string, unknown>): TrainConfig {
  return { ...TRAIN_DEFAULTS, model: 'tiny', env: yesOrNo.id, algo, episodes, seed: 2, algorithm };
}

function state(model: Model) {
  const transcript = new Transcript(model.tokenizer, 'plain', yesOrNo.description);
  transcript.addObservation('is it raining?');
  return { context: transcript.ids, actions: ACTIONS, actionTokens: ACTIONS.map((a) => transcript.encodeAction(a)) };
}

async function probabilityOfYes(model: Model, adapter: GpuLoraAdapter | null): Promise<number> {
  const policy = new ChoicePolicy(model, { env: yesOrNo, reset: {}, format: 'plain', adapter, microBatch: 16, lengthNormalize: true });
  const [scored] = await policy.scoreStates([state(model)]);
  return Math.exp(scored.logProbs[0]);
}

/** Each step's observation is `length` characters long: long episodes outgrow a tiny model's 128 positions. */
const chatty = (length: (seed: number) => number): EnvModule => ({
  id: 'chatty',
  description: 'Say something.',
  maxEpisodeSteps: 3,
  make: () => {
    let seed = 0;
    return {
      reset: ({ seed: s }) => ((seed = s), { observation: 'hello', info: {} }),
      validActions: () => ['ok', 'fine'],
      step: () => ({ observation: 'w'.repeat(length(seed)), reward: 0.1, terminated: false, truncated: false, info: {} }),
    };
  },
});

describe('the choice policy at the edge of the context', () => {
  test('an episode that outgrows the model\'s positions ends truncated where it stands; the others go on', async () => {
    const model = await tinyModel();
    const env = chatty((seed) => (seed === 1 ? 60 : 1));
    const policy = new ChoicePolicy(model, { env, reset: {}, format: 'plain', adapter: null, microBatch: 16, lengthNormalize: true });
    const [short, long] = await policy.play([{ seed: 0 }, { seed: 1 }]);
    expect(short.error).toBeUndefined();
    expect(short.steps).toHaveLength(3);
    expect(long.error).toBeUndefined();
    expect(long.steps.length).toBeGreaterThan(0);
    expect(long.steps.length).toBeLessThan(3);
    expect(long.steps.at(-1)!.truncated).toBe(true);
    expect(long.success).toBe(false);
  });

  test('an episode whose reset gives no observation fails alone with the reason, and its environment is closed', async () => {
    const model = await tinyModel();
    const closed: number[] = [];
    const env: EnvModule = {
      id: 'mute',
      description: 'Say something.',
      maxEpisodeSteps: 1,
      make: () => {
        let seed = 0;
        return {
          reset: ({ seed: s }) => ((seed = s), (s === 1 ? { info: {} } : { observation: 'hello', info: {} }) as ResetResult),
          validActions: () => ['ok', 'fine'],
          step: () => ({ observation: 'bye', reward: 1, terminated: true, truncated: false, info: { success: true } }),
          close: () => void closed.push(seed),
        };
      },
    };
    const policy = new ChoicePolicy(model, { env, reset: {}, format: 'plain', adapter: null, microBatch: 16, lengthNormalize: true });
    const [fine, mute] = await policy.play([{ seed: 0 }, { seed: 1 }]);
    expect(fine.error).toBeUndefined();
    expect(fine.success).toBe(true);
    expect(mute.error).toBe('environment mute: reset() must return { observation: string, info }');
    expect(mute.steps).toHaveLength(0);
    expect(closed.sort()).toEqual([0, 1]);
  });
});

describe('learning-rate annealing', () => {
  test('decays linearly per update from the full rate to rate / updates, and not at all when off', () => {
    const annealed = { learningRate: 3e-3, annealLearningRate: true };
    expect([0, 1, 2, 3].map((u) => updateLearningRate(annealed, u, 4))).toEqual([3e-3, 3e-3 * 0.75, 3e-3 * 0.5, 3e-3 * 0.25]);
    // A resumed run asked for fewer episodes than it played keeps the last update's rate, never 0.
    expect(updateLearningRate(annealed, 6, 4)).toBe(3e-3 * 0.25);
    expect([0, 3, 9].map((u) => updateLearningRate({ learningRate: 1e-3, annealLearningRate: false }, u, 4))).toEqual([1e-3, 1e-3, 1e-3]);
  });
});

describe('algorithms on the run driver', () => {
  const cases: [AlgorithmName, Record<string, unknown>][] = [
    ['reinforce', { learningRate: 1e-2, normalizeAdvantages: false }],
    ['grpo', { learningRate: 1e-2 }],
    ['ppo', { learningRate: 1e-2 }],
    ['a2c', { learningRate: 1e-2 }],
    ['bc', { learningRate: 1e-2, source: 'successes' }],
  ];
  for (const [algo, settings] of cases) {
    test(`${algo} raises the probability of the rewarded action`, async () => {
      const model = await tinyModel();
      const store = new FileTrajectoryStore(root);
      const before = await probabilityOfYes(model, null);
      const outcome = await trainRun(model, yesOrNo, store, `${algo}-run`, config(algo, 48, settings));
      const after = await probabilityOfYes(model, outcome.adapter);
      outcome.adapter.dispose();
      expect(outcome.status).toBe('finished');
      expect(outcome.episodes).toBe(48);
      expect((await store.listEpisodes(`${algo}-run`)).total).toBe(48);
      const returns = await store.listMetrics(`${algo}-run`, 'charts/episodic_return');
      expect(returns).toHaveLength(6);
      expect(after).toBeGreaterThan(before + 0.2);
    });
  }

  test('dqn learns Q-values whose greedy action is the rewarded one', async () => {
    const model = await tinyModel();
    const store = new FileTrajectoryStore(root);
    const outcome = await trainRun(model, yesOrNo, store, 'dqn-run', config('dqn', 64, { learningRate: 1e-2, explorationEpisodes: 32, learningStarts: 8, gradientSteps: 4, targetUpdateInterval: 1 }));
    const saved = await store.latestCheckpoint('dqn-run');
    const { valueHead } = await readCheckpoint(new MemoryModelSource(saved!.files), model.config);
    const policy = new ChoicePolicy(model, { env: yesOrNo, reset: {}, format: 'plain', adapter: outcome.adapter, microBatch: 16, lengthNormalize: true });
    const [scored] = await policy.scoreStates([state(model)], outcome.adapter, true);
    const q = scored.candidateHidden!.map((h) => h.reduce((s, x, i) => s + x * valueHead.weight[i], valueHead.bias));
    outcome.adapter.dispose();
    // Terminal one-step episodes: the targets are the rewards themselves, 1 for yes and 0 for no.
    expect(q[0]).toBeGreaterThan(q[1] + 0.3);
    expect(q[0]).toBeGreaterThan(0.5);
  }, 300_000); // 64 episodes and their replay updates: about a minute on SwiftShader, more on a loaded machine

  const settings = { learningRate: 1e-2 };
  let straightRun: Promise<HostLoraAdapter> | undefined;
  /** The adapter of a 24-episode PPO run that nothing interrupted. */
  const uninterrupted = () =>
    (straightRun ??= (async () => {
      const straight = await trainRun(await tinyModel(), yesOrNo, new FileTrajectoryStore(root), 'straight', config('ppo', 24, settings));
      const adapter = await straight.adapter.toHost();
      straight.adapter.dispose();
      return adapter;
    })());
  const expectSameAdapter = (got: HostLoraAdapter, expected: HostLoraAdapter) =>
    got.modules.forEach((m, i) => {
      expect(Array.from(m.A)).toEqual(Array.from(expected.modules[i].A));
      expect(Array.from(m.B)).toEqual(Array.from(expected.modules[i].B));
    });

  test('a run stopped after an update resumes to the same adapter as an uninterrupted run, keeping its episodes', async () => {
    const model = await tinyModel();
    const expected = await uninterrupted();
    // PPO anneals by default: 3 updates at 1e-2 × (1, 2/3, 1/3).
    const annealed = [1e-2, 2e-2 / 3, 1e-2 / 3];
    const expectAnnealed = async (store: FileTrajectoryStore, run: string) => {
      const rates = (await store.listMetrics(run, 'charts/learning_rate')).map((m) => m.value);
      expect(rates).toHaveLength(annealed.length);
      rates.forEach((lr, i) => expect(lr).toBeCloseTo(annealed[i], 9));
    };
    await expectAnnealed(new FileTrajectoryStore(root), 'straight');

    const stop = new AbortController();
    const store = new FileTrajectoryStore(root);
    const first = await trainRun(model, yesOrNo, store, 'interrupted', config('ppo', 24, settings), { signal: stop.signal, onUpdate: () => stop.abort() });
    first.adapter.dispose();
    expect(first.status).toBe('paused');
    expect(first.episodes).toBe(8);
    const logs: string[] = [];
    const resumed = await trainRun(model, yesOrNo, new FileTrajectoryStore(root), 'interrupted', config('ppo', 24, settings), { onLog: (m) => logs.push(m) });
    expect(resumed.resumedFrom).toBe(1);
    expect(logs[0]).toMatch(/resuming interrupted after update 1/);
    expectSameAdapter(await resumed.adapter.toHost(), expected);
    resumed.adapter.dispose();
    await expectAnnealed(store, 'interrupted');
    const episodes = await store.listEpisodes('interrupted');
    expect(episodes.items.map((e) => e.index)).toEqual(Array.from({ length: 24 }, (_, i) => i));

    // Other settings under the same run: refused, naming the difference.
    await expect(trainRun(model, yesOrNo, store, 'interrupted', config('a2c', 24, settings))).rejects.toThrow(/algo: "ppo" then, "a2c" now/);
  });

  test('a damaged newest checkpoint is passed over: the run resumes from the one before, losing nothing; all damaged, it says so', async () => {
    const model = await tinyModel();
    const expected = await uninterrupted();
    const store = new FileTrajectoryStore(root);
    const stopAfterTwo = new AbortController();
    const first = await trainRun(model, yesOrNo, store, 'damaged', config('ppo', 24, settings), { signal: stopAfterTwo.signal, onUpdate: ({ update }) => update === 2 && stopAfterTwo.abort() });
    first.adapter.dispose();
    expect(await store.listCheckpoints('damaged')).toEqual([1, 2]);
    const adapterFile = (step: number) => join(root, 'damaged', 'checkpoints', String(step), 'adapter_model.safetensors');
    truncateSync(adapterFile(2), 100);

    const logs: string[] = [];
    const resumed = await trainRun(model, yesOrNo, store, 'damaged', config('ppo', 24, settings), { onLog: (m) => logs.push(m) });
    expect(logs[0]).toMatch(/^checkpoint 2 of run damaged is damaged and is passed over \(adapter_model\.safetensors: .*truncated/);
    expect(logs[0]).not.toMatch(/download/); // advice for downloaded files, not for a checkpoint
    expect(logs[1]).toMatch(/resuming damaged after update 1 \(8 episodes\)/);
    expectSameAdapter(await resumed.adapter.toHost(), expected);
    resumed.adapter.dispose();
    // Update 2 played again: its episodes and metrics stored once.
    expect((await store.listEpisodes('damaged')).items.map((e) => e.index)).toEqual(Array.from({ length: 24 }, (_, i) => i));
    expect((await store.listMetrics('damaged', 'charts/updates')).map((m) => m.value)).toEqual([1, 2, 3]);

    for (const step of await store.listCheckpoints('damaged')) truncateSync(adapterFile(step), 100);
    await expect(trainRun(model, yesOrNo, store, 'damaged', config('ppo', 32, settings))).rejects.toThrow(/^run damaged cannot resume: every checkpoint it kept is damaged \(checkpoint 3: .*\). Its stored episodes and metrics are intact/);
    expect((await store.listEpisodes('damaged')).total).toBe(24);
    expect(await store.getRun('damaged')).toMatchObject({ status: 'failed', note: expect.stringMatching(/cannot resume/) });
  });

  test('a run stored before settings were renamed resumes under the new names, with the same settings', async () => {
    const model = await tinyModel();
    const store = new FileTrajectoryStore(root);
    const { defaultsVersion: _today, ...made } = config('ppo', 8, { earlyStopKl: 0.5, adaptiveKlTarget: 4 });
    await store.createRun({ id: 'renamed', config: { ...made, defaultsVersion: 2, algorithm: { targetKl: 0.5, klTarget: 4 } } as unknown as Record<string, unknown> });
    const outcome = await trainRun(model, yesOrNo, store, 'renamed', config('ppo', 8, { earlyStopKl: 0.5, adaptiveKlTarget: 4 }));
    outcome.adapter.dispose();
    expect((await store.listMetrics('renamed', 'charts/updates')).map((m) => m.value)).toEqual([1]);
    expect((await store.getRun('renamed'))!.config).toMatchObject({ defaultsVersion: 2, algorithm: { earlyStopKl: 0.5, adaptiveKlTarget: 4 } });
  });

  test('a run stored under earlier defaults resumes under them: before annealing, PPO at a constant 3e-3', async () => {
    const model = await tinyModel();
    const store = new FileTrajectoryStore(root);
    // What a run folder made before DEFAULTS_VERSION existed holds: its overrides, no version.
    const { defaultsVersion, ...before } = config('ppo', 16, {});
    expect(defaultsVersion).toBe(3);
    await store.createRun({ id: 'made-before', config: before as unknown as Record<string, unknown> });
    const outcome = await trainRun(model, yesOrNo, store, 'made-before', config('ppo', 16, {}));
    outcome.adapter.dispose();
    expect((await store.listMetrics('made-before', 'charts/learning_rate')).map((m) => m.value)).toEqual([3e-3, 3e-3]);
    expect((await store.getRun('made-before'))!.config.defaultsVersion).toBe(1);
  });
});

describe('PPO minibatches', () => {
  /** Episodes of uneven length (each step records its episode and time) and the minibatches PPO updates on. */
  async function minibatchesOf(lengths: number[], numMinibatches: number, updateEpochs: number): Promise<UpdateItem[][]> {
    const played: PlayedEpisode[] = lengths.map((n, e) => ({
      seed: e,
      samplingSeed: e,
      totalReward: 1,
      success: true,
      steps: Array.from({ length: n }, (_, t) => ({
        observation: `episode ${e}`,
        action: `step ${t}`,
        reward: t === n - 1 ? 1 : 0,
        terminated: t === n - 1,
        truncated: false,
        info: {},
        logProb: -0.5,
        value: 0.25 * t,
        tokens: { ids: [e, t], actionMask: [0, 1] },
      })),
    }));
    const minibatches: UpdateItem[][] = [];
    const metrics: UpdateMetrics = {
      'losses/total': 0,
      terms: {} as UpdateMetrics['terms'],
      'charts/learning_rate': 1e-3,
      'losses/grad_norm': 0,
      'losses/value_grad_norm': 0,
      skipped: false,
      step: 0,
      tokens: 0,
      actionTokens: 0,
      approxKl: 0,
      clipFraction: 0,
      entropy: 0,
      logProb: 0,
    };
    const policy: Policy = {
      mode: 'choice',
      options: {} as PolicyOptions,
      play: async () => played,
      update: async (_trainer, items) => (minibatches.push(items), metrics),
    };
    const algorithm = ppo({ ...PPO_DEFAULTS, episodesPerUpdate: lengths.length, numMinibatches, updateEpochs, klCoef: 0, earlyStopKl: null });
    await algorithm.update({ model: null as never, trainer: null as never, policy, update: 0, seed: 11 });
    return minibatches;
  }
  const where = (item: UpdateItem) => item.step.tokens.ids as [number, number];

  test('hold whole episodes, their steps in order, and every step once per epoch', async () => {
    const lengths = [3, 1, 4, 2, 5, 1];
    const minibatches = await minibatchesOf(lengths, 3, 2);
    expect(minibatches).toHaveLength(6);
    for (let epoch = 0; epoch < 2; epoch++) {
      const seen = minibatches.slice(3 * epoch, 3 * epoch + 3).map((minibatch) => {
        const episodes = [...new Set(minibatch.map((item) => where(item)[0]))];
        expect(episodes).toHaveLength(2);
        // Each episode's steps, complete and in order, one after the other.
        expect(minibatch.map(where)).toEqual(episodes.flatMap((e) => Array.from({ length: lengths[e] }, (_, t) => [e, t])));
        return episodes;
      });
      expect(seen.flat().sort()).toEqual([0, 1, 2, 3, 4, 5]);
    }
    // Shuffled: the second epoch does not repeat the first's minibatches.
    expect(minibatches.slice(3).map((m) => m.map(where))).not.toEqual(minibatches.slice(0, 3).map((m) => m.map(where)));
  });

  test('more minibatches than episodes gives one minibatch per episode', async () => {
    const minibatches = await minibatchesOf([2, 3], 4, 1);
    expect(minibatches.map((m) => m.length).sort()).toEqual([2, 3]);
  });
});
