// Scoring candidates after prompts that grow from one call to the next, as the transcripts of episodes
// played side by side do: each step's prompt is the last one with the chosen action and the next
// observation appended. scoreContinuations runs every prompt from its first token on every call, so an
// episode of n steps costs O(n²) prompt tokens; a PromptCache keeps each stream's KV cache between
// calls, feeds only the tokens that are new, and scores the candidates from there with the same
// kernels (src/engine/continuations.ts), to the same results.
//
// Layout: one ForwardState of `rows` streams × `capacity` cache slots. A call feeds the new tokens of
// every row together, at the slots [used, used + W), W the most new tokens of any row: each row's are
// left-padded, so that its last token sits in the last column, the padding masked out of attention,
// and their positions continue the row's own count. The candidates then run from slot `used`.
//
// The cache is built afresh, with rows for the call's streams only, when a stream is new or its prompt
// no longer extends what its row holds, when the adapter changed, when the slots would run out, or when
// feeding W tokens to every row would compute more token rows than building afresh (most of the streams
// have finished). A fresh cache has room for twice its longest prompt and candidate, so that the
// rebuilds of a growing transcript cost, all together, about as much as feeding it once. Streams with
// identical prompts (GRPO's group members at their first step) are fed once and copied, so is a long
// prefix that all prompts share (the environment's instructions), and streams with identical prompts
// and candidates have their candidates scored once.
//
// generate() writes text-mode actions the same way: after feeding the new tokens it samples each
// stream's action with generate()'s decode loop (src/engine/generate.ts), into the slots after
// `used`. A row keeps the tokens its decode steps fed, up to its stop token; the slots it decoded
// after that are masked out, and so are the decode slots of the rows that did not generate. The
// action's last token is never fed (nothing was sampled after it), so the next call feeds it with
// the observation; a row whose every token was fed and that gets nothing new is built afresh, as its
// kept residual belongs to its prompt.
import { cacheRowBytes, copyCacheSlots, distinctRequests, groupCandidates, KV_CACHE_BUDGET_BYTES, planGroups, scoreContinuations, scoreGroupCandidates, scoreGroups, validate, type ContinuationRequest, type ContinuationScores, type PromptSource } from './continuations.ts';
import { append, startsWith } from '../common/tokens.ts';
import { readBuffers, storageBuffer } from './gpu/buffers.ts';
import { encodeDispatches, type Dispatch } from './gpu/kernels.ts';
import { wholeMatrix } from './gpu/matrix.ts';
import type { GpuModel } from './gpu-model.ts';
import { ForwardState, maxRowsPerStep } from './forward.ts';
import { decodeAfterPrompts, generate, validatePrompts, type GenerateOptions, type GenerateResult } from './generate.ts';
import type { GpuLoraAdapter } from './lora/gpu-adapter.ts';
import { score } from './score.ts';

export interface StreamRequest extends ContinuationRequest {
  /** Which stream (e.g. episode) the prompt belongs to: a stream's next prompt extends its last. */
  stream: number;
}

/** What the cache has computed, for benchmarks and tests. */
export interface PromptCacheStats {
  /** Calls answered from the cache, and calls that built it afresh. */
  extended: number;
  rebuilt: number;
  /** Calls too big for one cache, scored without it (by scoreContinuations, or score for promptHidden). */
  uncached: number;
  /** Token rows of prompts fed through the model, padding included. */
  promptRows: number;
}

/** The streams' caches: a forward state and, per row, the tokens it holds and its slots' key mask. */
class Cache {
  readonly state: ForwardState;
  /** Normalisation input of each row's newest token [rows, C]: the first candidate token's predictor. */
  readonly lastResidual: GPUBuffer;
  readonly tokens: number[][];
  readonly mask: Uint32Array;
  /**
   * Rows whose newest tokens came from a generation's decode steps: lastResidual still holds their
   * prompt's last token, so they can only continue with new tokens to feed.
   */
  readonly staleResidual: boolean[];
  used = 0;
  private readonly plans = new Map<number, Dispatch[]>();

