// The action-level ('choice') policy: at each step the environment lists its valid actions, the
// model scores each one's tokens after the transcript so far, and the policy is a softmax over the
// candidates' summed or length-normalised log-probs (action-policy.ts). Many environments
// step side by side: the states of all unfinished episodes are scored in one batched call, each
// episode's transcript continuing from its KV cache of the step before (src/engine/prompt-cache.ts),
// its candidates from the transcript's.
//
// Training: π(a|s) = softmax_b(score_b), so ∂ log π(a|s) / ∂ score_b = 1[b = a] − π_b and the
// gradient of any per-step loss reaches EVERY candidate. update() works out g_b = ∂L/∂score_b for
// each step on the host (from the current policy, re-scored), and gives every candidate's tokens, after
// its state, the policy-gradient weight −g_b (÷ the candidate's length for mean scores): the GPU's
// −Σ weight · log p(token) then has exactly the gradient Σ_b g_b ∇score_b. The value loss sits on the
// row of the state's last token, the one that predicts the chosen candidate's first token.
//
// The training sequences share prefixes (choiceTrainingBatches): the steps of one episode form a chain
// (each state is the previous state + its chosen action + an observation), so one tree-structured
// sequence per episode (src/engine/train/batch.ts) holds them all: the trunk is the last state with its
// chosen action, every chosen action is a span of it, and every other candidate is a branch that sees
// the trunk up to its state. Each token is then computed once instead of once per candidate per later
// step, with the same loss and gradients as one sequence per candidate. Without a value loss, identical
// states of different episodes (GRPO's group members that chose alike) train once (mergeIdenticalStates).
import { mulberry32 } from '../common/random.ts';
import { startsWith } from '../common/tokens.ts';
import { requestKey, type ContinuationScores } from '../engine/continuations.ts';
import type { Model } from '../engine/model.ts';
import { PromptCache } from '../engine/prompt-cache.ts';
import type { TrainBatch } from '../engine/train/batch.ts';
import type { Trainer } from '../engine/train/trainer.ts';
import { valueOf } from '../engine/train/value-head.ts';
import type { Env, EnvInfo } from '../env/types.ts';
import { actionEntropy, actionLogProbs, sampleAction } from './action-policy.ts';
import { actionKl, startEpisodes, valueHeadOf, type CandidateScoring, type PlayedEpisode, type PlayOptions, type PlayRequest, type Policy, type PolicyLoss, type PolicyOptions, type PolicyStep, type UpdateItem, type UpdateMetrics } from './policy.ts';
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
  /** The revision of the policy's adapter that played the step (none without an adapter). */
  adapterRevision?: number;
}

/**
 * The most valid actions a state may offer by default: every one is scored each step (a forward pass
 * over its tokens), so a list of thousands makes one step take minutes and gigabytes.
 */
export const MAX_VALID_ACTIONS = 256;

export interface ChoicePolicyOptions extends PolicyOptions {
  /** Score actions by their mean token log-prob instead of the sum (long actions are not penalised). */
  lengthNormalize: boolean;
  /** The most valid actions a state may offer (default MAX_VALID_ACTIONS); an episode offered more fails at that step. */
  maxActions?: number;
  /** π(b|s) = softmax(score / τ) over the valid actions (default 1): below 1 the policy is sharper, closer to its greedy pick. */
  temperature?: number;
}

