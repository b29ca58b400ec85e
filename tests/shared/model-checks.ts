// The whole engine (load, forward, KV-cache decode, sampling, scoring) against the float64
// reference on random tiny models of every supported shape, and against PyTorch's outputs on the
// real stories260K model. Run in Node (tests/unit/model-engine.test.ts) and in headless Chromium.
import { distinctRequests } from '../../src/engine/continuations.ts';
import { PromptCache, type PromptCacheStats, type StreamRequest } from '../../src/engine/prompt-cache.ts';
import type { GpuContext } from '../../src/engine/gpu/device.ts';
import { loadModel, type Model } from '../../src/engine/model.ts';
import { loadModelFiles } from '../../src/engine/model/load.ts';
import type { ModelSource } from '../../src/engine/model/types.ts';
import { padLeft } from '../../src/engine/padding.ts';
import { referenceForward } from '../../src/engine/reference/model.ts';
import { logSoftmax } from '../../src/engine/reference/ops.ts';
import { mergeLoraAdapter, type HostLoraAdapter, type LoraSettings } from '../../src/engine/lora/adapter.ts';
import { peftAdapterFiles, readPeftAdapter } from '../../src/engine/lora/peft.ts';
import { assert, assertClose, assertEqual, maxAbsDiff, randomArray, seededRandom } from './assert.ts';
import { MemoryModelSource, tinyModelFiles, type TinyModelOptions } from './tiny-model.ts';

export interface ModelCheck {
  name: string;
  /** Needs the stories260K fixture; skipped (and reported as such) when `fixture` is null. */
  needsFixture?: boolean;
  run(gpu: GpuContext, fixture: ModelSource | null): Promise<void>;
}

const TINY_SHAPES: { name: string; options: TinyModelOptions; maxBindingBytes?: number }[] = [
  { name: 'llama, GQA 4/2, untied', options: { architecture: 'llama', numHeads: 4, numKvHeads: 2, tied: false, seed: 11 } },
  { name: 'qwen2 (q/k/v bias), GQA 4/1, tied', options: { architecture: 'qwen2', numHeads: 4, numKvHeads: 1, tied: true, seed: 12 } },
  { name: 'llama, MHA 2/2, tied, BF16', options: { architecture: 'llama', hiddenSize: 24, numHeads: 2, numKvHeads: 2, tied: true, dtype: 'BF16', seed: 13 } },
  // A 4 KiB binding cap splits the embedding and forces the prompt through several forward chunks.
  { name: 'llama, GQA 4/2, split weights and chunked prompt', options: { architecture: 'llama', numHeads: 4, numKvHeads: 2, tied: false, seed: 14 }, maxBindingBytes: 4096 },
];

async function tinyModel(gpu: GpuContext, options: TinyModelOptions, maxBindingBytes?: number): Promise<Model> {
  const source = new MemoryModelSource(tinyModelFiles(options).files);
  return loadModel(maxBindingBytes ? { ...gpu, maxBindingBytes } : gpu, source);
}

function randomSequences(random: () => number, lengths: number[], vocab: number): number[][] {
  return lengths.map((n) => [1, ...Array.from({ length: n - 1 }, () => 3 + Math.floor(random() * (vocab - 3)))]);
}

async function withModel(model: Model, body: (model: Model) => Promise<void>): Promise<void> {
  try {
    await body(model);
  } finally {
    model.dispose();
  }
}

const tinyForwardCheck: ModelCheck = {
  name: 'forward: logits, log-probs, entropies and hidden states match the float64 reference (padded batch)',
  async run(gpu) {
    for (const shape of TINY_SHAPES) {
      await withModel(await tinyModel(gpu, shape.options, shape.maxBindingBytes), async (model) => {
        const sequences = randomSequences(seededRandom(shape.options.seed!), [9, 4, 13], model.config.vocabSize);
        const hiddenAt = sequences.map((s) => [0, s.length - 1]);
        const got = await model.score(sequences, { logits: true, hiddenAt });
        const padded = padLeft(sequences, 0);
        const ref = referenceForward(model.config, model.files.weights, padded.ids, padded.mask);
        const { vocabSize: V, hiddenSize: C } = model.config;
        sequences.forEach((ids, b) => {
          const pad = padded.length - ids.length;
          ids.forEach((_, t) => {
            const row = b * padded.length + pad + t;
            const refLogits = ref.logits.subarray(row * V, (row + 1) * V);
            assertClose(got.logits![b][t], refLogits, `${shape.name}: logits of sequence ${b} at ${t}`);
            if (t + 1 < ids.length) assertClose([got.tokenLogprobs[b][t + 1]!], [logSoftmax(refLogits)[ids[t + 1]]], `${shape.name}: log-prob ${b}/${t + 1}`);
          });
          assertEqual(got.tokenLogprobs[b][0], null, 'no log-prob for the first token');
          hiddenAt[b].forEach((t, i) => {
            const row = b * padded.length + pad + t;
            assertClose(got.hidden![b][i], ref.hidden.subarray(row * C, (row + 1) * C), `${shape.name}: hidden state ${b}/${t}`);
          });
        });
      });
    }
  },
};