  constructor(
    readonly model: GpuModel,
    readonly rows: number,
    readonly capacity: number,
    adapter: GpuLoraAdapter | null,
    /** Token rows one forward step may feed at most (more are fed in chunks). */
    feedRows: number,
  ) {
    const maxRows = Math.max(rows, Math.min(maxRowsPerStep(model), feedRows));
    this.state = new ForwardState(model, { B: rows, S: capacity, maskLen: capacity, maxRows, adapter });
    this.lastResidual = storageBuffer(model.gpu.device, rows * model.config.hiddenSize * 4, 'last residual of each stream');
    this.tokens = Array.from({ length: rows }, () => []);
    this.mask = new Uint32Array(rows * capacity);
    this.staleResidual = new Array<boolean>(rows).fill(false);
  }

  /**
   * Feeds each row its new tokens (none for some), all at slots [used, used + W); returns the token rows
   * computed. Each row that gets tokens keeps its newest token's residual in lastResidual.
   */
  feed(newTokens: number[][]): number {
    const { model, state, rows, capacity } = this;
    const W = Math.max(...newTokens.map((t) => t.length));
    if (W === 0) return 0;
    if (this.used + W > capacity) throw new RangeError(`feeding ${W} tokens from slot ${this.used} overflows the ${capacity} cache slots`);
    const ids = new Uint32Array(rows * W);
    const positions = new Uint32Array(rows * W);
    newTokens.forEach((tokens, row) => {
      const pad = W - tokens.length;
      tokens.forEach((id, i) => {
        ids[row * W + pad + i] = id;
        positions[row * W + pad + i] = this.tokens[row].length + i;
        this.mask[row * capacity + this.used + pad + i] = 1;
      });
    });
    state.write(state.keyMask, this.mask);
    const chunk = Math.max(1, Math.floor(state.shape.maxRows / rows));
    let lastT = 0;
    for (let t0 = 0; t0 < W; t0 += chunk) {
      const T = Math.min(chunk, W - t0);
      if (!this.plans.has(T)) this.plans.set(T, state.body(T, state.ids));
      const columns = (table: Uint32Array) => {
        const out = new Uint32Array(rows * T);
        for (let row = 0; row < rows; row++) out.set(table.subarray(row * W + t0, row * W + t0 + T), row * T);
        return out;
      };
      state.write(state.ids, columns(ids));
      state.write(state.positions, columns(positions));
      state.setCursor(this.used + t0, 0);
      const encoder = model.gpu.device.createCommandEncoder();
      encodeDispatches(encoder, this.plans.get(T)!);
      model.gpu.device.queue.submit([encoder.finish()]);
      lastT = T;
    }
    // Left padding puts every row's newest token in the last column of the last chunk.
    const C = model.config.hiddenSize;
    const encoder = model.gpu.device.createCommandEncoder();
    newTokens.forEach((tokens, row) => {
      if (tokens.length > 0) encoder.copyBufferToBuffer(state.x, (row * lastT + lastT - 1) * C * 4, this.lastResidual, row * C * 4, C * 4);
    });
    model.gpu.device.queue.submit([encoder.finish()]);
    newTokens.forEach((tokens, row) => {
      append(this.tokens[row], tokens);
      if (tokens.length > 0) this.staleResidual[row] = false;
    });
    this.used += W;
    return rows * W;
  }

  /** This cache's rows `from` (one per row of `into`) copied into `into`, which is empty: the used slots. */
  async copyInto(into: Cache, from: number[]): Promise<void> {
    const { model, state } = this;
    const C = model.config.hiddenSize;
    const slots = copyCacheSlots(model, state.ops, this.source(), from, into.source(), this.used);
    const rowList = storageBuffer(model.gpu.device, from.length * 4, 'rows to copy');
    state.write(rowList, Uint32Array.from(from));
    const encoder = model.gpu.device.createCommandEncoder();
    encodeDispatches(encoder, [...slots.dispatches, ...state.ops.gatherRows(wholeMatrix(this.lastResidual, this.rows, C), rowList, into.lastResidual, from.length)]);
    model.gpu.device.queue.submit([encoder.finish()]);
    await model.gpu.device.queue.onSubmittedWorkDone();
    slots.rowList.destroy();
    rowList.destroy();
    from.forEach((row, i) => {
      into.tokens[i] = [...this.tokens[row]];
      into.staleResidual[i] = this.staleResidual[row];
      into.mask.set(this.mask.subarray(row * this.capacity, row * this.capacity + this.used), i * into.capacity);
    });
    into.used = this.used;
    into.state.write(into.state.keyMask, into.mask);
  }