/** A state's policy, and with `hidden` the final hidden states the value head reads. */
export interface ScoredState {
  logProbs: number[];
  /** log p of each candidate's tokens, one by one (what the trajectory browser shades). */
  tokenLogprobs: number[][];
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
  readonly candidates: CandidateScoring = this;

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
    return this.policyOf(states, scores, hidden);
  }

  /**
   * π over each state's candidates (the current adapter), like scoreStates, for states that come in
   * episodes: each state of an episode extends the one before, so the states are scored in rounds
   * (every episode's first state, then every episode's second, ...) through one KV cache per episode,
   * each round feeding only what the states added.
   */
  async scoreEpisodeStates(states: Pick<ChoiceStep, 'context' | 'actionTokens' | 'chosen'>[]): Promise<ScoredState[]> {
    if (states.length === 0) return [];
    const chains = episodeChains(states);
    const cache = new PromptCache(this.model.gpuModel, this.options.adapter);
    const scored = new Array<ScoredState>(states.length);
    try {
      for (let round = 0; ; round++) {
        const members = chains.flatMap((chain, stream) => (round < chain.length ? [{ stream, i: chain[round] }] : []));
        if (members.length === 0) break;
        const scores = await cache.score(members.map(({ stream, i }) => ({ stream, prompt: states[i].context, continuations: states[i].actionTokens })));
        this.policyOf(members.map(({ i }) => states[i]), scores, false).forEach((s, k) => (scored[members[k].i] = s));
      }
    } finally {
      cache.dispose();
    }
    return scored;
  }

  /** π over each state's candidates from their scores (and the hidden states, when they were asked for). */
  private policyOf(states: { actionTokens: number[][] }[], scores: ContinuationScores[], hidden: boolean): ScoredState[] {
    return scores.map((score, i) => ({
      logProbs: actionLogProbs([score.sums], [states[i].actionTokens.map((t) => t.length)], { lengthNormalize: this.options.lengthNormalize, temperature: this.options.temperature })[0],
      tokenLogprobs: score.tokenLogprobs,
      ...(hidden ? { hidden: score.promptHidden, candidateHidden: score.continuationHidden } : {}),
    }));
  }

  async play(requests: PlayRequest[], options: PlayOptions & { choose?: ActionChooser } = {}): Promise<PlayedEpisode<ChoiceStep>[]> {
    const { env: module, format } = this.options;
    const value = options.values ? await valueHeadOf(this.options).read() : undefined;
    interface Live {
      episode: PlayedEpisode<ChoiceStep>;
      env?: Env;
      expert?: () => Promise<string>;
      transcript: Transcript;
      random: () => number;
      observation: string;
      done: boolean;
    }
    const live: Live[] = requests.map(({ seed, samplingSeed }) => ({
      episode: { seed, samplingSeed: samplingSeed ?? seed, steps: [], totalReward: 0, success: false },
      transcript: new Transcript(this.model.tokenizer, format, module.description, this.model.config.maxPositions),
      random: mulberry32((samplingSeed ?? seed) ^ 0x5bd1e995),
      observation: '',
      done: false,
    }));
    const finish = (l: Live) => {
      l.done = true;
      options.onEpisode?.(l.episode);
    };
    /** Ends an episode with an error (and reports it, as finish does). */
    const fail = (l: Live, error: unknown) => {
      l.episode.error = error instanceof Error ? error.message : String(error);
      finish(l);
    };
    const gpuModel = this.model.gpuModel;
    // Without an adapter the policy is the reference: scored once.
    const caches = { policy: new PromptCache(gpuModel, this.options.adapter), reference: options.reference && this.options.adapter ? new PromptCache(gpuModel, null) : null };
    try {
      await startEpisodes(live, module, this.options.reset, options.expert === true, fail);
      for (const l of live) {
        if (!l.done && !l.env!.validActions) fail(l, new Error(`environment ${module.id} has no validActions(): it cannot be played by an action-level policy (use the text mode)`));
      }
      const maxActions = this.options.maxActions ?? MAX_VALID_ACTIONS;
      for (let t = 0; t < module.maxEpisodeSteps; t++) {
        const active = live.filter((l) => !l.done);
        if (active.length === 0) break;
        // 1. Every active environment's valid actions (and the expert's pick), side by side.
        const offered = await Promise.all(
          active.map(async (l) => {
            try {
              const actions = await l.env!.validActions!();
              if (!Array.isArray(actions) || actions.length === 0) throw new Error(`environment ${module.id} offered no valid actions at step ${t}`);
              if (actions.length > maxActions) {
                throw new Error(
                  `environment ${module.id} offered ${actions.length} valid actions at step ${t}, more than the ${maxActions} the choice mode scores (each is scored every step): ` +
                    'list fewer from validActions(), raise the limit (--max-actions), or play it in text mode (--mode text)',
                );
              }
              const expert = l.expert ? await l.expert() : undefined;
              if (expert !== undefined && !actions.includes(expert)) throw new Error(`the scripted expert of ${module.id} chose ${JSON.stringify(expert)} at step ${t}, which is not among its valid actions`);
              return { l, actions, actionTokens: actions.map((a) => l.transcript.encodeAction(a)), expert };
            } catch (error) {
              fail(l, error);
              return undefined;
            }
          }),
        );
        // An episode whose transcript has no room left for its longest candidate is cut short there
        // (truncated, as by a step limit); one whose first observation does not fit fails.
        const positions = this.model.gpuModel.ropePositions;
        const fitting = offered.filter((s) => {
          if (s === undefined) return false;
          const needed = s.l.transcript.ids.length + Math.max(...s.actionTokens.map((a) => a.length));
          if (needed <= positions) return true;
          const last = s.l.episode.steps.at(-1);
          if (!last) fail(s.l, new Error(`the first observation (${s.l.transcript.ids.length} tokens) and its longest action leave no room in the model's ${positions} positions`));
          else {
            last.truncated = true;
            s.l.episode.success = last.info?.success === true;
            finish(s.l);
          }
          return false;
        });
        const states = fitting.map((s) => ({ ...s!, context: [...s!.l.transcript.ids] }));
        if (states.length === 0) break;
        // 2. One batched scoring of every state's candidates (and of the reference, when asked), each
        //    episode's transcript continuing from its KV cache of the last step.
        const adapterRevision = this.options.adapter?.parameters.revision;
        const requests = states.map((s) => ({ stream: live.indexOf(s.l), prompt: s.context, continuations: s.actionTokens }));
        const hidden = value !== undefined || options.choose !== undefined;
        const scored = this.policyOf(states, await caches.policy.score(requests, { hidden }), hidden);
        const picked = options.choose?.(states, scored);
        const reference = !options.reference ? undefined : caches.reference ? this.policyOf(states, await caches.reference.score(requests), false) : scored;
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
                ...(reference ? { referenceLogProb: reference[i].logProbs[chosen], referenceKl: actionKl([logProbs[chosen]], [reference[i].logProbs[chosen]]) } : {}),
                ...(value ? { value: valueOf(value, scored[i].hidden!) } : {}),
                tokens: { ids: [...l.transcript.ids], actionMask: [...l.transcript.actionMask], logprobs: scored[i].tokenLogprobs[chosen] },
                context,
                actions,
                actionTokens,
                logProbs,
                ...(adapterRevision !== undefined ? { adapterRevision } : {}),
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
            }
          }),
        );
      }
      // A truncated episode's return bootstraps from the value of the observation it stopped at.
      if (value) {
        const cut = live.filter((l) => !l.episode.error && l.episode.steps.at(-1)?.truncated);
        // Cut for lack of context, the final observation may not fit either: its value is then taken as the last state's.
        const fits = cut.filter((l) => l.transcript.ids.length <= this.model.gpuModel.ropePositions);
        for (const l of cut) if (!fits.includes(l)) l.episode.finalValue = l.episode.steps.at(-1)!.value;
        if (fits.length > 0) {
          const hidden = await caches.policy.promptHidden(fits.map((l) => ({ stream: live.indexOf(l), prompt: l.transcript.ids })));
          fits.forEach((l, i) => (l.episode.finalValue = valueOf(value, hidden[i])));
        }
      }
      return live.map((l) => l.episode);
    } finally {
      caches.policy.dispose();
      caches.reference?.dispose();
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
    // The current policy over every item's candidates: what the steps recorded while the adapter has not
    // changed since they were played (A2C, REINFORCE, GRPO, PPO's first minibatch), scored anew otherwise.
    const revision = this.options.adapter?.parameters.revision;
    const unchanged = revision !== undefined && items.every(({ step }) => step.adapterRevision === revision);
    const current = unchanged ? items.map(({ step }) => ({ logProbs: step.logProbs })) : await this.scoreEpisodeStates(items.map((item) => item.step));
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
      approxKl += actionKl([step.logProb], [logPi[a]]);
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
    // Identical states (GRPO's group members share a reset seed, and often choose alike) train as one item
    // with their candidate gradients summed: the policy loss is linear in each candidate's weight, so the
    // gradients are the same from fewer tokens. Not with a value loss: its clipping is not linear in the target.
    const training = valueWeight > 0 ? perItem : mergeIdenticalStates(perItem);
    // The trainer averages over the action tokens it is given (each candidate's tokens count once, as in one
    // sequence per candidate); scale so that the loss is the mean over items instead. g is the gradient with
    // respect to the softmax's inputs, score / τ: the scores' own gradient is g / τ.
    const actionTokens = training.reduce((n, { step }) => n + step.actionTokens.reduce((m, t) => m + t.length, 0), 0);
    const scale = actionTokens / items.length;
    const batches = choiceTrainingBatches(training, { lengthNormalize, microBatch, scale: scale / (this.options.temperature ?? 1), value: valueWeight > 0 });
    const metrics = await trainer.step(batches, { pg: 1, value: valueWeight * scale, valueClip: loss.valueClip ?? 0 });
    return { ...metrics, approxKl: approxKl / items.length, clipFraction: clipped / items.length, entropy: entropy / items.length, logProb: logProb / items.length };
  }
}

