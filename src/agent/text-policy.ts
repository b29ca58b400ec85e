// The token-level ('text') policy: the model writes each action as free text, sampled on the GPU,
// and the environment parses it. Many environments step side by side: at every step the transcripts
// of all unfinished episodes go into one batched generation, each stopping at the end of its action
// (plain format: a token whose text holds a newline; chat format: an end-of-turn token). The
// generation goes through a PromptCache, which keeps each episode's KV cache from step to step and
// feeds only what is new (the end of the action, the next observation) instead of the whole transcript.
//
// Training is the usual token-level RL of RLHF: one training sequence per episode (its whole
// transcript), the chosen steps' action tokens masked in, each token carrying its step's advantage
// (and its own old and reference log-probs), so that the trainer's per-token terms
//
//   pg   -A log π(token)      ppo  -min(ρA, clip(ρ) A), ρ = π(token) / π_old(token)      nll  -log π(token)
//
// are averaged over the action tokens of the update. The value head is regressed at each chosen
// step's state: the row of the last context token before its action (the row that predicts the
// action's first token), the same place play() reads V(s) from.
//
// log π here is always the model's distribution at temperature 1 without top-k/top-p truncation
// (what generate reports and what the trainer differentiates), whatever the sampling settings.
import { append } from '../common/tokens.ts';
import type { Model } from '../engine/model.ts';
import type { TrainBatch } from '../engine/train/batch.ts';
import type { LossWeights } from '../engine/train/loss.ts';
import type { Trainer } from '../engine/train/trainer.ts';
import { valueOf } from '../engine/train/value-head.ts';
import { PromptCache } from '../engine/prompt-cache.ts';
import { pcgHash, resolveSampling } from '../engine/sampling-params.ts';
import type { Env, EnvInfo, StepResult } from '../env/types.ts';
import { actionKl, startEpisodes, valueHeadOf, type PlayedEpisode, type PlayOptions, type PlayRequest, type Policy, type PolicyLoss, type PolicyOptions, type PolicyStep, type UpdateItem, type UpdateMetrics } from './policy.ts';
import { actionSpans, Transcript, type ActionSpan } from './transcript.ts';

/** An episode's token sequence and action mask. */
export interface EpisodeTokens {
  ids: number[];
  actionMask: number[];
}

export interface TextStep extends PolicyStep {
  /** This step's number within its episode: its action is the index-th action span of the transcript. */
  index: number;
  /**
   * The episode's whole transcript (every action, and the last observation when the episode was cut
   * short), one object shared by all steps of the episode: update() trains each episode as one sequence.
   */
  transcript: EpisodeTokens;
  /** The transcript up to and including this action; `logprobs`: log π of each of this action's tokens (temperature 1). */
  tokens: { ids: number[]; actionMask: number[]; logprobs: number[] };
  /** log π_ref of each of this action's tokens (adapter off), when play was asked for the reference. */
  referenceLogProbs?: number[];
}

export interface TextSampling {
  /** Default 1. */
  temperature?: number;
  /** 0 or undefined: all tokens. */
  topK?: number;
  /** 1 or undefined: all tokens. */
  topP?: number;
}

export interface TextPolicyOptions extends PolicyOptions {
  sampling?: TextSampling;
  /** An action that has not ended after this many tokens ends there (default 32). */
  maxActionTokens?: number;
}

/** One episode while it is played. */
interface Live {
  episode: PlayedEpisode<TextStep>;
  env?: Env;
  expert?: () => Promise<string>;
  transcript: Transcript;
  /** Filled in when the episode ends; shared by its steps. */
  whole: EpisodeTokens;
  observation: string;
  done: boolean;
  reported: boolean;
}

/** An action chosen for one live episode, before the environment has seen it. */
interface Chosen {
  live: Live;
  ids: number[];
  /** Per-token log π from generate; undefined for the expert's actions (scored when the episode ends). */
  logprobs?: number[];
  text: string;
}

