// Scoring the continuations of many prompts at once: the log-probability of every token of each
// candidate, as action-level policies need (a softmax over the valid actions' summed or
// length-normalised log-probs), for a batch of environment states stepped side by side.
//
// All prompts run once, as one left-padded batch; each candidate's cache row then receives a copy
// of its own prompt's KV cache, and all candidates of all prompts run as one right-padded batch
// from the padded prompt's end, each at the positions and under the key mask of its own prompt.
// The candidate half (scoreGroupCandidates) takes its prompts from any PromptSource: here a fresh
// prefill, in src/engine/prompt-cache.ts caches that episodes keep from one step to the next.
//
//   log p(c_a[0] | prompt)          from the prompt's last hidden state, one row per candidate
//   log p(c_a[t] | prompt, c_a[<t]) from the candidate batch, row (a, t - 1)
//
// When the prompts or the candidates outgrow one batch (the KV cache of one layer must fit one
// binding, rows per forward step are bounded by maxRowsPerStep, and the caches of all layers by a
// memory budget), they are split into groups of consecutive candidates, run one after another;
// results of every group are copied into shared output buffers, so the whole call still ends in
// one read-back.
import { readBuffers, storageBuffer } from './gpu/buffers.ts';
import { encodeDispatches, type Dispatch } from './gpu/kernels.ts';
import { wholeMatrix, type GpuMatrix } from './gpu/matrix.ts';
import type { GpuModel } from './gpu-model.ts';
import { ForwardState, maxRowsPerStep } from './forward.ts';
import { LogprobHead } from './lm-head.ts';
import type { OpBuilder } from './ops.ts';
import type { GpuLoraAdapter } from './lora/gpu-adapter.ts';
import { padLeft, positionsFromMask } from './padding.ts';

export interface ContinuationRequest {
  /** Token ids of the prompt (non-empty: start it with the BOS token). */
  prompt: number[];
  /** The candidate continuations of this prompt, each non-empty. */
  continuations: number[][];
}

export interface ContinuationScores {
  /** tokenLogprobs[a][t] = log p(continuations[a][t] | prompt, continuations[a][<t]). */
  tokenLogprobs: number[][];
  /** The sum over each continuation's tokens. */
  sums: number[];
  /**
   * With options.hidden: the final hidden state (after the final RMSNorm, the `h` a value head
   * reads, as score()'s hiddenAt returns) at the prompt's last token.
   */
  promptHidden?: Float32Array;
  /** With options.hidden: the final hidden state at each continuation's last token. */
  continuationHidden?: Float32Array[];
}

export interface ContinuationOptions {
  /** Score with this LoRA adapter applied (default: the base model). */
  adapter?: GpuLoraAdapter | null;
  /** Also return the final hidden states at each prompt's and each continuation's last token. */
  hidden?: boolean;
}

/** Most bytes the KV caches of one group (prompt and candidate rows, all layers, keys and values) may take. */
export const KV_CACHE_BUDGET_BYTES = 1024 * 2 ** 20;

/** Candidates first .. first+count-1 of request `request`. */
export interface Part {
  request: number;
  first: number;
  count: number;
}

/** Consecutive candidates (in request order) that run as one batch, and their global numbers. */
export interface Group {
  parts: Part[];
  /** Global index of the group's first candidate. */
  firstCandidate: number;
  /** Floats the group writes into the continuation log-prob output, and where they start. */
  restBase: number;
}

/** What a finished group leaves for decoding its rows of the continuation log-prob output. */
export interface GroupLayout {
  restBase: number;
  /** Candidates, the longest continuation and tokens per candidate per forward step. */
  A: number;
  L: number;
  chunk: number;
}

