// What an RL algorithm sees of the agent, whichever way it acts:
//
//   'choice'  an action-level policy: a softmax over the environment's validActions(), each scored
//             by the model's (summed or length-normalised) log-probability of its tokens;
//   'text'    a token-level policy: the model writes its action as free text, sampled on the GPU.
//
// The algorithms (src/rl/*.ts) compute advantages and returns from the recorded rewards, values and
// log-probs, and call `update` with per-step numbers; each policy turns that into training
// sequences with per-token weights for the trainer. The objectives, per step with advantage A:
//
//   pg    -A log π(a|s)                                           (REINFORCE, A2C, GRPO)
//   ppo   -min(ρA, clip(ρ, 1 - c, 1 + c) A),  ρ = π(a|s) / π_old(a|s)
//   nll   -log π(a|s)                                             (behaviour cloning; A ignored)
//   plus  entropy bonus -β_H H(π(·|s)), KL penalty β_KL k3(π, π_ref) on the chosen action, and the value
//         loss β_V ½ max((V - R)², (V_clip - R)²) of the value head at the state's last token.
//
// Text policies apply these per token (the usual token-level PPO of RLHF); choice policies per action.
import type { GpuLoraAdapter } from '../engine/lora/gpu-adapter.ts';
import type { StepMetrics, Trainer } from '../engine/train/trainer.ts';
import type { ValueHead } from '../engine/train/value-head.ts';
import type { Env, EnvInfo, EnvModule, ResetOptions } from '../env/types.ts';
import type { ActionChooser, ChoiceStep, ScoredState } from './choice-policy.ts';
import type { PromptFormat, Transcript } from './transcript.ts';

export type PolicyMode = 'text' | 'choice';

/** What both kinds of policy are built from. */
export interface PolicyOptions {
  env: EnvModule;
  /** Options of every reset (split, difficulty). */
  reset: ResetOptions;
  format: PromptFormat;
  /** The adapter that acts and trains; null: the base model acts (evaluation of the base, BC from scratch needs one). */
  adapter: GpuLoraAdapter | null;
  /** The value head V(s) is read from (at the state's last token), when play is asked for values. */
  valueHead?: ValueHead;
  /** Training sequences per forward/backward in update (gradients accumulate across them). */
  microBatch: number;
}

/** The value head play reads V(s) from when asked for values; an error when the policy has none. */
export function valueHeadOf(options: PolicyOptions): ValueHead {
  if (!options.valueHead) throw new RangeError('play was asked for values, but the policy has no value head (PolicyOptions.valueHead)');
  return options.valueHead;
}

export interface PolicyStep {
  /** The observation the action answered. */
  observation: string;
  /** The action as text, as the environment received it. */
  action: string;
  reward: number;
  terminated: boolean;
  /** Cut short: by the environment, or by reaching its maxEpisodeSteps without terminating. */
  truncated: boolean;
  info: EnvInfo;
  /** log π(a|s) of the action when it was taken (the behaviour policy). */
  logProb: number;
  /** log π_ref(a|s) under the reference model (adapter off), when play was asked for it. */
  referenceLogProb?: number;
  /** KL(π ‖ π_ref) at this state, estimated from the action taken (actionKl), when play was asked for the reference. */
  referenceKl?: number;
  /** V(s) from the value head when the action was taken, when play was asked for it. */
  value?: number;
  /** The transcript's tokens up to and including this action, for storage and inspection. */
  tokens: { ids: number[]; actionMask: number[]; logprobs?: number[] };
}

export interface PlayedEpisode<S extends PolicyStep = PolicyStep> {
  /** Reset seed. */
  seed: number;
  /** Seed of the policy's draws (GRPO plays one reset seed with several). */
  samplingSeed: number;
  steps: S[];
  totalReward: number;
  success: boolean;
  /** V of the observation a truncated episode stopped at (played with values), for bootstrapping its return. */
  finalValue?: number;
  /** The environment failed (threw, returned something malformed, ran out of time): the episode ended there. */
  error?: string;
}

export interface PlayRequest {
  seed: number;
  /** Default: the reset seed. */
  samplingSeed?: number;
}

export interface PlayOptions {
  /** Take the most probable action (evaluation) instead of sampling. */
  greedy?: boolean;
  /** Let the environment's scripted expert act (demonstrations for BC); the states are recorded as usual. */
  expert?: boolean;
  /** Record log π_ref of the chosen actions (adapter off). */
  reference?: boolean;
  /** Record V(s) from this value head's weights (read back once per call). */
  values?: boolean;
  /** Called as each episode finishes. */
  onEpisode?: (episode: PlayedEpisode) => void;
}

export interface PolicyLoss {
  objective: 'pg' | 'ppo' | 'nll';
  /** PPO's ratio clip range c (default 0.2). */
  clip?: number;
  /** Entropy bonus weight (default 0). */
  entropy?: number;
  /** KL-to-reference penalty weight (default 0; needs referenceLogProb on the steps). */
  kl?: number;
  /** Value loss weight (default 0; needs `return`, and `value` for clipping). */
  value?: number;
  /** Clip range of the value update around the old value (0: none). */
  valueClip?: number;
}

export interface UpdateItem<S extends PolicyStep = PolicyStep> {
  step: S;
  advantage: number;
  /** Value target R for the value loss. */
  return?: number;
}