/** Greedy continuation computed by re-running the float64 reference on the whole sequence each step. */
function referenceGreedy(model: Model, prompt: number[], steps: number): number[] {
  const ids = [...prompt];
  const V = model.config.vocabSize;
  for (let i = 0; i < steps; i++) {
    const { logits } = referenceForward(model.config, model.files.weights, [ids], [ids.map(() => 1)]);
    const last = logits.subarray((ids.length - 1) * V, ids.length * V);
    let best = 0;
    for (let v = 1; v < V; v++) if (last[v] > last[best]) best = v;
    ids.push(best);
  }
  return ids.slice(prompt.length);
}

const tinyDecodeCheck: ModelCheck = {
  name: 'decode: KV-cache greedy decoding matches the reference; a padded batch decodes as each prompt alone',
  async run(gpu) {
    for (const shape of TINY_SHAPES) {
      await withModel(await tinyModel(gpu, shape.options, shape.maxBindingBytes), async (model) => {
        const prompts = randomSequences(seededRandom(100 + shape.options.seed!), [3, 8, 1, 5], model.config.vocabSize);
        const steps = 7;
        const batch = await model.generate(prompts, { maxNewTokens: steps, sampling: { greedy: true } });
        assertEqual(batch.tokens[1], referenceGreedy(model, prompts[1], steps), `${shape.name}: greedy tokens vs reference`);
        for (const [b, prompt] of prompts.entries()) {
          const alone = await model.generate([prompt], { maxNewTokens: steps, sampling: { greedy: true } });
          assertEqual(batch.tokens[b], alone.tokens[0], `${shape.name}: prompt ${b} batched vs alone`);
          assertClose(batch.logprobs[b], alone.logprobs[0], `${shape.name}: log-probs of prompt ${b} batched vs alone`, 1e-5, 1e-5);
        }
        // The log-probs reported while sampling are the model's own (teacher-forced scoring agrees).
        const full = [...prompts[0], ...batch.tokens[0]];
        const scored = await model.score([full]);
        assertClose(batch.logprobs[0], scored.tokenLogprobs[0].slice(prompts[0].length) as number[], `${shape.name}: sampled vs scored log-probs`);
      });
    }
  },
};

const samplingCheck: ModelCheck = {
  name: 'sampling: the same seed reproduces tokens, another seed changes them; stop tokens end a sequence',
  async run(gpu) {
    await withModel(await tinyModel(gpu, TINY_SHAPES[0].options), async (model) => {
      const prompts = randomSequences(seededRandom(5), [4, 6], model.config.vocabSize);
      const sample = (seed: number) => model.generate(prompts, { maxNewTokens: 12, sampling: { temperature: 1.5, topK: 40, topP: 0.95, seed } });
      const a = await sample(7);
      const b = await sample(7);
      const c = await sample(8);
      assertEqual(a.tokens, b.tokens, 'same seed, same tokens');
      assert(JSON.stringify(a.tokens) !== JSON.stringify(c.tokens), 'another seed gives other tokens');
      const stopAt = a.tokens[0][3];
      const stopped = await model.generate(prompts, { maxNewTokens: 12, sampling: { temperature: 1.5, topK: 40, topP: 0.95, seed: 7 }, stopTokenIds: [stopAt] });
      const firstStop = a.tokens[0].indexOf(stopAt);
      assertEqual(stopped.tokens[0], a.tokens[0].slice(0, firstStop + 1), 'sequence 0 ends at its stop token');
    });
  },
};

const samplingSeedsCheck: ModelCheck = {
  name: 'sampling: with one seed per prompt, a prompt samples the same tokens alone as in any batch (temperature, top-k/top-p, stop tokens)',
  async run(gpu) {
    await withModel(await tinyModel(gpu, TINY_SHAPES[0].options), async (model) => {
      const prompts = randomSequences(seededRandom(6), [4, 9, 6], model.config.vocabSize);
      const seeds = [11, 4000000000, 12];
      for (const setting of [{ temperature: 1.5 }, { temperature: 1.2, topK: 40, topP: 0.9 }]) {
        const what = JSON.stringify(setting);
        const generate = (batch: number[][], seed: number | number[], stopTokenIds?: number[]) =>
          model.generate(batch, { maxNewTokens: 10, sampling: { ...setting, seed }, stopTokenIds });
        const batch = await generate(prompts, seeds);
        for (const [b, prompt] of prompts.entries()) {
          const alone = await generate([prompt], [seeds[b]]);
          assertEqual(alone.tokens[0], batch.tokens[b], `${what}: prompt ${b} alone vs in the batch`);
          assertClose(alone.logprobs[0], batch.logprobs[b], `${what}: log-probs of prompt ${b} alone vs in the batch`, 1e-5, 1e-5);
          // One prompt with a single number draws as with that number as its own seed.
          assertEqual((await generate([prompt], seeds[b])).tokens[0], alone.tokens[0], `${what}: seed ${seeds[b]} vs [${seeds[b]}]`);
        }
        const reversed = await generate([...prompts].reverse(), [...seeds].reverse());
        assertEqual(reversed.tokens, [...batch.tokens].reverse(), `${what}: the batch in another order`);
        // Rows that stop at different steps leave the others' draws as they were.
        const stopAt = batch.tokens[1][2];
        const stopped = await generate(prompts, seeds, [stopAt]);
        batch.tokens.forEach((tokens, b) => {
          const at = tokens.indexOf(stopAt);
          assertEqual(stopped.tokens[b], at < 0 ? tokens : tokens.slice(0, at + 1), `${what}: prompt ${b} with a stop token`);
        });
        const same = await generate([prompts[0], prompts[0], prompts[0]], [1, 2, 1]);
        assertEqual(same.tokens[2], same.tokens[0], `${what}: the same prompt and seed in two rows`);
        assert(JSON.stringify(same.tokens[1]) !== JSON.stringify(same.tokens[0]), `${what}: another seed gives other tokens`);
      }
      const error = await model.generate(prompts, { maxNewTokens: 2, sampling: { seed: [1, 2] } }).then(() => null, (e: unknown) => e);
      assert(error instanceof RangeError && /2 seeds for 3 prompts/.test(error.message), `a seed list of the wrong length is rejected, got ${String(error)}`);
    });
  },
};

