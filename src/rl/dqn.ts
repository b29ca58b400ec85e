// DQN (Mnih et al. 2015) for action-level policies, CleanRL's dqn.py in structure. Q(s, a) is a
// linear head on the model's final hidden state at the last token of candidate a written after
// state s (the value head, reused as a Q head), so the LoRA adapter and the head learn together.
//
//   acting    ε-greedy over Q(s, ·) of the valid actions, ε decaying linearly over the episodes
//   replay    transitions (s, a, r, terminated, s' with its candidates) in a ring buffer
//   target    y = r + γ (1 − terminated) max_a' Q_target(s', a'), Q_target a copy of the adapter
//             and head refreshed every targetUpdateInterval updates; a step cut off by the episode
//             limit has no listed next actions and does not bootstrap
//   loss      ½ (Q(s, a) − y)² over sampled minibatches, several gradient steps per update
//
// Resuming restores the replay buffer; the target network is re-copied from the online one.
import { mulberry32 } from '../common/random.ts';
import type { ChoiceState, ScoredState } from '../agent/choice-policy.ts';
import type { GpuLoraAdapter } from '../engine/lora/gpu-adapter.ts';
import type { TrainBatch } from '../engine/train/batch.ts';
import type { Trainer } from '../engine/train/trainer.ts';
import { valueOf, type ValueHeadWeights } from '../engine/train/value-head.ts';
import type { Model } from '../engine/model.ts';
import { episodeMetrics, episodeSeeds, lossMetrics, usable, type Algorithm, type UpdateContext, type UpdateResult } from './algorithm.ts';
import { defaultsOf, integerSetting, numberSetting, type SettingsOf, type SettingsSchema } from '../common/settings.ts';
import { annealLearningRateSetting, episodesPerUpdateSetting, gammaSetting, learningRateSetting } from './settings.ts';
import { epsilonGreedy, linearSchedule, ReplayBuffer, tdTargets } from './td.ts';
import { mean } from '../common/stats.ts';

export const DQN_SETTINGS = {
  episodesPerUpdate: episodesPerUpdateSetting(8),
  gamma: gammaSetting(0.99),
  bufferSize: integerSetting(10_000, 'Transitions kept in the replay buffer.', { min: 1, unit: 'transitions' }),
  batchSize: integerSetting(16, 'Transitions per gradient step.', { min: 1, unit: 'transitions' }),
  gradientSteps: integerSetting(2, 'Gradient steps per update.', { min: 1, unit: 'steps' }),
  learningStarts: integerSetting(16, 'Transitions collected before learning starts.', { min: 0, unit: 'transitions' }),
  targetUpdateInterval: integerSetting(4, 'Updates between copies of the Q network to its target.', { min: 1, unit: 'updates' }),
  epsilonStart: numberSetting(1, 'Share of random actions at the start.', { min: 0, max: 1 }),
  epsilonEnd: numberSetting(0.05, 'Share of random actions after exploration.', { min: 0, max: 1 }),
  explorationEpisodes: integerSetting(500, 'Episodes over which random actions fade from the start share to the end share.', { min: 1, unit: 'episodes' }),
  learningRate: learningRateSetting(1e-3),
  // As CleanRL's DQN: a constant rate; its schedule is ε's.
  annealLearningRate: annealLearningRateSetting(false),
} satisfies SettingsSchema;

export type DqnConfig = SettingsOf<typeof DQN_SETTINGS>;
export const DQN_DEFAULTS: DqnConfig = defaultsOf(DQN_SETTINGS);

interface Transition {
  context: number[];
  action: number[];
  reward: number;
  terminated: boolean;
  /** The next state and its candidates; null when the episode ended (or was cut off) here. */
  next: { context: number[]; actionTokens: number[][] } | null;
}

