// ONNX export with a LoRA adapter merged in: transformers.js (onnxruntime-node, offline) loads the
// exported folder, and its logits (over a prompt and on the KV cache) and greedy tokens match our
// engine's with the adapter applied. Also the graph's shape, the size limit, and the CLI.
// The stories260K cases need ../shared/fixtures/stories260K and skip without it.
import { existsSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { AutoModelForCausalLM, env, pipeline, Tensor, type PreTrainedModel } from '@huggingface/transformers';
import onnxProto from 'onnx-proto';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { exportOnnx, ONNX_MODEL_FILE, OnnxExportError } from '../../src/engine/export/onnx.ts';
import type { HostLoraAdapter } from '../../src/engine/lora/adapter.ts';
import { readPeftAdapter } from '../../src/engine/lora/peft.ts';
import { Model } from '../../src/engine/model.ts';
import { parseModelConfig } from '../../src/engine/model/config.ts';
import { loadModelFiles } from '../../src/engine/model/load.ts';
import { FileModelSource } from '../../src/engine/model/source-node.ts';
import type { LoadedModelFiles } from '../../src/engine/model/types.ts';
import { rlplay } from '../support/cli.ts';
import { STORIES260K_DIR, MemoryModelSource, tinyModelFiles } from '../support/model-folder.ts';
import { nodeGpu } from '../support/node-gpu.ts';
import { compareWithEngine, randomAdapter } from '../support/onnx-parity.ts';

const fixturePresent = existsSync(STORIES260K_DIR);
const STORIES_ADAPTER = join(STORIES260K_DIR, 'lora-synthetic-r4');
const TOLERANCE = 1e-4;

let root: string;
/** Every request transformers.js sends through fetch; in Node local models are read from disk, so none. */
const requests: string[] = [];

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'rlplay-onnx-'));
  env.allowRemoteModels = false;
  env.allowLocalModels = true;
  env.localModelPath = join(root, 'models');
  env.useFSCache = false;
  env.fetch = async (url: string | URL) => {
    requests.push(String(url));
    throw new Error(`network access in a test: ${url}`);
  };
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
  expect(requests).toEqual([]);
});

async function writeFolder(dir: string, files: Map<string, Uint8Array>): Promise<void> {
  for (const [name, bytes] of files) {
    await mkdir(dirname(join(dir, name)), { recursive: true });
    await writeFile(join(dir, name), bytes);
  }
}

/** Exports, writes the folder under env.localModelPath and loads it with transformers.js. */
async function exportAndLoad(id: string, files: LoadedModelFiles, adapter?: HostLoraAdapter): Promise<{ folder: Map<string, Uint8Array>; exported: PreTrainedModel }> {
  const folder = await exportOnnx(files, adapter);
  await writeFolder(join(root, 'models', id), folder);
  const exported = await AutoModelForCausalLM.from_pretrained(id, { dtype: 'fp32' });
  return { folder, exported };
}

function decodeGraph(folder: Map<string, Uint8Array>) {
  return onnxProto.onnx.ModelProto.decode(folder.get(ONNX_MODEL_FILE)!);
}