export function validate(model: GpuModel, requests: ContinuationRequest[]): void {
  const V = model.config.vocabSize;
  const inVocabulary = (id: number) => Number.isInteger(id) && id >= 0 && id < V;
  if (requests.length === 0) throw new RangeError('there is nothing to score: no requests; pass at least one { prompt, continuations }');
  requests.forEach(({ prompt, continuations }, i) => {
    if (prompt.length === 0 || !prompt.every(inVocabulary)) throw new RangeError(`request ${i}: the prompt must be non-empty token ids in [0, ${V}) (start it with the BOS token)`);
    if (continuations.length === 0) throw new RangeError(`request ${i}: there is nothing to score: no continuations; give it at least one`);
    continuations.forEach((c, a) => {
      if (c.length === 0 || !c.every(inVocabulary)) throw new RangeError(`request ${i}: continuation ${a} must be non-empty token ids in [0, ${V})`);
    });
    const P = prompt.length;
    const L = Math.max(...continuations.map((c) => c.length));
    if (P + L > model.ropePositions) {
      throw new RangeError(`request ${i}: prompt (${P}) plus the longest continuation (${L}) exceed the model's ${model.ropePositions} positions; shorten the prompt or the continuations`);
    }
    const cacheBytes = cacheRowBytes(model, P + L);
    if (cacheBytes > model.gpu.maxBindingBytes) {
      throw new RangeError(
        `request ${i}: the KV cache of one layer for its prompt (${P}) plus the longest continuation (${L}) needs ${cacheBytes} bytes, ` +
          `more than this GPU binds at once (${model.gpu.maxBindingBytes}); shorten the prompt or the continuations`,
      );
    }
  });
}

/** Bytes of one layer's key (or value) cache for one sequence of S slots. */
export function cacheRowBytes(model: GpuModel, S: number): number {
  const { numKvHeads: Hk, headDim: D } = model.config;
  return Hk * S * D * 4;
}

/** KV caches in [rows, Hk, S, D] layout, one key and one value buffer per layer. */
export interface KvCaches {
  kCache: GPUBuffer[];
  vCache: GPUBuffer[];
  rows: number;
  /** Slots per row. */
  S: number;
}

/**
 * The dispatches that copy the slots [0, P) of `source`'s rows `from` into rows 0, 1, ... of `into`, one
 * kv head at a time, so that the two may have different slots per row. `rowList` is a fresh buffer the
 * dispatches read; the caller frees it once they have run.
 */
export function copyCacheSlots(model: GpuModel, ops: OpBuilder, source: KvCaches, from: number[], into: KvCaches, P: number): { dispatches: Dispatch[]; rowList: GPUBuffer } {
  const { numKvHeads: Hk, headDim: D } = model.config;
  if (P > into.S) throw new RangeError(`copying ${P} cache slots into rows of ${into.S}`);
  const rowList = storageBuffer(model.gpu.device, from.length * Hk * 4, 'cache rows to copy, per kv head');
  model.gpu.device.queue.writeBuffer(rowList, 0, Uint32Array.from(from.flatMap((row) => Array.from({ length: Hk }, (_, h) => row * Hk + h))));
  const heads = (buffer: GPUBuffer) => wholeMatrix(buffer, source.rows * Hk, source.S * D);
  const slots = { columns: P * D, outStride: into.S * D };
  const dispatches = model.layers.flatMap((_, l) => [
    ...ops.gatherRows(heads(source.kCache[l]), rowList, into.kCache[l], from.length * Hk, slots),
    ...ops.gatherRows(heads(source.vCache[l]), rowList, into.vCache[l], from.length * Hk, slots),
  ]);
  return { dispatches, rowList };
}

/** Whether a group of `prompts` prompts (padded to P tokens) and A candidates (the longest L tokens) fits one batch. */
export type GroupFits = (prompts: number, P: number, A: number, L: number) => boolean;

/**
 * Fits for prompts and candidates that run together: the prompt batch and the candidate batch each
 * within maxRowsPerStep sequences and the binding limit for one layer's cache, and both caches
 * together within the memory budget.
 */
function promptsAndCandidatesFit(model: GpuModel): GroupFits {
  const maxRows = maxRowsPerStep(model);
  const layers = model.config.numLayers;
  return (prompts, P, A, L) => {
    const row = cacheRowBytes(model, P + L);
    return prompts <= maxRows && A <= maxRows && Math.max(prompts, A) * row <= model.gpu.maxBindingBytes && (prompts + A) * row * 2 * layers <= KV_CACHE_BUDGET_BYTES;
  };
}

