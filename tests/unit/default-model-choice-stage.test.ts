// The default model's choice stage (scripts/default-model/choice-stage.ts) stopped after a step and
// resumed from what it saved ends with the same weights and summary as a stage that ran straight
// through: a build on a machine without a GPU takes hours and must survive being stopped.
import { describe, expect, test } from 'vitest';
import { hostWeightTensors } from '../../src/engine/gpu-model.ts';
import { loadModel, type Model } from '../../src/engine/model.ts';
import { modelFolderFiles } from '../../src/engine/model/folder.ts';
import { MemoryModelSource } from '../../src/engine/model/memory-source.ts';
import type { TrainerState } from '../../src/engine/train/trainer.ts';
import { choiceStage, type ChoiceProgress, type ChoiceStageOptions } from '../../scripts/default-model/choice-stage.ts';
import type { NoisyEpisode } from '../../scripts/default-model/corpus.ts';
import { tinyModelFiles } from '../shared/tiny-model.ts';
import { nodeGpu } from '../support/node-gpu.ts';

/** Two environments of two-step episodes; the expert is not always the action the episode took. */
const episodes: NoisyEpisode[] = ['north', 'south'].flatMap((env) =>
  [0, 1, 2].map((i) => ({
    env,
    description: `Go ${env}.`,
    success: i !== 1,
    steps: [
      { observation: `room ${i}`, action: i === 1 ? 'wait' : 'go', actions: ['go', 'wait'], expert: 'go' },
      { observation: 'a door', action: 'open', actions: ['open', 'knock', 'leave'], expert: env === 'north' ? 'open' : 'knock' },
    ],
  })),
);

const options: ChoiceStageOptions = { steps: 4, stopAfter: 4, maxSeconds: Infinity, episodesPerStep: 3, lr: 1e-2, target: 2, targetFor: {}, maxStepsFor: {}, window: 2, probeEpisodes: 0, probeEvery: 1, maxTokens: 128, seed: 5 };
const quiet = () => {};

async function tinyTrainable(files = tinyModelFiles({ vocabSize: 96, seed: 7 }).files): Promise<Model> {
  return loadModel(await nodeGpu(), new MemoryModelSource(files), undefined, { trainable: true });
}

async function weightsOf(model: Model): Promise<Float32Array[]> {
  return hostWeightTensors(await model.gpuModel.readWeights()).map((t) => Float32Array.from(t.data));
}

/** A stand-in for playing episodes: a number that depends on every weight, so a probe at other weights tells. */
const playOn = (model: Model) => async () => {
  const sum = (await weightsOf(model)).reduce((total, w) => total + w.reduce((a, b) => a + b, 0), 0);
  return Math.abs(Math.sin(sum));
};

