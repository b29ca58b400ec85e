// Action-level Q-learning pieces (DQN, as in CleanRL's dqn.py), as plain data structures.
//
//   TD target      y = r + γ (1 − terminated) max_a' Q_target(s', a')
//   action lists   vary in length per state: pad Q-values with −Infinity. A next state with no
//                  finite Q-value (empty or all padding) has no actions, so it counts as terminal.
//                  A truncated transition is not terminated: it still bootstraps from s'.
//   ε-greedy       with probability ε a uniformly random valid action, otherwise argmax_a Q(s, a)
//                  (ties go to the lowest index)
//   linear decay   ε(t) = start + (end − start) · min(t / duration, 1)
//   replay buffer  a ring of fixed capacity (the oldest transition is overwritten) sampled
//                  uniformly with replacement from a seeded mulberry32 stream.
import { mulberry32 } from '../common/random.ts';

/** One transition as the TD target needs it. */
export interface TdTransition {
  reward: number;
  /** The environment's `terminated` flag for this step (not `truncated`). */
  terminated: boolean;
  /** Q_target(s', a') for each action of the next state, −Infinity-padded. */
  nextQ: readonly number[];
}

export interface LinearScheduleOptions {
  /** Value at step 0. */
  start: number;
  /** Value from step `duration` on. */
  end: number;
  /** Steps over which the value moves linearly from start to end (> 0). */
  duration: number;
}

export interface ReplayBufferOptions {
  /** Most transitions kept; older ones are overwritten. */
  capacity: number;
  /** Seed of the sampling stream. */
  seed: number;
}

/** Index of the largest finite value (lowest index on ties), or −1 when there is none. */
export function greedyAction(q: readonly number[]): number {
  let best = -1;
  for (let a = 0; a < q.length; a++) {
    if (Number.isNaN(q[a])) throw new RangeError(`Q-value of action ${a} is NaN`);
    if (q[a] !== -Infinity && (best < 0 || q[a] > q[best])) best = a;
  }
  return best;
}

/** y = r + γ (1 − terminated) max_a' Q(s', a'), with a next state without actions counted as terminal. */
export function tdTargets(transitions: readonly TdTransition[], gamma: number): number[] {
  if (!(gamma >= 0 && gamma <= 1)) throw new RangeError(`gamma must be in [0, 1], got ${gamma}`);
  return transitions.map(({ reward, terminated, nextQ }) => {
    if (terminated) return reward;
    const best = greedyAction(nextQ);
    return best < 0 ? reward : reward + gamma * nextQ[best];
  });
}

/** ε-greedy action over −Infinity-padded Q-values; `random` is a seeded stream such as mulberry32(seed). */
export function epsilonGreedy(q: readonly number[], epsilon: number, random: () => number): number {
  const valid = q.flatMap((v, a) => (v === -Infinity ? [] : [a]));
  if (valid.length === 0) throw new RangeError('epsilonGreedy: the state has no valid actions');
  if (random() < epsilon) return valid[Math.floor(random() * valid.length)];
  return greedyAction(q);
}

/** ε(t) (or any linearly annealed value) as a function of the step. */
export function linearSchedule(options: LinearScheduleOptions): (step: number) => number {
  const { start, end, duration } = options;
  if (!(duration > 0)) throw new RangeError(`linearSchedule: duration must be > 0, got ${duration}`);
  return (step) => start + (end - start) * Math.min(Math.max(step, 0) / duration, 1);
}

/** Fixed-capacity ring of transitions with seeded uniform minibatch sampling (with replacement). */
export class ReplayBuffer<T> {
  private readonly items: T[] = [];
  private next = 0;
  private readonly random: () => number;
  readonly capacity: number;

  constructor(options: ReplayBufferOptions) {
    if (!Number.isInteger(options.capacity) || options.capacity < 1) throw new RangeError(`ReplayBuffer: capacity must be a positive integer, got ${options.capacity}`);
    this.capacity = options.capacity;
    this.random = mulberry32(options.seed);
  }

  get size(): number {
    return this.items.length;
  }

  /** Stores a transition, overwriting the oldest once the buffer is full. */
  push(item: T): void {
    if (this.items.length < this.capacity) this.items.push(item);
    else this.items[this.next] = item;
    this.next = (this.next + 1) % this.capacity;
  }

  /** `batchSize` transitions drawn uniformly with replacement: index ⌊u · size⌋ for each draw u (from `random`, default the buffer's stream). */
  sample(batchSize: number, random: () => number = this.random): T[] {
    if (this.items.length === 0) throw new RangeError('ReplayBuffer: cannot sample from an empty buffer');
    return Array.from({ length: batchSize }, () => this.items[Math.floor(random() * this.items.length)]);
  }

  /** The stored transitions and the ring's write position, for checkpoints (JSON when T is). */
  toJSON(): { items: T[]; next: number } {
    return { items: this.items, next: this.next };
  }

  /** Refills an empty buffer from toJSON()'s output. */
  load(state: { items: T[]; next: number }): void {
    if (!Array.isArray(state?.items) || state.items.length > this.capacity || !Number.isInteger(state.next)) throw new RangeError('not a replay buffer state (or one larger than this buffer)');
    this.items.splice(0, this.items.length, ...state.items);
    this.next = state.next % this.capacity;
  }
}