  /**
   * Samples up to maxNewTokens after the prompts the cache holds in `rows` (one per prompt), from each
   * row's lastResidual, decoding at the slots [used, used + steps). Then every row keeps, of its
   * generated tokens, those its decode steps fed (all but the last one sampled, or up to its stop
   * token), and the slots after them are masked out; the other rows' decode slots stay masked.
   */
  async generate(rows: number[], options: GenerateOptions): Promise<GenerateResult> {
    const { model, state, capacity } = this;
    const slot0 = this.used;
    // The decode slots of the generating rows are real while they decode: each query sees only
    // slots up to its own, so a row's tokens after its stop affect nothing but its own, dropped, tokens.
    for (const row of rows) this.mask.fill(1, row * capacity + slot0, row * capacity + slot0 + options.maxNewTokens - 1);
    state.write(state.keyMask, this.mask);
    const result = await decodeAfterPrompts(model, state, {
      rows,
      slot0,
      firstPositions: this.tokens.map((tokens) => tokens.length),
      prefill: (head, submitLast) => {
        const encoder = model.gpu.device.createCommandEncoder();
        encoder.copyBufferToBuffer(this.lastResidual, 0, state.x, 0, this.rows * model.config.hiddenSize * 4);
        model.gpu.device.queue.submit([encoder.finish()]);
        submitLast(head(1));
      },
    }, options);
    const steps = result.stats.decodeSteps;
    rows.forEach((row, i) => {
      const kept = result.tokens[i].slice(0, steps);
      this.mask.fill(0, row * capacity + slot0 + kept.length, row * capacity + slot0 + options.maxNewTokens - 1);
      this.tokens[row].push(...kept);
      if (kept.length > 0) this.staleResidual[row] = true;
    });
    state.write(state.keyMask, this.mask);
    this.used += steps;
    return result;
  }

  source(): PromptSource {
    const { capacity, used } = this;
    return {
      kCache: this.state.kCache,
      vCache: this.state.vCache,
      rows: this.rows,
      S: capacity,
      P: used,
      mask: (row) => [...this.mask.subarray(row * capacity, row * capacity + used)],
      length: (row) => this.tokens[row].length,
      residual: wholeMatrix(this.lastResidual, this.rows, this.model.config.hiddenSize),
      residualRow: (row) => row,
    };
  }

  dispose(): void {
    this.state.dispose();
    this.lastResidual.destroy();
  }
}

/**
 * Most bytes the caches of one PromptCache (all rows and layers, keys and values) may take: half of what
 * one group of scoreContinuations may, as it stays allocated while the candidates' groups take theirs.
 */
const PROMPT_CACHE_BUDGET_BYTES = KV_CACHE_BUDGET_BYTES / 2;

/** Token rows a shared prefix must save before it is fed once and copied (below that the copies cost more). */
const MIN_SHARED_PREFIX_ROWS = 64;

/** How many first tokens all the sequences share. */
function commonPrefixLength(sequences: number[][]): number {
  let n = 0;
  while (sequences.every((s) => n < s.length && s[n] === sequences[0][n])) n++;
  return n;
}

export class PromptCache {
  readonly stats: PromptCacheStats = { extended: 0, rebuilt: 0, uncached: 0, promptRows: 0 };
  private cache: Cache | null = null;
  private rowOf = new Map<number, number>();
  private revision: number | undefined;

  constructor(
    readonly model: GpuModel,
    /** The adapter every score applies (null: the base model). */
    readonly adapter: GpuLoraAdapter | null,
  ) {}

  /** Like scoreContinuations, for prompts that extend their stream's prompt of an earlier call. */
  async score(requests: StreamRequest[], options: { hidden?: boolean } = {}): Promise<ContinuationScores[]> {
    const { model, adapter } = this;
    validate(model, requests);
    const L = Math.max(...requests.flatMap((r) => r.continuations.map((c) => c.length)));
    if (!(await this.hold(requests, L))) return scoreContinuations(model, requests, { adapter, hidden: options.hidden });
    // Streams that hold the same prompt and candidates (episodes that went alike) are scored once.
    const { distinct, of } = distinctRequests(requests);
    const scores = await this.scoreCandidates(distinct as StreamRequest[], options);
    return distinct.length < requests.length ? of.map((i) => structuredClone(scores[i])) : scores;
  }

