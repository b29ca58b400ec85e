import { existsSync } from 'node:fs';
import { readdir, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseModelConfig } from '../../src/engine/model/config.ts';
import { loadModelFiles } from '../../src/engine/model/load.ts';
import { FileModelSource, openModelSource } from '../../src/engine/model/source-node.ts';
import { HttpModelSource, joinUrl } from '../../src/engine/model/source.ts';
import { loadTokenizer } from '../../src/engine/model/tokenizer.ts';
import { ModelLoadError } from '../../src/engine/model/types.ts';
import type { HostTensor, HostWeights, LoadedModelFiles } from '../../src/engine/model/types.ts';
import { loadHostWeights } from '../../src/engine/model/weights.ts';
import type { WeightsProgress } from '../../src/engine/model/weights.ts';
import {
  STORIES260K_DIR,
  makeTinyModelFolder,
  syntheticTokenizer,
  tinyModelTensors,
  writeModelFolder,
  writePaddedSafetensors,
} from '../support/model-folder.ts';
import type { TinyModelOptions } from '../support/model-folder.ts';
import { serveFolder } from '../support/static-server.ts';

const folders: string[] = [];
afterAll(async () => {
  await Promise.all(folders.map((dir) => rm(dir, { recursive: true, force: true })));
});

async function tinyFolder(options: TinyModelOptions = {}) {
  const folder = await makeTinyModelFolder(options);
  folders.push(folder.dir);
  return folder;
}

function loadFolder(dir: string, onProgress?: (p: WeightsProgress) => void): Promise<LoadedModelFiles> {
  return loadModelFiles(openModelSource(dir), onProgress);
}

async function loadError(loading: Promise<unknown> | (() => unknown), ...fragments: string[]): Promise<ModelLoadError> {
  let error: unknown;
  try {
    await (typeof loading === 'function' ? loading() : loading);
  } catch (caught) {
    error = caught;
  }
  expect(error).toBeInstanceOf(ModelLoadError);
  for (const fragment of fragments) expect((error as Error).message).toContain(fragment);
  return error as ModelLoadError;
}

/** Every tensor of the loaded weights, by checkpoint name. */
function byName(weights: HostWeights): Map<string, HostTensor> {
  const tensors: HostTensor[] = [weights.embedding, weights.lmHead, weights.finalNorm];
  for (const layer of weights.layers) {
    tensors.push(layer.inputNorm, layer.postAttentionNorm);
    for (const linear of [layer.q, layer.k, layer.v, layer.o, layer.gate, layer.up, layer.down]) {
      tensors.push(linear.weight, ...(linear.bias ? [linear.bias] : []));
    }
  }
  return new Map(tensors.map((t) => [t.name, t]));
}

function expectWeightsToEqual(weights: HostWeights, stored: Map<string, Float32Array>) {
  const loaded = byName(weights);
  expect([...loaded.keys()].sort()).toEqual([...stored.keys()].sort());
  for (const [name, data] of stored) expect(loaded.get(name)!.data, name).toEqual(data);
}

