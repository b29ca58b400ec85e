// Stage 2 of the default model: choice-level fine-tuning on the noisy-expert episodes.
//
// Token-level training (stage 1) teaches the transcripts' format, but the baseline and every RL run
// in action-level mode pick among the valid actions by their scores, and there a short action with a
// certain ending ("escalate") beats the right one whose order number the model has not learned to
// copy. This stage trains what is measured: at each state of the data, the loss
//     L = −log π(expert | s),   π = softmax over the valid actions of their mean token log-probs,
// with the expert's action as the label even where the data's episode took a random one (the states
// stay those of the noisy episodes: mistakes and recoveries). Its gradient reaches every candidate:
// g_b = ∂L/∂score_b = π_b − 1[b = expert] (src/agent/choice-policy.ts turns that into token weights).
//
// The model must stay far from perfect: an environment whose estimated greedy success reaches its
// target leaves the stage, as does one that has trained for its step limit (`maxStepsFor`: a skill
// that RL learns fast, such as looking up more of tool-use's keys before answering, is left to RL);
// the others go on until `steps`. Two estimates:
//   - agreement (free): before each step the batch's states are scored anyway (π is needed for g),
//     so each environment's greedy agreement with the expert over whole episodes it has not been
//     trained on (until its episodes come round again) is known, over its last `window` episodes.
//     It is what the default model of commit e5a2435 was made with, and it is biased both ways: the data's
//     noisy states are not the ones the greedy policy reaches, and one wrong step of many fails the
//     agreement without failing the task (support-desk stopped at 50% and measured 18% in one
//     build, stopped at 46% and measured 83% in another).
//   - played (`probeEpisodes` > 0): every `probeEvery` steps, each environment still training plays
//     that many greedy train-split episodes on a fixed set of seeds, the success the baseline
//     measures on the test split.
import { mulberry32 } from '../../src/common/random.ts';
import { Transcript } from '../../src/agent/transcript.ts';
import { choiceTrainingBatches, type ChoiceTrainingItem } from '../../src/agent/choice-policy.ts';
import type { Model } from '../../src/engine/model.ts';
import { Trainer, type TrainerState } from '../../src/engine/train/trainer.ts';
import { actionLogProbs } from '../../src/agent/action-policy.ts';
import type { NoisyEpisode } from './corpus.ts';

export interface ChoiceStageOptions {
  /** Most optimiser steps; the learning-rate schedule spans them. */
  steps: number;
  /** Ends the stage after this many steps, the schedule unchanged: how a build that its time budget cut short is made again exactly. */
  stopAfter: number;
  /** A wall-clock budget: the stage ends after the step that passes it (Infinity: none). */
  maxSeconds: number;
  episodesPerStep: number;
  lr: number;
  /** Estimated greedy success at which an environment stops training. */
  target: number;
  /** Per environment, a target other than `target`. */
  targetFor: Record<string, number>;
  /** Per environment, the most steps it trains for (none: until `steps`). */
  maxStepsFor: Record<string, number>;
  /** Episodes per environment the agreement estimate is taken over (the most recent). */
  window: number;
  /** Greedy episodes each environment plays at a probe; 0: stop on the agreement estimate instead. */
  probeEpisodes: number;
  /** Steps between probes (the first is before step 1). */
  probeEvery: number;
  /** A state and its longest candidate fit in this many tokens (as in stage 1). */
  maxTokens: number;
  seed: number;
}

export interface ChoiceStageSummary {
  steps: number;
  /** What ended the stage before its steps did: its time budget or --choice-stop-after; null if nothing did. */
  cutShortBy: 'time budget' | 'stop-after' | null;
  /**
   * Per environment: episodes it was trained on, its last estimate (null: never measured, as for a
   * step limit of 0), and what stopped it before the stage ended (null: nothing did).
   */
  environments: Record<string, { episodes: number; estimate: number | null; stoppedBy: ChoiceStop | null }>;
}

/** What stops one environment's choice training: its target or its step limit. */
export type ChoiceStop = 'target' | 'step limit';

/** Where the stage stands after a step: with the weights and the optimiser's moments, enough to go on exactly. */
export interface ChoiceProgress {
  /** The summary so far; `steps` is the steps done. */
  summary: ChoiceStageSummary;
  /** Per environment: agreement on its most recent episodes (how many it has taken is in the summary). */
  recent: Record<string, boolean[]>;
  /** Seconds the stage has run, over every process that ran it (for --choice-minutes). */
  seconds: number;
  /** Whether the stage has ended. */
  done: boolean;
}