interface ReferenceLogits {
  ids: number[];
  logits: number[][];
  token_logprobs: (number | null)[];
}

async function readReference<T>(fixture: ModelSource, file: string): Promise<T> {
  return JSON.parse(await fixture.readText(`reference/${file}`)) as T;
}

const storiesLogitsCheck: ModelCheck = {
  name: 'stories260K: logits and log-probs match PyTorch (max abs diff <= 1e-4)',
  needsFixture: true,
  async run(gpu, fixture) {
    await withModel(await loadModel(gpu, fixture!), async (model) => {
      for (const file of ['logits_once_upon.json', 'logits_greedy32.json']) {
        const ref = await readReference<ReferenceLogits>(fixture!, file);
        const got = await model.score([ref.ids], { logits: true });
        const worst = Math.max(...ref.logits.map((row, t) => maxAbsDiff(got.logits![0][t], row)));
        assert(worst <= 1e-4, `${file}: logits max abs diff ${worst} > 1e-4`);
        assertClose(got.tokenLogprobs[0].slice(1) as number[], ref.token_logprobs.slice(1) as number[], `${file}: token log-probs`, 1e-4, 0);
      }
    });
  },
};

const storiesGreedyCheck: ModelCheck = {
  name: 'stories260K: 256-step greedy generation from BOS reproduces the reference token for token',
  needsFixture: true,
  async run(gpu, fixture) {
    await withModel(await loadModel(gpu, fixture!), async (model) => {
      const ref = await readReference<{ ids: number[]; prompt_ids: number[]; steps: number }>(fixture!, 'greedy_from_bos.json');
      const got = await model.generate([ref.prompt_ids], { maxNewTokens: ref.steps, sampling: { greedy: true } });
      assertEqual([...ref.prompt_ids, ...got.tokens[0]], ref.ids, 'greedy ids');
      assertEqual(got.stats.readbacksPerDecodeStep, 1, 'one read-back per decode step');
    });
  },
};

const storiesBatchCheck: ModelCheck = {
  name: 'stories260K: a batch of prompts of different lengths decodes as each alone',
  needsFixture: true,
  async run(gpu, fixture) {
    await withModel(await loadModel(gpu, fixture!), async (model) => {
      const texts = ['Once upon a time', 'The cat', 'Lily and Ben went to the park to play with a big red ball', 'One day'];
      const prompts = texts.map((text) => model.tokenizer.encode(text));
      const batch = await model.generate(prompts, { maxNewTokens: 20, sampling: { greedy: true } });
      for (const [b, prompt] of prompts.entries()) {
        const alone = await model.generate([prompt], { maxNewTokens: 20, sampling: { greedy: true } });
        assertEqual(batch.tokens[b], alone.tokens[0], `prompt "${texts[b]}" batched vs alone`);
        assertClose(batch.logprobs[b], alone.logprobs[0], `log-probs of "${texts[b]}" batched vs alone`, 1e-5, 1e-5);
      }
      assert(model.tokenizer.decode(batch.tokens[0]).startsWith(', there was a little girl'), 'the story starts as the reference does');
    });
  },
};

const storiesTokenizerCheck: ModelCheck = {
  name: 'stories260K: tokenizer ids match the reference cases',
  needsFixture: true,
  async run(_gpu, fixture) {
    const files = await loadModelFiles(fixture!);
    const ref = await readReference<{ cases: { text: string; ids: number[] }[] }>(fixture!, 'tokenizer_cases.json');
    for (const c of ref.cases) assertEqual(files.tokenizer.encode(c.text), c.ids, `ids of ${JSON.stringify(c.text)}`);
  },
};

/** An adapter with random A and B, so that it changes the model. */
function randomAdapter(model: Model, settings: LoraSettings, seed: number): HostLoraAdapter {
  const adapter = model.createAdapter(settings, seed);
  const random = seededRandom(seed);
  for (const m of adapter.modules) m.B = randomArray(random, m.B.length, 0.3);
  return adapter;
}