describe('ONNX export, loaded by transformers.js', () => {
  test.skipIf(!fixturePresent)('stories260K with its synthetic adapter: logits, cached decode and greedy tokens match the engine', async () => {
    const files = await loadModelFiles(new FileModelSource(STORIES260K_DIR));
    const adapter = await readPeftAdapter(new FileModelSource(STORIES_ADAPTER), files.config);
    const { folder, exported } = await exportAndLoad('stories260K-lora', files, adapter);

    expect([...folder.keys()].sort()).toEqual(['config.json', 'generation_config.json', ONNX_MODEL_FILE, 'special_tokens_map.json', 'tokenizer.json', 'tokenizer_config.json']);
    const config = JSON.parse(new TextDecoder().decode(folder.get('config.json')));
    expect(config['transformers.js_config']).toEqual({ dtype: 'fp32' });
    expect(config.model_type).toBe('llama');
    // Tied embeddings are stored once: the LM head is a Transpose of the embedding.
    const graph = decodeGraph(folder).graph!;
    expect(graph.initializer!.filter((t) => t.name === 'model.embed_tokens.weight')).toHaveLength(1);
    expect(graph.initializer!.some((t) => t.name!.startsWith('lm_head'))).toBe(false);

    // The PyTorch reference of the fixture, with this adapter, for a first independent check.
    const reference = JSON.parse(await readFile(join(STORIES260K_DIR, 'reference', 'logits_once_upon_lora.json'), 'utf8'));
    const n = reference.ids.length;
    const out = await exported.forward({
      input_ids: new Tensor('int64', BigInt64Array.from(reference.ids, BigInt), [1, n]),
      attention_mask: new Tensor('int64', new BigInt64Array(n).fill(1n), [1, n]),
    });
    const logits = out.logits.data as Float32Array;
    const worstVsReference = Math.max(...reference.logits.flatMap((row: number[], t: number) => row.map((v, j) => Math.abs(v - logits[t * 512 + j]))));
    expect(worstVsReference).toBeLessThanOrEqual(TOLERANCE);

    const engine = new Model(await nodeGpu(), files);
    try {
      const prompt = files.tokenizer.encode('Once upon a time, there was a little girl');
      const report = await compareWithEngine(engine, engine.uploadAdapter(adapter), exported, prompt, { decodeSteps: 4, newTokens: 32, stopTokenIds: files.config.eosTokenIds });
      expect(report.promptMaxDiff).toBeLessThanOrEqual(TOLERANCE);
      expect(report.decodeMaxDiffs).toHaveLength(4);
      for (const diff of report.decodeMaxDiffs) expect(diff).toBeLessThanOrEqual(TOLERANCE);
      expect(report.paddedMaxDiff).toBeLessThanOrEqual(TOLERANCE);
      expect(report.engineTokens).toHaveLength(32);
      expect(report.transformersTokens).toEqual(report.engineTokens);

      // The same continuation through pipeline('text-generation'), from text.
      const generator = await pipeline('text-generation', 'stories260K-lora', { dtype: 'fp32' });
      const [result] = (await generator('Once upon a time, there was a little girl', { max_new_tokens: 32, do_sample: false })) as { generated_text: string }[];
      expect(result.generated_text).toBe(files.tokenizer.decode([...prompt, ...report.engineTokens], { skipSpecialTokens: true }));
    } finally {
      engine.dispose();
    }
  });

  test('tiny Qwen2 (q/k/v biases, untied LM head, GQA) with a random adapter matches the engine', async () => {
    const dir = join(root, 'tiny-qwen2');
    await writeFolder(dir, tinyModelFiles({ architecture: 'qwen2', tied: false, hiddenSize: 32, numHeads: 4, numKvHeads: 2, numLayers: 2, intermediateSize: 48, vocabSize: 64, seed: 7 }).files);
    const files = await loadModelFiles(new FileModelSource(dir));
    expect(files.config).toMatchObject({ architecture: 'qwen2', qkvBias: true, tieWordEmbeddings: false, numKvHeads: 2 });
    const adapter = randomAdapter(files, 11);
    const { folder, exported } = await exportAndLoad('tiny-qwen2-lora', files, adapter);
    expect(folder.has('generation_config.json')).toBe(false);
    const graph = decodeGraph(folder).graph!;
    expect(graph.initializer!.some((t) => t.name === 'lm_head.weight.T')).toBe(true);
    expect(graph.initializer!.some((t) => t.name === 'model.layers.0.self_attn.k_proj.bias')).toBe(true);

    const engine = new Model(await nodeGpu(), files);
    try {
      const gpuAdapter = engine.uploadAdapter(adapter);
      // The adapter must matter, or the check would not tell a merged export from the base model.
      const prompt = files.tokenizer.encode('the cat sat on');
      const [base, adapted] = await Promise.all([engine.score([prompt], { logits: true }), engine.score([prompt], { logits: true, adapter: gpuAdapter })]);
      expect(Math.max(...base.logits![0].at(-1)!.map((v, j) => Math.abs(v - adapted.logits![0].at(-1)![j])))).toBeGreaterThan(0.1);

      const report = await compareWithEngine(engine, gpuAdapter, exported, prompt, { decodeSteps: 4, newTokens: 20, stopTokenIds: [] });
      expect(report.promptMaxDiff).toBeLessThanOrEqual(TOLERANCE);
      for (const diff of report.decodeMaxDiffs) expect(diff).toBeLessThanOrEqual(TOLERANCE);
      expect(report.paddedMaxDiff).toBeLessThanOrEqual(TOLERANCE);
      expect(report.engineTokens).toHaveLength(20);
      expect(report.transformersTokens).toEqual(report.engineTokens);
    } finally {
      engine.dispose();
    }
  });
});

const DEFAULT_MODEL = join(import.meta.dirname, '../../public/models/rlplay-agent-mini');

describe.skipIf(!existsSync(join(DEFAULT_MODEL, 'config.json')))('the embedded default model', () => {
  test('its shipped onnx/model.onnx, and an export with an adapter merged, match the engine in transformers.js', async () => {
    const files = await loadModelFiles(new FileModelSource(DEFAULT_MODEL));
    const engine = new Model(await nodeGpu(), files);
    try {
      const prompt = files.tokenizer.encode('Question: What is the population of Fulstead?\nObservation:');
      // The folder as shipped: transformers.js reads it in place.
      await cp(DEFAULT_MODEL, join(root, 'models', 'rlplay-agent-mini'), { recursive: true });
      const shipped = await AutoModelForCausalLM.from_pretrained('rlplay-agent-mini', { dtype: 'fp32' });
      const base = await compareWithEngine(engine, null, shipped, prompt, { decodeSteps: 4, newTokens: 24, stopTokenIds: [] });
      expect(base.promptMaxDiff).toBeLessThanOrEqual(TOLERANCE);
      for (const diff of base.decodeMaxDiffs) expect(diff).toBeLessThanOrEqual(TOLERANCE);
      expect(base.transformersTokens).toEqual(base.engineTokens);

      // With an adapter merged (random B: it must change the logits for the check to mean anything).
      const adapter = randomAdapter(files, 5);
      const { exported } = await exportAndLoad('rlplay-agent-mini-lora', files, adapter);
      const merged = await compareWithEngine(engine, engine.uploadAdapter(adapter), exported, prompt, { decodeSteps: 4, newTokens: 24, stopTokenIds: [] });
      expect(merged.promptMaxDiff).toBeLessThanOrEqual(TOLERANCE);
      for (const diff of merged.decodeMaxDiffs) expect(diff).toBeLessThanOrEqual(TOLERANCE);
      expect(merged.paddedMaxDiff).toBeLessThanOrEqual(TOLERANCE);
      expect(merged.transformersTokens).toEqual(merged.engineTokens);
    } finally {
      engine.dispose();
    }
  });
});

