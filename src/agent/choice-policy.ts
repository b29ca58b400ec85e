// The action-level ('choice') policy: at each step the environment lists its valid actions, the
// model scores each one's tokens after the transcript so far, and the policy is a softmax over the
// candidates' summed or length-normalised log-probs (src/rl/action-policy.ts). Many environments
// step side by side: the states of all unfinished episodes are scored in one batched call (each
// state's transcript runs once, its candidates continue from its KV cache).
//
// Training: π(a|s) = softmax_b(score_b), so ∂ log π(a|s) / ∂ score_b = 1[b = a] − π_b and the
// gradient of any per-step loss reaches EVERY candidate. update() works out g_b = ∂L/∂score_b for
// each step on the host (from the current policy, re-scored), and turns it into one training
// sequence per candidate (the state, then that candidate) whose tokens carry the policy-gradient
// weight −g_b (÷ the candidate's length for mean scores): the GPU's −Σ weight · log p(token) then has
// exactly the gradient Σ_b g_b ∇score_b. The value loss sits on the chosen candidate's sequence, on
// the row of the state's last token (its own value mask).
import { mulberry32 } from '../common/random.ts';
import type { Model } from '../engine/model.ts';
import type { TrainBatch } from '../engine/train/batch.ts';
import type { Trainer } from '../engine/train/trainer.ts';
import type { Env, EnvInfo } from '../env/types.ts';
import { actionEntropy, actionLogProbs, sampleAction } from '../rl/action-policy.ts';
import type { PlayedEpisode, PlayOptions, PlayRequest, Policy, PolicyLoss, PolicyOptions, PolicyStep, UpdateItem, UpdateMetrics } from './policy.ts';
import { Transcript } from './transcript.ts';

export interface ChoiceStep extends PolicyStep {
  /** Token ids of the transcript before this step's action (the state). */
  context: number[];
  /** Each valid action's text and tokens. */
  actions: string[];
  actionTokens: number[][];
  /** log π(b|s) of every valid action when the step was played. */
  logProbs: number[];
  chosen: number;
}

export interface ChoicePolicyOptions extends PolicyOptions {
  /** Score actions by their mean token log-prob instead of the sum (long actions are not penalised). */
  lengthNormalize: boolean;
}

/** A state's policy, and with `hidden` the final hidden states the value head reads. */
export interface ScoredState {
  logProbs: number[];
  /** At the state's last token: V(s) = w · hidden + b. */
  hidden?: Float32Array;
  /** At each candidate's last token: Q(s, a) = w · hidden + b (DQN). */
  candidateHidden?: Float32Array[];
}

/** A state as the policy saw it: the transcript so far and its candidates. */
export interface ChoiceState {
  context: number[];
  actions: string[];
  actionTokens: number[][];
}

/** Picks each state's action from its scores, in place of sampling from π (e.g. DQN's ε-greedy over Q). */
export type ActionChooser = (states: ChoiceState[], scored: ScoredState[]) => number[];

export class ChoicePolicy implements Policy<ChoiceStep> {
  readonly mode = 'choice' as const;

  constructor(
    readonly model: Model,
    readonly options: ChoicePolicyOptions,
  ) {}

  /** π over each state's candidates (and the state's last hidden state), all states in one batched call. */
  async scoreStates(states: { context: number[]; actionTokens: number[][] }[], adapter = this.options.adapter, hidden = false): Promise<ScoredState[]> {
    if (states.length === 0) return [];
    const scores = await this.model.scoreContinuations(
      states.map((s) => ({ prompt: s.context, continuations: s.actionTokens })),
      { adapter, hidden },
    );
    return scores.map((score, i) => ({
      logProbs: actionLogProbs([score.sums], [states[i].actionTokens.map((t) => t.length)], { lengthNormalize: this.options.lengthNormalize })[0],
      ...(hidden ? { hidden: score.promptHidden, candidateHidden: score.continuationHidden } : {}),
    }));
  }