/**
 * Splits the candidates, in order, into groups that each fit one batch (`fits`). A group of one
 * candidate always runs (validate has checked that its cache fits a binding).
 */
export function planGroups(requests: ContinuationRequest[], fits: GroupFits): { groups: Group[]; restFloats: number } {
  const groups: Group[] = [];
  let current: Group | null = null;
  let P = 0;
  let L = 0;
  let A = 0;
  let candidate = 0;
  let restBase = 0;
  const close = () => {
    if (current) restBase += A * L;
  };
  requests.forEach(({ prompt, continuations }, i) => {
    continuations.forEach((c, a) => {
      const part = current?.parts.at(-1);
      const samePrompt = part?.request === i;
      const prompts = (current?.parts.length ?? 0) + (samePrompt ? 0 : 1);
      if (current && fits(prompts, Math.max(P, prompt.length), A + 1, Math.max(L, c.length))) {
        if (samePrompt) part!.count++;
        else current.parts.push({ request: i, first: a, count: 1 });
        P = Math.max(P, prompt.length);
        L = Math.max(L, c.length);
        A++;
      } else {
        close();
        current = { parts: [{ request: i, first: a, count: 1 }], firstCandidate: candidate, restBase };
        groups.push(current);
        P = prompt.length;
        L = c.length;
        A = 1;
      }
      candidate++;
    });
  });
  close();
  return { groups, restFloats: restBase };
}

/**
 * Where a group's candidates find their prompts: KV caches [rows, Hk, S, D] holding each prompt in a row
 * (its tokens at the real slots of [0, P), under `mask`), and each prompt's last residual. The
 * candidates' own caches get the slots [0, P) and continue from slot P.
 */
export interface PromptSource {
  kCache: GPUBuffer[];
  vCache: GPUBuffer[];
  /** Rows of the caches. */
  rows: number;
  /** Slots per cache row (at least P). */
  S: number;
  /** Slots holding the prompts: candidates are fed from here. */
  P: number;
  /** The key mask of a row's slots [0, P). */
  mask(row: number): number[];
  /** Real tokens of a row's prompt (the position of its candidates' first tokens). */
  length(row: number): number;
  /** Residual rows, and which of them holds a prompt row's last token. */
  residual: GpuMatrix;
  residualRow(row: number): number;
}

/** A candidate of a group: its tokens, its prompt's row in the PromptSource, and where it came from. */
export interface GroupCandidate {
  tokens: number[];
  row: number;
  part: Part;
  /** Its index among its request's continuations. */
  a: number;
}

/** The group's candidates in order, each with its prompt's row in the source (`rowOf` a part). */
export function groupCandidates(requests: ContinuationRequest[], group: Group, rowOf: (part: Part, index: number) => number): GroupCandidate[] {
  return group.parts.flatMap((part, b) =>
    requests[part.request].continuations.slice(part.first, part.first + part.count).map((tokens, k) => ({ tokens, row: rowOf(part, b), part, a: part.first + k })),
  );
}

/** The group's prompts as one left-padded batch (rows in part order), in chunks of up to maxRowsPerStep rows. */
function prefillGroupPrompts(model: GpuModel, requests: ContinuationRequest[], group: Group, adapter: GpuLoraAdapter | null, owned: { dispose(): void }[]): PromptSource {
  const prompts = group.parts.map((part) => requests[part.request].prompt);
  const Np = prompts.length;
  const padded = padLeft(prompts, 0);
  const P = padded.length;
  const promptRows = Math.max(Np, Math.min(Np * P, maxRowsPerStep(model)));
  const chunk = Math.max(1, Math.floor(promptRows / Np));
  const prefix = new ForwardState(model, { B: Np, S: P, maskLen: P, maxRows: promptRows, adapter });
  owned.push(prefix);
  const positions = positionsFromMask(padded.mask);
  prefix.write(prefix.keyMask, Uint32Array.from(padded.mask.flat()));
  const plans = new Map<number, Dispatch[]>();
  let lastT = 0;
  for (let t0 = 0; t0 < P; t0 += chunk) {
    const T = Math.min(chunk, P - t0);
    if (!plans.has(T)) plans.set(T, prefix.body(T, prefix.ids));
    const rows = (table: number[][]) => Uint32Array.from(table.flatMap((row) => row.slice(t0, t0 + T)));
    prefix.write(prefix.ids, rows(padded.ids));
    prefix.write(prefix.positions, rows(positions));
    prefix.setCursor(t0, 0);
    submit(model, plans.get(T)!);
    lastT = T;
  }
  // Left padding puts every prompt's last token in the last column: the last row of its rows in the last chunk.
  return {
    kCache: prefix.kCache,
    vCache: prefix.vCache,
    rows: Np,
    S: P,
    P,
    mask: (row) => padded.mask[row],
    length: (row) => prompts[row].length,
    residual: wholeMatrix(prefix.x, Np * lastT, model.config.hiddenSize),
    residualRow: (row) => row * lastT + lastT - 1,
  };
}

