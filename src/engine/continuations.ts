// Scoring several continuations of one prompt: the log-probability of every token of each
// candidate, as action-level policies need (a softmax over the valid actions' summed or
// length-normalised log-probs). The prompt runs once; its KV cache is then copied to one cache row
// per candidate, and all candidates run as one batch from there, each starting at the prompt's end.
//
//   log p(c_a[0] | prompt)        from the prompt's last hidden state, repeated for every candidate
//   log p(c_a[t] | prompt, c_a[<t]) from the candidate batch, row (a, t - 1)
import { readBuffers, storageBuffer, storageFrom } from './gpu/buffers.ts';
import { encodeDispatches, type Dispatch } from './gpu/kernels.ts';
import type { GpuMatrix } from './gpu/matrix.ts';
import type { GpuModel } from './gpu-model.ts';
import { ForwardState, maxRowsPerStep } from './forward.ts';
import { LogprobHead } from './lm-head.ts';
import type { GpuLoraAdapter } from './lora/gpu-adapter.ts';

export interface ContinuationScores {
  /** tokenLogprobs[a][t] = log p(continuations[a][t] | prompt, continuations[a][<t]). */
  tokenLogprobs: number[][];
  /** The sum over each continuation's tokens. */
  sums: number[];
}

function submit(model: GpuModel, dispatches: Dispatch[]): void {
  const encoder = model.gpu.device.createCommandEncoder();
  encodeDispatches(encoder, dispatches);
  model.gpu.device.queue.submit([encoder.finish()]);
}

/** A cache as a one-row matrix (all of a sequence's heads and slots), for gather_rows to copy. */
function asRow(cache: GPUBuffer, floats: number): GpuMatrix {
  return { rows: 1, cols: floats, chunks: [{ buffer: cache, rowStart: 0, rows: 1 }] };
}

export async function scoreContinuations(
  model: GpuModel,
  prompt: number[],
  continuations: number[][],
  options: { adapter?: GpuLoraAdapter | null } = {},
): Promise<ContinuationScores> {
  const { vocabSize: V, numKvHeads: Hk, headDim: D } = model.config;
  const inVocabulary = (id: number) => Number.isInteger(id) && id >= 0 && id < V;
  if (prompt.length === 0 || !prompt.every(inVocabulary)) throw new RangeError(`the prompt must be non-empty token ids in [0, ${V})`);
  if (continuations.length === 0) throw new RangeError('there is nothing to score: no continuations');
  continuations.forEach((c, a) => {
    if (c.length === 0 || !c.every(inVocabulary)) throw new RangeError(`continuation ${a} must be non-empty token ids in [0, ${V})`);
  });
  const A = continuations.length;
  const P = prompt.length;
  const L = Math.max(...continuations.map((c) => c.length));
  const S = P + L;
  if (S > model.ropePositions) throw new RangeError(`prompt (${P}) plus the longest continuation (${L}) exceed the model's ${model.ropePositions} positions`);
  const adapter = options.adapter ?? null;
  const device = model.gpu.device;

  // 1. The prompt, alone, in chunks; then its last hidden state copied to A rows and scored against
  //    each continuation's first token.
  const promptRows = Math.max(1, Math.min(P, maxRowsPerStep(model)));
  const prefix = new ForwardState(model, { B: 1, S, maskLen: P, maxRows: promptRows, adapter });
  const batch = new ForwardState(model, { B: A, S, maskLen: P, maxRows: A * L, adapter });
  const head = new LogprobHead(model, Math.max(A * L, A));
  try {
    prefix.write(prefix.keyMask, new Uint32Array(P).fill(1));
    const plans = new Map<number, Dispatch[]>();
    for (let t0 = 0; t0 < P; t0 += promptRows) {
      const T = Math.min(promptRows, P - t0);
      if (!plans.has(T)) plans.set(T, prefix.body(T, prefix.ids));
      prefix.write(prefix.ids, Uint32Array.from(prompt.slice(t0, t0 + T)));
      prefix.write(prefix.positions, Uint32Array.from({ length: T }, (_, t) => t0 + t));
      prefix.setCursor(t0, 0);
      submit(model, plans.get(T)!);
    }
    const lastT = P - Math.floor((P - 1) / promptRows) * promptRows; // rows in the last prompt chunk
    const C = model.config.hiddenSize;
    const cacheFloats = Hk * S * D;
    // Row lists for gather_rows: the prompt's cache row 0 for every candidate, and its last token's row.
    batch.write(batch.lastRows, new Uint32Array(A));
    const lastRow = storageFrom(device, new Uint32Array(A).fill(lastT - 1), 'last prompt row');
    const residual: GpuMatrix = { rows: lastT, cols: C, chunks: [{ buffer: prefix.x, rowStart: 0, rows: lastT }] };
    const ops = batch.ops;
    const firstTokens = Int32Array.from(continuations, (c) => c[0]);
    prefix.write(head.targets, firstTokens);
    const firstLogprobs = storageBuffer(device, A * 4, 'first-token log-probs');
    const encoder = device.createCommandEncoder();
    encodeDispatches(encoder, [
      ...model.layers.flatMap((_, l) => [
        ...ops.gatherRows(asRow(prefix.kCache[l], cacheFloats), batch.lastRows, batch.kCache[l], A),
        ...ops.gatherRows(asRow(prefix.vCache[l], cacheFloats), batch.lastRows, batch.vCache[l], A),
      ]),
      ...ops.gatherRows(residual, lastRow, batch.x, A),
      ops.rmsnorm(batch.x, model.finalNorm, batch.h, A, C, model.config.rmsNormEps),
      ...head.dispatches(ops, batch.h, A),
    ]);
    // Kept aside, so that both phases come back in one read-back.
    encoder.copyBufferToBuffer(head.logprob, 0, firstLogprobs, 0, A * 4);
    device.queue.submit([encoder.finish()]);

    // 2. All continuations as one batch from slot P on, right-padded; row (a, t) predicts c_a[t + 1].
    const ids = new Uint32Array(A * L);
    const targets = new Int32Array(A * L).fill(-1);
    continuations.forEach((c, a) => {
      c.forEach((id, t) => {
        ids[a * L + t] = id;
        if (t + 1 < c.length) targets[a * L + t] = c[t + 1];
      });
    });
    batch.write(batch.keyMask, new Uint32Array(A * P).fill(1));
    batch.write(batch.ids, ids);
    batch.write(batch.positions, Uint32Array.from({ length: A * L }, (_, r) => P + (r % L)));
    batch.write(head.targets, targets);
    batch.setCursor(P, 0);
    submit(model, [...batch.body(L, batch.ids), batch.finalNorm(L), ...head.dispatches(ops, batch.h, A * L)]);
    const bytes = await readBuffers(device, [
      { buffer: firstLogprobs, bytes: A * 4 },
      { buffer: head.logprob, bytes: A * L * 4 },
    ]);
    firstLogprobs.destroy();
    lastRow.destroy();
    const first = new Float32Array(bytes, 0, A);
    const rest = new Float32Array(bytes, A * 4, A * L);

    const tokenLogprobs = continuations.map((c, a) => c.map((_, t) => (t === 0 ? first[a] : rest[a * L + t - 1])));
    return { tokenLogprobs, sums: tokenLogprobs.map((lps) => lps.reduce((s, lp) => s + lp, 0)) };
  } finally {
    prefix.dispose();
    batch.dispose();
    head.dispose();
  }
}
