// Autoregressive generation for a batch of prompts of different lengths.
//
// Prompts are left-padded (padding.ts) and run through the forward in chunks that fit the
// activation buffers; the last chunk ends in the sampling head, which writes each sequence's next
// token on the GPU. Every decode step then feeds those ids straight back into the embedding
// lookup: the CPU only reads the B sampled ids (and their log-probs) once per step, to stop on
// end-of-sequence tokens and to stream text.
//
// Random draws: the sampler's counter is the index of the new token (0 for the first), the same for
// every row, since all rows start together and a finished row keeps being computed (its tokens are
// dropped) rather than compacted out of the batch. With one seed per prompt (sampling.seed an
// array) the sampler reads the seeds from the tail of the sampled-ids buffer (sampling.wgsl), so
// prompt i's draw at token t depends on (seed_i, t) only: its tokens are the same alone as in any
// batch. With one seed for the call, draws also depend on the row, as they always have.
//
// The decode loop (decodeAfterPrompts) also serves PromptCache.generate, which keeps each episode's
// KV cache between calls and so prefills only the tokens that are new (src/engine/prompt-cache.ts).
import { uniformBuffer } from './gpu/buffers.ts';
import { encodeDispatches, type Dispatch } from './gpu/kernels.ts';
import type { GpuModel } from './gpu-model.ts';
import type { GpuLoraAdapter } from './lora/gpu-adapter.ts';
import { ForwardState, maxRowsPerStep } from './forward.ts';
import { padLeft, positionsFromMask } from './padding.ts';
import { resolveSampling, type SamplingOptions } from './sampling-params.ts';

export interface GenerateOptions {
  maxNewTokens: number;
  sampling?: SamplingOptions;
  /** A sequence stops after producing one of these (it is kept in the output). Default: none. */
  stopTokenIds?: number[];
  /** Generate with this LoRA adapter applied (default: the base model). */
  adapter?: GpuLoraAdapter | null;
  /** Called after every decode step with the tokens generated so far, per prompt. */
  onStep?: (newTokens: number[][]) => void;
}

export interface GenerateStats {
  prefillMs: number;
  decodeMs: number;
  /** Forward steps after the prompt, each one token for every unfinished sequence. */
  decodeSteps: number;
  dispatchesPerDecodeStep: number;
  readbacksPerDecodeStep: number;
}

export interface GenerateResult {
  /** New tokens per prompt (the stop token included, when one was produced). */
  tokens: number[][];
  /** log p(token) under the model (temperature 1, before truncation), per new token. */
  logprobs: number[][];
  stats: GenerateStats;
}

interface Readback {
  /** Sampled ids [B] (then, with one seed per prompt, the seeds), and their log-probs [B]. */
  ids: GPUBuffer;
  logprobs: GPUBuffer;
  staging: GPUBuffer;
  B: number;
}

/**
 * Encodes and submits `dispatches`; with `readback`, the same submit also copies the sampled ids and
 * their log-probs into the step's staging buffer, so a decode step is one submit and one map.
 */
function submit(model: GpuModel, dispatches: Dispatch[], readback?: Readback): void {
  const encoder = model.gpu.device.createCommandEncoder();
  encodeDispatches(encoder, dispatches);
  if (readback) {
    const bytes = readback.B * 4;
    encoder.copyBufferToBuffer(readback.ids, 0, readback.staging, 0, bytes);
    encoder.copyBufferToBuffer(readback.logprobs, 0, readback.staging, bytes, bytes);
  }
  model.gpu.device.queue.submit([encoder.finish()]);
}

/**
 * The sampling head with its sampler replaced by `sampler`: the forward state's head ends in a
 * one-seed sampler writing into its own ids buffer; generate's writes into a buffer that can also
 * carry one seed per prompt.
 */
function withSampler(head: Dispatch[], sampler: Dispatch): Dispatch[] {
  if (head.at(-1)?.kernel !== 'sample') throw new Error('internal: the sampling head does not end with the sampler');
  return [...head.slice(0, -1), sampler];
}

