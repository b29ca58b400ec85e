// Our engine against transformers.js running an exported ONNX model: logits over a prompt, logits of
// decode steps that read the KV cache, and greedy generation. Pure code, so Vitest (Node, Dawn and
// onnxruntime-node) and the browser page (Chromium's WebGPU and onnxruntime-web) run the same checks.
import { Tensor, type PreTrainedModel } from '@huggingface/transformers';
import { seededNormal } from '../../src/common/random.ts';
import { initLoraAdapter, LORA_TARGETS, type HostLoraAdapter } from '../../src/engine/lora/adapter.ts';
import type { GpuLoraAdapter } from '../../src/engine/lora/gpu-adapter.ts';
import type { Model } from '../../src/engine/model.ts';
import type { LoadedModelFiles } from '../../src/engine/model/types.ts';

/** An adapter on every projection with B random too (a fresh PEFT adapter has B = 0 and changes nothing). */
export function randomAdapter(files: LoadedModelFiles, seed: number): HostLoraAdapter {
  const adapter = initLoraAdapter(files.config, { r: 4, alpha: 8, targets: [...LORA_TARGETS], rslora: false, dropout: 0, layers: null }, seed, 'tiny');
  const normal = seededNormal(seed + 1);
  for (const m of adapter.modules) m.B = Float32Array.from(m.B, () => 0.2 * normal());
  return adapter;
}

export interface ParityReport {
  /** max |Δ| of the logits at every prompt position, one forward over the whole prompt. */
  promptMaxDiff: number;
  /** max |Δ| of the logits of each decode step, one token at a time on the KV cache. */
  decodeMaxDiffs: number[];
  /** max |Δ| at the real positions of a left-padded batch (the prompt and a shorter one). */
  paddedMaxDiff: number;
  /** Greedy new tokens: ours (Model.generate) and transformers.js (generate, do_sample false). */
  engineTokens: number[];
  transformersTokens: number[];
}

export interface ParityOptions {
  decodeSteps: number;
  newTokens: number;
  /** Generation stops after one of these (both sides keep it). */
  stopTokenIds: number[];
}

const ids = (rows: number[][]) => new Tensor('int64', BigInt64Array.from(rows.flat(), BigInt), [rows.length, rows[0].length]);

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) return Infinity;
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
  return worst;
}

/** Row t of logits [B, S, V] for sequence b. */
function logitsAt(logits: Tensor, b: number, t: number): Float32Array {
  const [, S, V] = logits.dims;
  return (logits.data as Float32Array).subarray((b * S + t) * V, (b * S + t + 1) * V);
}

/** present.* outputs of one forward as the past_key_values inputs of the next. */
function cacheOf(outputs: Record<string, Tensor>): Record<string, Tensor> {
  const past: Record<string, Tensor> = {};
  for (const [name, tensor] of Object.entries(outputs)) {
    if (name.startsWith('present.')) past[name.replace('present.', 'past_key_values.')] = tensor;
  }
  return past;
}

export async function compareWithEngine(
  engine: Model,
  adapter: GpuLoraAdapter | null,
  exported: PreTrainedModel,
  prompt: number[],
  options: ParityOptions,
): Promise<ParityReport> {
  const n = prompt.length;
  const generated = await engine.generate([prompt], { maxNewTokens: options.newTokens, sampling: { greedy: true }, adapter, stopTokenIds: options.stopTokenIds });
  const engineTokens = generated.tokens[0];
  const sequence = [...prompt, ...engineTokens.slice(0, options.decodeSteps)];
  const shorter = prompt.slice(0, Math.max(2, n - 3));
  const scored = await engine.score([sequence, shorter], { logits: true, adapter });
  const [ours, oursShorter] = scored.logits!;

  // The prompt in one forward, then the decode steps one token at a time on the cache.
  let outputs = await exported.forward({ input_ids: ids([prompt]), attention_mask: ids([prompt.map(() => 1)]) });
  const promptMaxDiff = Math.max(...prompt.map((_, t) => maxDiff(logitsAt(outputs.logits, 0, t), ours[t])));
  const decodeMaxDiffs: number[] = [];
  for (let t = n; t < sequence.length; t++) {
    outputs = await exported.forward({
      input_ids: ids([[sequence[t]]]),
      attention_mask: ids([sequence.slice(0, t + 1).map(() => 1)]),
      past_key_values: cacheOf(outputs),
    });
    decodeMaxDiffs.push(maxDiff(logitsAt(outputs.logits, 0, 0), ours[t]));
  }

  // A left-padded batch: position_ids and the padding mask come from attention_mask.
  const pad = n - shorter.length;
  const padded = await exported.forward({
    input_ids: ids([prompt, [...new Array<number>(pad).fill(0), ...shorter]]),
    attention_mask: ids([prompt.map(() => 1), [...new Array<number>(pad).fill(0), ...shorter.map(() => 1)]]),
  });
  const paddedMaxDiff = Math.max(
    ...prompt.map((_, t) => maxDiff(logitsAt(padded.logits, 0, t), ours[t])),
    ...shorter.map((_, t) => maxDiff(logitsAt(padded.logits, 1, pad + t), oursShorter[t])),
  );

  const output = (await exported.generate({ input_ids: ids([prompt]), attention_mask: ids([prompt.map(() => 1)]), max_new_tokens: options.newTokens, do_sample: false })) as Tensor;
  const transformersTokens = (output.tolist()[0] as bigint[]).slice(n).map(Number);
  return { promptMaxDiff, decodeMaxDiffs, paddedMaxDiff, engineTokens, transformersTokens };
}