export class TextPolicy implements Policy<TextStep> {
  readonly mode = 'text' as const;
  readonly maxActionTokens: number;
  readonly sampling: Required<TextSampling>;
  private stops?: { ids: number[]; newline: Set<number>; closing: number[] };

  constructor(
    readonly model: Model,
    readonly options: TextPolicyOptions,
  ) {
    this.maxActionTokens = options.maxActionTokens ?? 32;
    if (!Number.isInteger(this.maxActionTokens) || this.maxActionTokens < 1) throw new RangeError(`maxActionTokens must be a whole number >= 1, got ${options.maxActionTokens}`);
    const resolved = resolveSampling(options.sampling); // checks the settings now rather than at the first play
    this.sampling = { temperature: resolved.temperature, topK: resolved.topK, topP: resolved.topP };
    if (!Number.isInteger(options.microBatch) || options.microBatch < 1) throw new RangeError(`microBatch must be a whole number >= 1, got ${options.microBatch}`);
    new Transcript(model.tokenizer, options.format, options.env.description); // a chat format without a chat template fails here
  }

  /**
   * The ids after which an action has ended, worked out once: in the plain format every vocabulary
   * entry whose text holds a newline (and EOS), in the chat format the end-of-turn (EOS) ids that
   * Transcript.encodeAction ends actions with. `closing`: the context tokens that end an action cut
   * off by maxActionTokens (plain: a newline), so that the transcript keeps its shape.
   */
  stopTokens(): { ids: number[]; newline: Set<number>; closing: number[] } {
    if (this.stops) return this.stops;
    const tokenizer = this.model.tokenizer;
    const eos = tokenizer.eosTokenIds;
    const newline = new Set<number>();
    let closing: number[] = [];
    if (this.options.format === 'plain') {
      for (let id = 0; id < this.model.config.vocabSize; id++) if (tokenizer.decode([id]).includes('\n')) newline.add(id);
      // The newline token the plain format itself ends actions with (encodeAction encodes ` {text}\n`).
      const last = tokenizer.encode(' a\n', { addSpecialTokens: false }).at(-1);
      closing = last !== undefined && tokenizer.decode([last]) === '\n' ? [last] : tokenizer.encode('\n', { addSpecialTokens: false });
    }
    this.stops = { ids: [...new Set([...newline, ...eos])], newline, closing };
    return this.stops;
  }

  /** The action as the environment reads it: special tokens dropped, the plain format's line only, trimmed. */
  actionText(ids: number[]): string {
    const text = this.model.tokenizer.decode(ids, { skipSpecialTokens: true });
    return (this.options.format === 'plain' ? text.split('\n')[0] : text).trim();
  }

