// How bench:engine measures a runtime, shared by its Node part (bench/engine.ts) and its page
// (bench/browser/engine-page.ts), so that both time the same prompts the same way.
import type { AutoModelForCausalLM, Tensor } from '@huggingface/transformers';
import type { Model } from '../../src/engine/model.ts';

export interface BenchSettings {
  promptTokens: number;
  newTokens: number;
  batches: number[];
  /** Each figure is the best of this many runs. */
  repeats: number;
}

/** Throughput at one batch size, in tokens per second summed over the batch. */
export interface Row {
  batch: number;
  prefill: number;
  decode: number;
  dispatches?: number;
  readbacks?: number;
}

type TransformersModel = Awaited<ReturnType<typeof AutoModelForCausalLM.from_pretrained>>;
type TensorClass = typeof Tensor;

/** `batch` prompts of `promptTokens` ids each, different per sequence, starting with BOS. */
export function prompts(shape: { vocab: number; bos: number }, batch: number, promptTokens: number): number[][] {
  return Array.from({ length: batch }, (_, b) => [shape.bos, ...Array.from({ length: promptTokens - 1 }, (_, t) => 3 + ((b * 31 + t * 7) % (shape.vocab - 3)))]);
}

function best<T>(runs: T[], key: (run: T) => number): number {
  return Math.max(...runs.map(key));
}

/** Our engine: greedy generation, prefill and decode timed by the engine itself. */
export async function benchOurs(model: Model, settings: BenchSettings): Promise<Row[]> {
  const { promptTokens, newTokens } = settings;
  const shape = { vocab: model.config.vocabSize, bos: model.config.bosTokenId ?? 1 };
  await model.generate(prompts(shape, 1, promptTokens), { maxNewTokens: 4, sampling: { greedy: true } }); // compile pipelines
  const rows: Row[] = [];
  for (const batch of settings.batches) {
    const runs = [];
    for (let r = 0; r < settings.repeats; r++) {
      const result = await model.generate(prompts(shape, batch, promptTokens), { maxNewTokens: newTokens, sampling: { greedy: true } });
      runs.push(result.stats);
    }
    rows.push({
      batch,
      prefill: best(runs, (s) => (batch * promptTokens) / (s.prefillMs / 1000)),
      decode: best(runs, (s) => (batch * s.decodeSteps) / (s.decodeMs / 1000)),
      dispatches: runs[0].dispatchesPerDecodeStep,
      readbacks: runs[0].readbacksPerDecodeStep,
    });
  }
  return rows;
}

/**
 * transformers.js: prefill is one forward over the prompts; decode is a greedy generate of exactly
 * `newTokens` tokens (min_new_tokens forces the length) less that prefill time, over newTokens - 1
 * steps (generate's first token comes from its own prefill).
 */
export async function benchTransformersJs(model: TransformersModel, TensorType: TensorClass, shape: { vocab: number; bos: number }, settings: BenchSettings): Promise<Row[]> {
  const { promptTokens, newTokens } = settings;
  const tensor = (ids: number[][]) => new TensorType('int64', BigInt64Array.from(ids.flat(), BigInt), [ids.length, ids[0].length]);
  const inputsFor = (batch: number) => {
    const ids = prompts(shape, batch, promptTokens);
    return { input_ids: tensor(ids), attention_mask: tensor(ids.map((row) => row.map(() => 1))) };
  };
  await model.generate({ ...inputsFor(1), max_new_tokens: 4, do_sample: false }); // warm-up
  const rows: Row[] = [];
  for (const batch of settings.batches) {
    const inputs = inputsFor(batch);
    const runs = [];
    for (let r = 0; r < settings.repeats; r++) {
      let started = performance.now();
      const outputs = (await model(inputs)) as Record<string, { location?: string; dispose?: () => void }>;
      const prefillMs = performance.now() - started;
      // With device 'webgpu' the present key/values stay on the GPU until disposed, as generate() does.
      for (const output of Object.values(outputs)) if (output?.location === 'gpu-buffer') output.dispose?.();
      started = performance.now();
      await model.generate({ ...inputs, max_new_tokens: newTokens, min_new_tokens: newTokens, do_sample: false });
      runs.push({ prefillMs, decodeMs: Math.max(1e-3, performance.now() - started - prefillMs) });
    }
    rows.push({
      batch,
      prefill: best(runs, (s) => (batch * promptTokens) / (s.prefillMs / 1000)),
      decode: best(runs, (s) => (batch * (newTokens - 1)) / (s.decodeMs / 1000)),
    });
  }
  return rows;
}