describe('ONNX export errors', () => {
  test('a model over the 2 GiB protobuf limit is refused before any work', async () => {
    const big = parseModelConfig({ model_type: 'llama', hidden_size: 4096, intermediate_size: 14336, num_hidden_layers: 32, num_attention_heads: 32, num_key_value_heads: 8, vocab_size: 128256 });
    const files = { config: big, source: new MemoryModelSource(new Map(), 'memory:llama-8b/') } as unknown as LoadedModelFiles;
    const error = await exportOnnx(files).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OnnxExportError);
    expect((error as Error).message).toMatch(/memory:llama-8b\/ needs 29\.\d\d GiB of float32 weights in ONNX, more than the 2 GiB/);
  });

  test('an adapter made for another model is named, not merged', async () => {
    const files = await loadModelFiles(new MemoryModelSource(tinyModelFiles({ hiddenSize: 16, numLayers: 2 }).files));
    const wider = await loadModelFiles(new MemoryModelSource(tinyModelFiles({ hiddenSize: 32, numLayers: 2 }).files));
    const error = await exportOnnx(files, randomAdapter(wider, 3)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OnnxExportError);
    expect((error as Error).message).toMatch(/adapter's layer 0 q_proj is \[32 x 32\] \(rank 4\) but that projection of memory: is \[16 x 16\]/);
  });
});



describe.skipIf(!fixturePresent)('rlplay export --format onnx', () => {
  test('writes the same folder as exportOnnx', async () => {
    const out = join(root, 'cli-export');
    const { code, stderr } = await rlplay('export', '--format', 'onnx', '--model', STORIES260K_DIR, '--adapter', STORIES_ADAPTER, '--out', out);
    expect(stderr).toMatch(/ONNX model of .*stories260K with adapter .*lora-synthetic-r4 merged in \(LoRA r=4 on q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj\) written to/);
    expect(code).toBe(0);
    const files = await loadModelFiles(new FileModelSource(STORIES260K_DIR));
    const expected = await exportOnnx(files, await readPeftAdapter(new FileModelSource(STORIES_ADAPTER), files.config));
    for (const [name, bytes] of expected) expect(Buffer.compare(await readFile(join(out, name)), bytes), name).toBe(0);
  });

  test('clear errors: a missing adapter, an unsupported model, conflicting or missing flags', async () => {
    const out = join(root, 'cli-errors');
    const missing = await rlplay('export', '--format', 'onnx', '--model', STORIES260K_DIR, '--adapter', join(root, 'no-such-adapter'), '--out', out);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/adapter folder .*no-such-adapter does not exist; give a folder holding adapter_config\.json and adapter_model\.safetensors/);
    expect(existsSync(out)).toBe(false);

    const gpt2 = join(root, 'gpt2-like');
    await cp(STORIES260K_DIR, gpt2, { recursive: true, filter: (path) => !path.includes('original') && !path.includes('reference') });
    const config = JSON.parse(await readFile(join(gpt2, 'config.json'), 'utf8'));
    await writeFile(join(gpt2, 'config.json'), JSON.stringify({ ...config, model_type: 'gpt2', architectures: ['GPT2LMHeadModel'] }));
    const unsupported = await rlplay('export', '--format', 'onnx', '--model', gpt2, '--out', out);
    expect(unsupported.code).toBe(1);
    expect(unsupported.stderr).toMatch(/config\.json: model_type is "gpt2" but only Llama-family decoders run here/);

    const both = await rlplay('export', '--format', 'onnx', '--model', STORIES260K_DIR, '--adapter', STORIES_ADAPTER, '--run', out, '--out', out);
    expect(both.code).toBe(1);
    expect(both.stderr).toMatch(/either --run .* or --adapter .*, not both/);
    const noModel = await rlplay('export', '--format', 'onnx', '--adapter', STORIES_ADAPTER, '--out', out);
    expect(noModel.code).toBe(1);
    expect(noModel.stderr).toMatch(/--format onnx needs --model/);
  });
});