/** One update item as the training sequences need it: its state, candidates and per-candidate gradients. */
export interface ChoiceTrainingItem {
  step: Pick<ChoiceStep, 'context' | 'actionTokens' | 'chosen'>;
  /** g_b = ∂L/∂score_b of every candidate: its tokens get the weight −g_b · scale (÷ its length when normalised). */
  g: number[];
  /** Value target and old value of the state (used with `value`). */
  target: number;
  oldValue: number;
}

export interface ChoiceBatchOptions {
  lengthNormalize: boolean;
  /**
   * The micro-batch size of one sequence per candidate: micro-batches are filled up to microBatch times the
   * longest [state, candidate] sequence of tokens (padded B × T), so they need no more memory than those did.
   */
  microBatch: number;
  scale: number;
  /** Regress V(s) on the row of each state's last token. */
  value: boolean;
}

/** One item per distinct state (its context and candidates), with the candidate gradients of its copies summed. */
export function mergeIdenticalStates(items: ChoiceTrainingItem[]): ChoiceTrainingItem[] {
  const merged = new Map<string, ChoiceTrainingItem>();
  for (const item of items) {
    const key = requestKey({ prompt: item.step.context, continuations: item.step.actionTokens });
    const same = merged.get(key);
    if (same) same.g = same.g.map((g, b) => g + item.g[b]);
    else merged.set(key, { ...item, g: [...item.g] });
  }
  return [...merged.values()];
}