export interface ChoiceStageHooks {
  /** Plays `episodes` greedy episodes of `env` with the model as it is and returns their success rate (for `probeEpisodes`). */
  play?: (env: string, episodes: number) => Promise<number>;
  /** Where an earlier process stopped: the stage goes on from there (and returns at once if it was done). */
  resume?: { progress: ChoiceProgress; optimizer: TrainerState };
  /** Called after a step when `everySeconds` have passed since the last save, and at the end. */
  save?: (progress: ChoiceProgress, trainer: Trainer) => Promise<void>;
  everySeconds?: number;
}

interface LabelledState {
  step: ChoiceTrainingItem['step'];
  expert: number;
}

/** An episode's states as token ids, its candidates, the action it took and the expert's. */
function labelledStates(model: Model, episode: NoisyEpisode, maxTokens: number): LabelledState[] {
  const transcript = new Transcript(model.tokenizer, 'plain', episode.description);
  const states: LabelledState[] = [];
  for (const played of episode.steps) {
    transcript.addObservation(played.observation);
    const actionTokens = played.actions.map((a) => transcript.encodeAction(a));
    if (transcript.ids.length + Math.max(...actionTokens.map((t) => t.length)) > maxTokens) break;
    const chosen = played.actions.indexOf(played.action);
    states.push({ step: { context: [...transcript.ids], actionTokens, chosen }, expert: played.actions.indexOf(played.expert) });
    transcript.addAction(actionTokens[chosen]);
  }
  return states;
}