const loraForwardCheck: ModelCheck = {
  name: 'LoRA: adapted logits match the float64 reference with merged weights; generation uses the adapter',
  async run(gpu) {
    const cases: { shape: (typeof TINY_SHAPES)[number]; settings: LoraSettings }[] = [
      { shape: TINY_SHAPES[0], settings: { r: 4, alpha: 8, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], rslora: false, dropout: 0, layers: null } },
      { shape: TINY_SHAPES[1], settings: { r: 2, alpha: 3, targets: ['k_proj', 'up_proj'], rslora: true, dropout: 0, layers: [1] } },
      { shape: TINY_SHAPES[3], settings: { r: 3, alpha: 6, targets: ['v_proj', 'down_proj'], rslora: false, dropout: 0, layers: null } },
    ];
    for (const [i, { shape, settings }] of cases.entries()) {
      await withModel(await tinyModel(gpu, shape.options, shape.maxBindingBytes), async (model) => {
        const host = randomAdapter(model, settings, 40 + i);
        const adapter = model.uploadAdapter(host);
        const sequences = randomSequences(seededRandom(50 + i), [7, 3], model.config.vocabSize);
        const got = await model.score(sequences, { logits: true, adapter });
        const base = await model.score(sequences, { logits: true });
        const padded = padLeft(sequences, 0);
        const ref = referenceForward(model.config, mergeLoraAdapter(model.files.weights, host), padded.ids, padded.mask);
        const V = model.config.vocabSize;
        let moved = 0;
        sequences.forEach((ids, b) => ids.forEach((_, t) => {
          const row = b * padded.length + padded.length - ids.length + t;
          assertClose(got.logits![b][t], ref.logits.subarray(row * V, (row + 1) * V), `${shape.name} + LoRA r=${settings.r}: logits ${b}/${t}`);
          moved = Math.max(moved, maxAbsDiff(got.logits![b][t], base.logits![b][t]));
        }));
        assert(moved > 1e-3, `the adapter changes the logits (max change ${moved})`);
        const generated = await model.generate(sequences, { maxNewTokens: 4, sampling: { greedy: true }, adapter });
        const scored = await model.score([[...sequences[0], ...generated.tokens[0]]], { adapter });
        assertClose(generated.logprobs[0], scored.tokenLogprobs[0].slice(sequences[0].length) as number[], 'adapted generation log-probs agree with adapted scoring');
        adapter.dispose();
      });
    }
  },
};

const loraRoundTripCheck: ModelCheck = {
  name: 'LoRA: a fresh adapter leaves logits exactly unchanged; PEFT save and load gives identical log-probs',
  async run(gpu) {
    await withModel(await tinyModel(gpu, TINY_SHAPES[0].options), async (model) => {
      const settings: LoraSettings = { r: 4, alpha: 16, targets: ['q_proj', 'v_proj', 'gate_proj'], rslora: false, dropout: 0, layers: null };
      const sequences = randomSequences(seededRandom(9), [6, 9], model.config.vocabSize);
      const base = await model.score(sequences, { logits: true });
      const fresh = model.createAdapter(settings, 1);
      const reloadedFresh = await readPeftAdapter(new MemoryModelSource(peftAdapterFiles(fresh)), model.config);
      const freshGpu = model.uploadAdapter(reloadedFresh);
      const withFresh = await model.score(sequences, { logits: true, adapter: freshGpu });
      sequences.forEach((ids, b) => ids.forEach((_, t) => assertEqual(Array.from(withFresh.logits![b][t]), Array.from(base.logits![b][t]), `fresh adapter: logits ${b}/${t} exactly the base model's`)));
      const trained = randomAdapter(model, settings, 2);
      const reloaded = await readPeftAdapter(new MemoryModelSource(peftAdapterFiles(trained)), model.config);
      const before = await model.score(sequences, { adapter: model.uploadAdapter(trained) });
      const after = await model.score(sequences, { adapter: model.uploadAdapter(reloaded) });
      assertEqual(after.tokenLogprobs, before.tokenLogprobs, 'log-probs after a PEFT save and load');
      freshGpu.dispose();
    });
  },
};

const storiesLoraCheck: ModelCheck = {
  name: 'stories260K: the synthetic PEFT adapter reproduces the reference adapted logits (max abs diff <= 1e-4)',
  needsFixture: true,
  async run(gpu, fixture) {
    await withModel(await loadModel(gpu, fixture!), async (model) => {
      const adapter = await model.loadAdapter(subfolder(fixture!, 'lora-synthetic-r4'));
      const ref = await readReference<ReferenceLogits>(fixture!, 'logits_once_upon_lora.json');
      const got = await model.score([ref.ids], { logits: true, adapter });
      const worst = Math.max(...ref.logits.map((row, t) => maxAbsDiff(got.logits![0][t], row)));
      assert(worst <= 1e-4, `adapted logits max abs diff ${worst} > 1e-4`);
      adapter.dispose();
    });
  },
};

