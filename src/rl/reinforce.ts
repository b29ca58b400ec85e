// REINFORCE with a baseline, for action-level policies (CleanRL style: the hyperparameters in one
// record, then the loop top to bottom).
//
// For an episode with returns-to-go G_t and a running-mean baseline of episode returns, the loss is
// -Σ_t A_t log π(a_t|s_t) with A_t = G_t - baseline (optionally normalised over the update); the
// gradient of log π over the whole action list is built in action-gradient.ts.
import type { Model } from '../engine/model.ts';
import type { LoraSettings } from '../engine/lora/adapter.ts';
import type { GpuLoraAdapter } from '../engine/lora/gpu-adapter.ts';
import { Trainer, type StepMetrics } from '../engine/train/trainer.ts';
import type { EnvModule } from '../env/types.ts';
import { playActionEpisode, type ActionEpisode } from '../agent/rollout.ts';
import type { PromptFormat } from '../agent/transcript.ts';
import { actionPolicyGradientBatches } from './action-gradient.ts';
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
      // 3. The policy gradient of every step over its whole action list.
      const steps = episodes.flatMap((e) => e.steps).map((step, k) => ({ step, advantage: advantages[k] }));
      const sequences = actionPolicyGradientBatches(steps, config.lengthNormalize, config.microBatch);
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