/** Checks prompts for a generation of up to maxNewTokens: non-empty, in the vocabulary, within the positions. */
export function validatePrompts(model: GpuModel, prompts: number[][], maxNewTokens: number): void {
  if (!Number.isInteger(maxNewTokens) || maxNewTokens < 1) throw new RangeError(`max new tokens must be a whole number >= 1, got ${maxNewTokens}`);
  const { vocabSize: V } = model.config;
  for (const [b, prompt] of prompts.entries()) {
    if (prompt.length === 0) throw new RangeError(`prompt ${b} is empty: start it with the BOS token`);
    const bad = prompt.find((id) => !Number.isInteger(id) || id < 0 || id >= V);
    if (bad !== undefined) throw new RangeError(`prompt ${b} holds token id ${bad}, outside the vocabulary [0, ${V})`);
    if (prompt.length + maxNewTokens > model.ropePositions) {
      throw new RangeError(`prompt ${b} (${prompt.length} tokens) plus ${maxNewTokens} new tokens exceeds the model's ${model.ropePositions} positions`);
    }
  }
}

/** Where the prompts of a generation sit in a forward state whose cache holds them (or will, after `prefill`). */
export interface DecodeLayout {
  /** The state row of each prompt; the state's other rows are computed along and their tokens dropped. */
  rows: number[];
  /** The cache slot the first new token goes to; each decode step writes the next slot. */
  slot0: number;
  /** Per state row: the position of its first new token (its prompt's length). */
  firstPositions: number[];
  /**
   * Submits the forward over the prompts that ends in the sampling head: `head(T)` for a last chunk of
   * T tokens per row (its lastRows set), passed to `submitLast`, which also reads back the first tokens.
   */
  prefill(head: (T: number) => Dispatch[], submitLast: (dispatches: Dispatch[]) => void): void;
}

/**
 * Samples up to maxNewTokens tokens after the prompts of `layout`, in `state`: the prefill samples
 * each row's first token, then every decode step feeds all rows' sampled ids back (on the GPU) and
 * reads the next ones. Used by generate (a fresh state) and by PromptCache.generate (a kept one).
 */