/** A rolling hash of every prefix of `tokens`: hashes[n] covers tokens[0, n). */
function prefixHashes(tokens: number[]): Int32Array {
  const hashes = new Int32Array(tokens.length + 1);
  for (let i = 0; i < tokens.length; i++) hashes[i + 1] = (Math.imul(hashes[i], 0x01000193) ^ tokens[i]) | 0;
  return hashes;
}

/**
 * Steps grouped into the chains of their episodes, as indices in state order: by increasing state length,
 * a step joins the longest chain whose last state and chosen action its state starts with (every link
 * verified token by token); a step that extends no chain starts its own (another episode, a repeated state).
 */
export function episodeChains(steps: readonly Pick<ChoiceStep, 'context' | 'actionTokens' | 'chosen'>[]): number[][] {
  interface Chain {
    indices: number[];
    /** The last step's state and chosen action, and its hash. */
    tokens: number[];
    hash: number;
  }
  const chains: Chain[] = [];
  const order = steps.map((_, i) => i).sort((a, b) => steps[a].context.length - steps[b].context.length || a - b);
  for (const i of order) {
    const { context, actionTokens, chosen } = steps[i];
    const hashes = prefixHashes(context);
    let best: Chain | undefined;
    for (const chain of chains) {
      const last = steps[chain.indices[chain.indices.length - 1]].context.length;
      if (last >= context.length || chain.tokens.length > context.length || hashes[chain.tokens.length] !== chain.hash) continue;
      if ((!best || chain.tokens.length > best.tokens.length) && startsWith(context, chain.tokens)) best = chain;
    }
    const tokens = [...context, ...actionTokens[chosen]];
    const hash = prefixHashes(tokens)[tokens.length];
    if (best) {
      best.indices.push(i);
      best.tokens = tokens;
      best.hash = hash;
    } else {
      chains.push({ indices: [i], tokens, hash });
    }
  }
  return chains.map((chain) => chain.indices);
}

/**
 * The training sequences of an update, tree-structured (src/engine/train/batch.ts). Items whose states
 * extend one another (the steps of an episode, in any order: each state starts with the previous state and
 * its chosen action) are chained, every link verified token by token; each chain becomes one sequence:
 *
 *   trunk     the chain's last state and its chosen action; each item's chosen action is a span [P, P + n)
 *             of it (P = its state's length) with that candidate's weight, and its value on row P − 1;
 *   branches  per item, each other candidate with tokens: [a copy of trunk token P − 1 at position P − 1,
 *             then the candidate's tokens at P, P + 1, ...], seeing the trunk's tokens [0, P − 1) and itself.
 *
 * Items that extend no chain start their own (other episodes, repeated states). A chain too long for one
 * micro-batch is cut into consecutive pieces, each with the trunk up to its last item. Every candidate's
 * tokens carry its weight exactly once and every state's value once, so the loss, its action-token count
 * and its gradients are those of one sequence [state, candidate] per candidate.
 */
