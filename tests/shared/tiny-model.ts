// Tiny random Llama/Qwen2 models in Hugging Face form, in memory: config.json, seeded random
// weights in safetensors bytes (F32/F16/BF16), a character-level tokenizer. Pure code, so the GPU
// checks can build models both in Node and in the browser; tests/support/model-folder.ts writes
// them to disk for the loader and CLI tests.
import { seededNormal } from '../../src/common/random.ts';
import { float32Tensor, serializeSafetensors } from '../../src/engine/model/safetensors.ts';
import type { ModelSource } from '../../src/engine/model/types.ts';

export type FloatDtype = 'F32' | 'F16' | 'BF16';

export interface TensorToWrite {
  name: string;
  dtype: FloatDtype;
  shape: number[];
  data: Float32Array;
}

export interface TokenizerFiles {
  json: object;
  config: object;
}

export interface TinyModelOptions {
  architecture?: 'llama' | 'qwen2';
  hiddenSize?: number;
  intermediateSize?: number;
  numLayers?: number;
  numHeads?: number;
  numKvHeads?: number;
  vocabSize?: number;
  /** tie_word_embeddings; tied checkpoints store no lm_head.weight. */
  tied?: boolean;
  dtype?: FloatDtype;
  /** 1: model.safetensors; more: model-0000i-of-0000n.safetensors and model.safetensors.index.json. */
  shards?: number;
  seed?: number;
  /** 'synthetic' (default): a character-level tokenizer; 'stories260K': the fixture's (needs vocabSize ≥ 512). */
  tokenizer?: 'synthetic' | 'stories260K' | TokenizerFiles;
}


/** config.json of a tiny model, as Hugging Face transformers writes it. */
export function tinyModelConfig(options: TinyModelOptions = {}): Record<string, unknown> {
  const architecture = options.architecture ?? 'llama';
  const hiddenSize = options.hiddenSize ?? 16;
  const numHeads = options.numHeads ?? 4;
  return {
    architectures: [architecture === 'llama' ? 'LlamaForCausalLM' : 'Qwen2ForCausalLM'],
    model_type: architecture,
    hidden_size: hiddenSize,
    intermediate_size: options.intermediateSize ?? 40,
    num_hidden_layers: options.numLayers ?? 2,
    num_attention_heads: numHeads,
    num_key_value_heads: options.numKvHeads ?? 2,
    vocab_size: options.vocabSize ?? 96,
    max_position_embeddings: 128,
    hidden_act: 'silu',
    rms_norm_eps: 1e-5,
    rope_theta: 10000,
    rope_scaling: null,
    tie_word_embeddings: options.tied ?? false,
    bos_token_id: 1,
    eos_token_id: 2,
    torch_dtype: 'float32',
  };
}

/**
 * Seeded random weights for a config written by tinyModelConfig: matrices and biases ~ N(0, 0.2²),
 * norm weights ~ 1 + N(0, 0.1²). Names and shapes as in Hugging Face checkpoints.
 */
export function tinyModelTensors(config: Record<string, unknown>, seed: number): Omit<TensorToWrite, 'dtype'>[] {
  const hidden = config.hidden_size as number;
  const ffn = config.intermediate_size as number;
  const vocab = config.vocab_size as number;
  const headDim = hidden / (config.num_attention_heads as number);
  const queries = (config.num_attention_heads as number) * headDim;
  const keys = (config.num_key_value_heads as number) * headDim;
  const qkvBias = config.model_type === 'qwen2';
  const normal = seededNormal(seed);
  const tensors: Omit<TensorToWrite, 'dtype'>[] = [];
  const add = (name: string, shape: number[], mean: number, std: number) => {
    const data = new Float32Array(shape.reduce((n, d) => n * d, 1));
    for (let i = 0; i < data.length; i++) data[i] = mean + std * normal();
    tensors.push({ name, shape, data });
  };
  const matrix = (name: string, shape: number[]) => add(name, shape, 0, 0.2);
  const norm = (name: string) => add(name, [hidden], 1, 0.1);

  matrix('model.embed_tokens.weight', [vocab, hidden]);
  for (let i = 0; i < (config.num_hidden_layers as number); i++) {
    const p = `model.layers.${i}.`;
    norm(`${p}input_layernorm.weight`);
    for (const [name, rows] of [['q_proj', queries], ['k_proj', keys], ['v_proj', keys]] as const) {
      matrix(`${p}self_attn.${name}.weight`, [rows, hidden]);
      if (qkvBias) matrix(`${p}self_attn.${name}.bias`, [rows]);
    }
    matrix(`${p}self_attn.o_proj.weight`, [hidden, queries]);
    norm(`${p}post_attention_layernorm.weight`);
    matrix(`${p}mlp.gate_proj.weight`, [ffn, hidden]);
    matrix(`${p}mlp.up_proj.weight`, [ffn, hidden]);
    matrix(`${p}mlp.down_proj.weight`, [hidden, ffn]);
  }
  norm('model.norm.weight');
  if (!config.tie_word_embeddings) matrix('lm_head.weight', [vocab, hidden]);
  return tensors;
}

const SYNTHETIC_ALPHABET = ' abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?\'":;-\n';

/**
 * A character-level tokenizer in the tokenizers format: <unk> 0, <s> 1, </s> 2, then one id per
 * character (as many as fit in the vocabulary); BOS prepended, as Llama's post-processor does.
 */
