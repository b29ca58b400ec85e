// Tiny random Llama/Qwen2 model folders in Hugging Face layout, for loader and kernel tests:
// config.json, seeded random weights in safetensors (F32/F16/BF16, optionally sharded), a tokenizer.
import { appendFile, copyFile, mkdtemp, stat, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseModelConfig } from '../../src/engine/model/config.ts';
import { readJsonFile } from '../../src/engine/model/source.ts';
import { FileModelSource } from '../../src/engine/model/source-node.ts';
import { loadTokenizer } from '../../src/engine/model/tokenizer.ts';
import type { Tokenizer } from '../../src/engine/model/types.ts';
import {
  roundToDtype,
  syntheticTokenizer,
  tinyModelConfig,
  tinyModelTensors,
  writeSafetensors,
  type TensorToWrite,
  type TinyModelOptions,
} from '../shared/tiny-model.ts';

export * from '../shared/tiny-model.ts';

/** The real stories260K model (see its SOURCE.md); tests that use it skip when it is absent. */
export const STORIES260K_DIR = fileURLToPath(new URL('../../../shared/fixtures/stories260K', import.meta.url));

/** The embedded default model (a byte-level BPE tokenizer, like GPT-2's). */
export const DEFAULT_MODEL_DIR = fileURLToPath(new URL('../../public/models/rlplay-agent-mini', import.meta.url));

/** The tokenizer of a model folder, without its weights. */
export async function loadFolderTokenizer(dir: string): Promise<Tokenizer> {
  const source = new FileModelSource(dir);
  return loadTokenizer(source, parseModelConfig(await readJsonFile(source, 'config.json')));
}

export interface TinyModelFolder {
  dir: string;
  /** The config.json written. */
  config: Record<string, unknown>;
  /** Every tensor written, by name, with the values as stored (rounded to the dtype). */
  tensors: Map<string, Float32Array>;
}

/** A model folder in a new temporary directory (the caller removes it). */
export async function makeTinyModelFolder(options: TinyModelOptions = {}): Promise<TinyModelFolder> {
  const config = tinyModelConfig(options);
  const dtype = options.dtype ?? 'F32';
  const tensors = tinyModelTensors(config, options.seed ?? 1).map((t) => ({
    ...t,
    dtype,
    data: roundToDtype(t.data, dtype),
  }));
  const dir = await mkdtemp(join(tmpdir(), 'rlplay-model-'));
  await writeModelFolder(dir, { config, tensors, shards: options.shards ?? 1, tokenizer: options.tokenizer });
  return { dir, config, tensors: new Map(tensors.map((t) => [t.name, t.data])) };
}

/** config.json, the weights (single file or shards with an index) and the tokenizer files into `dir`. */
export async function writeModelFolder(
  dir: string,
  folder: {
    config: object;
    tensors: TensorToWrite[];
    shards?: number;
    tokenizer?: TinyModelOptions['tokenizer'];
  },
): Promise<void> {
  await writeFile(join(dir, 'config.json'), JSON.stringify(folder.config, null, 2));
  const shards = folder.shards ?? 1;
  if (shards === 1) {
    await writeFile(join(dir, 'model.safetensors'), writeSafetensors(folder.tensors));
  } else {
    const perShard = Math.ceil(folder.tensors.length / shards);
    const weightMap: Record<string, string> = {};
    let totalSize = 0;
    for (let s = 0; s < shards; s++) {
      const file = `model-${String(s + 1).padStart(5, '0')}-of-${String(shards).padStart(5, '0')}.safetensors`;
      const part = folder.tensors.slice(s * perShard, (s + 1) * perShard);
      for (const t of part) weightMap[t.name] = file;
      const bytes = writeSafetensors(part);
      totalSize += bytes.length;
      await writeFile(join(dir, file), bytes);
    }
    const index = { metadata: { total_size: totalSize }, weight_map: weightMap };
    await writeFile(join(dir, 'model.safetensors.index.json'), JSON.stringify(index, null, 2));
  }
  await writeTokenizer(dir, folder.tokenizer ?? 'synthetic', folder.config);
}

async function writeTokenizer(dir: string, tokenizer: NonNullable<TinyModelOptions['tokenizer']>, config: object) {
  if (tokenizer === 'stories260K') {
    for (const file of ['tokenizer.json', 'tokenizer_config.json']) {
      await copyFile(join(STORIES260K_DIR, file), join(dir, file));
    }
    return;
  }
  const files = tokenizer === 'synthetic' ? syntheticTokenizer((config as { vocab_size: number }).vocab_size) : tokenizer;
  await writeFile(join(dir, 'tokenizer.json'), JSON.stringify(files.json));
  await writeFile(join(dir, 'tokenizer_config.json'), JSON.stringify(files.config));
}


/**
 * Writes the safetensors file `bytes` to `path` with a tensor of `padding` zero bytes before its
 * own ones, the padding left as a hole (a sparse file): a file of many gigabytes, as a Hub shard,
 * that takes no disk. Returns the file's size.
 */
export async function writePaddedSafetensors(path: string, bytes: Uint8Array, padding: number): Promise<number> {
  const view = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLength = Number(view.readBigUInt64LE(0));
  const header = JSON.parse(view.subarray(8, 8 + headerLength).toString('utf8'));
  for (const entry of Object.values(header) as { data_offsets?: number[] }[]) entry.data_offsets = entry.data_offsets?.map((o) => o + padding);
  header.padding = { dtype: 'U8', shape: [padding], data_offsets: [0, padding] };
  const headerBytes = Buffer.from(JSON.stringify(header));
  const lengthBytes = Buffer.alloc(8);
  lengthBytes.writeBigUInt64LE(BigInt(headerBytes.length));
  await writeFile(path, Buffer.concat([lengthBytes, headerBytes]));
  await truncate(path, 8 + headerBytes.length + padding);
  await appendFile(path, view.subarray(8 + headerLength));
  return (await stat(path)).size;
}