describe('default model: the choice stage', () => {
  test.each([
    ['the agreement estimate', options],
    ['probes every 2 steps', { ...options, probeEpisodes: 3, probeEvery: 2 }],
  ])('stopped after step 2 and resumed from its save, it ends as a stage that ran straight through (%s)', async (_, options) => {
    const straightModel = await tinyTrainable();
    const straight = await choiceStage(straightModel, episodes, options, quiet, { play: playOn(straightModel) });
    expect(straight.steps).toBe(4);
    const expected = await weightsOf(straightModel);
    straightModel.dispose();

    // Saves after every step; the one after step 2 is kept, then the process "dies".
    const stoppedModel = await tinyTrainable();
    let kept: { progress: ChoiceProgress; optimizer: TrainerState; files: Map<string, Uint8Array> } | undefined;
    const killed = choiceStage(stoppedModel, episodes, options, quiet, {
      play: playOn(stoppedModel),
      everySeconds: 0,
      save: async (progress, trainer) => {
        if (progress.summary.steps < 2) return;
        // Through JSON, as the checkpoint keeps it.
        kept = { progress: JSON.parse(JSON.stringify(progress)), optimizer: await trainer.optimizerState(), files: await modelFolderFiles(stoppedModel, await stoppedModel.gpuModel.readWeights()) };
        throw new Error('killed');
      },
    });
    await expect(killed).rejects.toThrow('killed');
    stoppedModel.dispose();
    expect(kept!.progress).toMatchObject({ done: false, summary: { steps: 2 } });

    const resumedModel = await tinyTrainable(kept!.files);
    const saves: ChoiceProgress[] = [];
    const resumed = await choiceStage(resumedModel, episodes, options, quiet, {
      play: playOn(resumedModel),
      resume: { progress: kept!.progress, optimizer: kept!.optimizer },
      save: async (progress) => void saves.push(JSON.parse(JSON.stringify(progress))),
      everySeconds: Infinity,
    });
    expect(resumed).toEqual(straight);
    const got = await weightsOf(resumedModel);
    resumedModel.dispose();
    got.forEach((w, i) => expect(Array.from(w)).toEqual(Array.from(expected[i])));
    // Only the final save, marked done: resumed from it, the stage is over at once.
    expect(saves.map((s) => [s.summary.steps, s.done])).toEqual([[4, true]]);
    const doneModel = await tinyTrainable(kept!.files);
    expect(await choiceStage(doneModel, episodes, options, quiet, { resume: { progress: saves[0], optimizer: kept!.optimizer } })).toEqual(straight);
    doneModel.dispose();
  });

  test('with probes, an environment whose played success reaches the target stops training; the others go on and are probed again', async () => {
    const model = await tinyTrainable();
    const probes: [string, number][] = [];
    const logs: string[] = [];
    const summary = await choiceStage(model, episodes, { ...options, target: 0.5, probeEpisodes: 3, probeEvery: 2 }, (m) => logs.push(m), {
      play: async (env, count) => {
        probes.push([env, count]);
        return env === 'north' ? 2 / 3 : 1 / 3;
      },
    });
    model.dispose();
    // Probes before steps 1 and 3: north stops at the first, south is probed at both.
    expect(probes).toEqual([['north', 3], ['south', 3], ['south', 3]]);
    expect(summary.environments).toEqual({
      north: { episodes: 0, estimate: 2 / 3, stoppedBy: 'target' },
      south: { episodes: 12, estimate: 1 / 3, stoppedBy: null },
    });
    expect(logs).toContain('choice stage: north stops after 0 steps (greedy success 67% on 3 train-split episodes)');
    await expect(choiceStage(model, episodes, { ...options, probeEpisodes: 3 }, quiet)).rejects.toThrow('probeEpisodes needs a play hook');
  });

  test("an environment's own target and step limit stop it where the common target would not", async () => {
    const model = await tinyTrainable();
    const probes: [string, number][] = [];
    const logs: string[] = [];
    // Both play at 2/3, under the common target; north's own target is under that, south may train 1 step.
    const summary = await choiceStage(model, episodes, { ...options, target: 0.9, targetFor: { north: 0.6 }, maxStepsFor: { south: 1 }, probeEpisodes: 3, probeEvery: 2 }, (m) => logs.push(m), {
      play: async (env, count) => {
        probes.push([env, count]);
        return 2 / 3;
      },
    });
    model.dispose();
    // Before step 1 north stops on its target; south trains its one step (all 3 of its episodes) and
    // stops before step 2 without a probe, which ends the stage.
    expect(probes).toEqual([['north', 3], ['south', 3]]);
    expect(summary).toEqual({
      steps: 1,
      cutShortBy: null,
      environments: { north: { episodes: 0, estimate: 2 / 3, stoppedBy: 'target' }, south: { episodes: 3, estimate: 2 / 3, stoppedBy: 'step limit' } },
    });
    expect(logs).toContain('choice stage: south stops after 1 step (its step limit)');
  });

  test('an environment with a step limit of 0 trains no step and is never measured', async () => {
    const model = await tinyTrainable();
    const probes: string[] = [];
    const summary = await choiceStage(model, episodes, { ...options, maxStepsFor: { north: 0, south: 0 }, probeEpisodes: 3 }, quiet, {
      play: async (env) => {
        probes.push(env);
        return 0;
      },
    });
    model.dispose();
    expect(probes).toEqual([]);
    expect(summary).toEqual({
      steps: 0,
      cutShortBy: null,
      environments: { north: { episodes: 0, estimate: null, stoppedBy: 'step limit' }, south: { episodes: 0, estimate: null, stoppedBy: 'step limit' } },
    });
  });
});