export async function decodeAfterPrompts(model: GpuModel, state: ForwardState, layout: DecodeLayout, options: GenerateOptions): Promise<GenerateResult> {
  const { maxNewTokens } = options;
  const sampling = resolveSampling(options.sampling);
  const { vocabSize: V } = model.config;
  const stop = new Set(options.stopTokenIds ?? []);
  const B = state.shape.B;
  const requests = layout.rows.length;
  const seeds = Array.isArray(sampling.seed) ? sampling.seed : null;
  if (seeds && seeds.length !== requests) throw new RangeError(`sampling.seed holds ${seeds.length} seeds for ${requests} prompts: give one seed per prompt, or a single number`);
  const device = model.gpu.device;
  // One staging buffer for the whole generation: the decode loop allocates nothing.
  const staging = device.createBuffer({ size: B * 8, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST, label: 'sampled ids read-back' });
  // The sampled ids [B], fed back into the embedding lookup at every decode step, then the per-row seeds [B].
  const ids = device.createBuffer({
    size: B * (seeds ? 8 : 4),
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
    label: 'sampled ids and seeds',
  });
  if (seeds) {
    const rowSeeds = new Uint32Array(B);
    layout.rows.forEach((row, i) => (rowSeeds[row] = seeds[i]));
    device.queue.writeBuffer(ids, B * 4, rowSeeds);
  }
  // sampling.wgsl's Params, as OpBuilder.sample writes them, with rowSeeds set for one seed per prompt.
  const samplerParams = uniformBuffer(device, [
    B, V, sampling.greedy ? 1 : 0, sampling.topK, { f32: sampling.topP }, { f32: 1 / sampling.temperature }, seeds ? 0 : (sampling.seed as number) >>> 0, seeds ? 1 : 0,
  ], 'sample');
  const readback: Readback = { ids, logprobs: state.sampledLogprobs, staging, B };
  try {
    const sampler = state.ops.kernels.dispatch('sample', [samplerParams, state.cursor, state.logits, ids, state.sampledLogprobs], [B, 1, 1]);
    const head = (T: number) => withSampler(state.samplingHead(T, { ...sampling, seed: 0 }), sampler);
    const started = performance.now();
    layout.prefill(head, (dispatches) => submit(model, dispatches, readback));

    const tokens: number[][] = layout.rows.map(() => []);
    const logprobs: number[][] = layout.rows.map(() => []);
    const finished = new Array<boolean>(requests).fill(false);
    const readStep = async () => {
      await staging.mapAsync(GPUMapMode.READ);
      const bytes = staging.getMappedRange().slice(0);
      staging.unmap();
      const sampled = new Uint32Array(bytes, 0, B);
      const lps = new Float32Array(bytes, B * 4, B);
      layout.rows.forEach((row, i) => {
        if (finished[i]) return;
        tokens[i].push(sampled[row]);
        logprobs[i].push(lps[row]);
        if (stop.has(sampled[row])) finished[i] = true;
      });
      options.onStep?.(tokens);
    };
    await readStep();
    const prefillMs = performance.now() - started;

    const decodePlan = [...state.body(1, ids), ...head(1)];
    const decodeStarted = performance.now();
    let step = 1;
    for (; step < maxNewTokens && finished.includes(false); step++) {
      // The token sampled at step-1 goes to slot slot0 + step - 1; its position continues its own prompt.
      // Finished rows are computed on (their tokens dropped), so `step` is every row's token index.
      state.write(state.positions, Uint32Array.from(layout.firstPositions, (first) => first + step - 1));
      state.setCursor(layout.slot0 + step - 1, step);
      submit(model, decodePlan, readback);
      await readStep();
    }
    return {
      tokens,
      logprobs,
      stats: {
        prefillMs,
        decodeMs: performance.now() - decodeStarted,
        decodeSteps: step - 1,
        dispatchesPerDecodeStep: decodePlan.length,
        readbacksPerDecodeStep: 1,
      },
    };
  } finally {
    staging.destroy();
    ids.destroy();
    samplerParams.destroy();
  }
}

export async function generate(model: GpuModel, prompts: number[][], options: GenerateOptions): Promise<GenerateResult> {
  validatePrompts(model, prompts, options.maxNewTokens);
  const B = prompts.length;
  const padded = padLeft(prompts, 0);
  const P = padded.length;
  const maxRows = Math.max(B, Math.min(B * P, maxRowsPerStep(model)));
  const chunk = Math.max(1, Math.floor(maxRows / B));
  const state = new ForwardState(model, { B, S: P + options.maxNewTokens, maskLen: P, maxRows, adapter: options.adapter ?? null });
  try {
    return await decodeAfterPrompts(model, state, {
      rows: prompts.map((_, b) => b),
      slot0: P,
      firstPositions: prompts.map((prompt) => prompt.length),
      // The prompts, in chunks of `chunk` tokens per sequence; the last chunk samples the first new token.
      prefill: (head, submitLast) => {
        const positions = positionsFromMask(padded.mask);
        state.write(state.keyMask, Uint32Array.from(padded.mask.flat()));
        const plans = new Map<string, Dispatch[]>();
        for (let t0 = 0; t0 < P; t0 += chunk) {
          const T = Math.min(chunk, P - t0);
          const last = t0 + T === P;
          const key = `${T}:${last}`;
          if (!plans.has(key)) plans.set(key, [...state.body(T, state.ids), ...(last ? head(T) : [])]);
          const rows = (table: number[][]) => Uint32Array.from(table.flatMap((row) => row.slice(t0, t0 + T)));
          state.write(state.ids, rows(padded.ids));
          state.write(state.positions, rows(positions));
          if (last) state.write(state.lastRows, Uint32Array.from({ length: B }, (_, b) => b * T + T - 1));
          state.setCursor(t0, 0);
          if (last) submitLast(plans.get(key)!);
          else submit(model, plans.get(key)!);
        }
      },
    }, options);
  } finally {
    state.dispose();
  }
}
