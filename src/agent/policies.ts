// A policy of either mode from one set of settings (the run driver, `rlplay eval`, the benchmarks).
import type { Model } from '../engine/model.ts';
import { ChoicePolicy } from './choice-policy.ts';
import type { Policy, PolicyMode, PolicyOptions } from './policy.ts';
import { TextPolicy } from './text-policy.ts';

export interface PolicySettings extends PolicyOptions {
  mode: PolicyMode;
  /** Choice mode: score actions by their mean token log-prob instead of the sum. */
  lengthNormalize: boolean;
  /** Sampling temperature; in choice mode τ of the softmax over the actions' scores. */
  temperature: number;
  /** Text mode: the longest action in tokens. */
  maxActionTokens: number;
  /** Choice mode: the most valid actions a state may offer (default MAX_VALID_ACTIONS). */
  maxActions?: number;
}

export function makePolicy(model: Model, { mode, lengthNormalize, temperature, maxActionTokens, maxActions, ...options }: PolicySettings): Policy {
  return mode === 'choice'
    ? new ChoicePolicy(model, { ...options, lengthNormalize, temperature, maxActions })
    : new TextPolicy(model, { ...options, sampling: { temperature }, maxActionTokens });
}