/** Scores one group's candidates after their prompts in `source`, copying the results into the shared output buffers. */
export async function scoreGroupCandidates(
  model: GpuModel,
  source: PromptSource,
  candidates: GroupCandidate[],
  group: Group,
  out: GroupOutputs,
  adapter: GpuLoraAdapter | null,
  owned: { dispose(): void }[],
): Promise<GroupLayout> {
  const device = model.gpu.device;
  const { hiddenSize: C, rmsNormEps: eps } = model.config;
  const A = candidates.length;
  const L = Math.max(...candidates.map((c) => c.tokens.length));
  const { P } = source;
  const S = P + L;
  const rowsPerStep = maxRowsPerStep(model);
  // The candidate batch: `candChunk` tokens of every candidate per forward step.
  const candChunk = Math.max(1, Math.min(L, Math.floor(rowsPerStep / A)));
  const batch = new ForwardState(model, { B: A, S, maskLen: P, maxRows: A * candChunk, adapter });
  owned.push(batch);
  const head = new LogprobHead(model, A * candChunk);
  owned.push(head);
  const lastRow = storageBuffer(device, A * 4, 'last prompt rows');
  owned.push({ dispose: () => lastRow.destroy() });

  // 1. Each candidate's cache gets its prompt's slots [0, P) (the source's rows may have room for more
  //    slots than the candidates'); its first row the prompt's last residual, whose normed state scores
  //    the candidate's first token.
  const ops = batch.ops;
  const prompts = copyCacheSlots(model, ops, source, candidates.map((c) => c.row), { kCache: batch.kCache, vCache: batch.vCache, rows: A, S }, P);
  owned.push({ dispose: () => prompts.rowList.destroy() });
  batch.write(lastRow, Uint32Array.from(candidates, (c) => source.residualRow(c.row)));
  batch.write(head.targets, Int32Array.from(candidates, (c) => c.tokens[0]));
  const encoder = device.createCommandEncoder();
  encodeDispatches(encoder, [
    ...prompts.dispatches,
    ...ops.gatherRows(source.residual, lastRow, batch.x, A),
    ops.rmsnorm(batch.x, model.finalNorm, batch.h, A, C, eps),
    ...head.dispatches(ops, batch.h, A),
  ]);
  encoder.copyBufferToBuffer(head.logprob, 0, out.first, group.firstCandidate * 4, A * 4);
  if (out.promptHidden) {
    candidates.forEach((c, a) => {
      if (c.a === 0) encoder.copyBufferToBuffer(batch.h, a * C * 4, out.promptHidden!, c.part.request * C * 4, C * 4);
    });
  }
  device.queue.submit([encoder.finish()]);

  // 2. All candidates from slot P on, right-padded, `candChunk` tokens each per step; row (a, t) of a
  //    step starting at t0 predicts c_a[t0 + t + 1], at position len(prompt) + t0 + t.
  batch.write(batch.keyMask, Uint32Array.from(candidates.flatMap((c) => source.mask(c.row))));
  const candidatePlans = new Map<number, Dispatch[]>();
  for (let t0 = 0; t0 < L; t0 += candChunk) {
    const T = Math.min(candChunk, L - t0);
    const R = A * T;
    if (!candidatePlans.has(T)) candidatePlans.set(T, [...batch.body(T, batch.ids), batch.finalNorm(T), ...head.dispatches(ops, batch.h, R)]);
    const ids = new Uint32Array(R);
    const targets = new Int32Array(R).fill(-1);
    const rowPositions = new Uint32Array(R);
    candidates.forEach((c, a) => {
      for (let t = 0; t < T; t++) {
        const at = t0 + t;
        ids[a * T + t] = c.tokens[at] ?? 0;
        if (at + 1 < c.tokens.length) targets[a * T + t] = c.tokens[at + 1];
        rowPositions[a * T + t] = source.length(c.row) + at;
      }
    });
    batch.write(batch.ids, ids);
    batch.write(batch.positions, rowPositions);
    batch.write(head.targets, targets);
    batch.setCursor(P + t0, 0);
    const stepEncoder = device.createCommandEncoder();
    encodeDispatches(stepEncoder, candidatePlans.get(T)!);
    stepEncoder.copyBufferToBuffer(head.logprob, 0, out.rest, (group.restBase + A * t0) * 4, R * 4);
    if (out.candidateHidden) {
      candidates.forEach((c, a) => {
        const t = c.tokens.length - 1 - t0;
        if (t >= 0 && t < T) stepEncoder.copyBufferToBuffer(batch.h, (a * T + t) * C * 4, out.candidateHidden!, (group.firstCandidate + a) * C * 4, C * 4);
      });
    }
    device.queue.submit([stepEncoder.finish()]);
  }
  return { restBase: group.restBase, A, L, chunk: candChunk };
}