/** The files of a folder inside a model source. */
function subfolder(source: ModelSource, folder: string): ModelSource {
  return {
    location: `${source.location.replace(/\/$/, '')}/${folder}`,
    exists: (file) => source.exists(`${folder}/${file}`),
    readText: (file) => source.readText(`${folder}/${file}`),
    readBytes: (file, onProgress) => source.readBytes(`${folder}/${file}`, onProgress),
  };
}

/** A candidate list of the given lengths (tokens from 3 up, none of them BOS). */
function randomCandidates(random: () => number, lengths: number[], vocab: number): number[][] {
  return lengths.map((n) => Array.from({ length: n }, () => 3 + Math.floor(random() * (vocab - 3))));
}

const continuationsCheck: ModelCheck = {
  name: 'continuations: a batch of prompts, each with its own candidates, matches scoring each full sequence (log-probs and hidden states; adapter; split into groups)',
  async run(gpu) {
    // With the 4 KiB binding cap one layer's cache holds 8 sequences of 11 + 5 slots and a forward
    // step at most 12 rows: the 12 candidates run as two groups (request 2 split between them), the
    // prompts in several chunks and the candidates a token or two per step.
    for (const shape of [TINY_SHAPES[0], TINY_SHAPES[3]]) {
      await withModel(await tinyModel(gpu, shape.options, shape.maxBindingBytes), async (model) => {
        const random = seededRandom(60 + shape.options.seed!);
        const V = model.config.vocabSize;
        const prompts = randomSequences(random, [11, 4, 7, 1], V);
        const requests = [[3, 1, 5, 2, 4], [2, 3], [1, 4, 3, 2], [3]].map((lengths, i) => ({ prompt: prompts[i], continuations: randomCandidates(random, lengths, V) }));
        const host = randomAdapter(model, { r: 2, alpha: 4, targets: ['q_proj', 'v_proj', 'down_proj'], rslora: false, dropout: 0, layers: null }, 61);
        const adapter = model.uploadAdapter(host);
        for (const [label, options] of [['base model', {}], ['with adapter', { adapter }]] as const) {
          const got = await model.scoreContinuations(requests, { ...options, hidden: true });
          assertEqual(got.length, requests.length, 'one result per request');
          for (const [i, { prompt, continuations }] of requests.entries()) {
            const full = await model.score(continuations.map((c) => [...prompt, ...c]), { ...options, hiddenAt: continuations.map((c) => [prompt.length - 1, prompt.length + c.length - 1]) });
            const what = `${shape.name}, ${label}, request ${i}`;
            assertEqual(got[i].tokenLogprobs.length, continuations.length, `${what}: one entry per candidate`);
            continuations.forEach((c, a) => {
              const expected = full.tokenLogprobs[a].slice(prompt.length) as number[];
              assertClose(got[i].tokenLogprobs[a], expected, `${what}: candidate ${a}`, 1e-5, 1e-5);
              assertClose([got[i].sums[a]], [expected.reduce((x, y) => x + y, 0)], `${what}: sum of candidate ${a}`, 1e-5, 1e-5);
              assertClose(got[i].promptHidden!, full.hidden![a][0], `${what}: hidden state at the prompt's last token`, 1e-5, 1e-5);
              assertClose(got[i].continuationHidden![a], full.hidden![a][1], `${what}: hidden state at candidate ${a}'s last token`, 1e-5, 1e-5);
            });
          }
          // Each request alone (the single-prompt case) agrees with the batch, and hidden states are only returned when asked for.
          const alone = await model.scoreContinuations([requests[2]], options);
          assertClose(alone[0].tokenLogprobs.flat(), got[2].tokenLogprobs.flat(), `${shape.name}, ${label}: request 2 alone vs in the batch`, 1e-5, 1e-5);
          assert(alone[0].promptHidden === undefined && alone[0].continuationHidden === undefined, 'no hidden states unless asked for');
          // Repeated requests (as GRPO's group members make) run once, and each gets the scores of its own copy.
          const picks = [1, 0, 1, 3, 0];
          const repeated = picks.map((i) => requests[i]);
          assertEqual(distinctRequests(repeated).distinct.length, 3, `${shape.name}: requests 1, 0 and 3 are the distinct ones`);
          const twice = await model.scoreContinuations(repeated, options);
          picks.forEach((i, k) => assertClose(twice[k].tokenLogprobs.flat(), got[i].tokenLogprobs.flat(), `${shape.name}, ${label}: repeated request ${k} (request ${i})`, 1e-5, 1e-5));
          assert(twice[0].tokenLogprobs !== twice[2].tokenLogprobs, 'each repeated request gets its own copy of the scores');
        }
        const base = await model.scoreContinuations(requests);
        const adapted = await model.scoreContinuations(requests, { adapter });
        assert(maxAbsDiff(base[0].sums, adapted[0].sums) > 1e-3, 'the adapter changes the scores');
        adapter.dispose();
      });
    }
  },
};

