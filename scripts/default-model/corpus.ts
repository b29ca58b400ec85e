// The default model's training data: episodes of the five built-in environments played by their
// scripted experts with noise (with probability `noise` a step takes a uniformly random valid action
// instead), so the data holds mistakes, recoveries and failures as well as clean solutions.
import { mulberry32 } from '../../src/common/random.ts';
import type { BuiltinEnvModule } from '../../src/env/types.ts';

export interface PlayedStep {
  observation: string;
  /** The action taken: the expert's, or with probability `noise` a random valid one. */
  action: string;
  /** The valid actions at this step, and the expert's pick among them. */
  actions: string[];
  expert: string;
}

export interface NoisyEpisode {
  env: string;
  description: string;
  steps: PlayedStep[];
  success: boolean;
}

export interface CorpusOptions {
  /** Episodes of each environment (by id), spread evenly over `difficulties`. */
  episodesPerEnv: Record<string, number>;
  difficulties: number[];
  /** Probability that a step is a random valid action instead of the expert's. */
  noise: number;
  seed: number;
}

export async function noisyExpertEpisodes(envs: BuiltinEnvModule[], options: CorpusOptions): Promise<NoisyEpisode[]> {
  const random = mulberry32(options.seed);
  const episodes: NoisyEpisode[] = [];
  for (const module of envs) {
    for (let i = 0; i < options.episodesPerEnv[module.id]; i++) {
      const env = module.make();
      const difficulty = options.difficulties[i % options.difficulties.length];
      let { observation } = await env.reset({ seed: options.seed * 100_003 + i, options: { split: 'train', difficulty } });
      const steps: PlayedStep[] = [];
      let success = false;
      for (let t = 0; t < module.maxEpisodeSteps; t++) {
        const actions = await env.validActions!();
        const expert = env.expertAction();
        const action = random() < options.noise ? actions[Math.floor(random() * actions.length)] : expert;
        steps.push({ observation, action, actions: [...actions], expert });
        const result = await env.step(action);
        if (result.terminated || result.truncated) {
          success = result.info.success === true;
          break;
        }
        observation = result.observation;
      }
      await env.close?.();
      episodes.push({ env: module.id, description: module.description, steps, success });
    }
  }
  return episodes;
}

/** The text pieces a plain transcript is tokenised in (src/agent/transcript.ts), for training the tokenizer. */
export function transcriptPieces(episode: NoisyEpisode): string[] {
  return [`${episode.description}\n`, ...episode.steps.flatMap((s) => [`Observation: ${s.observation}\nAction:`, ` ${s.action}\n`])];
}