  /**
   * The final hidden state (after the final RMSNorm, what a value head reads) at the last token of each
   * prompt, for prompts that extend their stream's prompt of an earlier call (e.g. the observation an
   * episode was cut short at).
   */
  async promptHidden(requests: { stream: number; prompt: number[] }[]): Promise<Float32Array[]> {
    const { model, adapter } = this;
    if (requests.length === 0) return [];
    const V = model.config.vocabSize;
    requests.forEach(({ prompt }, i) => {
      if (prompt.length === 0 || prompt.length > model.ropePositions || !prompt.every((id) => Number.isInteger(id) && id >= 0 && id < V)) {
        throw new RangeError(`request ${i}: the prompt must be 1 to ${model.ropePositions} token ids in [0, ${V})`);
      }
    });
    const prompts = requests.map((r) => r.prompt);
    if (!(await this.hold(requests, 0))) {
      const { hidden } = await score(model, prompts, { adapter, hiddenAt: prompts.map((p) => [p.length - 1]) });
      return hidden!.map(([h]) => h);
    }
    const { hiddenSize: C, rmsNormEps: eps } = model.config;
    const device = model.gpu.device;
    const built = this.cache!;
    const rowList = storageBuffer(device, requests.length * 4, 'streams');
    const normed = storageBuffer(device, requests.length * C * 4, 'prompt hidden states');
    const rows = storageBuffer(device, requests.length * C * 4, 'last residuals');
    try {
      built.state.write(rowList, Uint32Array.from(requests, (r) => this.rowOf.get(r.stream)!));
      const encoder = device.createCommandEncoder();
      encodeDispatches(encoder, [
        ...built.state.ops.gatherRows(wholeMatrix(built.lastResidual, built.rows, C), rowList, rows, requests.length),
        built.state.ops.rmsnorm(rows, model.finalNorm, normed, requests.length, C, eps),
      ]);
      device.queue.submit([encoder.finish()]);
      const bytes = await readBuffers(device, [{ buffer: normed, bytes: requests.length * C * 4 }]);
      return requests.map((_, i) => new Float32Array(bytes.slice(i * C * 4, (i + 1) * C * 4)));
    } finally {
      for (const buffer of [rowList, normed, rows]) buffer.destroy();
    }
  }

  /**
   * Like generate() with this cache's adapter, for prompts that extend their stream's prompt of an
   * earlier call, such as the transcripts of episodes played side by side, each the last one with the
   * generated action and the next observation appended: only the new tokens are fed. The tokens are
   * the same as generate()'s (with one seed per prompt, the same draws), up to float rounding.
   */
  async generate(requests: { stream: number; prompt: number[] }[], options: Omit<GenerateOptions, 'adapter'>): Promise<GenerateResult> {
    const { model, adapter } = this;
    const prompts = requests.map((r) => r.prompt);
    validatePrompts(model, prompts, options.maxNewTokens);
    if (!(await this.hold(requests, options.maxNewTokens))) return generate(model, prompts, { ...options, adapter });
    try {
      return await this.cache!.generate(requests.map((r) => this.rowOf.get(r.stream)!), options);
    } catch (error) {
      this.dispose(); // a generation cut short leaves its decode slots half-written: the next call builds afresh
      throw error;
    }
  }

  /**
   * Makes the cache hold every request's prompt (validated by the caller), with room for L more tokens
   * after it: by feeding each stream its new tokens, or by building the cache afresh. False (and no
   * cache) when the streams do not fit one (the caller scores without it).
   */
  private async hold(requests: { stream: number; prompt: number[] }[], L: number): Promise<boolean> {
    const { model, adapter } = this;
    const streams = new Set(requests.map((r) => r.stream));
    if (streams.size < requests.length) throw new RangeError('two requests of one call name the same stream; each stream has one prompt at a time');
    const longest = Math.max(...requests.map((r) => r.prompt.length));
    const cache = this.cache;
    const rows = requests.map((r) => this.rowOf.get(r.stream));
    const extends_ =
      cache !== null &&
      this.revision === adapter?.parameters.revision &&
      requests.every((r, i) => {
        const row = rows[i];
        if (row === undefined || !startsWith(r.prompt, cache.tokens[row])) return false;
        // A row that generated last keeps its prompt's residual: it needs a new token to read from.
        return r.prompt.length > cache.tokens[row].length || !cache.staleResidual[row];
      });
    const W = extends_ ? Math.max(...requests.map((r, i) => r.prompt.length - cache!.tokens[rows[i]!].length)) : 0;
    if (extends_ && cache!.used + W + L <= cache!.capacity && cache!.rows * W <= requests.length * longest) {
      const newTokens: number[][] = Array.from({ length: cache!.rows }, () => []);
      requests.forEach((r, i) => (newTokens[rows[i]!] = r.prompt.slice(cache!.tokens[rows[i]!].length)));
      this.stats.promptRows += cache!.feed(newTokens);
      this.stats.extended++;
      return true;
    }
    if (await this.rebuild(requests, longest, L)) {
      this.stats.rebuilt++;
      return true;
    }
    this.stats.uncached++;
    return false;
  }