const promptCacheCheck: ModelCheck = {
  name: 'prompt cache: prompts that grow call by call (episodes stepped side by side) score as scoreContinuations does, feeding only their new tokens',
  async run(gpu) {
    // The 4 KiB binding cap leaves the cache of 4 streams 32 slots: the growing prompts outgrow it and
    // force rebuilds, and 6 streams of them do not fit at all (scored without the cache).
    for (const shape of [TINY_SHAPES[0], TINY_SHAPES[3]]) {
      await withModel(await tinyModel(gpu, shape.options, shape.maxBindingBytes), async (model) => {
        const random = seededRandom(70 + shape.options.seed!);
        const V = model.config.vocabSize;
        const adapter = model.uploadAdapter(randomAdapter(model, { r: 2, alpha: 4, targets: ['q_proj', 'v_proj', 'down_proj'], rslora: false, dropout: 0, layers: null }, 71));
        const cache = new PromptCache(model.gpuModel, adapter);
        /** Scores the requests through the cache and afresh, and checks that they agree; returns the cache's. */
        const scoreBothWays = async (requests: StreamRequest[], what: string, hidden = false) => {
          const got = await cache.score(requests, { hidden });
          const expected = await model.scoreContinuations(requests.map(({ prompt, continuations }) => ({ prompt, continuations })), { adapter, hidden });
          requests.forEach((_, i) => {
            assertClose(got[i].tokenLogprobs.flat(), expected[i].tokenLogprobs.flat(), `${shape.name}, ${what}: request ${i}'s token log-probs`, 1e-5, 1e-5);
            assertClose(got[i].sums, expected[i].sums, `${shape.name}, ${what}: request ${i}'s sums`, 1e-5, 1e-5);
            if (!hidden) return;
            assertClose(got[i].promptHidden!, expected[i].promptHidden!, `${shape.name}, ${what}: request ${i}'s hidden state at its prompt's last token`, 1e-5, 1e-5);
            assertClose(got[i].continuationHidden!.flatMap((h) => [...h]), expected[i].continuationHidden!.flatMap((h) => [...h]), `${shape.name}, ${what}: request ${i}'s candidate hidden states`, 1e-5, 1e-5);
          });
          return got;
        };
        const prompts = randomSequences(random, [9, 6, 9, 4], V);
        prompts[2] = [...prompts[0]]; // two streams start alike (GRPO's group members): fed once
        let streams = [0, 1, 2, 3];
        const grow = (stream: number, n: number) => (prompts[stream] = [...prompts[stream], ...randomCandidates(random, [n], V)[0]]);
        const calls: { what: string; grow: () => void; expect: keyof PromptCacheStats }[] = [
          { what: 'first call', grow: () => {}, expect: 'rebuilt' },
          { what: 'each prompt grows by its own count (stream 1 not at all)', grow: () => [[0, 3], [2, 4], [3, 1]].forEach(([s, n]) => grow(s, n)), expect: 'extended' },
          { what: 'stream 3 has finished', grow: () => ((streams = [0, 1, 2]), [[0, 2], [1, 5], [2, 1]].forEach(([s, n]) => grow(s, n))), expect: 'extended' },
          { what: "stream 2's prompt no longer extends its last", grow: () => (prompts[2] = [...prompts[2].slice(0, 4), ...randomCandidates(random, [3], V)[0]]), expect: 'rebuilt' },
        ];
        let fedRows = 0;
        let freshRows = 0;
        for (const call of calls) {
          call.grow();
          const requests = streams.map((stream) => ({ stream, prompt: prompts[stream], continuations: randomCandidates(random, [1 + Math.floor(random() * 4), 2, 1], V) }));
          const before = { ...cache.stats };
          await scoreBothWays(requests, call.what, true);
          assertEqual(cache.stats[call.expect], before[call.expect] + 1, `${shape.name}, ${call.what}: the cache was ${call.expect}`);
          fedRows += cache.stats.promptRows - before.promptRows;
          freshRows += requests.length * Math.max(...requests.map((r) => r.prompt.length));
        }
        assert(fedRows < freshRows, `${shape.name}: the cache fed ${fedRows} prompt token rows, fewer than the ${freshRows} of scoring each call afresh`);
        // Prompts that outgrow the slots rebuild the cache; the scores stay the same.
        for (let k = 0; k < 5; k++) {
          [0, 1, 2].forEach((s) => grow(s, 4));
          await scoreBothWays([0, 1, 2].map((stream) => ({ stream, prompt: prompts[stream], continuations: randomCandidates(random, [2, 3], V) })), `growth ${k}`);
        }
        assert(cache.stats.rebuilt >= 3, `${shape.name}: prompts that outgrow the cache's slots rebuild it (rebuilt ${cache.stats.rebuilt} times)`);
        // The final hidden state at each prompt's last token (what a cut-short episode's value reads), as score() gives it.
        [0, 1, 2].forEach((s) => grow(s, 2));
        const finals = await cache.promptHidden([0, 1, 2].map((stream) => ({ stream, prompt: prompts[stream] })));
        const full = await model.score([0, 1, 2].map((s) => prompts[s]), { adapter, hiddenAt: [0, 1, 2].map((s) => [prompts[s].length - 1]) });
        finals.forEach((h, i) => assertClose(h, full.hidden![i][0], `${shape.name}: hidden state at stream ${i}'s last token`, 1e-5, 1e-5));
        // Too many streams for one cache: scored without it, to the same scores.
        const many = randomSequences(random, [30, 30, 30, 30, 30, 30], V).map((prompt, stream) => ({ stream, prompt, continuations: randomCandidates(random, [2, 1], V) }));
        const manyScores = await scoreBothWays(many, '6 streams');
        if (shape.maxBindingBytes) assertEqual(cache.stats.uncached, 1, `${shape.name}: 6 streams of 30 tokens are scored without the cache`);
        // Streams that went alike (the same prompt and candidates) are scored once, each with its own copy.
        const alike = await scoreBothWays([0, 1].map((stream) => ({ stream, prompt: many[0].prompt, continuations: many[0].continuations })), 'streams that went alike');
        assertClose(alike[0].tokenLogprobs.flat(), manyScores[0].tokenLogprobs.flat(), `${shape.name}: alike streams`, 1e-5, 1e-5);
        assert(alike[0].tokenLogprobs !== alike[1].tokenLogprobs, 'each stream gets its own copy of the scores');
        // A prompt at the position limit with a one-token candidate, beside a short prompt with long ones.
        await scoreBothWays(
          [
            { stream: 0, prompt: randomSequences(random, [model.gpuModel.ropePositions - 1], V)[0], continuations: [[5]] },
            { stream: 1, prompt: [1, 7], continuations: randomCandidates(random, [6, 2], V) },
          ],
          'at the position limit',
        );
        // Prompts that share a long prefix (an environment's instructions): the prefix is fed once, then each rest.
        const instructions = randomSequences(random, [34], V)[0];
        const rowsBefore = cache.stats.promptRows;
        await scoreBothWays([0, 1, 2].map((stream) => ({ stream: 10 + stream, prompt: [...instructions, ...randomCandidates(random, [2 + stream], V)[0]], continuations: randomCandidates(random, [2, 1], V) })), 'a shared prefix');
        assertEqual(cache.stats.promptRows - rowsBefore, 34 + 3 * 4, `${shape.name}: the shared prefix is fed once, then the rest of each prompt`);
        // A changed adapter invalidates what was cached with the old one.
        const rebuilt = cache.stats.rebuilt;
        adapter.parameters.markChanged();
        await cache.score(many.slice(0, 2));
        assertEqual(cache.stats.rebuilt, rebuilt + 1, `${shape.name}: a changed adapter rebuilds the cache`);
        const twice = await cache.score([many[0], many[0]]).then(() => null, (e: unknown) => e);
        assert(twice instanceof RangeError && /same stream/.test(twice.message), `two requests of one stream in a call are rejected, got ${String(twice)}`);
        cache.dispose();
        adapter.dispose();
      });
    }
  },
};

