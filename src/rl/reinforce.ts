// REINFORCE with a baseline, for action-level policies (CleanRL style: the hyperparameters in one
// record, then the loop top to bottom).
//
// The policy is π(a|s) = softmax_b(score_b), score_b = the (summed or mean) log-probability of
// action b's tokens after the transcript s. For an episode with returns G_t and a running-mean
// baseline, the loss is -Σ_t A_t log π(a_t|s_t), A_t = G_t - baseline, whose gradient reaches the
// tokens of EVERY candidate: ∇ log π(a|s) = ∇ score_a - Σ_b π_b ∇ score_b. So each step becomes one
// training sequence per candidate (the state, then that candidate), and every candidate token gets
// the weight A_t (1[b = a_t] - π_b) (divided by the candidate's length for mean scores), trained
// through the GPU's policy-gradient loss term.
import type { Model } from '../engine/model.ts';
import type { LoraSettings } from '../engine/lora/adapter.ts';
import type { GpuLoraAdapter } from '../engine/lora/gpu-adapter.ts';
import type { TrainBatch } from '../engine/train/batch.ts';
import { Trainer, type StepMetrics } from '../engine/train/trainer.ts';
import type { EnvModule } from '../env/types.ts';
import { playActionEpisode, type ActionEpisode } from '../agent/rollout.ts';
import type { PromptFormat } from '../agent/transcript.ts';
import { discountedReturns, normalizeAdvantages, RunningMean } from './advantages.ts';

export interface ReinforceConfig {
  /** Episodes to train on, in total. */
  totalEpisodes: number;
  /** Episodes collected per policy update. */
  episodesPerUpdate: number;
  /** Discount of future rewards. */
  gamma: number;
  /** AdamW learning rate. */
  learningRate: number;
  /** Normalise the advantages of each update to zero mean and unit variance. */
  normalizeAdvantages: boolean;
  /** Score actions by their mean token log-prob instead of the sum (longer actions are not penalised). */
  lengthNormalize: boolean;
  /** Training sequences per forward/backward (gradients accumulate across them). */
  microBatch: number;
  /** The LoRA adapter being trained. */
  lora: LoraSettings;
  /** Difficulty level of the training instances. */
  difficulty: number;
  /** Prompt rendering: the chat template, or a plain transcript. */
  format: PromptFormat;
  /** Seed of the adapter, the episodes and the sampling. */
  seed: number;
}

export const REINFORCE_DEFAULTS: Omit<ReinforceConfig, 'totalEpisodes'> = {
  episodesPerUpdate: 8,
  gamma: 1,
  learningRate: 3e-3,
  normalizeAdvantages: true,
  lengthNormalize: true,
  microBatch: 16,
  lora: { r: 8, alpha: 16, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], rslora: false, dropout: 0, layers: null },
  difficulty: 1,
  format: 'plain',
  seed: 0,
};

export interface ReinforceUpdate {
  episodes: number;
  meanReturn: number;
  successRate: number;
  metrics: StepMetrics;
}

/** Trains `adapter` (already on the GPU) with REINFORCE on the environment's train split. */
export async function trainReinforce(
  model: Model,
  env: EnvModule,
  adapter: GpuLoraAdapter,
  config: ReinforceConfig,
  onUpdate?: (update: ReinforceUpdate) => void,
): Promise<ReinforceUpdate[]> {
  const trainer = new Trainer(model.gpuModel, { train: adapter, optimizer: { schedule: { kind: 'constant', lr: config.learningRate } }, seed: config.seed });
  const baseline = new RunningMean({ decay: 0.9 });
  const history: ReinforceUpdate[] = [];
  try {
    for (let done = 0; done < config.totalEpisodes; done += config.episodesPerUpdate) {
      // 1. Rollouts on the train split.
      const episodes: ActionEpisode[] = [];
      for (let i = 0; i < config.episodesPerUpdate; i++) {
        const seed = config.seed * 1_000_003 + done + i;
        const episode = await playActionEpisode(model, seed, { env, reset: { split: 'train', difficulty: config.difficulty }, format: config.format, lengthNormalize: config.lengthNormalize, adapter });
        if (episode.error) throw new Error(`episode with seed ${seed} failed: ${episode.error}`);
        episodes.push(episode);
      }
      // 2. Advantages: return-to-go minus a running-mean baseline of episode returns.
      const returns = episodes.map((e) => discountedReturns(e.steps.map((s) => s.reward), config.gamma));
      const raw = returns.flatMap((g) => g.map((x) => x - baseline.mean));
      const advantages = config.normalizeAdvantages ? normalizeAdvantages(raw) : raw;
      baseline.update(episodes.map((e) => e.totalReward));
      // 3. One training sequence per (step, candidate), weighted by A (1[chosen] - π).
      const sequences: TrainBatch[] = [];
      const pending: TrainBatch = { sequences: [], actionMask: [], advantages: [] };
      let k = 0;
      for (const episode of episodes) {
        for (const step of episode.steps) {
          const advantage = advantages[k++];
          step.actionTokens.forEach((tokens, b) => {
            const weight = advantage * ((b === step.chosen ? 1 : 0) - Math.exp(step.logProbs[b])) / (config.lengthNormalize ? tokens.length : 1);
            pending.sequences.push([...step.context, ...tokens]);
            pending.actionMask.push([...step.context.map(() => 0), ...tokens.map(() => 1)]);
            pending.advantages!.push([...step.context.map(() => 0), ...tokens.map(() => weight)]);
            if (pending.sequences.length === config.microBatch) sequences.push(flush(pending));
          });
        }
      }
      if (pending.sequences.length > 0) sequences.push(flush(pending));
      const metrics = await trainer.step(sequences, { pg: 1 });
      const update = {
        episodes: done + episodes.length,
        meanReturn: episodes.reduce((s, e) => s + e.totalReward, 0) / episodes.length,
        successRate: episodes.filter((e) => e.success).length / episodes.length,
        metrics,
      };
      history.push(update);
      onUpdate?.(update);
    }
    return history;
  } finally {
    trainer.dispose();
  }
}

function flush(pending: TrainBatch): TrainBatch {
  const batch = { sequences: pending.sequences, actionMask: pending.actionMask, advantages: pending.advantages };
  pending.sequences = [];
  pending.actionMask = [];
  pending.advantages = [];
  return batch;
}

/** Success rate and mean return of the greedy action-level policy on the test split. */
export async function evaluateActionPolicy(model: Model, env: EnvModule, options: { episodes: number; difficulty: number; format: PromptFormat; lengthNormalize: boolean; adapter?: GpuLoraAdapter | null; firstSeed?: number }): Promise<{ successRate: number; meanReturn: number }> {
  let wins = 0;
  let total = 0;
  for (let i = 0; i < options.episodes; i++) {
    const episode = await playActionEpisode(model, (options.firstSeed ?? 900_000) + i, { env, reset: { split: 'test', difficulty: options.difficulty }, format: options.format, lengthNormalize: options.lengthNormalize, greedy: true, adapter: options.adapter });
    if (episode.error) throw new Error(`evaluation episode ${i} failed: ${episode.error}`);
    if (episode.success) wins++;
    total += episode.totalReward;
  }
  return { successRate: wins / options.episodes, meanReturn: total / options.episodes };
}