function submit(model: GpuModel, dispatches: Dispatch[]): void {
  const encoder = model.gpu.device.createCommandEncoder();
  encodeDispatches(encoder, dispatches);
  model.gpu.device.queue.submit([encoder.finish()]);
}

/** A string that two requests share exactly when their prompts and continuations are the same tokens. */
export function requestKey({ prompt, continuations }: ContinuationRequest): string {
  return `${prompt.join(',')}|${continuations.map((c) => c.join(',')).join(';')}`;
}

/**
 * The distinct requests, and for each request the index of its distinct twin. Identical requests are
 * common: GRPO's group members share their reset seed, so they start from the same state, and keep
 * sharing it while they choose alike.
 */
export function distinctRequests(requests: ContinuationRequest[]): { distinct: ContinuationRequest[]; of: number[] } {
  const seen = new Map<string, number>();
  const distinct: ContinuationRequest[] = [];
  const of = requests.map((request) => {
    const key = requestKey(request);
    let index = seen.get(key);
    if (index === undefined) {
      index = distinct.push(request) - 1;
      seen.set(key, index);
    }
    return index;
  });
  return { distinct, of };
}

/** The shared output buffers that every group of a call writes its results into. */
export interface GroupOutputs {
  first: GPUBuffer;
  rest: GPUBuffer;
  promptHidden: GPUBuffer | null;
  candidateHidden: GPUBuffer | null;
}

/**
 * Log-probabilities of each request's continuations after its prompt, all requests in one batched
 * forward (split into groups only where one batch would not fit) and one read-back. Identical
 * requests run once; each still gets its own copy of the result.
 */
export async function scoreContinuations(model: GpuModel, requests: ContinuationRequest[], options: ContinuationOptions = {}): Promise<ContinuationScores[]> {
  validate(model, requests);
  const { distinct, of } = distinctRequests(requests);
  if (distinct.length < requests.length) {
    const scores = await scoreContinuations(model, distinct, options);
    return of.map((i) => structuredClone(scores[i]));
  }
  const adapter = options.adapter ?? null;
  const plan = planGroups(requests, promptsAndCandidatesFit(model));
  return scoreGroups(model, requests, plan, options, (group, out, owned) => {
    const source = prefillGroupPrompts(model, requests, group, adapter, owned);
    return scoreGroupCandidates(model, source, groupCandidates(requests, group, (_, b) => b), group, out, adapter, owned);
  });
}

