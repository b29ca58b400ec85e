// How the next token is chosen, shared by the GPU sampler and its float64 reference.

export interface SamplingOptions {
  /** Take the most likely token (ties: the lowest id). Overrides the other fields. */
  greedy?: boolean;
  /** Divides the logits; must be > 0. Default 1. */
  temperature?: number;
  /** Keep only the k most likely tokens; 0 or undefined keeps all. */
  topK?: number;
  /** Keep the smallest set of most likely tokens whose probability reaches p; 1 or undefined keeps all. */
  topP?: number;
  /**
   * Seed of the counter-based random stream; the same seed gives the same tokens. Default 0.
   * One number: one stream for the whole batch, whose draws also depend on each sequence's row
   * (samplingUniform(seed, b, step)). One number per sequence: each sequence draws from its own
   * stream (sequenceUniform(seeds[b], step)), so its tokens are the same alone as in any batch.
   */
  seed?: number | readonly number[];
}

export interface ResolvedSampling {
  greedy: boolean;
  temperature: number;
  topK: number;
  topP: number;
  /** One seed for the batch, or one per sequence. */
  seed: number | number[];
}

export function resolveSampling(options: SamplingOptions = {}): ResolvedSampling {
  const temperature = options.temperature ?? 1;
  const topK = options.topK ?? 0;
  const topP = options.topP ?? 1;
  const seed = typeof options.seed === 'object' ? [...options.seed] : (options.seed ?? 0);
  if (!(temperature > 0) || !Number.isFinite(temperature)) {
    throw new RangeError(`temperature must be a positive number, got ${options.temperature}; use greedy decoding for temperature 0`);
  }
  if (!Number.isInteger(topK) || topK < 0) throw new RangeError(`top-k must be a whole number >= 0 (0 keeps all tokens), got ${topK}`);
  if (!(topP > 0 && topP <= 1)) throw new RangeError(`top-p must be in (0, 1], got ${topP}`);
  const badSeed = (value: number) => !Number.isInteger(value) || value < 0 || value > 0xffffffff;
  if (Array.isArray(seed)) {
    if (seed.length === 0) throw new RangeError('seed: give one seed per sequence, or a single number; got an empty list');
    const at = seed.findIndex(badSeed);
    if (at >= 0) throw new RangeError(`seed ${at} must be a whole number in [0, 2^32), got ${seed[at]}`);
  } else if (badSeed(seed)) {
    throw new RangeError(`seed must be a whole number in [0, 2^32), got ${seed}`);
  }
  return { greedy: options.greedy ?? false, temperature, topK, topP, seed };
}

/** PCG hash (Jarzynski & Olano, 2020), as in sampling.wgsl. */
export function pcgHash(v: number): number {
  const state = (Math.imul(v >>> 0, 747796405) + 2891336453) >>> 0;
  const word = Math.imul(((state >>> ((state >>> 28) + 4)) ^ state) >>> 0, 277803737) >>> 0;
  return ((word >>> 22) ^ word) >>> 0;
}

/** The uniform draw in [0, 1) that the GPU sampler uses for sequence b at decode step `step`, with one seed for the batch. */
export function samplingUniform(seed: number, b: number, step: number): number {
  const h = pcgHash((seed ^ pcgHash((b ^ pcgHash(step)) >>> 0)) >>> 0);
  return (h >>> 8) / 16777216;
}

/**
 * The draw of a sequence with its own seed at decode step `step` (one seed per sequence): it depends
 * on that seed and the step only, not on the row, and equals row 0's draw of a one-seed call, so a
 * single prompt samples the same tokens with `seed: s` as with `seed: [s]`.
 */
export function sequenceUniform(seed: number, step: number): number {
  return samplingUniform(seed, 0, step);
}

/** Whether dropout.wgsl keeps element i of stream `stream` at training step `step` (drop probability p). */
export function dropoutKeeps(seed: number, stream: number, step: number, i: number, p: number): boolean {
  const threshold = Math.min(0xffffffff, Math.floor(p * 2 ** 32));
  return pcgHash((seed ^ pcgHash((stream ^ pcgHash((step ^ pcgHash(i)) >>> 0)) >>> 0)) >>> 0) >= threshold;
}