describe('loading a model folder', () => {
  it('reads an untied Llama: config, every weight in f32 with its shape, and the tokenizer', async () => {
    const folder = await tinyFolder({ numLayers: 3, seed: 7 });
    const { config, weights, tokenizer, source } = await loadFolder(folder.dir);
    expect(source.location).toBe(folder.dir);
    expect(config).toMatchObject({ architecture: 'llama', numLayers: 3, numHeads: 4, numKvHeads: 2, headDim: 4 });
    expect(weights.layers).toHaveLength(3);
    expect(weights.layers[0].k.weight.shape).toEqual([8, 16]);
    expect(weights.layers[0].o.weight.shape).toEqual([16, 16]);
    expect(weights.layers[2].down.weight.shape).toEqual([16, 40]);
    expect(weights.lmHead).not.toBe(weights.embedding);
    expect(weights.layers[0].q.bias).toBeNull();
    expectWeightsToEqual(weights, folder.tensors);
    // The synthetic tokenizer: <s> is 1, then ' ' 3, 'a' 4, ... so 'h' 11 and 'i' 12.
    expect(tokenizer.encode('hi')).toEqual([1, 11, 12]);
  });

  it('uses the embedding object as lm_head when the embeddings are tied', async () => {
    const folder = await tinyFolder({ tied: true });
    const { weights } = await loadFolder(folder.dir);
    expect(weights.lmHead).toBe(weights.embedding);
    expect(folder.tensors.has('lm_head.weight')).toBe(false);
  });

  it('reads Qwen2 q/k/v biases, with no o_proj bias', async () => {
    const folder = await tinyFolder({ architecture: 'qwen2' });
    const { config, weights } = await loadFolder(folder.dir);
    expect(config).toMatchObject({ architecture: 'qwen2', qkvBias: true, oBias: false });
    expect(weights.layers[1].q.bias!.shape).toEqual([16]);
    expect(weights.layers[1].k.bias!.shape).toEqual([8]);
    expect(weights.layers[1].o.bias).toBeNull();
    expectWeightsToEqual(weights, folder.tensors);
  });

  it.each(['F16', 'BF16'] as const)('converts %s checkpoints to the stored values exactly', async (dtype) => {
    const folder = await tinyFolder({ dtype, architecture: 'qwen2' });
    expectWeightsToEqual((await loadFolder(folder.dir)).weights, folder.tensors);
  });

  it('loads a sharded checkpoint exactly as the single file, reporting progress per shard', async () => {
    const single = await tinyFolder({ seed: 3, dtype: 'BF16' });
    const sharded = await tinyFolder({ seed: 3, dtype: 'BF16', shards: 3 });
    expect(existsSync(join(sharded.dir, 'model.safetensors'))).toBe(false);
    const progress: WeightsProgress[] = [];
    const fromShards = await loadFolder(sharded.dir, (p) => progress.push(p));
    expect(byName(fromShards.weights)).toEqual(byName((await loadFolder(single.dir)).weights));

    const files = [...new Set(progress.map((p) => p.file))];
    expect(files).toEqual([1, 2, 3].map((i) => `model-0000${i}-of-00003.safetensors`));
    for (const file of files) {
      const last = progress.filter((p) => p.file === file).at(-1)!;
      expect(last.loadedBytes).toBe(last.totalBytes);
    }
  });

  it('loads a model.safetensors larger than one Node array (5 GB), reading each tensor from its offset', async () => {
    const folder = await tinyFolder({ dtype: 'BF16' });
    const path = join(folder.dir, 'model.safetensors');
    // A sparse 5 GB tensor first (as in a Hub shard), the model's own tensors after it.
    const size = await writePaddedSafetensors(path, await readFile(path), 5_000_000_000);
    expect(size).toBeGreaterThan(2 ** 32);

    const progress: WeightsProgress[] = [];
    const loaded = await loadFolder(folder.dir, (p) => progress.push(p));
    expectWeightsToEqual(loaded.weights, folder.tensors);
    expect(progress.at(-1)).toEqual({ file: 'model.safetensors', loadedBytes: size, totalBytes: size });
  });

  describe('errors name the file, the tensor and the fix', () => {
    it('a truncated model.safetensors', async () => {
      const folder = await tinyFolder();
      const path = join(folder.dir, 'model.safetensors');
      await truncate(path, (await readFile(path)).length - 100);
      const error = await loadError(loadFolder(folder.dir), 'model.safetensors', 'lm_head.weight', 'download it again');
      expect(error.file).toBe('model.safetensors');
      expect(error.tensor).toBe('lm_head.weight');
    });

    it('a 10 GB model.safetensors of zeros, by its header, never "Invalid typed array length"', async () => {
      const folder = await tinyFolder();
      const path = join(folder.dir, 'model.safetensors');
      await writeFile(path, '');
      await truncate(path, 10 * 2 ** 30);
      await loadError(loadFolder(folder.dir), 'model.safetensors: the header is not valid JSON', 'not a safetensors file', 'download it again');
    });

    it('a missing tensor', async () => {
      const folder = await tinyFolder();
      const config = folder.config;
      const tensors = tinyModelTensors(config, 1)
        .filter((t) => t.name !== 'model.layers.1.mlp.up_proj.weight')
        .map((t) => ({ ...t, dtype: 'F32' as const }));
      await writeModelFolder(folder.dir, { config, tensors });
      const error = await loadError(
        loadFolder(folder.dir),
        "model.safetensors has no tensor 'model.layers.1.mlp.up_proj.weight'",
        'incomplete download',
      );
      expect(error.tensor).toBe('model.layers.1.mlp.up_proj.weight');
    });

    it.each(['F32', 'BF16'] as const)('a NaN or infinite %s weight, with the tensor and the first bad index', async (dtype) => {
      const folder = await tinyFolder();
      const tensors = tinyModelTensors(folder.config, 1).map((t) => ({ ...t, dtype }));
      const bad = tensors.find((t) => t.name === 'model.layers.1.mlp.up_proj.weight')!;
      bad.data = Float32Array.from(bad.data);
      bad.data[7] = Number.NaN;
      bad.data[9] = Infinity;
      await writeModelFolder(folder.dir, { config: folder.config, tensors });
      const error = await loadError(
        loadFolder(folder.dir),
        "model.safetensors: tensor 'model.layers.1.mlp.up_proj.weight' holds NaN at index 7 of",
        `the file is corrupt, or its values overflowed when it was saved as ${dtype}`,
      );
      expect(error.tensor).toBe('model.layers.1.mlp.up_proj.weight');
    });

    it('a tensor missing from a sharded checkpoint index', async () => {
      const folder = await tinyFolder({ shards: 2 });
      const indexPath = join(folder.dir, 'model.safetensors.index.json');
      const index = JSON.parse(await readFile(indexPath, 'utf8'));
      delete index.weight_map['model.norm.weight'];
      await writeFile(indexPath, JSON.stringify(index));
      await loadError(loadFolder(folder.dir), 'model.safetensors.index.json', "'model.norm.weight'");
    });

    it('a sharded index naming a file outside the model folder', async () => {
      const folder = await tinyFolder({ shards: 2 });
      const outside = await tinyFolder({ shards: 2 });
      const indexPath = join(folder.dir, 'model.safetensors.index.json');
      const index = JSON.parse(await readFile(indexPath, 'utf8'));
      const escape = `../${basename(outside.dir)}/model-00002-of-00002.safetensors`;
      for (const [name, file] of Object.entries(index.weight_map)) if (file === 'model-00002-of-00002.safetensors') index.weight_map[name] = escape;
      await writeFile(indexPath, JSON.stringify(index));
      const error = await loadError(
        loadFolder(folder.dir),
        `model.safetensors.index.json: weight_map maps '`,
        `to ${JSON.stringify(escape)}, which is not a file inside the model folder`,
      );
      expect(error.file).toBe('model.safetensors.index.json');
      await expect(new FileModelSource(folder.dir).readBytes(escape)).rejects.toThrow(`${JSON.stringify(escape)} is not a file path inside the folder`);
    });

    it('a shard missing from the folder', async () => {
      const folder = await tinyFolder({ shards: 2 });
      await rm(join(folder.dir, 'model-00002-of-00002.safetensors'));
      await loadError(loadFolder(folder.dir), 'model-00002-of-00002.safetensors not found');
    });

    it('a wrong shape, with the config fields that imply the expected one', async () => {
      const folder = await tinyFolder();
      await writeFile(join(folder.dir, 'config.json'), JSON.stringify({ ...folder.config, num_key_value_heads: 4 }));
      const error = await loadError(
        loadFolder(folder.dir),
        "model.safetensors: tensor 'model.layers.0.self_attn.k_proj.weight' has shape [8, 16]",
        'config.json implies [16, 16] (num_key_value_heads × head_dim (4 × 4), hidden_size (16))',
      );
      expect(error.tensor).toBe('model.layers.0.self_attn.k_proj.weight');
    });

    it('an untied config whose checkpoint has no lm_head', async () => {
      const folder = await tinyFolder({ tied: true });
      await writeFile(join(folder.dir, 'config.json'), JSON.stringify({ ...folder.config, tie_word_embeddings: false }));
      await loadError(loadFolder(folder.dir), "no tensor 'lm_head.weight'", 'tie_word_embeddings');
    });

    it('attention biases the config does not ask for', async () => {
      const folder = await tinyFolder({ architecture: 'qwen2' });
      await writeFile(join(folder.dir, 'config.json'), JSON.stringify({ ...folder.config, model_type: 'llama' }));
      await loadError(loadFolder(folder.dir), "model.safetensors holds 'model.layers.0.self_attn.q_proj.bias'", 'attention_bias');
    });

    it('an unsupported architecture', async () => {
      const folder = await tinyFolder();
      await writeFile(join(folder.dir, 'config.json'), JSON.stringify({ ...folder.config, model_type: 'gpt2' }));
      await loadError(loadFolder(folder.dir), 'config.json: model_type is "gpt2"');
    });

    it('a config.json that is not valid JSON, with the position', async () => {
      const folder = await tinyFolder();
      await writeFile(join(folder.dir, 'config.json'), '{\n  "model_type": "llama",\n  "hidden_size": 16,,\n}');
      await loadError(loadFolder(folder.dir), 'config.json is not valid JSON at line 3, column 21');
    });

    it('a missing config.json, tokenizer.json or weights file', async () => {
      const folder = await tinyFolder();
      await rm(join(folder.dir, 'tokenizer.json'));
      await loadError(loadFolder(folder.dir), 'has no tokenizer.json');
      await rm(join(folder.dir, 'model.safetensors'));
      const source = new FileModelSource(folder.dir);
      await loadError(
        loadHostWeights(source, parseModelConfig(JSON.parse(await source.readText('config.json')))),
        'looked for model.safetensors and, for sharded checkpoints, model.safetensors.index.json',
      );
      await rm(join(folder.dir, 'config.json'));
      await loadError(loadFolder(folder.dir), `${join(folder.dir, 'config.json')} not found: the folder must hold config.json`);
    });

    it('a folder that does not exist', async () => {
      const error = await loadError(() => openModelSource('/nonexistent/model'), 'model folder /nonexistent/model does not exist');
      expect(error.file).toBe('/nonexistent/model');
    });

    it('a tokenizer with ids beyond vocab_size', async () => {
      const folder = await tinyFolder({ vocabSize: 40 });
      await writeFile(join(folder.dir, 'tokenizer.json'), JSON.stringify(syntheticTokenizer(60).json));
      await loadError(loadFolder(folder.dir), 'tokenizer.json has token ids up to 59 but config.json has vocab_size 40');
    });
  });
});

