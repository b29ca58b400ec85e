// Returns and advantages over one episode (CleanRL's ppo.py conventions, written out plainly).
//
//   discounted return   G_t = r_t + γ G_{t+1},                 G_T = bootstrap
//   TD error            δ_t = r_t + γ V_{t+1} − V_t,             V_T = bootstrap
//   GAE(λ)              A_t = δ_t + γλ A_{t+1},                  A_T = 0;   returns R_t = A_t + V_t
//   bootstrap           0 if the episode terminated (the MDP ended), V(s_T) if it was truncated
//                       (time limit, or a rollout cut short): the future still had value there.
//   normalisation       Â = (A − mean) / (std + ε) over the unmasked entries (population std)
//   REINFORCE baseline  A_t = G_t − b, b a running mean of past returns or a value estimate V_t
//
// λ = 1 gives Monte-Carlo advantages G_t − V_t; λ = 0 gives one-step TD errors.

/** How an episode (or the rollout of it) ended, and the value to bootstrap from. */
export interface EpisodeEnd {
  /** True when the environment reported `terminated`: nothing follows, bootstrap from 0. */
  terminated: boolean;
  /** V(s_T), the value of the final observation; required unless terminated (truncated or unfinished). */
  finalValue?: number;
}

export interface GaeOptions {
  /** Discount γ in [0, 1]. */
  gamma: number;
  /** GAE trace decay λ in [0, 1]. */
  lambda: number;
}

export interface NormalizeOptions {
  /** Added to the std before dividing, so a constant batch gives zeros rather than NaN. Default 1e-8. */
  eps?: number;
  /** 1 for entries that count (and get normalised), 0 for entries left at 0. Default: all count. */
  mask?: readonly number[];
}

export interface RunningMeanOptions {
  /** Exponential moving-average decay β: b ← β b + (1 − β) G. Default: the plain mean of every return seen. */
  decay?: number;
}

function checkUnit(name: string, value: number): void {
  if (!(value >= 0 && value <= 1)) throw new RangeError(`${name} must be in [0, 1], got ${value}`);
}

/** The value the episode's last step bootstraps from: 0 when terminated, V(s_T) otherwise. */
export function bootstrapValue(end: EpisodeEnd): number {
  if (end.terminated) return 0;
  if (end.finalValue === undefined || !Number.isFinite(end.finalValue)) {
    throw new RangeError('a truncated or unfinished episode needs the finite value of its final observation (finalValue)');
  }
  return end.finalValue;
}

/** G_t = r_t + γ G_{t+1} for every step, with G_T = `bootstrap` (0 for a terminated episode). */
export function discountedReturns(rewards: readonly number[], gamma: number, bootstrap = 0): number[] {
  checkUnit('gamma', gamma);
  const returns = new Array<number>(rewards.length);
  let g = bootstrap;
  for (let t = rewards.length - 1; t >= 0; t--) {
    g = rewards[t] + gamma * g;
    returns[t] = g;
  }
  return returns;
}

/** GAE(λ) advantages and the value targets R_t = A_t + V_t of one episode. */
export function gae(rewards: readonly number[], values: readonly number[], end: EpisodeEnd, options: GaeOptions): { advantages: number[]; returns: number[] } {
  checkUnit('gamma', options.gamma);
  checkUnit('lambda', options.lambda);
  if (values.length !== rewards.length) throw new RangeError(`gae: ${rewards.length} rewards but ${values.length} values`);
  const { gamma, lambda } = options;
  const advantages = new Array<number>(rewards.length);
  let nextValue = bootstrapValue(end);
  let nextAdvantage = 0;
  for (let t = rewards.length - 1; t >= 0; t--) {
    const delta = rewards[t] + gamma * nextValue - values[t];
    nextAdvantage = delta + gamma * lambda * nextAdvantage;
    advantages[t] = nextAdvantage;
    nextValue = values[t];
  }
  return { advantages, returns: advantages.map((a, t) => a + values[t]) };
}

/** (A − mean) / (std + ε) over the masked-in entries; masked-out entries come back as 0. */
export function normalizeAdvantages(advantages: readonly number[], options: NormalizeOptions = {}): number[] {
  const { eps = 1e-8, mask } = options;
  if (mask && mask.length !== advantages.length) throw new RangeError(`normalizeAdvantages: ${advantages.length} advantages but ${mask.length} mask entries`);
  const counted = (i: number) => !mask || mask[i] !== 0;
  let n = 0;
  let sum = 0;
  advantages.forEach((a, i) => {
    if (!counted(i)) return;
    n++;
    sum += a;
  });
  if (n === 0) return advantages.map(() => 0);
  const mean = sum / n;
  let squares = 0;
  advantages.forEach((a, i) => {
    if (counted(i)) squares += (a - mean) ** 2;
  });
  const std = Math.sqrt(squares / n);
  return advantages.map((a, i) => (counted(i) ? (a - mean) / (std + eps) : 0));
}

/**
 * A running-mean baseline for REINFORCE. Compute the batch's advantages with `mean` before calling
 * `update` with its returns, so no return is its own baseline. Starts at 0.
 */
export class RunningMean {
  private count = 0;
  private value = 0;
  private readonly decay: number | undefined;

  constructor(options: RunningMeanOptions = {}) {
    if (options.decay !== undefined) checkUnit('decay', options.decay);
    this.decay = options.decay;
  }

  get mean(): number {
    return this.value;
  }

  /** Its state, for checkpoints. */
  toJSON(): { count: number; value: number } {
    return { count: this.count, value: this.value };
  }

  static fromJSON(state: unknown, options: RunningMeanOptions = {}): RunningMean {
    const { count, value } = (state ?? {}) as { count?: unknown; value?: unknown };
    if (typeof count !== 'number' || typeof value !== 'number') throw new RangeError(`not a RunningMean state: ${JSON.stringify(state)}`);
    const mean = new RunningMean(options);
    mean.count = count;
    mean.value = value;
    return mean;
  }

  /** Folds returns in one at a time, in order. */
  update(returns: readonly number[]): void {
    for (const g of returns) {
      this.count++;
      this.value = this.decay === undefined ? this.value + (g - this.value) / this.count : this.decay * this.value + (1 - this.decay) * g;
    }
  }
}