  async play(requests: PlayRequest[], options: PlayOptions = {}): Promise<PlayedEpisode<TextStep>[]> {
    const { env: module, format, adapter } = this.options;
    const positions = this.model.gpuModel.ropePositions;
    const valueHead = options.values ? await valueHeadOf(this.options).read() : undefined;
    const stops = this.stopTokens();
    const live: Live[] = requests.map(({ seed, samplingSeed }) => ({
      episode: { seed, samplingSeed: samplingSeed ?? seed, steps: [], totalReward: 0, success: false },
      transcript: new Transcript(this.model.tokenizer, format, module.description, this.model.config.maxPositions),
      whole: { ids: [], actionMask: [] },
      observation: '',
      done: false,
      reported: false,
    }));
    const fail = (l: Live, error: unknown) => {
      l.episode.error = error instanceof Error ? error.message : String(error);
      l.done = true;
    };
    /** Cut short from outside the task: no room left in the model's context for another action. */
    const outOfContext = (l: Live, needed: number) => {
      const last = l.episode.steps.at(-1);
      if (!last) return fail(l, new Error(`the first observation (${l.transcript.ids.length} tokens) leaves no room for an action of ${needed} tokens in the model's ${positions} positions`));
      last.truncated = true;
      l.episode.success = last.info?.success === true;
      l.done = true;
    };
    const endEpisodes = () => this.finish(live.filter((l) => l.done && !l.reported), options, valueHead);
    // The episodes' KV caches, kept from step to step: each step feeds only the tokens that are new.
    let cache: PromptCache | undefined;
    try {
      await startEpisodes(live, module, this.options.reset, options.expert === true, fail);
      await endEpisodes();

      for (let t = 0; t < module.maxEpisodeSteps; t++) {
        let acting = live.filter((l) => !l.done);
        if (acting.length === 0) break;
        // 1. The actions: the expert's, or all episodes' sampled in one batched generate.
        let chosen: Chosen[];
        if (options.expert) {
          chosen = [];
          for (const l of acting) {
            try {
              const text = await l.expert!();
              if (typeof text !== 'string') throw new Error(`the scripted expert of ${module.id} returned ${JSON.stringify(text)} at step ${t}, not a string`);
              const ids = l.transcript.encodeAction(text);
              if (l.transcript.ids.length + ids.length > positions) outOfContext(l, ids.length);
              else chosen.push({ live: l, ids, text });
            } catch (error) {
              fail(l, error);
            }
          }
        } else {
          for (const l of acting) if (l.transcript.ids.length + this.maxActionTokens > positions) outOfContext(l, this.maxActionTokens);
          acting = acting.filter((l) => !l.done);
          chosen = [];
          if (acting.length > 0) {
            cache ??= new PromptCache(this.model.gpuModel, adapter ?? null);
            const generated = await cache.generate(
              acting.map((l) => ({ stream: live.indexOf(l), prompt: l.transcript.ids })),
              {
                maxNewTokens: this.maxActionTokens,
                sampling: options.greedy ? { greedy: true } : { ...this.sampling, seed: acting.map((l) => stepSeed(l.episode.samplingSeed, t)) },
                stopTokenIds: stops.ids,
              },
            );
            chosen = acting.map((l, i) => ({ live: l, ids: generated.tokens[i], logprobs: generated.logprobs[i], text: this.actionText(generated.tokens[i]) }));
          }
        }

        // 2. Every environment steps on its action, side by side.
        await Promise.all(
          chosen.map(async ({ live: l, ids, logprobs, text }) => {
            try {
              const result = checkStepResult(await l.env!.step(text), module.id, t);
              const closing = this.closingTokens(l.transcript, ids);
              l.transcript.addAction(ids);
              const step: TextStep = {
                observation: l.observation,
                action: text,
                reward: result.reward,
                terminated: result.terminated,
                truncated: result.truncated || (!result.terminated && t === module.maxEpisodeSteps - 1),
                info: result.info,
                logProb: logprobs ? sum(logprobs) : NaN, // the expert's: scored when the episode ends
                tokens: { ids: [...l.transcript.ids], actionMask: [...l.transcript.actionMask], logprobs: logprobs ?? [] },
                index: l.episode.steps.length,
                transcript: l.whole,
              };
              l.episode.steps.push(step);
              l.episode.totalReward += result.reward;
              if (!result.terminated) {
                // An action cut off before its end is closed as context, so the next observation starts where the format expects it.
                l.transcript.addContext(closing);
                try {
                  l.transcript.addObservation(result.observation);
                } catch (error) {
                  throw new Error(`the transcript cannot continue after the action ${JSON.stringify(text)} at step ${t}: ${(error as Error).message}`);
                }
                l.observation = result.observation;
              }
              if (result.terminated || step.truncated) {
                l.episode.success = result.info.success === true;
                l.done = true;
              }
            } catch (error) {
              fail(l, error);
            }
          }),
        );
        await endEpisodes();
      }
      for (const l of live) l.done = true; // only when maxEpisodeSteps < 1
      await endEpisodes();
      return live.map((l) => l.episode);
    } finally {
      cache?.dispose();
      await Promise.all(live.map((l) => Promise.resolve(l.env?.close?.()).catch(() => undefined)));
    }
  }