  async play(requests: PlayRequest[], options: PlayOptions & { choose?: ActionChooser } = {}): Promise<PlayedEpisode<ChoiceStep>[]> {
    const { env: module, format } = this.options;
    const value = options.values ? await readValueHead(this.options) : undefined;
    interface Live {
      episode: PlayedEpisode<ChoiceStep>;
      env?: Env & { expertAction?: () => string };
      transcript: Transcript;
      random: () => number;
      observation: string;
      done: boolean;
    }
    const live: Live[] = requests.map(({ seed, samplingSeed }) => ({
      episode: { seed, samplingSeed: samplingSeed ?? seed, steps: [], totalReward: 0, success: false },
      transcript: new Transcript(this.model.tokenizer, format, module.description),
      random: mulberry32((samplingSeed ?? seed) ^ 0x5bd1e995),
      observation: '',
      done: false,
    }));
    const fail = (l: Live, error: unknown) => {
      l.episode.error = error instanceof Error ? error.message : String(error);
      l.done = true;
    };
    const finish = (l: Live) => {
      l.done = true;
      options.onEpisode?.(l.episode);
    };
    try {
      await Promise.all(
        live.map(async (l) => {
          try {
            l.env = await module.make();
            const reset = await l.env.reset({ seed: l.episode.seed, options: this.options.reset });
            if (!l.env.validActions) throw new Error(`environment ${module.id} has no validActions(): it cannot be played by an action-level policy (use the text mode)`);
            if (options.expert && typeof l.env.expertAction !== 'function') throw new Error(`environment ${module.id} has no scripted expert (expertAction()): demonstrations need one; train BC on the run's own successful episodes instead`);
            l.transcript.addObservation(reset.observation);
            l.observation = reset.observation;
          } catch (error) {
            fail(l, error);
            options.onEpisode?.(l.episode);
          }
        }),
      );
      for (let t = 0; t < module.maxEpisodeSteps; t++) {
        const active = live.filter((l) => !l.done);
        if (active.length === 0) break;
        // 1. Every active environment's valid actions (and the expert's pick), side by side.
        const offered = await Promise.all(
          active.map(async (l) => {
            try {
              const actions = await l.env!.validActions!();
              if (!Array.isArray(actions) || actions.length === 0) throw new Error(`environment ${module.id} offered no valid actions at step ${t}`);
              const expert = options.expert ? l.env!.expertAction!() : undefined;
              if (expert !== undefined && !actions.includes(expert)) throw new Error(`the scripted expert of ${module.id} chose ${JSON.stringify(expert)} at step ${t}, which is not among its valid actions`);
              return { l, actions, actionTokens: actions.map((a) => l.transcript.encodeAction(a)), expert };
            } catch (error) {
              fail(l, error);
              options.onEpisode?.(l.episode);
              return undefined;
            }
          }),
        );
        const states = offered.filter((s) => s !== undefined).map((s) => ({ ...s, context: [...s.l.transcript.ids] }));
        if (states.length === 0) break;
        // 2. One batched scoring of every state's candidates (and of the reference, when asked).
        const scored = await this.scoreStates(states, this.options.adapter, value !== undefined || options.choose !== undefined);
        const picked = options.choose?.(states, scored);
        const reference = options.reference ? await this.scoreStates(states, null) : undefined;
        // 3. Choose, then step every environment.
        await Promise.all(
          states.map(async (s, i) => {
            const { l, actions, actionTokens, context } = s;
            const logProbs = scored[i].logProbs;
            const chosen =
              s.expert !== undefined
                ? actions.indexOf(s.expert)
                : picked
                  ? picked[i]
                  : options.greedy
                    ? logProbs.indexOf(Math.max(...logProbs))
                    : sampleAction(logProbs, l.random);
            try {
              const result = await l.env!.step(actions[chosen]);
              if (!Number.isFinite(result.reward)) throw new Error(`environment ${module.id} returned reward ${result.reward} at step ${t}; rewards must be finite numbers`);
              l.transcript.addAction(actionTokens[chosen]);
              const step: ChoiceStep = {
                observation: l.observation,
                action: actions[chosen],
                reward: result.reward,
                terminated: result.terminated,
                truncated: result.truncated || (!result.terminated && t === module.maxEpisodeSteps - 1),
                info: result.info as EnvInfo,
                logProb: logProbs[chosen],
                ...(reference ? { referenceLogProb: reference[i].logProbs[chosen] } : {}),
                ...(value ? { value: dot(value.weight, scored[i].hidden!) + value.bias } : {}),
                tokens: { ids: [...l.transcript.ids], actionMask: [...l.transcript.actionMask] },
                context,
                actions,
                actionTokens,
                logProbs,
                chosen,
              };
              l.episode.steps.push(step);
              l.episode.totalReward += result.reward;
              if (!result.terminated) {
                l.transcript.addObservation(result.observation);
                l.observation = result.observation;
              }
              if (result.terminated || step.truncated) {
                l.episode.success = result.info?.success === true;
                finish(l);
              }
            } catch (error) {
              fail(l, error);
              options.onEpisode?.(l.episode);
            }
          }),
        );
      }
      // A truncated episode's return bootstraps from the value of the observation it stopped at.
      if (value) {
        const cut = live.filter((l) => !l.episode.error && l.episode.steps.at(-1)?.truncated);
        if (cut.length > 0) {
          const ids = cut.map((l) => l.transcript.ids);
          const { hidden } = await this.model.score(ids, { adapter: this.options.adapter, hiddenAt: ids.map((x) => [x.length - 1]) });
          cut.forEach((l, i) => (l.episode.finalValue = dot(value.weight, hidden![i][0]) + value.bias));
        }
      }
      return live.map((l) => l.episode);
    } finally {
      await Promise.all(live.map((l) => Promise.resolve(l.env?.close?.()).catch(() => undefined)));
    }
  }

