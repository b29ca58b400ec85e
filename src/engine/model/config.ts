// config.json -> ModelConfig: the Llama-family fields the engine needs, validated, with defaults as
// Hugging Face transformers applies them, and errors that say what to fix.
import { ModelLoadError } from './types.ts';
import type { Architecture, ModelConfig, RopeScaling } from './types.ts';

const ARCHITECTURE_BY_MODEL_TYPE: Record<string, Architecture> = { llama: 'llama', qwen2: 'qwen2' };
const ARCHITECTURE_BY_CLASS: Record<string, Architecture> = {
  LlamaForCausalLM: 'llama',
  Qwen2ForCausalLM: 'qwen2',
};
const SUPPORTED_ARCHITECTURES =
  'model_type "llama" (LlamaForCausalLM: Llama, SmolLM2, TinyLlama) or "qwen2" (Qwen2ForCausalLM: Qwen2, Qwen2.5)';

export function parseModelConfig(json: unknown, file = 'config.json'): ModelConfig {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw new ModelLoadError(
      `${file} must hold a JSON object (a Hugging Face model config) but holds ${describe(json)}`,
      file,
    );
  }
  const fields = new ConfigFields(json as Record<string, unknown>, file);
  const architecture = readArchitecture(fields);
  if (fields.raw.quantization_config != null) {
    const method = (fields.raw.quantization_config as { quant_method?: unknown }).quant_method;
    fields.fail(
      'quantization_config',
      `is set (quant_method ${describe(method)}): quantized checkpoints are not supported; ` +
        'use the unquantized (F32, F16 or BF16) release of the model',
    );
  }

  const hiddenSize = fields.positiveInteger('hidden_size');
  const intermediateSize = fields.positiveInteger('intermediate_size');
  const numLayers = fields.positiveInteger('num_hidden_layers');
  const numHeads = fields.positiveInteger('num_attention_heads');
  const numKvHeads = fields.positiveInteger('num_key_value_heads', numHeads);
  if (numHeads % numKvHeads !== 0) {
    fields.fail(
      'num_key_value_heads',
      `is ${numKvHeads} but num_attention_heads (${numHeads}) is not a multiple of it; ` +
        'this is not a valid grouped-query attention config',
    );
  }
  if (fields.raw.head_dim == null && hiddenSize % numHeads !== 0) {
    fields.fail(
      'head_dim',
      `is missing and hidden_size (${hiddenSize}) is not a multiple of num_attention_heads (${numHeads}); ` +
        'set head_dim in the config',
    );
  }
  const headDim = fields.positiveInteger('head_dim', hiddenSize / numHeads);
  if (headDim % 2 !== 0) {
    fields.fail('head_dim', `is ${headDim} but must be even: rotary position embeddings rotate pairs of dimensions`);
  }

  const hiddenAct = fields.raw.hidden_act ?? 'silu';
  if (hiddenAct !== 'silu') {
    fields.fail('hidden_act', `is ${describe(hiddenAct)} but only "silu" (SwiGLU MLP) is supported`);
  }
  if (fields.boolean('mlp_bias', false)) {
    fields.fail('mlp_bias', 'is true but bias on the MLP projections is not supported; only mlp_bias false is');
  }
  if (architecture === 'qwen2' && fields.boolean('use_sliding_window', false)) {
    fields.fail('use_sliding_window', 'is true but sliding-window attention is not supported; only full attention is');
  }
  const attentionBias = architecture === 'llama' && fields.boolean('attention_bias', false);
  const rope = readRope(fields);

  return {
    architecture,
    hiddenSize,
    intermediateSize,
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    vocabSize: fields.positiveInteger('vocab_size'),
    maxPositions: fields.positiveInteger('max_position_embeddings', 2048),
    rmsNormEps: fields.positiveNumber('rms_norm_eps', 1e-6),
    ropeTheta: rope.theta,
    ropeScaling: rope.scaling,
    tieWordEmbeddings: fields.boolean('tie_word_embeddings', false),
    // Qwen2 always has bias on q/k/v and never on o; Llama has both or neither (attention_bias).
    qkvBias: architecture === 'qwen2' || attentionBias,
    oBias: attentionBias,
    bosTokenId: fields.optionalTokenId('bos_token_id'),
    eosTokenIds: fields.tokenIds('eos_token_id'),
  };
}

function readArchitecture(fields: ConfigFields): Architecture {
  const modelType = fields.raw.model_type;
  if (modelType != null) {
    const architecture = typeof modelType === 'string' ? ARCHITECTURE_BY_MODEL_TYPE[modelType] : undefined;
    if (!architecture) {
      fields.fail(
        'model_type',
        `is ${describe(modelType)} but only Llama-family decoders run here: ${SUPPORTED_ARCHITECTURES}; ` +
          'pick a model of one of these architectures',
      );
    }
    return architecture;
  }
  const classes = fields.raw.architectures;
  const architecture = Array.isArray(classes) ? ARCHITECTURE_BY_CLASS[String(classes[0])] : undefined;
  if (!architecture) {
    fields.fail(
      'model_type',
      `is missing and architectures is ${describe(classes)}; only Llama-family decoders run here: ` +
        `${SUPPORTED_ARCHITECTURES}`,
    );
  }
  return architecture;
}