const promptCacheGenerateCheck: ModelCheck = {
  name: 'prompt cache: generation after prompts that grow call by call (text-mode episodes) samples what generate() samples, feeding only the new tokens',
  async run(gpu) {
    // Prompts that outgrow the cache's slots, and a stream that needs a rebuild, are part of the
    // sequence below. (A binding cap small enough to force more rebuilds would stop generate() too.)
    for (const shape of [TINY_SHAPES[0], TINY_SHAPES[1]]) {
      await withModel(await tinyModel(gpu, shape.options), async (model) => {
        const random = seededRandom(80 + shape.options.seed!);
        const V = model.config.vocabSize;
        const adapter = model.uploadAdapter(randomAdapter(model, { r: 2, alpha: 4, targets: ['q_proj', 'v_proj', 'down_proj'], rslora: false, dropout: 0, layers: null }, 81));
        const cache = new PromptCache(model.gpuModel, adapter);
        // About one token in seven ends an action, so the rows stop at different steps.
        const stopTokenIds = Array.from({ length: V }, (_, id) => id).filter((id) => id % 7 === 3);
        // Long enough first prompts that the cache (room for twice the longest and its action) holds four steps.
        const prompts = randomSequences(random, [36, 20, 28], V);
        let call = 0;
        /** Generates through the cache and afresh with the same per-stream seeds; checks they agree. */
        const generateBothWays = async (streams: number[], what: string, sampling: { greedy?: boolean; temperature?: number; topK?: number } = { temperature: 1.3, topK: 12 }, stops = stopTokenIds) => {
          call++;
          const options = { maxNewTokens: 6, stopTokenIds: stops, sampling: { ...sampling, seed: streams.map((s) => 1000 * call + s) } };
          const got = await cache.generate(streams.map((stream) => ({ stream, prompt: prompts[stream] })), options);
          const expected = await model.generate(streams.map((s) => prompts[s]), { ...options, adapter });
          streams.forEach((s, i) => {
            assertEqual(got.tokens[i], expected.tokens[i], `${shape.name}, ${what}: stream ${s}'s tokens`);
            assertClose(got.logprobs[i], expected.logprobs[i], `${shape.name}, ${what}: stream ${s}'s log-probs`, 1e-5, 1e-5);
          });
          return got;
        };
        /** The episode goes on: its action (the generated tokens) and an observation of n tokens join its prompt. */
        const act = (stream: number, action: number[], n: number) => (prompts[stream] = [...prompts[stream], ...action, ...randomCandidates(random, [n], V)[0]]);
        let fedRows = 0;
        let freshRows = 0;
        const step = async (streams: number[], what: string, expect: keyof PromptCacheStats, observation: (stream: number) => number) => {
          const before = { ...cache.stats };
          const got = await generateBothWays(streams, what);
          assertEqual(cache.stats[expect], before[expect] + 1, `${shape.name}, ${what}: the cache was ${expect}`);
          fedRows += cache.stats.promptRows - before.promptRows;
          freshRows += streams.length * Math.max(...streams.map((s) => prompts[s].length));
          streams.forEach((s, i) => act(s, got.tokens[i], observation(s)));
        };
        await step([0, 1, 2], 'first call', 'rebuilt', (s) => 2 + s);
        await step([0, 1, 2], 'each transcript grows by its action and an observation', 'extended', (s) => 3 - s);
        await step([0, 2], 'stream 1 sits out a call', 'extended', () => 2);
        await step([0, 1, 2], 'stream 1 is back', 'extended', () => 1);
        assert(fedRows < freshRows, `${shape.name}: the cache fed ${fedRows} prompt token rows, fewer than the ${freshRows} of generating afresh`);
        // Growth beyond the slots rebuilds the cache; the tokens stay the same, greedy ones too.
        for (let k = 0; k < 3; k++) {
          const got = await generateBothWays([0, 1, 2], `growth ${k}`, k === 2 ? { greedy: true } : undefined);
          [0, 1, 2].forEach((s, i) => act(s, got.tokens[i], 3));
        }
        assert(cache.stats.rebuilt >= 2, `${shape.name}: growth beyond the slots rebuilds the cache (rebuilt ${cache.stats.rebuilt} times)`);
        // Streams that stopped before the last decode step have had every generated token fed; a next
        // prompt of exactly those tokens leaves nothing to read the first new token from: built afresh.
        // (New streams, so that the cache has room to spare; half the tokens end an action, so that
        // the rows stop at different steps.)
        randomSequences(random, [10, 14, 12], V).forEach((prompt, i) => (prompts[20 + i] = prompt));
        const halfStop = stopTokenIds.concat(Array.from({ length: V }, (_, id) => id).filter((id) => id % 2 === 0));
        const last = await generateBothWays([20, 21, 22], 'before actions without observations', undefined, halfStop);
        assert(last.tokens.some((tokens) => tokens.length <= last.stats.decodeSteps), `${shape.name}: the check needs a stream that stopped before the last decode step`);
        [20, 21, 22].forEach((s, i) => (prompts[s] = [...prompts[s], ...last.tokens[i]]));
        const rebuilt = cache.stats.rebuilt;
        await generateBothWays([20, 21, 22], 'actions without observations');
        assertEqual(cache.stats.rebuilt, rebuilt + 1, `${shape.name}: a stream whose every generated token was fed and nothing added is built afresh`);
        const error = await cache.generate([{ stream: 0, prompt: [1, V] }], { maxNewTokens: 2 }).then(() => null, (e: unknown) => e);
        assert(error instanceof RangeError && /outside the vocabulary/.test(error.message), `a prompt outside the vocabulary is rejected, got ${String(error)}`);
        cache.dispose();
        adapter.dispose();
      });
    }
  },
};

