// The environment contract, with Gymnasium semantics: reset returns an observation and info; step
// returns observation, reward, terminated, truncated and info. Observations and actions are text, so
// a language model can read and write them. Any method may be async. docs/environments.md has a
// complete example.

export type MaybePromise<T> = T | Promise<T>;

/** Free-form diagnostics; `success` (set when an episode ends) is task success, kept apart from reward. */
export interface EnvInfo {
  success?: boolean;
  [key: string]: unknown;
}

export interface ResetResult {
  observation: string;
  info: EnvInfo;
}

export interface StepResult {
  observation: string;
  reward: number;
  /** The episode reached a terminal state of the task (solved, failed, answered). */
  terminated: boolean;
  /** The episode was cut short from outside the task (e.g. a step limit). */
  truncated: boolean;
  info: EnvInfo;
}

export type Split = 'train' | 'test';

/** Options every built-in environment understands in reset({ options }). */
export interface ResetOptions {
  /** Which instances to draw from: train and test instances never overlap. Default 'train'. */
  split?: Split;
  /** 1 (easiest) to 3. Default 1. */
  difficulty?: number;
  [key: string]: unknown;
}

export interface Env {
  reset(args: { seed: number; options?: ResetOptions }): MaybePromise<ResetResult>;
  step(action: string): MaybePromise<StepResult>;
  /** The actions that make sense now, for action-level policies (a softmax over this list). */
  validActions?(): MaybePromise<string[]>;
  close?(): MaybePromise<void>;
  /**
   * A scripted expert: the action it takes now (it may read the hidden state; it plays well, not
   * perfectly). Optional; with it, behaviour cloning can imitate demonstrations and `rlplay collect
   * --expert` can record them.
   */
  expertAction?(): MaybePromise<string>;
}

/** What an environment module exports by default. */
export interface EnvModule {
  id: string;
  description: string;
  /** Episodes are truncated after this many steps. */
  maxEpisodeSteps: number;
  make(options?: Record<string, unknown>): MaybePromise<Env>;
}

/** A built-in environment: also a scripted expert, for demonstrations, baselines and tests. */
export interface BuiltinEnvModule extends EnvModule {
  make(options?: Record<string, unknown>): ExpertEnv;
}

/** An Env whose expert is always there and answers at once (built-ins: the default model's corpus and the tests call it synchronously). */
export interface ExpertEnv extends Env {
  expertAction(): string;
  /**
   * The instance's hidden state (the answer, the secret number, the hidden tests): what the expert
   * reads and what no observation, info or valid-action list may give away before the episode
   * ends. Only in-process code calls it (the expert, tests); `rlplay serve` never sends it.
   */
  hiddenState(): unknown;
}