  /** The candidates of requests whose prompts the cache holds. */
  private scoreCandidates(requests: StreamRequest[], options: { hidden?: boolean }): Promise<ContinuationScores[]> {
    const { model, adapter } = this;
    const built = this.cache!;
    const source = built.source();
    const layers = model.config.numLayers;
    const maxRows = maxRowsPerStep(model);
    // A candidate's cache holds its prompt's slots and its own tokens.
    const plan = planGroups(requests, (_prompts, _P, A, L) => {
      const row = cacheRowBytes(model, built.used + L);
      return A <= maxRows && A * row <= model.gpu.maxBindingBytes && A * row * 2 * layers <= KV_CACHE_BUDGET_BYTES;
    });
    return scoreGroups(model, requests, plan, options, (group, out, owned) =>
      scoreGroupCandidates(model, source, groupCandidates(requests, group, (part) => this.rowOf.get(requests[part.request].stream)!), group, out, adapter, owned),
    );
  }

  /**
   * A fresh cache with one row per request, holding its prompt, with room for twice the longest prompt
   * and candidate; false (and no cache) when even the least room does not fit one binding and the budget.
   */
  private async rebuild(requests: { stream: number; prompt: number[] }[], longest: number, L: number): Promise<boolean> {
    this.dispose();
    const { model, adapter } = this;
    const rows = requests.length;
    const slotBytes = cacheRowBytes(model, 1);
    const most = Math.min(Math.floor(model.gpu.maxBindingBytes / (rows * slotBytes)), Math.floor(PROMPT_CACHE_BUDGET_BYTES / (rows * slotBytes * 2 * model.config.numLayers)));
    const capacity = Math.min(2 * (longest + L), most);
    if (capacity < longest + L || rows > maxRowsPerStep(model)) return false;
    // Identical prompts are fed once, then copied to each of their streams' rows; so is the prefix that
    // all prompts share (an environment's instructions), when that saves enough rows.
    const { distinct, of } = distinctRequests(requests.map((r) => ({ prompt: r.prompt, continuations: [] })));
    const prompts = distinct.map((r) => r.prompt);
    const shared = commonPrefixLength(prompts);
    let fed: Cache;
    if (shared * (prompts.length - 1) >= MIN_SHARED_PREFIX_ROWS) {
      const prefix = new Cache(model, 1, shared, adapter, shared);
      this.stats.promptRows += prefix.feed([prompts[0].slice(0, shared)]);
      fed = new Cache(model, prompts.length, capacity, adapter, prompts.length * (longest - shared));
      await prefix.copyInto(fed, prompts.map(() => 0));
      prefix.dispose();
      this.stats.promptRows += fed.feed(prompts.map((p) => p.slice(shared)));
    } else {
      // Room to feed the longest prompt in one step (a later step's new tokens are fewer, as a rule).
      fed = new Cache(model, prompts.length, capacity, adapter, prompts.length * longest);
      this.stats.promptRows += fed.feed(prompts);
    }
    if (distinct.length < rows) {
      this.cache = new Cache(model, rows, capacity, adapter, rows * longest);
      await fed.copyInto(this.cache, of);
      fed.dispose();
    } else {
      this.cache = fed;
    }
    this.rowOf = new Map(requests.map((r, i) => [r.stream, i]));
    this.revision = adapter?.parameters.revision;
    return true;
  }

  dispose(): void {
    this.cache?.dispose();
    this.cache = null;
    this.rowOf.clear();
  }
}