export function dqn(config: DqnConfig = DQN_DEFAULTS): Algorithm {
  const buffer = new ReplayBuffer<Transition>({ capacity: config.bufferSize, seed: 0 });
  const epsilon = linearSchedule({ start: config.epsilonStart, end: config.epsilonEnd, duration: config.explorationEpisodes });
  let target: { adapter: GpuLoraAdapter; head: ValueHeadWeights } | undefined;
  return {
    name: 'dqn',
    modes: ['choice'],
    episodesPerUpdate: config.episodesPerUpdate,
    learningRate: config.learningRate,
    annealLearningRate: config.annealLearningRate,

    async update({ model, policy, trainer, update, seed, onEpisode }: UpdateContext): Promise<UpdateResult> {
      const scoring = policy.candidates;
      if (!scoring || !policy.options.adapter) throw new RangeError('DQN scores Q-values over listed actions: it needs the action-level (choice) mode with a LoRA adapter');
      const online = policy.options.adapter;
      if (!target || update % config.targetUpdateInterval === 0) target = await refreshTarget(model, online, trainer, target);
      // 1. ε-greedy episodes on the online Q.
      const head = await trainer.valueHead.read();
      const eps = epsilon(update * config.episodesPerUpdate);
      const random = mulberry32(seed ^ 0x68e31da4);
      const choose = (_: ChoiceState[], scored: ScoredState[]) => scored.map((s) => epsilonGreedy(qValues(head, s.candidateHidden!), eps, random));
      const played = await scoring.play(episodeSeeds(seed, config.episodesPerUpdate).map((s) => ({ seed: s })), { choose, onEpisode });
      for (const episode of usable(played)) {
        episode.steps.forEach((step, t) => {
          const following = episode.steps[t + 1];
          buffer.push({
            context: step.context,
            action: step.actionTokens[step.chosen],
            reward: step.reward,
            terminated: step.terminated,
            next: following ? { context: following.context, actionTokens: following.actionTokens } : null,
          });
        });
      }
      const metrics: Record<string, number> = { ...episodeMetrics(played), 'charts/epsilon': eps, 'dqn/buffer_size': buffer.size };
      if (buffer.size < config.learningStarts) return { episodes: played, metrics };
      // 2. Gradient steps on replayed minibatches against the target network.
      const sampling = mulberry32(seed ^ 0x1b873593);
      for (let g = 0; g < config.gradientSteps; g++) {
        const batch = buffer.sample(config.batchSize, sampling);
        const withNext = batch.filter((x) => x.next !== null);
        const nextScores = await scoring.scoreStates(withNext.map((x) => x.next!), target.adapter, true);
        const nextQ = new Map(withNext.map((x, i) => [x, qValues(target!.head, nextScores[i].candidateHidden!)]));
        const targets = tdTargets(batch.map((x) => ({ reward: x.reward, terminated: x.terminated, nextQ: nextQ.get(x) ?? [] })), config.gamma);
        const step = await trainer.step(qRegression(batch, targets, policy.options.microBatch), { value: 1 });
        Object.assign(metrics, lossMetrics(step, null, false), { 'losses/td_loss': step.terms['losses/value'], 'losses/q_target': mean(targets) });
      }
      return { episodes: played, metrics };
    },

    dispose() {
      target?.adapter.dispose();
      target = undefined;
    },

    state: () => buffer.toJSON(),
    restore(state) {
      buffer.load(state as ReturnType<typeof buffer.toJSON>);
    },
  };
}

/** Q(s, a) = w · h_a + b for each candidate's final hidden state. */
function qValues(head: ValueHeadWeights, hidden: Float32Array[]): number[] {
  return hidden.map((h) => valueOf(head, h));
}

async function refreshTarget(model: Model, online: GpuLoraAdapter, trainer: Trainer, previous?: { adapter: GpuLoraAdapter }): Promise<{ adapter: GpuLoraAdapter; head: ValueHeadWeights }> {
  previous?.adapter.dispose();
  return { adapter: model.uploadAdapter(await online.toHost()), head: await trainer.valueHead.read() };
}

/**
 * Training sequences that regress Q(s, a) to y: the state, the action, then one filler token, so that
 * the row of the action's last token (which predicts the filler) carries the value loss. The filler's
 * own log-prob has weight 0.
 */
function qRegression(batch: Transition[], targets: number[], microBatch: number): TrainBatch[] {
  const batches: TrainBatch[] = [];
  for (let start = 0; start < batch.length; start += microBatch) {
    const part = batch.slice(start, start + microBatch);
    const sequences = part.map((x) => [...x.context, ...x.action, 0]);
    const last = (seq: number[]) => seq.map((_, t) => (t === seq.length - 1 ? 1 : 0));
    batches.push({
      sequences,
      actionMask: sequences.map(last),
      advantages: sequences.map((seq) => seq.map(() => 0)),
      valueMask: sequences.map(last),
      returns: sequences.map((seq, i) => seq.map((_, t) => (t === seq.length - 1 ? targets[start + i] : 0))),
      oldValues: sequences.map((seq) => seq.map(() => 0)),
    });
  }
  return batches;
}
