// What every algorithm file (reinforce.ts, grpo.ts, ppo.ts, a2c.ts, dqn.ts, bc.ts) provides to the
// run driver (run.ts): one update at a time (play some episodes, take some optimiser steps), with its
// own state (baselines, an adaptive KL coefficient, a replay buffer...) as JSON for checkpoints, so a
// resumed run continues exactly where it stopped.
import type { PlayedEpisode, Policy, PolicyMode, PolicyStep, UpdateItem } from '../agent/policy.ts';
import { gae, type GaeOptions } from './advantages.ts';
import type { Trainer } from '../engine/train/trainer.ts';
import type { Model } from '../engine/model.ts';
import { mean } from '../common/stats.ts';

export const ALGORITHMS = ['ppo', 'a2c', 'reinforce', 'grpo', 'dqn', 'bc'] as const;
export type AlgorithmName = (typeof ALGORITHMS)[number];

export interface UpdateContext<S extends PolicyStep = PolicyStep> {
  model: Model;
  policy: Policy<S>;
  trainer: Trainer;
  /** 0, 1, 2...: which update this is. */
  update: number;
  /** Seed of this update's episodes (reset seeds and sampling), derived from the run's seed and the update. */
  seed: number;
  /** Called as each episode finishes (progress). */
  onEpisode?: (episode: PlayedEpisode) => void;
}

export interface UpdateResult {
  /** Every episode played, failed ones included (error set): the driver stores and reports them. */
  episodes: PlayedEpisode[];
  /** Charts: losses and algorithm-specific figures (e.g. 'ppo/kl_coef'), by name. */
  metrics: Record<string, number>;
}

export interface Algorithm<S extends PolicyStep = PolicyStep> {
  readonly name: AlgorithmName;
  /** Policy modes it supports ('choice' and/or 'text'). */
  readonly modes: readonly PolicyMode[];
  /** Episodes one update plays. */
  readonly episodesPerUpdate: number;
  /** AdamW learning rate. */
  readonly learningRate: number;
  /** Decay it linearly over the run's updates (see updateLearningRate in run.ts). */
  readonly annealLearningRate: boolean;
  update(context: UpdateContext<S>): Promise<UpdateResult>;
  /** State to checkpoint (JSON), and to restore from. */
  state(): unknown;
  restore(state: unknown): void;
  /** Frees what the algorithm holds on the GPU (e.g. DQN's target network). */
  dispose?(): void;
}

/** Episodes an update can learn from: those whose environment did not fail. */
export function usable<E extends PlayedEpisode>(episodes: E[]): E[] {
  return episodes.filter((e) => !e.error && e.steps.length > 0);
}

/** An update's n reset seeds: seed, seed + 1, ... (the driver spaces updates' seeds so they never overlap). */
export function episodeSeeds(seed: number, n: number): number[] {
  return Array.from({ length: n }, (_, i) => seed + i);
}

/**
 * Every step of episodes played with values (PPO, A2C) with its GAE advantage and return; an episode
 * cut short (truncated, or out of room) bootstraps from the value of where it stopped.
 */
export function gaeItems(episodes: readonly PlayedEpisode[], options: GaeOptions): UpdateItem<PolicyStep>[] {
  return episodes.flatMap((e) => {
    const last = e.steps[e.steps.length - 1];
    const { advantages, returns } = gae(
      e.steps.map((s) => s.reward),
      e.steps.map((s) => s.value!),
      { terminated: last.terminated, finalValue: e.finalValue },
      options,
    );
    return e.steps.map((step, t) => ({ step, advantage: advantages[t], return: returns[t] }));
  });
}

/**
 * The figures every update reports about its episodes. Return and length are over the episodes
 * played to the end; the success rate counts a failed episode (one the environment or the policy
 * broke) as a failure, as evaluation does, so that breaking episodes never raises it.
 */
export function episodeMetrics(episodes: readonly PlayedEpisode[]): Record<string, number> {
  const ok = usable([...episodes]);
  return {
    'charts/episodic_return': mean(ok.map((e) => e.totalReward)),
    'charts/success_rate': episodes.length ? ok.filter((e) => e.success).length / episodes.length : NaN,
    'charts/episodic_length': mean(ok.map((e) => e.steps.length)),
    'charts/failed_episodes': episodes.length - ok.length,
  };
}

/**
 * The KL to the reference per episode, `losses/kl` and what PPO's adaptiveKlTarget steers: the mean over the
 * episodes of the sum of their steps' referenceKl (each action's k3 estimate, actionKl), so it is never
 * negative, and is the same quantity in choice and text mode. An episode's KL is the sum of its
 * actions' KLs (the chain rule over its steps); a step played without the reference adds nothing.
 */
export function referenceKlPerEpisode(episodes: readonly PlayedEpisode[]): number {
  if (episodes.length === 0) return NaN;
  return episodes.reduce((total, e) => total + e.steps.reduce((sum, s) => sum + (s.referenceKl ?? 0), 0), 0) / episodes.length;
}

/**
 * The trainer's step metrics under CleanRL's chart names. `policyTerm` is the loss term that is the
 * algorithm's policy objective (every term is measured whatever its weight, so the algorithm says
 * which one is its policy loss; null when it has none, as DQN). Algorithms with a KL penalty report
 * `losses/kl`, the KL to the reference per episode (referenceKlPerEpisode), themselves.
 */
export function lossMetrics(
  m: { 'losses/total': number; 'losses/grad_norm': number; 'losses/value_grad_norm': number; 'charts/learning_rate': number; skipped: boolean; terms: Record<string, number> },
  policyTerm: 'losses/ppo' | 'losses/policy_gradient' | 'losses/nll' | null,
  /** The objective trains the value head (PPO, A2C): only then is the value term a value loss. */
  trainsValueHead: boolean,
): Record<string, number> {
  return {
    'losses/total': m['losses/total'],
    'losses/grad_norm': m['losses/grad_norm'],
    ...(policyTerm ? { 'losses/policy_loss': m.terms[policyTerm] } : {}),
    ...(trainsValueHead ? { 'losses/value_loss': m.terms['losses/value'] } : {}),
    'charts/learning_rate': m['charts/learning_rate'],
    'losses/skipped_steps': m.skipped ? 1 : 0,
  };
}