describe('the tokenizer', () => {
  it('reports special ids: BOS from the tokenizer, EOS from generation_config, config and tokenizer, no implicit pad', async () => {
    const folder = await tinyFolder();
    await writeFile(join(folder.dir, 'generation_config.json'), JSON.stringify({ bos_token_id: 1, eos_token_id: [2, 5] }));
    const { tokenizer } = await loadFolder(folder.dir);
    expect(tokenizer.bosTokenId).toBe(1);
    expect(tokenizer.eosTokenIds).toEqual([2, 5]);
    expect(tokenizer.padTokenId).toBeNull();
    expect(tokenizer.decode([])).toBe('');
    expect(tokenizer.decode(tokenizer.encode('Hello there'), { skipSpecialTokens: true })).toBe('Hello there');
    expect(tokenizer.decode(tokenizer.encode('Hi'))).toBe('<s>Hi');
  });

  it('renders the chat template of tokenizer_config.json, or of chat_template.jinja in preference', async () => {
    const folder = await tinyFolder();
    const { config } = syntheticTokenizer(96);
    const template =
      "{% for m in messages %}{{ bos_token }}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";
    await writeFile(join(folder.dir, 'tokenizer_config.json'), JSON.stringify({ ...config, chat_template: template }));
    const source = new FileModelSource(folder.dir);
    const parsedConfig = (await loadModelFiles(source)).config;
    const tokenizer = await loadTokenizer(source, parsedConfig);
    expect(tokenizer.hasChatTemplate).toBe(true);
    const ids = tokenizer.applyChatTemplate([{ role: 'user', content: 'hi' }], { addGenerationPrompt: true });
    expect(ids).toEqual(tokenizer.encode('<s>user: hi\nassistant:', { addSpecialTokens: false }));
    expect(ids[0]).toBe(1);

    await writeFile(join(folder.dir, 'chat_template.jinja'), '{% for m in messages %}[{{ m.content }}]{% endfor %}');
    const fromFile = await loadTokenizer(source, parsedConfig);
    expect(fromFile.applyChatTemplate([{ role: 'user', content: 'hi' }])).toEqual(
      fromFile.encode('[hi]', { addSpecialTokens: false }),
    );
  });

  it('says so when there is no chat template', async () => {
    const folder = await tinyFolder();
    const { tokenizer } = await loadFolder(folder.dir);
    expect(tokenizer.hasChatTemplate).toBe(false);
    await loadError(() => tokenizer.applyChatTemplate([{ role: 'user', content: 'hi' }]), 'has no chat template');
  });
});