  /**
   * Context tokens that close an action which stopped without its end marker (cut off by
   * maxActionTokens, or, in the plain format, ended by EOS instead of a newline): the plain format's
   * newline, or the chat template's end-of-turn token. Worked out before the action joins the transcript.
   */
  private closingTokens(transcript: Transcript, ids: number[]): number[] {
    const { newline, closing } = this.stopTokens();
    const last = ids[ids.length - 1];
    if (this.options.format === 'plain') return newline.has(last) ? [] : closing;
    const eos = this.model.tokenizer.eosTokenIds;
    if (eos.includes(last)) return [];
    const rendered = transcript.encodeAction(this.model.tokenizer.decode(ids, { skipSpecialTokens: true }));
    const end = rendered[rendered.length - 1];
    return end !== undefined && eos.includes(end) ? [end] : [];
  }

  /**
   * Ends episodes: records their whole transcripts, then what needs the finished transcripts, each in
   * one batched score over these episodes: the expert's log-probs and V(s) (with the adapter, hidden
   * states at each state's last token), the reference log-probs (adapter off). Then onEpisode.
   */
  private async finish(ended: Live[], options: PlayOptions, valueHead?: { weight: Float32Array; bias: number }): Promise<void> {
    if (ended.length === 0) return;
    const positions = this.model.gpuModel.ropePositions;
    for (const l of ended) {
      append(l.whole.ids, l.transcript.ids);
      append(l.whole.actionMask, l.transcript.actionMask);
    }
    const played = ended.filter((l) => l.episode.steps.length > 0);
    const spans = played.map((l) => actionSpans(l.whole.actionMask));
    played.forEach((l, i) => {
      if (spans[i].length !== l.episode.steps.length) throw new Error(`internal: an episode of ${l.episode.steps.length} steps has ${spans[i].length} action spans`);
    });
    // A cut-short episode's return bootstraps from V of the observation it stopped at (the last token).
    const wantsFinal = played.map((l) => valueHead !== undefined && !l.episode.error && !l.episode.steps.at(-1)!.terminated);
    played.forEach((l, i) => {
      if (wantsFinal[i] && l.whole.ids.length > positions) {
        l.episode.error = `the transcript (${l.whole.ids.length} tokens) outgrew the model's ${positions} positions, so the value of its last observation cannot be read`;
        wantsFinal[i] = false;
      }
    });
    // Score up to the last action, or the whole transcript when its last observation's value is wanted.
    const sequences = played.map((l, i) => l.whole.ids.slice(0, wantsFinal[i] ? l.whole.ids.length : spans[i].at(-1)!.end));
    if (played.length > 0 && (options.expert || valueHead)) {
      const hiddenAt = valueHead ? spans.map((s, i) => [...s.map((span) => span.start - 1), ...(wantsFinal[i] ? [sequences[i].length - 1] : [])]) : undefined;
      const scored = await this.model.score(sequences, { adapter: this.options.adapter, hiddenAt });
      played.forEach((l, i) => {
        l.episode.steps.forEach((step, k) => {
          if (options.expert) {
            step.tokens.logprobs = spanLogprobs(scored.tokenLogprobs[i], spans[i][k]);
            step.logProb = sum(step.tokens.logprobs);
          }
          if (valueHead) step.value = valueOf(valueHead, scored.hidden![i][k]);
        });
        if (valueHead && wantsFinal[i]) l.episode.finalValue = valueOf(valueHead, scored.hidden![i][l.episode.steps.length]);
      });
    }
    if (played.length > 0 && options.reference) {
      const reference = await this.model.score(
        played.map((l, i) => sequences[i].slice(0, spans[i].at(-1)!.end)),
        { adapter: null },
      );
      played.forEach((l, i) =>
        l.episode.steps.forEach((step, k) => {
          step.referenceLogProbs = spanLogprobs(reference.tokenLogprobs[i], spans[i][k]);
          step.referenceLogProb = sum(step.referenceLogProbs);
          step.referenceKl = actionKl(step.tokens.logprobs, step.referenceLogProbs);
        }),
      );
    }
    for (const l of ended) {
      l.reported = true;
      options.onEpisode?.(l.episode);
    }
  }