const continuationsValidationCheck: ModelCheck = {
  name: 'continuations: malformed requests are rejected with the request index and the fix',
  async run(gpu) {
    await withModel(await tinyModel(gpu, TINY_SHAPES[0].options), async (model) => {
      const rejects = async (requests: Parameters<Model['scoreContinuations']>[0], pattern: RegExp) => {
        const error = await model.scoreContinuations(requests).then(() => null, (e: unknown) => e);
        assert(error instanceof RangeError && pattern.test(error.message), `expected a RangeError matching ${pattern}, got ${String(error)}`);
      };
      const ok = { prompt: [1, 5, 6], continuations: [[7], [8, 9]] };
      await rejects([], /no requests/);
      await rejects([ok, { prompt: [], continuations: [[7]] }], /^request 1: the prompt must be non-empty/);
      await rejects([ok, ok, { prompt: [1], continuations: [] }], /^request 2: .*no continuations/);
      await rejects([{ prompt: [1], continuations: [[7], []] }], /^request 0: continuation 1 must be non-empty/);
      await rejects([ok, { prompt: [1], continuations: [[model.config.vocabSize]] }], /^request 1: continuation 0 must be non-empty token ids/);
      await rejects([ok, { prompt: new Array<number>(120).fill(1), continuations: [new Array<number>(9).fill(3)] }], /^request 1: prompt \(120\) plus the longest continuation \(9\) exceed/);
    });
  },
};

export const modelChecks: ModelCheck[] = [
  tinyForwardCheck,
  tinyDecodeCheck,
  samplingCheck,
  samplingSeedsCheck,
  storiesLogitsCheck,
  storiesGreedyCheck,
  storiesBatchCheck,
  storiesTokenizerCheck,
  loraForwardCheck,
  loraRoundTripCheck,
  storiesLoraCheck,
  continuationsCheck,
  promptCacheCheck,
  promptCacheGenerateCheck,
  continuationsValidationCheck,
];