export async function choiceStage(
  model: Model,
  episodes: NoisyEpisode[],
  options: ChoiceStageOptions,
  log: (message: string) => void,
  hooks: ChoiceStageHooks = {},
): Promise<ChoiceStageSummary> {
  const resumed = hooks.resume?.progress;
  if (resumed?.done) return resumed.summary;
  if (options.probeEpisodes > 0 && !hooks.play) throw new Error('choiceStage: probeEpisodes needs a play hook');
  const random = mulberry32(options.seed ^ 0x27d4eb2f);
  const byEnv = new Map<string, LabelledState[][]>();
  for (const episode of episodes) {
    const states = labelledStates(model, episode, options.maxTokens);
    if (states.length > 0) byEnv.set(episode.env, [...(byEnv.get(episode.env) ?? []), states]);
  }
  // Each environment's episodes in a seeded order, taken in turn, round after round.
  const queues = new Map([...byEnv].map(([env, list]) => [env, { list: list.map((x) => ({ x, key: random() })).sort((a, b) => a.key - b.key).map(({ x }) => x), next: resumed?.summary.environments[env]?.episodes ?? 0 }]));
  const recent = new Map([...byEnv.keys()].map((env) => [env, [...(resumed?.recent[env] ?? [])]]));
  const summary: ChoiceStageSummary = resumed
    ? structuredClone(resumed.summary)
    : { steps: 0, cutShortBy: null, environments: Object.fromEntries([...byEnv.keys()].map((env) => [env, { episodes: 0, estimate: null, stoppedBy: null }])) };
  const trainer = new Trainer(model.gpuModel, {
    train: 'full',
    optimizer: { schedule: { kind: 'warmup-cosine', lr: options.lr, warmupSteps: Math.min(10, Math.floor(options.steps / 4)), totalSteps: options.steps, minLrRatio: 0.1 }, weightDecay: 0.01, maxGradNorm: 1 },
    seed: options.seed,
  });
  if (hooks.resume) trainer.loadOptimizerState(hooks.resume.optimizer);
  const started = performance.now();
  const elapsed = () => (resumed?.seconds ?? 0) + (performance.now() - started) / 1000;
  let lastSave = performance.now();
  const save = (done: boolean) =>
    hooks.save?.(
      {
        summary,
        recent: Object.fromEntries(recent),
        seconds: elapsed(),
        done,
      },
      trainer,
    );
  try {
    const stop = (env: string, step: number, by: ChoiceStop, how: string) => {
      summary.environments[env].stoppedBy = by;
      log(`choice stage: ${env} stops after ${step} step${step === 1 ? '' : 's'} (${how})`);
    };
    const training = () => [...queues.keys()].filter((env) => summary.environments[env].stoppedBy === null);
    const targetOf = (env: string) => options.targetFor[env] ?? options.target;
    /** Greedy agreement with the expert over the environment's last `window` episodes. */
    const agreement = (env: string) => recent.get(env)!.filter(Boolean).length / Math.max(1, recent.get(env)!.length);
    for (let step = summary.steps; step < options.steps; step++) {
      for (const env of training()) {
        if (step >= (options.maxStepsFor[env] ?? Infinity)) stop(env, step, 'step limit', 'its step limit');
      }
      if (options.probeEpisodes > 0 && step % options.probeEvery === 0) {
        for (const env of training()) {
          const estimate = await hooks.play!(env, options.probeEpisodes);
          summary.environments[env].estimate = estimate;
          if (estimate >= targetOf(env)) stop(env, step, 'target', `greedy success ${(100 * estimate).toFixed(0)}% on ${options.probeEpisodes} train-split episodes`);
        }
      }
      const active = training();
      if (active.length === 0) break;
      const batch: { env: string; states: LabelledState[] }[] = [];
      for (let i = 0; i < options.episodesPerStep; i++) {
        const env = active[(step * options.episodesPerStep + i) % active.length];
        const queue = queues.get(env)!;
        batch.push({ env, states: queue.list[queue.next % queue.list.length] });
        queue.next++;
      }
      const states = batch.flatMap((b) => b.states);
      const scores = await model.scoreContinuations(states.map((s) => ({ prompt: s.step.context, continuations: s.step.actionTokens })), { adapter: null });
      const logPi = actionLogProbs(scores.map((s) => s.sums), states.map((s) => s.step.actionTokens.map((t) => t.length)), { lengthNormalize: true });
      // Greedy agreement with the expert, episode by episode, before this step trains on them.
      let at = 0;
      for (const { env, states: episodeStates } of batch) {
        const correct = episodeStates.every((s, i) => logPi[at + i].indexOf(Math.max(...logPi[at + i])) === s.expert);
        at += episodeStates.length;
        const window = recent.get(env)!;
        window.push(correct);
        if (window.length > options.window) window.shift();
        summary.environments[env].episodes++;
        if (options.probeEpisodes === 0) summary.environments[env].estimate = agreement(env);
      }
      const items: ChoiceTrainingItem[] = states.map((s, i) => ({
        step: s.step,
        g: logPi[i].map((lp, b) => Math.exp(lp) - (b === s.expert ? 1 : 0)),
        target: 0,
        oldValue: 0,
      }));
      // The trainer averages over action tokens; this scale makes the loss the mean over states.
      const actionTokens = states.reduce((n, s) => n + s.step.actionTokens.reduce((m, t) => m + t.length, 0), 0);
      const loss = -states.reduce((sum, s, i) => sum + logPi[i][s.expert], 0) / states.length;
      await trainer.step(choiceTrainingBatches(items, { lengthNormalize: true, microBatch: 8, scale: actionTokens / states.length, value: false }), { pg: 1 });
      summary.steps = step + 1;
      if (options.probeEpisodes === 0) {
        for (const env of active) {
          const estimate = agreement(env);
          if (recent.get(env)!.length >= options.window && estimate >= targetOf(env)) {
            stop(env, step + 1, 'target', `greedy agreement with the expert on ${(100 * estimate).toFixed(0)}% of its last ${options.window} episodes`);
          }
        }
      }
      if ((step + 1) % 5 === 0 || step + 1 === options.steps) {
        const estimates = active.map((env) => `${env} ${(100 * agreement(env)).toFixed(0)}%`).join(', ');
        log(`choice step ${step + 1}/${options.steps}  −log π(expert) ${loss.toFixed(3)}  agreement ${estimates}  ${elapsed().toFixed(0)} s`);
      }
      if (step + 1 < options.steps && step + 1 >= options.stopAfter) {
        summary.cutShortBy = 'stop-after';
        log(`choice stage: ends at step ${step + 1} (--choice-stop-after)`);
        break;
      }
      if (elapsed() > options.maxSeconds && step + 1 < options.steps) {
        summary.cutShortBy = 'time budget';
        log(`choice stage: its time budget of ${options.maxSeconds} s ends it at step ${step + 1}`);
        break;
      }
      if ((performance.now() - lastSave) / 1000 >= (hooks.everySeconds ?? 0)) {
        await save(false);
        lastSave = performance.now();
      }
    }
    await save(true);
  } finally {
    trainer.dispose();
  }
  return summary;
}
