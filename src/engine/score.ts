// Teacher-forced scoring of given token sequences: per-token log-probabilities and entropies,
// optionally the raw logits and the final hidden states. Sequences of different lengths are
// left-padded; the forward runs in chunks of tokens, and the LM head in chunks of rows, so that
// neither the activations nor a [rows, vocab] logits block outgrow one binding.
import { readBuffers } from './gpu/buffers.ts';
import { LogprobHead } from './lm-head.ts';
import { encodeDispatches, type Dispatch } from './gpu/kernels.ts';
import type { GpuModel } from './gpu-model.ts';
import type { GpuLoraAdapter } from './lora/gpu-adapter.ts';
import { ForwardState, maxRowsPerStep } from './forward.ts';
import { padLeft, positionsFromMask } from './padding.ts';

export interface ScoreOptions {
  /** Also return the raw logits after every position (large: vocab floats per token). */
  logits?: boolean;
  /** Score with this LoRA adapter applied (default: the base model). */
  adapter?: GpuLoraAdapter | null;
  /** Also return the final hidden states (after the last RMSNorm) at these positions of each sequence. */
  hiddenAt?: number[][];
}

export interface ScoreResult {
  /** tokenLogprobs[b][t] = log p(ids[t] | ids[<t]); null at t = 0. */
  tokenLogprobs: (number | null)[][];
  /** entropies[b][t] = entropy of the next-token distribution after position t. */
  entropies: number[][];
  /** logits[b][t] = the raw logits after position t (only with options.logits). */
  logits?: Float32Array[][];
  /** hidden[b][i] = final hidden state at hiddenAt[b][i] (only with options.hiddenAt). */
  hidden?: Float32Array[][];
}

export async function score(model: GpuModel, sequences: number[][], options: ScoreOptions = {}): Promise<ScoreResult> {
  const { vocabSize: V, hiddenSize: C } = model.config;
  const device = model.gpu.device;
  for (const [b, ids] of sequences.entries()) {
    const bad = ids.find((id) => !Number.isInteger(id) || id < 0 || id >= V);
    if (bad !== undefined) throw new RangeError(`sequence ${b} holds token id ${bad}, outside the vocabulary [0, ${V})`);
    if (ids.length > model.ropePositions) throw new RangeError(`sequence ${b} has ${ids.length} tokens, more than the model's ${model.ropePositions} positions`);
    options.hiddenAt?.[b]?.forEach((t) => {
      if (!(Number.isInteger(t) && t >= 0 && t < ids.length)) throw new RangeError(`hidden state position ${t} is outside sequence ${b} (length ${ids.length})`);
    });
  }
  const B = sequences.length;
  const padded = padLeft(sequences, 0);
  const P = padded.length;
  const maxRows = Math.max(B, Math.min(B * P, maxRowsPerStep(model)));
  const chunk = Math.max(1, Math.floor(maxRows / B));
  const state = new ForwardState(model, { B, S: P, maskLen: P, maxRows, adapter: options.adapter ?? null });
  const head = new LogprobHead(model, maxRows);
  const { logprob, entropy, targets } = head;
  const offset = (P: number, b: number) => P - sequences[b].length; // padding before sequence b

  const result: ScoreResult = {
    tokenLogprobs: sequences.map((ids) => ids.map(() => null)),
    entropies: sequences.map((ids) => ids.map(() => 0)),
    ...(options.logits ? { logits: sequences.map((ids) => ids.map(() => new Float32Array(0))) } : {}),
    ...(options.hiddenAt ? { hidden: sequences.map((_, b) => (options.hiddenAt![b] ?? []).map(() => new Float32Array(0))) } : {}),
  };
  try {
    const positions = positionsFromMask(padded.mask);
    state.write(state.keyMask, Uint32Array.from(padded.mask.flat()));
    const plans = new Map<number, Dispatch[]>();
    for (let t0 = 0; t0 < P; t0 += chunk) {
      const T = Math.min(chunk, P - t0);
      const R = B * T;
      if (!plans.has(T)) {
        // The logits block is reused by each row chunk: only one chunk per step when logits are wanted.
        if (options.logits && !head.holdsAllLogits(R)) throw new RangeError('returning logits needs fewer rows per step; score fewer or shorter sequences at once');
        plans.set(T, [...state.body(T, state.ids), state.finalNorm(T), ...head.dispatches(state.ops, state.h, R)]);
      }
      const rows = (table: number[][]) => table.flatMap((row) => row.slice(t0, t0 + T));
      state.write(state.ids, Uint32Array.from(rows(padded.ids)));
      state.write(state.positions, Uint32Array.from(rows(positions)));
      // Row (b, t) predicts the token at t + 1; the last position and padding have no target.
      const next = padded.ids.map((row, b) => row.slice(t0 + 1, t0 + T + 1).map((id, i) => (t0 + i + 1 < P && padded.mask[b][t0 + i + 1] ? id : -1)));
      state.write(targets, Int32Array.from(next.flatMap((row) => [...row, ...new Array<number>(T - row.length).fill(-1)])));
      state.setCursor(t0, 0);
      const encoder = device.createCommandEncoder();
      encodeDispatches(encoder, plans.get(T)!);
      device.queue.submit([encoder.finish()]);

      const wanted = (b: number) => (options.hiddenAt?.[b] ?? []).map((t, i) => ({ t: t + offset(P, b), i })).filter(({ t }) => t >= t0 && t < t0 + T);
      const hiddenParts = sequences.flatMap((_, b) => wanted(b).map(({ t, i }) => ({ b, i, row: b * T + (t - t0) })));
      const bytes = await readBuffers(device, [
        { buffer: logprob, bytes: R * 4 },
        { buffer: entropy, bytes: R * 4 },
        ...(options.logits ? [{ buffer: head.logits, bytes: R * V * 4 }] : []),
        ...hiddenParts.map(({ row }) => ({ buffer: state.h, offset: row * C * 4, bytes: C * 4 })),
      ]);
      const lp = new Float32Array(bytes, 0, R);
      const ent = new Float32Array(bytes, R * 4, R);
      const logitsAt = R * 8;
      for (let b = 0; b < B; b++) {
        for (let t = 0; t < T; t++) {
          const position = t0 + t - offset(P, b); // index within the unpadded sequence
          if (position < 0) continue;
          const r = b * T + t;
          result.entropies[b][position] = ent[r];
          if (position + 1 < sequences[b].length) result.tokenLogprobs[b][position + 1] = lp[r];
          if (result.logits) result.logits[b][position] = new Float32Array(bytes.slice(logitsAt + r * V * 4, logitsAt + (r + 1) * V * 4));
        }
      }
      const hiddenAt = logitsAt + (options.logits ? R * V * 4 : 0);
      hiddenParts.forEach(({ b, i }, k) => {
        result.hidden![b][i] = new Float32Array(bytes.slice(hiddenAt + k * C * 4, hiddenAt + (k + 1) * C * 4));
      });
    }
    return result;
  } finally {
    state.dispose();
    head.dispose();
  }
}