/**
 * Runs the planned groups one after another (`runGroup` scores a group's candidates into the shared
 * outputs), then reads every result back at once and sorts it by request and candidate.
 */
export async function scoreGroups(
  model: GpuModel,
  requests: ContinuationRequest[],
  { groups, restFloats }: { groups: Group[]; restFloats: number },
  options: { hidden?: boolean },
  runGroup: (group: Group, out: GroupOutputs, owned: { dispose(): void }[]) => Promise<GroupLayout>,
): Promise<ContinuationScores[]> {
  const device = model.gpu.device;
  const C = model.config.hiddenSize;
  const N = requests.reduce((n, r) => n + r.continuations.length, 0);
  const outputs: GPUBuffer[] = [];
  const output = (bytes: number, label: string) => {
    const buffer = storageBuffer(device, bytes, label);
    outputs.push(buffer);
    return buffer;
  };
  const out: GroupOutputs = {
    first: output(N * 4, 'first-token log-probs'),
    rest: output(restFloats * 4, 'continuation log-probs'),
    promptHidden: options.hidden ? output(requests.length * C * 4, 'prompt hidden states') : null,
    candidateHidden: options.hidden ? output(N * C * 4, 'continuation hidden states') : null,
  };
  const owned: { dispose(): void }[] = [];
  const disposeOwned = () => {
    for (const o of owned.splice(0)) o.dispose();
  };
  try {
    const layouts: GroupLayout[] = [];
    for (const [g, group] of groups.entries()) {
      layouts.push(await runGroup(group, out, owned));
      // Bounded memory: a group's buffers go before the next group allocates its own.
      if (g + 1 < groups.length) {
        await device.queue.onSubmittedWorkDone();
        disposeOwned();
      }
    }
    const bytes = await readBuffers(device, [
      { buffer: out.first, bytes: N * 4 },
      { buffer: out.rest, bytes: restFloats * 4 },
      ...(out.promptHidden ? [{ buffer: out.promptHidden, bytes: requests.length * C * 4 }] : []),
      ...(out.candidateHidden ? [{ buffer: out.candidateHidden, bytes: N * C * 4 }] : []),
    ]);
    const first = new Float32Array(bytes, 0, N);
    const rest = new Float32Array(bytes, N * 4, restFloats);
    const promptHiddenAt = (N + restFloats) * 4;
    const candidateHiddenAt = promptHiddenAt + requests.length * C * 4;
    const hiddenRow = (at: number, row: number) => new Float32Array(bytes.slice(at + row * C * 4, at + (row + 1) * C * 4));

    // Where each candidate's rows sit: its group, and its index within the group.
    const place: { layout: GroupLayout; a: number; global: number }[][] = requests.map((r) => new Array(r.continuations.length));
    groups.forEach((group, g) => {
      let a = 0;
      for (const part of group.parts) {
        for (let k = 0; k < part.count; k++, a++) place[part.request][part.first + k] = { layout: layouts[g], a, global: group.firstCandidate + a };
      }
    });
    const restIndex = ({ layout, a }: { layout: GroupLayout; a: number }, t: number) => {
      const t0 = Math.floor(t / layout.chunk) * layout.chunk;
      const T = Math.min(layout.chunk, layout.L - t0);
      return layout.restBase + layout.A * t0 + a * T + (t - t0);
    };
    return requests.map((request, i) => {
      const tokenLogprobs = request.continuations.map((c, a) => c.map((_, t) => (t === 0 ? first[place[i][a].global] : rest[restIndex(place[i][a], t - 1)])));
      return {
        tokenLogprobs,
        sums: tokenLogprobs.map((lps) => lps.reduce((s, lp) => s + lp, 0)),
        ...(options.hidden
          ? {
              promptHidden: hiddenRow(promptHiddenAt, i),
              continuationHidden: request.continuations.map((_, a) => hiddenRow(candidateHiddenAt, place[i][a].global)),
            }
          : {}),
      };
    });
  } finally {
    disposeOwned();
    for (const buffer of outputs) buffer.destroy();
  }
}