describe('HttpModelSource', () => {
  it('loads a folder served over http exactly as from disk, with download progress', async () => {
    const folder = await tinyFolder({ architecture: 'qwen2', dtype: 'F16', shards: 2 });
    const server = await serveFolder(folder.dir);
    try {
      const source = openModelSource(`${server.url}/`);
      expect(source).toBeInstanceOf(HttpModelSource);
      expect(source.location).toBe(server.url);
      const progress: WeightsProgress[] = [];
      const overHttp = await loadModelFiles(source, (p) => progress.push(p));
      const fromDisk = await loadFolder(folder.dir);
      expect(overHttp.config).toEqual(fromDisk.config);
      expect(byName(overHttp.weights)).toEqual(byName(fromDisk.weights));
      expect(overHttp.tokenizer.encode('Hello')).toEqual(fromDisk.tokenizer.encode('Hello'));
      const last = progress.at(-1)!;
      expect(last.file).toBe('model-00002-of-00002.safetensors');
      expect(last.totalBytes).toBeGreaterThan(0);
      expect(last.loadedBytes).toBe(last.totalBytes);
      expect(await source.exists('config.json')).toBe(true);
      expect(await source.exists('nothing.json')).toBe(false);
    } finally {
      await server.close();
    }
  });

  it('explains a 404', async () => {
    const folder = await tinyFolder();
    const server = await serveFolder(folder.dir);
    try {
      const source = new HttpModelSource(`${server.url}/missing-model`);
      const error = await loadError(
        loadModelFiles(source),
        `${server.url}/missing-model/config.json not found (HTTP 404): the folder must hold config.json`,
      );
      expect(error.file).toBe('config.json');
    } finally {
      await server.close();
    }
  });

  it('names the URL when the server cannot be reached', async () => {
    const server = await serveFolder(tmpdir());
    const url = server.url;
    await server.close();
    await loadError(new HttpModelSource(url).readText('config.json'), `could not reach ${url}/config.json`);
  });

  it('does not take an HTML fallback page for a model file', async () => {
    const page = () => new Response('<!doctype html>', { headers: { 'content-type': 'text/html' } });
    const source = new HttpModelSource('https://example.test/model', { fetch: async () => page() });
    expect(await source.exists('model.safetensors')).toBe(false);
    await loadError(source.readBytes('model.safetensors'), 'answered with an HTML page instead of model.safetensors');
  });

  it('answers exists() from a known file list without a request, and still reads the files', async () => {
    const folder = await tinyFolder();
    const server = await serveFolder(folder.dir);
    try {
      const requested: string[] = [];
      const fetchLogged: typeof fetch = (input, init) => {
        requested.push(`${init?.method ?? 'GET'} ${String(input)}`);
        return fetch(input, init);
      };
      const files = await readdir(folder.dir);
      const source = new HttpModelSource(server.url, { fetch: fetchLogged, files });
      expect(await source.exists('chat_template.jinja')).toBe(false);
      expect(await source.exists('config.json')).toBe(true);
      expect(requested).toEqual([]);
      const model = await loadModelFiles(source);
      expect(model.config.numLayers).toBeGreaterThan(0);
      expect(requested.every((line) => line.startsWith('GET '))).toBe(true);
    } finally {
      await server.close();
    }
  });

  it('joins URLs', () => {
    expect(joinUrl('https://hf.co/org/m/resolve/main/', 'onnx/model.onnx')).toBe(
      'https://hf.co/org/m/resolve/main/onnx/model.onnx',
    );
    expect(joinUrl('http://h', 'a b.json')).toBe('http://h/a%20b.json');
  });
});

