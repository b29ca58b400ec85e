// The options every agent command shares (train, collect, eval): which environment, how the policy
// acts, and the time limit of a custom environment's steps.
import { Option, type Command } from 'commander';
import { makePolicy } from '../agent/policies.ts';
import type { Policy, PolicyMode } from '../agent/policy.ts';
import type { PromptFormat } from '../agent/transcript.ts';
import type { GpuLoraAdapter } from '../engine/lora/gpu-adapter.ts';
import type { Model } from '../engine/model.ts';
import { BUILTIN_ENVIRONMENTS } from '../env/builtin/index.ts';
import type { EnvModule, Split } from '../env/types.ts';
import { RUN_SETTINGS, TRAIN_DEFAULTS, type TrainConfig } from '../rl/run.ts';
import { resolveEnvironment, type ResolvedEnvironment } from '../env/resolve-node.ts';
import { ENV_LIMIT_SETTINGS } from '../env/settings.ts';
import { parseNumber, parseWholeNumber } from './parse.ts';
import { addSettingOptions } from './setting-options.ts';

export interface AgentFlags {
  env: string;
  mode: PolicyMode;
  difficulty: number;
  sum?: boolean;
  temperature: number;
  maxActionTokens: number;
  maxActions: number;
  stepTimeout: number;
  maxMemoryMb: number;
}

export function addAgentOptions(command: Command): Command {
  command
    .requiredOption('--env <id|file>', `a built-in environment (${[...BUILTIN_ENVIRONMENTS.keys()].join(', ')}) or a custom environment's .js/.mjs file`)
    .addOption(new Option('--mode <mode>', 'choice: a softmax over the listed valid actions; text: the model writes its actions').choices(['choice', 'text']).default('choice'))
    .option('--difficulty <d>', 'difficulty level of the instances, 1-3', parseWholeNumber, 1)
    .option('--sum', 'choice mode: score actions by summed token log-probs (default: their mean, which does not penalise long actions)')
    .option('--temperature <t>', 'sampling temperature (choice mode: τ of the softmax over the valid actions; below 1 sharper)', parseNumber, 1)
    .option('--max-action-tokens <n>', 'text mode: the longest action, in tokens', parseWholeNumber, RUN_SETTINGS.maxActionTokens.default)
    .option('--max-actions <n>', 'choice mode: the most valid actions a state may offer (each is scored every step); an episode offered more fails at that step', parseWholeNumber, RUN_SETTINGS.maxActions.default);
  return addSettingOptions(command, ENV_LIMIT_SETTINGS);
}

export function checkAgentFlags(flags: AgentFlags): void {
  if (flags.difficulty < 1 || flags.difficulty > 3) throw new Error(`--difficulty must be 1, 2 or 3, got ${flags.difficulty}`);
  if (!(flags.temperature > 0)) throw new Error(`--temperature must be > 0, got ${flags.temperature}`);
  if (flags.maxActionTokens < 1) throw new Error('--max-action-tokens must be at least 1');
  if (flags.maxActions < 1) throw new Error('--max-actions must be at least 1');
}

/** The environment, validated (custom ones run in workers: dispose() it when done). */
export function loadEnvironment(flags: AgentFlags): Promise<ResolvedEnvironment> {
  return resolveEnvironment(flags.env, { stepTimeoutMs: flags.stepTimeout, maxMemoryMb: flags.maxMemoryMb });
}

/** The chat template when the model has one, a plain transcript otherwise. */
export function promptFormat(model: Model): PromptFormat {
  return model.tokenizer.hasChatTemplate ? 'chat' : 'plain';
}

/** How the agent acts, from the shared flags: the part of a run's settings that every agent command takes the same way. */
export function actingSettings(model: Model, flags: AgentFlags): Pick<TrainConfig, 'mode' | 'format' | 'lengthNormalize' | 'temperature' | 'maxActionTokens' | 'maxActions'> {
  return { mode: flags.mode, format: promptFormat(model), lengthNormalize: !flags.sum, temperature: flags.temperature, maxActionTokens: flags.maxActionTokens, maxActions: flags.maxActions };
}

/** The policy that plays `split` instances for collect and eval (with the adapter, or the base model). */
export function agentPolicy(model: Model, flags: AgentFlags, env: EnvModule, split: Split, adapter: GpuLoraAdapter | null): Policy {
  return makePolicy(model, { ...TRAIN_DEFAULTS, ...actingSettings(model, flags), env, reset: { split, difficulty: flags.difficulty }, adapter });
}