export function choiceTrainingBatches(items: ChoiceTrainingItem[], options: ChoiceBatchOptions): TrainBatch[] {
  const { lengthNormalize, scale } = options;
  if (!(options.microBatch >= 1)) throw new RangeError(`microBatch must be at least 1, got ${options.microBatch}`);
  let longest = 0; // the longest [state, candidate] sequence: the memory of one old micro-batch row
  for (const item of items) {
    const { context, actionTokens, chosen } = item.step;
    if (context.length === 0) throw new RangeError('a step with an empty context: its first action token has nothing to predict it');
    if (!(chosen >= 0 && chosen < actionTokens.length)) throw new RangeError(`a step chose candidate ${chosen} of ${actionTokens.length}`);
    if (item.g.length !== actionTokens.length) throw new RangeError(`${item.g.length} candidate gradients for ${actionTokens.length} candidates`);
    for (const tokens of actionTokens) longest = Math.max(longest, context.length + tokens.length);
  }
  // 1. Chains: one per episode, its last state and chosen action the trunk.
  const chains = episodeChains(items.map((item) => item.step)).map((chain) => {
    const last = items[chain[chain.length - 1]].step;
    return { items: chain.map((i) => items[i]), tokens: [...last.context, ...last.actionTokens[last.chosen]] };
  });
  // 2. Pieces of chains within the token budget of one old micro-batch.
  const budget = options.microBatch * longest;
  const branchTokens = (item: ChoiceTrainingItem) => item.step.actionTokens.reduce((n, t, b) => n + (b === item.step.chosen || t.length === 0 ? 0 : t.length + 1), 0);
  const end = (item: ChoiceTrainingItem) => item.step.context.length + item.step.actionTokens[item.step.chosen].length;
  const pieces: { trunk: number[]; items: ChoiceTrainingItem[]; length: number }[] = [];
  for (const chain of chains) {
    let piece: ChoiceTrainingItem[] = [];
    let branches = 0;
    const close = () => {
      const trunkEnd = end(piece[piece.length - 1]);
      pieces.push({ trunk: chain.tokens.slice(0, trunkEnd), items: piece, length: trunkEnd + branches });
    };
    for (const item of chain.items) {
      if (piece.length > 0 && end(item) + branches + branchTokens(item) > budget) {
        close();
        piece = [];
        branches = 0;
      }
      piece.push(item);
      branches += branchTokens(item);
    }
    close();
  }
  // 3. The sequences, longest first, into micro-batches of at most `budget` padded tokens.
  pieces.sort((a, b) => b.length - a.length);
  const batches: TrainBatch[] = [];
  let batch: TrainBatch | undefined;
  let batchLength = 0;
  for (const piece of pieces) {
    if (!batch || (batch.sequences.length + 1) * batchLength > budget) {
      batch = { sequences: [], actionMask: [], advantages: [], valueMask: [], returns: [], oldValues: [], positions: [], segmentStart: [], attendPrefix: [] };
      batchLength = piece.length;
      batches.push(batch);
    }
    const sequence = [...piece.trunk];
    const n = sequence.length;
    const zeros = () => new Array<number>(n).fill(0);
    const actionMask = zeros();
    const advantages = zeros();
    const valueMask = zeros();
    const returns = zeros();
    const oldValues = zeros();
    const positions = sequence.map((_, t) => t);
    const segmentStart = zeros();
    const attendPrefix = zeros();
    const weight = (item: ChoiceTrainingItem, b: number) => (-item.g[b] * scale) / (lengthNormalize ? item.step.actionTokens[b].length : 1);
    for (const item of piece.items) {
      const { context, actionTokens, chosen } = item.step;
      const P = context.length;
      for (let t = P; t < P + actionTokens[chosen].length; t++) {
        actionMask[t] = 1;
        advantages[t] = weight(item, chosen);
      }
      // V(s) is the value on the row of the state's last token, the row that predicts the first action token.
      if (options.value && actionTokens[chosen].length > 0) {
        valueMask[P] = 1;
        returns[P] = item.target;
        oldValues[P] = item.oldValue;
      }
      actionTokens.forEach((tokens, b) => {
        if (b === chosen || tokens.length === 0) return;
        const start = sequence.length;
        const w = weight(item, b);
        [context[P - 1], ...tokens].forEach((token, i) => {
          sequence.push(token);
          positions.push(P - 1 + i);
          segmentStart.push(start);
          attendPrefix.push(P - 1);
          actionMask.push(i === 0 ? 0 : 1);
          advantages.push(i === 0 ? 0 : w);
          valueMask.push(0);
          returns.push(0);
          oldValues.push(0);
        });
      });
    }
    batch.sequences.push(sequence);
    batch.actionMask.push(actionMask);
    batch.advantages!.push(advantages);
    batch.valueMask!.push(valueMask);
    batch.returns!.push(returns);
    batch.oldValues!.push(oldValues);
    batch.positions!.push(positions);
    batch.segmentStart!.push(segmentStart);
    batch.attendPrefix!.push(attendPrefix);
  }
  return batches;
}