  async update(trainer: Trainer, items: UpdateItem<TextStep>[], loss: PolicyLoss): Promise<UpdateMetrics> {
    if (items.length === 0) throw new RangeError('update needs at least one step');
    const klWeight = loss.kl ?? 0;
    const valueWeight = loss.value ?? 0;
    const valueClip = loss.valueClip ?? 0;

    // One training sequence per episode (a step given twice goes into a second copy of its episode).
    interface Sequence {
      episode: EpisodeTokens;
      spans: ActionSpan[];
      steps: Set<number>;
      end: number;
      mask: number[];
      advantages: number[];
      oldLogprobs: number[];
      referenceLogProbs: number[];
      valueMask: number[];
      returns: number[];
      oldValues: number[];
    }
    const sequences: Sequence[] = [];
    // Steps of one episode share its transcript object (steps read back from storage each carry a
    // copy: they train as one sequence each, which is only slower).
    const byEpisode = new Map<EpisodeTokens, Sequence[]>();
    for (const [n, { step, advantage, return: target }] of items.entries()) {
      const { transcript: episode, index } = step;
      if (!episode || !Number.isInteger(index)) throw new RangeError(`item ${n} is not a step played by a text policy (it has no episode transcript and index)`);
      if (!byEpisode.has(episode)) byEpisode.set(episode, []);
      const copies = byEpisode.get(episode)!;
      const spans = copies[0]?.spans ?? actionSpans(episode.actionMask);
      const span = spans[index];
      if (!span) throw new RangeError(`item ${n}: step ${index} of an episode whose transcript holds ${spans.length} actions`);
      const length = span.end - span.start;
      if (step.tokens.logprobs.length !== length) throw new RangeError(`item ${n}: ${step.tokens.logprobs.length} log-probs for an action of ${length} tokens`);
      if (loss.objective !== 'nll' && !Number.isFinite(advantage)) throw new RangeError(`item ${n}: advantage ${advantage} is not a finite number`);
      if (klWeight > 0 && step.referenceLogProbs?.length !== length) throw new RangeError('a KL penalty needs reference log-probs: play with { reference: true }');
      if (valueWeight > 0 && !Number.isFinite(target)) throw new RangeError(`item ${n}: a value loss needs a finite return for every step, got ${target}`);
      if (valueWeight > 0 && valueClip > 0 && !Number.isFinite(step.value)) throw new RangeError('a clipped value loss needs the old values: play with { values: true }');

      let sequence = copies.find((s) => !s.steps.has(index));
      if (!sequence) {
        const zeros = () => new Array<number>(episode.ids.length).fill(0);
        sequence = { episode, spans, steps: new Set(), end: 0, mask: zeros(), advantages: zeros(), oldLogprobs: zeros(), referenceLogProbs: zeros(), valueMask: zeros(), returns: zeros(), oldValues: zeros() };
        copies.push(sequence);
        sequences.push(sequence);
      }
      sequence.steps.add(index);
      sequence.end = Math.max(sequence.end, span.end);
      for (let t = span.start, j = 0; t < span.end; t++, j++) {
        sequence.mask[t] = 1;
        sequence.advantages[t] = loss.objective === 'nll' ? 0 : advantage;
        sequence.oldLogprobs[t] = step.tokens.logprobs[j];
        if (step.referenceLogProbs) sequence.referenceLogProbs[t] = step.referenceLogProbs[j];
      }
      if (valueWeight > 0) {
        // V(s) sits on the row of the state's last token, the row that predicts the action's first token.
        sequence.valueMask[span.start] = 1;
        sequence.returns[span.start] = target!;
        sequence.oldValues[span.start] = step.value ?? 0;
      }
    }

    const batches: TrainBatch[] = [];
    for (let i = 0; i < sequences.length; i += this.options.microBatch) {
      // Each sequence stops after its last chosen action: later tokens would only cost time.
      const chunk = sequences.slice(i, i + this.options.microBatch);
      const cut = (pick: (s: Sequence) => number[]) => chunk.map((s) => pick(s).slice(0, s.end));
      batches.push({
        sequences: cut((s) => s.episode.ids),
        actionMask: cut((s) => s.mask),
        advantages: cut((s) => s.advantages),
        oldLogprobs: cut((s) => s.oldLogprobs),
        ...(klWeight > 0 ? { referenceLogProbs: cut((s) => s.referenceLogProbs) } : {}),
        valueMask: cut((s) => s.valueMask),
        ...(valueWeight > 0 ? { returns: cut((s) => s.returns), oldValues: cut((s) => s.oldValues) } : {}),
      });
    }
    // The trainer averages every term over the update's action tokens; the value loss, which sits on
    // one row per step, is scaled to be the mean over the steps instead.
    const actionTokens = sequences.reduce((n, s) => n + s.mask.reduce((a, m) => a + m, 0), 0);
    const weights: LossWeights = {
      [loss.objective]: 1,
      clip: loss.clip ?? 0.2,
      entropy: loss.entropy ?? 0,
      kl: klWeight,
      value: valueWeight > 0 ? (valueWeight * actionTokens) / items.length : 0,
      valueClip,
    };
    const metrics = await trainer.step(batches, weights);
    // approxKl is per action, as in choice mode (actionKl): the sum over an action's tokens of their
    // k3 = (ρ − 1) − log ρ, which the trainer's approx_kl term averages over the update's action tokens.
    // clipFraction and entropy are means over those tokens: PPO's clipped share and the entropy of the
    // next-token distributions. logProb is per step: log π(a|s) sums its tokens' log-probs, which the
    // trainer's nll term (a token mean, under the policy before the step) gives back.
    const tokensPerStep = metrics.actionTokens / items.length;
    return {
      ...metrics,
      approxKl: metrics.terms['losses/approx_kl'] * tokensPerStep,
      clipFraction: metrics.terms['losses/clipfrac'],
      entropy: metrics.terms['losses/entropy'],
      logProb: -metrics.terms['losses/nll'] * tokensPerStep,
    };
  }
}

