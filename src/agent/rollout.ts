// Episodes played by an action-level policy: at each step the environment lists its valid actions,
// the model scores each one's tokens after the transcript so far (the transcript runs once, then
// every candidate continues from its KV cache), and the policy is a softmax over the candidates'
// summed or length-normalised log-probs. Everything a policy-gradient update needs is recorded:
// the transcript before each step, every candidate's tokens, the policy's probabilities, the choice.
import { mulberry32 } from '../common/random.ts';
import type { Model } from '../engine/model.ts';
import type { GpuLoraAdapter } from '../engine/lora/gpu-adapter.ts';
import type { EnvModule, ResetOptions } from '../env/types.ts';
import { actionLogProbs, sampleAction } from '../rl/action-policy.ts';
import { Transcript, type PromptFormat } from './transcript.ts';

export interface ActionStep {
  /** Token ids of the transcript before this step's action (the state). */
  context: number[];
  /** Each valid action's text and tokens. */
  actions: string[];
  actionTokens: number[][];
  /** log π(a | s) for every valid action. */
  logProbs: number[];
  /** log π_ref(a | s) of the chosen action under the reference model (adapter off), when asked for. */
  referenceLogProb?: number;
  chosen: number;
  reward: number;
}

export interface ActionEpisode {
  seed: number;
  steps: ActionStep[];
  totalReward: number;
  success: boolean;
  /** Set when the environment failed (threw, or returned something malformed): the episode ended there. */
  error?: string;
}

export interface ActionRolloutOptions {
  env: EnvModule;
  reset: ResetOptions;
  format: PromptFormat;
  /** Policy over summed (false) or length-normalised (true) token log-probs. */
  lengthNormalize: boolean;
  /** Take the most probable action instead of sampling (evaluation). */
  greedy?: boolean;
  adapter?: GpuLoraAdapter | null;
  /** Seed of the policy's draws (default: the reset seed); GRPO plays one reset seed with several. */
  samplingSeed?: number;
  /** Also score the chosen action under the reference model (the adapter off), for KL penalties. */
  referenceLogProbs?: boolean;
}

/** Plays one episode from `seed`; the policy's draws come from their own seeded stream. */
export async function playActionEpisode(model: Model, seed: number, options: ActionRolloutOptions): Promise<ActionEpisode> {
  const env = await options.env.make();
  const random = mulberry32((options.samplingSeed ?? seed) ^ 0x5bd1e995);
  const episode: ActionEpisode = { seed, steps: [], totalReward: 0, success: false };
  try {
    const reset = await env.reset({ seed, options: options.reset });
    if (!env.validActions) throw new Error(`environment ${options.env.id} has no validActions(): it cannot be played by an action-level policy`);
    const transcript = new Transcript(model.tokenizer, options.format, options.env.description);
    transcript.addObservation(reset.observation);
    for (let t = 0; t < options.env.maxEpisodeSteps; t++) {
      const actions = await env.validActions();
      if (actions.length === 0) throw new Error(`environment ${options.env.id} offered no valid actions at step ${t}`);
      const actionTokens = actions.map((a) => transcript.encodeAction(a));
      const [scores] = await model.scoreContinuations([{ prompt: transcript.ids, continuations: actionTokens }], { adapter: options.adapter });
      const [logProbs] = actionLogProbs([scores.sums], [actionTokens.map((tokens) => tokens.length)], { lengthNormalize: options.lengthNormalize });
      const chosen = options.greedy ? logProbs.indexOf(Math.max(...logProbs)) : sampleAction(logProbs, random);
      const context = [...transcript.ids];
      let referenceLogProb: number | undefined;
      if (options.referenceLogProbs) {
        const [reference] = await model.scoreContinuations([{ prompt: transcript.ids, continuations: actionTokens }], { adapter: null });
        referenceLogProb = actionLogProbs([reference.sums], [actionTokens.map((tokens) => tokens.length)], { lengthNormalize: options.lengthNormalize })[0][chosen];
      }
      const result = await env.step(actions[chosen]);
      if (!Number.isFinite(result.reward)) throw new Error(`environment ${options.env.id} returned reward ${result.reward} at step ${t}; rewards must be finite numbers`);
      episode.steps.push({ context, actions, actionTokens, logProbs, chosen, reward: result.reward, ...(referenceLogProb === undefined ? {} : { referenceLogProb }) });
      episode.totalReward += result.reward;
      transcript.addAction(actionTokens[chosen]);
      if (result.terminated || result.truncated) {
        episode.success = result.info.success === true;
        return episode;
      }
      transcript.addObservation(result.observation);
    }
    return episode; // reached maxEpisodeSteps: truncated, not a success
  } catch (error) {
    episode.error = (error as Error).message;
    return episode;
  } finally {
    await env.close?.();
  }
}