  async update(trainer: Trainer, items: UpdateItem<ChoiceStep>[], loss: PolicyLoss): Promise<UpdateMetrics> {
    if (items.length === 0) throw new RangeError('update needs at least one step');
    const { lengthNormalize, microBatch } = this.options;
    const clip = loss.clip ?? 0.2;
    const entropyWeight = loss.entropy ?? 0;
    const klWeight = loss.kl ?? 0;
    const valueWeight = loss.value ?? 0;
    // The current policy over every item's candidates: PPO's later epochs differ from the behaviour policy.
    const current = await this.scoreStates(items.map((item) => item.step));
    let approxKl = 0;
    let clipped = 0;
    let entropy = 0;
    let logProb = 0;
    const perItem = items.map((item, i) => {
      const { step, advantage } = item;
      const logPi = current[i].logProbs;
      const a = step.chosen;
      // g_a = ∂L/∂ log π(a|s) of the objective and the KL penalty.
      let gChosen: number;
      const ratio = Math.exp(logPi[a] - step.logProb);
      approxKl += ratio - 1 - (logPi[a] - step.logProb);
      if (loss.objective === 'nll') gChosen = -1;
      else if (loss.objective === 'pg') gChosen = -advantage;
      else {
        const clippedRatio = Math.min(Math.max(ratio, 1 - clip), 1 + clip);
        if (clippedRatio !== ratio) clipped++;
        gChosen = ratio * advantage <= clippedRatio * advantage ? -ratio * advantage : 0;
      }
      if (klWeight > 0) {
        if (step.referenceLogProb === undefined) throw new RangeError('a KL penalty needs reference log-probs: play with { reference: true }');
        gChosen += klWeight * (1 - Math.exp(step.referenceLogProb - logPi[a]));
      }
      logProb += logPi[a];
      const h = actionEntropy(logPi);
      entropy += h;
      // g_b = g_a (1[b = a] − π_b) + β_H π_b (log π_b + H)   (the entropy bonus −β_H H differentiated).
      const g = logPi.map((lp, b) => gChosen * ((b === a ? 1 : 0) - Math.exp(lp)) + entropyWeight * Math.exp(lp) * (lp + h));
      if (valueWeight > 0 && item.return === undefined) throw new RangeError('a value loss needs a return for every step');
      return { step, g, target: item.return ?? 0, oldValue: step.value ?? 0 };
    });
    // The trainer averages over action tokens; scale so that the loss is the mean over items instead.
    const actionTokens = items.reduce((n, { step }) => n + step.actionTokens.reduce((m, t) => m + t.length, 0), 0);
    const scale = actionTokens / items.length;
    const batches: TrainBatch[] = [];
    let batch = emptyBatch();
    for (const { step, g, target, oldValue } of perItem) {
      step.actionTokens.forEach((tokens, b) => {
        const weight = (-g[b] * scale) / (lengthNormalize ? tokens.length : 1);
        const P = step.context.length;
        const sequence = [...step.context, ...tokens];
        batch.sequences.push(sequence);
        batch.actionMask.push(sequence.map((_, t) => (t < P ? 0 : 1)));
        batch.advantages!.push(sequence.map((_, t) => (t < P ? 0 : weight)));
        // V(s) is the value on the row of the state's last token, the row that predicts the first action token.
        const onValue = b === step.chosen && valueWeight > 0;
        batch.valueMask!.push(sequence.map((_, t) => (onValue && t === P ? 1 : 0)));
        batch.returns!.push(sequence.map((_, t) => (onValue && t === P ? target : 0)));
        batch.oldValues!.push(sequence.map((_, t) => (onValue && t === P ? oldValue : 0)));
        if (batch.sequences.length === microBatch) {
          batches.push(batch);
          batch = emptyBatch();
        }
      });
    }
    if (batch.sequences.length > 0) batches.push(batch);
    const metrics = await trainer.step(batches, { pg: 1, value: valueWeight * scale, valueClip: loss.valueClip ?? 0 });
    return { ...metrics, approxKl: approxKl / items.length, clipFraction: clipped / items.length, entropy: entropy / items.length, logProb: logProb / items.length };
  }
}

function emptyBatch(): TrainBatch {
  return { sequences: [], actionMask: [], advantages: [], valueMask: [], returns: [], oldValues: [] };
}

function dot(a: Float32Array, b: Float32Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}

/** The value head's weights, read back once per play call (V(s) = w · h + b on the host). */
export async function readValueHead(options: PolicyOptions): Promise<{ weight: Float32Array; bias: number }> {
  if (!options.valueHead) throw new RangeError('values were asked for, but the policy has no value head');
  const params = await options.valueHead.parameters.read();
  return { weight: params.get('value.weight')!, bias: params.get('value.bias')![0] };
}