describe.skipIf(!existsSync(STORIES260K_DIR))(
  `stories260K fixture (${STORIES260K_DIR}; these tests skip when it is absent)`,
  () => {
    it('loads: Llama, 5 layers, GQA 8/4, tied embeddings', async () => {
      const { config, weights, tokenizer } = await loadFolder(STORIES260K_DIR);
      expect(config).toMatchObject({
        architecture: 'llama',
        numLayers: 5,
        numHeads: 8,
        numKvHeads: 4,
        headDim: 8,
        vocabSize: 512,
        tieWordEmbeddings: true,
      });
      expect(weights.layers).toHaveLength(5);
      expect(weights.embedding.shape).toEqual([512, 64]);
      expect(weights.lmHead).toBe(weights.embedding);
      expect(weights.layers[4].gate.weight.shape).toEqual([172, 64]);
      expect(byName(weights).size).toBe(47);
      expect(tokenizer.bosTokenId).toBe(1);
      expect(tokenizer.eosTokenIds).toEqual([2]);
      expect(tokenizer.padTokenId).toBeNull();
    });

    it('tokenizes every reference case (BOS included) and decodes back', async () => {
      const { tokenizer } = await loadFolder(STORIES260K_DIR);
      const reference = JSON.parse(await readFile(join(STORIES260K_DIR, 'reference/tokenizer_cases.json'), 'utf8'));
      const cases = reference.cases as { text: string; ids: number[]; roundtrip: boolean }[];
      expect(cases.length).toBeGreaterThan(0);
      for (const { text, ids, roundtrip } of cases) {
        expect(tokenizer.encode(text), JSON.stringify(text)).toEqual(ids);
        if (roundtrip) expect(tokenizer.decode(ids, { skipSpecialTokens: true }), JSON.stringify(text)).toBe(text);
      }
    });

    it('serves as the tokenizer of a tiny random model', async () => {
      const folder = await tinyFolder({ vocabSize: 512, tokenizer: 'stories260K' });
      const { tokenizer } = await loadFolder(folder.dir);
      expect(tokenizer.encode('Once upon a time')).toEqual([1, 403, 407, 261, 378]);
    });
  },
);