/**
 * rope_theta and rope_scaling, or transformers v5's rope_parameters, which holds both
 * ({rope_theta, rope_type, factor, ...}).
 */
function readRope(fields: ConfigFields): { theta: number; scaling: RopeScaling | null } {
  const parameters = fields.raw.rope_parameters;
  if (parameters != null) {
    if (typeof parameters !== 'object' || Array.isArray(parameters)) {
      fields.fail('rope_parameters', 'must be an object such as {"rope_type": "default", "rope_theta": 10000}');
    }
    const nested = new ConfigFields(parameters as Record<string, unknown>, fields.file, 'rope_parameters.');
    return { theta: nested.positiveNumber('rope_theta', 10000), scaling: readRopeScaling(nested) };
  }
  const scaling = fields.raw.rope_scaling;
  if (scaling == null) return { theta: fields.positiveNumber('rope_theta', 10000), scaling: null };
  if (typeof scaling !== 'object' || Array.isArray(scaling)) {
    fields.fail('rope_scaling', 'must be null or an object such as {"rope_type": "linear", "factor": 2}');
  }
  const nested = new ConfigFields(scaling as Record<string, unknown>, fields.file, 'rope_scaling.');
  return { theta: fields.positiveNumber('rope_theta', 10000), scaling: readRopeScaling(nested) };
}

function readRopeScaling(fields: ConfigFields): RopeScaling | null {
  const typeField = fields.raw.rope_type != null ? 'rope_type' : 'type';
  const type = fields.raw[typeField] ?? 'default';
  switch (type) {
    case 'default':
      return null;
    case 'linear':
      return { type: 'linear', factor: fields.positiveNumber('factor') };
    case 'llama3': {
      const scaling: RopeScaling = {
        type: 'llama3',
        factor: fields.positiveNumber('factor'),
        lowFreqFactor: fields.positiveNumber('low_freq_factor'),
        highFreqFactor: fields.positiveNumber('high_freq_factor'),
        originalMaxPositions: fields.positiveInteger('original_max_position_embeddings'),
      };
      // The llama3 rule interpolates between the two wavelength bounds, dividing by their difference.
      if (scaling.highFreqFactor <= scaling.lowFreqFactor) {
        fields.fail(
          'high_freq_factor',
          `is ${scaling.highFreqFactor} but must be greater than low_freq_factor (${scaling.lowFreqFactor})`,
        );
      }
      return scaling;
    }
    default:
      return fields.fail(
        typeField,
        `is ${describe(type)} but only rope scaling "linear" and "llama3" (or none) are supported`,
      );
  }
}

/** Typed reads of one JSON object's fields; every failure names the file and the field. */
class ConfigFields {
  constructor(
    readonly raw: Record<string, unknown>,
    readonly file: string,
    private readonly prefix = '',
  ) {}

  fail(field: string, problem: string): never {
    throw new ModelLoadError(`${this.file}: ${this.prefix}${field} ${problem}`, this.file);
  }

  positiveInteger(field: string, fallback?: number): number {
    const value = this.raw[field] ?? fallback;
    if (value === undefined) this.failMissing(field);
    if (typeof value !== 'number' || !Number.isInteger(value) || value <= 0) {
      this.fail(field, `is ${describe(value)} but must be a positive integer; correct it in ${this.file}`);
    }
    return value;
  }

  positiveNumber(field: string, fallback?: number): number {
    const value = this.raw[field] ?? fallback;
    if (value === undefined) this.failMissing(field);
    if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
      this.fail(field, `is ${describe(value)} but must be a positive number; correct it in ${this.file}`);
    }
    return value;
  }

  boolean(field: string, fallback: boolean): boolean {
    const value = this.raw[field] ?? fallback;
    if (typeof value !== 'boolean') this.fail(field, `is ${describe(value)} but must be true or false`);
    return value;
  }

  optionalTokenId(field: string): number | null {
    const value = this.raw[field];
    if (value == null) return null;
    if (!isTokenId(value)) this.fail(field, `is ${describe(value)} but must be a token id (an integer ≥ 0) or null`);
    return value;
  }

  tokenIds(field: string): number[] {
    const value = this.raw[field];
    if (value == null) return [];
    const ids = Array.isArray(value) ? value : [value];
    if (!ids.every(isTokenId)) {
      this.fail(field, `is ${describe(value)} but must be a token id, a list of token ids, or null`);
    }
    return ids;
  }

  private failMissing(field: string): never {
    return this.fail(field, 'is missing; a Llama-family model config must give it (is this the right config.json?)');
  }
}

function isTokenId(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0;
}

function describe(value: unknown): string {
  if (value === undefined) return 'missing';
  return JSON.stringify(value) ?? String(value);
}