export function syntheticTokenizer(vocabSize: number): TokenizerFiles {
  const specials = ['<unk>', '<s>', '</s>'];
  const pieces = [...specials, ...SYNTHETIC_ALPHABET.slice(0, Math.max(0, vocabSize - specials.length))];
  const vocab = Object.fromEntries(pieces.map((piece, id) => [piece, id]));
  const addedTokens = specials.map((content, id) => ({
    id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
  }));
  const json = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: addedTokens,
    normalizer: null,
    pre_tokenizer: null,
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [
        { SpecialToken: { id: '<s>', type_id: 0 } },
        { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: '<s>', type_id: 1 } },
        { Sequence: { id: 'B', type_id: 1 } },
      ],
      special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } },
    },
    decoder: { type: 'Fuse' },
    model: {
      type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges: [],
    },
  };
  const config = {
    tokenizer_class: 'LlamaTokenizer',
    bos_token: '<s>',
    eos_token: '</s>',
    unk_token: '<unk>',
    pad_token: null,
    add_bos_token: true,
    add_eos_token: false,
    clean_up_tokenization_spaces: false,
    model_max_length: 128,
  };
  return { json, config };
}

/** A safetensors file: u64 LE header length, JSON header padded with spaces to 8 bytes, the data in order. */
export function writeSafetensors(tensors: TensorToWrite[]): Uint8Array {
  return serializeSafetensors(tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, bytes: encodeTensor(t) })));
}

function encodeTensor({ dtype, data, shape, name }: TensorToWrite): Uint8Array {
  if (dtype === 'F32') return float32Tensor(name, shape, data).bytes;
  const count = shape.reduce((n, d) => n * d, 1);
  if (count !== data.length) throw new Error(`${name}: shape [${shape}] holds ${count} values, data has ${data.length}`);
  const toBits = dtype === 'F16' ? float16Bits : bfloat16Bits;
  return new Uint8Array(Uint16Array.from(data, toBits).buffer);
}

/** The values a dtype stores for `data` (round to nearest even), as float32. */
export function roundToDtype(data: Float32Array, dtype: FloatDtype): Float32Array {
  if (dtype === 'F32') return data.slice();
  if (dtype === 'BF16') return new Float32Array(Uint32Array.from(data, (x) => bfloat16Bits(x) << 16).buffer);
  return Float32Array.from(data, (x) => float16Value(float16Bits(x)));
}

const f32 = new Float32Array(1);
const f32Bits = new Uint32Array(f32.buffer);

export function bfloat16Bits(value: number): number {
  f32[0] = value;
  const bits = f32Bits[0];
  if (Number.isNaN(value)) return (bits >>> 16) | 0x40;
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

export function float16Bits(value: number): number {
  f32[0] = value;
  const bits = f32Bits[0];
  const sign = (bits >>> 16) & 0x8000;
  const exponent = ((bits >>> 23) & 0xff) - 127 + 15;
  const mantissa = bits & 0x7fffff;
  if (((bits >>> 23) & 0xff) === 0xff) return sign | 0x7c00 | (mantissa ? 0x200 : 0);
  if (exponent >= 31) return sign | 0x7c00;
  if (exponent <= 0) {
    if (exponent < -10) return sign;
    // Subnormal: value = m · 2^-24 with m = (1.mantissa) >> (14 - exponent), rounded to nearest even.
    const full = mantissa | 0x800000;
    const shift = 14 - exponent;
    const half = 1 << (shift - 1);
    const rest = full & ((1 << shift) - 1);
    let m = full >>> shift;
    if (rest > half || (rest === half && m & 1)) m++;
    return sign | m;
  }
  let half = (exponent << 10) | (mantissa >>> 13);
  const rest = mantissa & 0x1fff;
  // A carry out of the mantissa correctly bumps the exponent (up to infinity).
  if (rest > 0x1000 || (rest === 0x1000 && half & 1)) half++;
  return sign | half;
}

function float16Value(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const mantissa = bits & 0x3ff;
  if (exponent === 0) return sign * mantissa * 2 ** -24;
  if (exponent === 31) return mantissa ? NaN : sign * Infinity;
  return sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
}

export { seededNormal };

/** The files of a tiny model folder, in memory (single safetensors file, tokenizer given or synthetic). */
export function tinyModelFiles(options: TinyModelOptions = {}): { files: Map<string, Uint8Array>; config: Record<string, unknown> } {
  const config = tinyModelConfig(options);
  const dtype = options.dtype ?? 'F32';
  const tensors = tinyModelTensors(config, options.seed ?? 1).map((t) => ({ ...t, dtype, data: roundToDtype(t.data, dtype) }));
  if (options.tokenizer === 'stories260K') throw new Error('tinyModelFiles: pass the stories260K tokenizer files explicitly');
  const tokenizer = !options.tokenizer || options.tokenizer === 'synthetic' ? syntheticTokenizer(config.vocab_size as number) : options.tokenizer;
  const text = (value: object) => new TextEncoder().encode(JSON.stringify(value));
  const files = new Map<string, Uint8Array>([
    ['config.json', text(config)],
    ['model.safetensors', writeSafetensors(tensors)],
    ['tokenizer.json', text(tokenizer.json)],
    ['tokenizer_config.json', text(tokenizer.config)],
  ]);
  return { files, config };
}

export { MemoryModelSource } from '../../src/engine/model/memory-source.ts';