/**
 * The generate seed of an episode at environment step `step`, from its sampling seed and the step
 * only. generate draws each prompt's tokens from its own seed and the token index, so an episode's
 * actions do not depend on which other episodes share its batch: a request played alone is the same
 * episode as in any batch, and draws differ per episode and per environment step.
 */
function stepSeed(samplingSeed: number, step: number): number {
  return pcgHash((pcgHash((0x7e47 ^ step) >>> 0) ^ pcgHash(samplingSeed >>> 0)) >>> 0);
}

/** The environment's step result, checked: a malformed one ends the episode with a clear message. */
function checkStepResult(result: StepResult, id: string, t: number): StepResult & { info: EnvInfo } {
  const where = `environment ${id} at step ${t}`;
  if (!result || typeof result !== 'object') throw new Error(`${where} returned ${JSON.stringify(result)}; step() must return { observation, reward, terminated, truncated, info }`);
  if (typeof result.observation !== 'string') throw new Error(`${where} returned observation ${JSON.stringify(result.observation)}; observations must be strings`);
  if (typeof result.reward !== 'number' || !Number.isFinite(result.reward)) throw new Error(`${where} returned reward ${result.reward}; rewards must be finite numbers`);
  if (typeof result.terminated !== 'boolean' || typeof result.truncated !== 'boolean') throw new Error(`${where} returned terminated ${result.terminated} and truncated ${result.truncated}; both must be true or false`);
  return { ...result, info: result.info && typeof result.info === 'object' ? result.info : {} };
}

function spanLogprobs(tokenLogprobs: (number | null)[], span: ActionSpan): number[] {
  return tokenLogprobs.slice(span.start, span.end).map((lp) => lp!);
}

function sum(xs: readonly number[]): number {
  return xs.reduce((a, b) => a + b, 0);
}


