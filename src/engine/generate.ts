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

export async function generate(model: GpuModel, prompts: number[][], options: GenerateOptions): Promise<GenerateResult> {
  const { maxNewTokens } = options;
  if (!Number.isInteger(maxNewTokens) || maxNewTokens < 1) throw new RangeError(`max new tokens must be a whole number >= 1, got ${maxNewTokens}`);
  const sampling = resolveSampling(options.sampling);
  const { vocabSize: V } = model.config;
  for (const [b, prompt] of prompts.entries()) {
    if (prompt.length === 0) throw new RangeError(`prompt ${b} is empty: start it with the BOS token`);
    const bad = prompt.find((id) => !Number.isInteger(id) || id < 0 || id >= V);
    if (bad !== undefined) throw new RangeError(`prompt ${b} holds token id ${bad}, outside the vocabulary [0, ${V})`);
    if (prompt.length + maxNewTokens > model.ropePositions) {
      throw new RangeError(`prompt ${b} (${prompt.length} tokens) plus ${maxNewTokens} new tokens exceeds the model's ${model.ropePositions} positions`);
    }
  }
  const stop = new Set(options.stopTokenIds ?? []);
  const B = prompts.length;
  const seeds = Array.isArray(sampling.seed) ? sampling.seed : null;
  if (seeds && seeds.length !== B) throw new RangeError(`sampling.seed holds ${seeds.length} seeds for ${B} prompts: give one seed per prompt, or a single number`);
  const padded = padLeft(prompts, 0);
  const P = padded.length;
  const maxRows = Math.max(B, Math.min(B * P, maxRowsPerStep(model)));
  const chunk = Math.max(1, Math.floor(maxRows / B));
  const state = new ForwardState(model, { B, S: P + maxNewTokens, maskLen: P, maxRows, adapter: options.adapter ?? null });
  const device = model.gpu.device;
  // One staging buffer for the whole generation: the decode loop allocates nothing.
  const staging = device.createBuffer({ size: B * 8, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST, label: 'sampled ids read-back' });
  // The sampled ids [B], fed back into the embedding lookup at every decode step, then the per-prompt seeds [B].
  const ids = device.createBuffer({
    size: B * (seeds ? 8 : 4),
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
    label: 'sampled ids and seeds',
  });
  if (seeds) device.queue.writeBuffer(ids, B * 4, Uint32Array.from(seeds));
  // sampling.wgsl's Params, as OpBuilder.sample writes them, with rowSeeds set for one seed per prompt.
  const samplerParams = uniformBuffer(device, [
    B, V, sampling.greedy ? 1 : 0, sampling.topK, { f32: sampling.topP }, { f32: 1 / sampling.temperature }, seeds ? 0 : (sampling.seed as number) >>> 0, seeds ? 1 : 0,
  ], 'sample');
  const readback: Readback = { ids, logprobs: state.sampledLogprobs, staging, B };
  try {
    const sampler = state.ops.kernels.dispatch('sample', [samplerParams, state.cursor, state.logits, ids, state.sampledLogprobs], [B, 1, 1]);
    const head = (T: number) => withSampler(state.samplingHead(T, { ...sampling, seed: 0 }), sampler);
    const positions = positionsFromMask(padded.mask);
    state.write(state.keyMask, Uint32Array.from(padded.mask.flat()));

    // Prompt, in chunks of `chunk` tokens per sequence; the last chunk samples the first new token.
    const started = performance.now();
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
      submit(model, plans.get(key)!, last ? readback : undefined);
    }

    const tokens: number[][] = prompts.map(() => []);
    const logprobs: number[][] = prompts.map(() => []);
    const finished = new Array<boolean>(B).fill(false);
    const readStep = async () => {
      await staging.mapAsync(GPUMapMode.READ);
      const bytes = staging.getMappedRange().slice(0);
      staging.unmap();
      const sampled = new Uint32Array(bytes, 0, B);
      const lps = new Float32Array(bytes, B * 4, B);
      for (let b = 0; b < B; b++) {
        if (finished[b]) continue;
        tokens[b].push(sampled[b]);
        logprobs[b].push(lps[b]);
        if (stop.has(sampled[b])) finished[b] = true;
      }
      options.onStep?.(tokens);
    };
    await readStep();
    const prefillMs = performance.now() - started;

    const decodePlan = [...state.body(1, ids), ...head(1)];
    const decodeStarted = performance.now();
    let step = 1;
    for (; step < maxNewTokens && finished.includes(false); step++) {
      // The token sampled at step-1 sits at slot P + step - 1; its position continues its own prompt.
      // Finished rows are computed on (their tokens dropped), so `step` is every row's token index.
      state.write(state.positions, Uint32Array.from(prompts, (prompt) => prompt.length + step - 1));
      state.setCursor(P + step - 1, step);
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
    state.dispose();
    staging.destroy();
    ids.destroy();
    samplerParams.destroy();
  }
}
