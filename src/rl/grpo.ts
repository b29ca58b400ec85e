// GRPO (DeepSeekMath) for action-level policies: no value function; each update plays G episodes
// from each of several reset seeds (same start state, different samples), scores every episode
// relative to its group, and follows the policy gradient of those group-relative advantages.
//
//   reward_i   = total environment reward - β Σ_t (log π(a_t|s_t) - log π_ref(a_t|s_t))   (KL to the
//                reference model, the adapter switched off, as a per-step penalty; β = 0 skips it)
//   A_i        = (reward_i - mean_group) / (std_group + ε)   (or mean-centred only: Dr. GRPO)
//   every step of episode i gets A_i (outcome supervision); one policy-gradient step per update,
//   on-policy, so PPO's ratio clipping is the identity and is left out.
import type { Model } from '../engine/model.ts';
import type { LoraSettings } from '../engine/lora/adapter.ts';
import type { GpuLoraAdapter } from '../engine/lora/gpu-adapter.ts';
import { Trainer, type StepMetrics } from '../engine/train/trainer.ts';
import type { EnvModule } from '../env/types.ts';
import { playActionEpisode, type ActionEpisode } from '../agent/rollout.ts';
import type { PromptFormat } from '../agent/transcript.ts';
import { actionPolicyGradientBatches } from './action-gradient.ts';
import { groupAdvantages } from './group-advantages.ts';

export interface GrpoConfig {
  /** Episodes to train on, in total. */
  totalEpisodes: number;
  /** Reset seeds (groups) per update. */
  groupsPerUpdate: number;
  /** Episodes per group, all from the group's reset seed. */
  groupSize: number;
  /** Weight β of the KL penalty to the reference model (0: none, and no reference scoring). */
  klCoefficient: number;
  /** Divide advantages by the group's standard deviation (GRPO) or only centre them (Dr. GRPO). */
  scaleByStd: boolean;
  /** AdamW learning rate. */
  learningRate: number;
  /** Score actions by their mean token log-prob instead of the sum. */
  lengthNormalize: boolean;
  /** Training sequences per forward/backward (gradients accumulate across them). */
  microBatch: number;
  /** Difficulty level of the training instances. */
  difficulty: number;
  /** Prompt rendering: the chat template, or a plain transcript. */
  format: PromptFormat;
  /** Seed of the groups' reset seeds and of the sampling. */
  seed: number;
  /** The LoRA adapter being trained. */
  lora: LoraSettings;
}

export const GRPO_DEFAULTS: Omit<GrpoConfig, 'totalEpisodes'> = {
  groupsPerUpdate: 2,
  groupSize: 4,
  klCoefficient: 0.04,
  scaleByStd: true,
  learningRate: 3e-3,
  lengthNormalize: true,
  microBatch: 16,
  difficulty: 1,
  format: 'plain',
  seed: 0,
  lora: { r: 8, alpha: 16, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], rslora: false, dropout: 0, layers: null },
};

export interface GrpoUpdate {
  episodes: number;
  meanReturn: number;
  successRate: number;
  /** Mean over episodes of Σ_t (log π - log π_ref) of the chosen actions. */
  meanKl: number;
  metrics: StepMetrics;
}

/** Trains `adapter` (already on the GPU) with GRPO on the environment's train split. */
export async function trainGrpo(model: Model, env: EnvModule, adapter: GpuLoraAdapter, config: GrpoConfig, onUpdate?: (update: GrpoUpdate) => void): Promise<GrpoUpdate[]> {
  if (config.groupSize < 2) throw new RangeError('GRPO needs at least 2 episodes per group: a lone episode has nothing to be compared with');
  const trainer = new Trainer(model.gpuModel, { train: adapter, optimizer: { schedule: { kind: 'constant', lr: config.learningRate } }, seed: config.seed });
  const perUpdate = config.groupsPerUpdate * config.groupSize;
  const history: GrpoUpdate[] = [];
  try {
    for (let done = 0; done < config.totalEpisodes; done += perUpdate) {
      // 1. Groups: groupSize samples from each reset seed.
      const played: { episode: ActionEpisode; group: number; kl: number }[] = [];
      for (let g = 0; g < config.groupsPerUpdate; g++) {
        const resetSeed = config.seed * 1_000_003 + done + g;
        for (let i = 0; i < config.groupSize; i++) {
          const episode = await playActionEpisode(model, resetSeed, {
            env, reset: { split: 'train', difficulty: config.difficulty }, format: config.format, lengthNormalize: config.lengthNormalize,
            adapter, samplingSeed: resetSeed * 131 + i, referenceLogProbs: config.klCoefficient > 0,
          });
          if (episode.error) throw new Error(`episode with seed ${resetSeed} failed: ${episode.error}`);
          const kl = episode.steps.reduce((sum, s) => sum + (s.referenceLogProb === undefined ? 0 : s.logProbs[s.chosen] - s.referenceLogProb), 0);
          played.push({ episode, group: resetSeed, kl });
        }
      }
      // 2. Group-relative advantages of the KL-penalised episode rewards.
      const advantages = groupAdvantages(
        played.map(({ episode, group, kl }) => ({ seed: group, reward: episode.totalReward - config.klCoefficient * kl })),
        { scaleByStd: config.scaleByStd },
      );
      // 3. One policy-gradient step, every step of an episode carrying its episode's advantage.
      const steps = played.flatMap(({ episode }, i) => episode.steps.map((step) => ({ step, advantage: advantages[i] })));
      const metrics = await trainer.step(actionPolicyGradientBatches(steps, config.lengthNormalize, config.microBatch), { pg: 1 });
      const update: GrpoUpdate = {
        episodes: done + played.length,
        meanReturn: played.reduce((s, p) => s + p.episode.totalReward, 0) / played.length,
        successRate: played.filter((p) => p.episode.success).length / played.length,
        meanKl: played.reduce((s, p) => s + p.kl, 0) / played.length,
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