export interface UpdateMetrics extends StepMetrics {
  /** KL(π_old ‖ π) per action (actionKl), averaged over the items: what PPO's early stop reads. */
  approxKl: number;
  /** Share of items whose PPO ratio was clipped. */
  clipFraction: number;
  /** Mean entropy of the policy over the items' states. */
  entropy: number;
  /** Mean log π(a|s) of the items' actions under the policy before the step (−this is BC's loss). */
  logProb: number;
}

/**
 * What a value-based algorithm (DQN) needs of a policy: to play by its own rule over each state's
 * listed actions, and to score states, with their candidates' final hidden states, under any
 * adapter (its target network). Only the action-level policy has it.
 */
export interface CandidateScoring {
  play(requests: PlayRequest[], options: PlayOptions & { choose: ActionChooser }): Promise<PlayedEpisode<ChoiceStep>[]>;
  scoreStates(states: { context: number[]; actionTokens: number[][] }[], adapter: GpuLoraAdapter | null, hidden: boolean): Promise<ScoredState[]>;
}

export interface Policy<S extends PolicyStep = PolicyStep> {
  readonly mode: PolicyMode;
  readonly options: PolicyOptions;
  /** Set on policies over listed actions (choice mode): see CandidateScoring. */
  readonly candidates?: CandidateScoring;
  /** Plays one episode per request, side by side, their model calls batched together. */
  play(requests: PlayRequest[], options?: PlayOptions): Promise<PlayedEpisode<S>[]>;
  /** One optimiser step of `trainer` on the items. */
  update(trainer: Trainer, items: UpdateItem<S>[], loss: PolicyLoss): Promise<UpdateMetrics>;
}

/**
 * The one KL estimate of the agent, in both policy modes: KL(p ‖ q) at an action's state, in nats per
 * action, from the action drawn from p. `sampled` and `other` are log p and log q of each draw the
 * action was made of; each draw adds k3(r) = e^r − 1 − r, r = log q − log p (Schulman, "Approximating
 * KL divergence"). Like the mean of log-ratios (k1) it is unbiased, but it is never negative, so
 * neither a chart nor a threshold ever reads a negative KL. It gives PPO's approx KL (p = π_old,
 * q = π) and the KL to the reference (p = π, q = π_ref).
 *
 * The unit is the action, the policy's decision, so that one threshold means the same in both modes.
 * A choice-mode action is one draw from the softmax over the candidates. A text-mode action is drawn
 * token by token, so its KL is the sum of its tokens' KLs (the chain rule), estimated by the sum of
 * their k3s: unbiased like k3 of the summed log-ratio, with less variance (that exponential grows
 * with the action's length); it is the per-token k3 the text-mode loss penalises, summed as TRL sums a
 * completion's KL. A mean over tokens instead would measure a different thing, shrinking as actions grow
 * longer, so that one earlyStopKl would stop text mode far later than choice mode.
 */
export function actionKl(sampled: readonly number[], other: readonly number[]): number {
  if (sampled.length !== other.length) throw new RangeError(`actionKl: ${sampled.length} sampled log-probs against ${other.length} to compare with`);
  let kl = 0;
  for (let i = 0; i < sampled.length; i++) {
    const r = other[i] - sampled[i];
    kl += Math.expm1(r) - r;
  }
  return kl;
}

/** Thrown by play() when demonstrations are asked of an environment without a scripted expert. */
export class MissingExpertError extends Error {}

/**
 * The environment's scripted expert, for demonstrations: it gives the action the expert takes now.
 * Every instance of a module has the same methods, so a module without an expert fails the whole
 * play() call (MissingExpertError), not each episode: there is nothing to imitate, and a run should
 * stop at once rather than record only failures.
 */
function requireExpert(module: EnvModule, env: Env): () => Promise<string> {
  if (typeof env.expertAction !== 'function') {
    throw new MissingExpertError(
      `environment ${module.id} has no scripted expert (expertAction()): demonstrations need one; ` +
        "add expertAction() to the environment (docs/environments.md), or train BC on the run's own successful episodes (--set source=successes)",
    );
  }
  return async () => env.expertAction!();
}

/** What both policies keep of an episode being played, as far as starting it goes. */
export interface EpisodeStart {
  episode: { seed: number };
  env?: Env;
  expert?: () => Promise<string>;
  transcript: Transcript;
  observation: string;
}

/**
 * Starts the episodes side by side, each with a fresh environment (kept on its episode at once, so
 * that it is closed even if its reset throws), its expert when demonstrations are asked, and the
 * reset observation in its transcript. An episode that fails to start goes to `failed` and the
 * others go on; a missing expert fails the whole call (MissingExpertError, see requireExpert).
 */
export async function startEpisodes<L extends EpisodeStart>(
  live: L[],
  module: EnvModule,
  reset: ResetOptions,
  withExpert: boolean,
  failed: (episode: L, error: unknown) => void,
): Promise<void> {
  let missingExpert: MissingExpertError | null = null;
  await Promise.all(
    live.map(async (l) => {
      try {
        l.env = await module.make();
        if (withExpert) l.expert = requireExpert(module, l.env);
        const result = await l.env.reset({ seed: l.episode.seed, options: reset });
        if (!result || typeof result.observation !== 'string') throw new Error(`environment ${module.id}: reset() must return { observation: string, info }`);
        l.transcript.addObservation(result.observation);
        l.observation = result.observation;
      } catch (error) {
        if (error instanceof MissingExpertError) missingExpert = error;
        else failed(l, error);
      }
    }),
  );
  if (missingExpert) throw missingExpert;
}
