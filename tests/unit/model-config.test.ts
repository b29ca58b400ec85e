import { describe, expect, it } from 'vitest';
import { parseModelConfig } from '../../src/engine/model/config.ts';
import { ModelLoadError } from '../../src/engine/model/types.ts';

/** The stories260K config.json, as shipped (a Llama with GQA 8/4 and tied embeddings). */
const STORIES_CONFIG = {
  architectures: ['LlamaForCausalLM'],
  model_type: 'llama',
  hidden_size: 64,
  intermediate_size: 172,
  num_hidden_layers: 5,
  num_attention_heads: 8,
  num_key_value_heads: 4,
  head_dim: 8,
  vocab_size: 512,
  max_position_embeddings: 512,
  hidden_act: 'silu',
  rms_norm_eps: 1e-5,
  rope_theta: 10000.0,
  rope_scaling: null,
  attention_bias: false,
  mlp_bias: false,
  tie_word_embeddings: true,
  bos_token_id: 1,
  eos_token_id: 2,
};

function configError(json: unknown): ModelLoadError {
  try {
    parseModelConfig(json);
  } catch (error) {
    expect(error).toBeInstanceOf(ModelLoadError);
    expect((error as ModelLoadError).file).toBe('config.json');
    expect((error as Error).message).toMatch(/^config\.json/);
    return error as ModelLoadError;
  }
  throw new Error('expected a ModelLoadError');
}

describe('parseModelConfig', () => {
  it('reads a Llama config into the engine names', () => {
    expect(parseModelConfig(STORIES_CONFIG)).toEqual({
      architecture: 'llama',
      hiddenSize: 64,
      intermediateSize: 172,
      numLayers: 5,
      numHeads: 8,
      numKvHeads: 4,
      headDim: 8,
      vocabSize: 512,
      maxPositions: 512,
      rmsNormEps: 1e-5,
      ropeTheta: 10000,
      ropeScaling: null,
      tieWordEmbeddings: true,
      qkvBias: false,
      oBias: false,
      bosTokenId: 1,
      eosTokenIds: [2],
    });
  });

  it('applies the transformers defaults to missing optional fields', () => {
    const config = parseModelConfig({
      model_type: 'llama',
      hidden_size: 64,
      intermediate_size: 128,
      num_hidden_layers: 2,
      num_attention_heads: 4,
      vocab_size: 100,
    });
    expect(config).toMatchObject({
      numKvHeads: 4,
      headDim: 16,
      maxPositions: 2048,
      rmsNormEps: 1e-6,
      ropeTheta: 10000,
      ropeScaling: null,
      tieWordEmbeddings: false,
      qkvBias: false,
      oBias: false,
      bosTokenId: null,
      eosTokenIds: [],
    });
  });

  it('gives Qwen2 bias on q/k/v only, and Llama attention_bias on all four', () => {
    expect(parseModelConfig({ ...STORIES_CONFIG, model_type: 'qwen2' })).toMatchObject({
      architecture: 'qwen2',
      qkvBias: true,
      oBias: false,
    });
    expect(parseModelConfig({ ...STORIES_CONFIG, attention_bias: true })).toMatchObject({ qkvBias: true, oBias: true });
  });

  it('falls back on architectures when model_type is missing', () => {
    const { model_type: _, ...withoutType } = STORIES_CONFIG;
    expect(parseModelConfig({ ...withoutType, architectures: ['Qwen2ForCausalLM'] }).architecture).toBe('qwen2');
    expect(parseModelConfig(withoutType).architecture).toBe('llama');
  });

  it('reads a list of EOS ids', () => {
    expect(parseModelConfig({ ...STORIES_CONFIG, eos_token_id: [128001, 128009] }).eosTokenIds).toEqual([128001, 128009]);
  });

  it('reads linear and llama3 rope scaling, by rope_type or type', () => {
    expect(parseModelConfig({ ...STORIES_CONFIG, rope_scaling: { type: 'linear', factor: 2 } }).ropeScaling).toEqual({
      type: 'linear',
      factor: 2,
    });
    const llama3 = {
      rope_type: 'llama3',
      factor: 32,
      low_freq_factor: 1,
      high_freq_factor: 4,
      original_max_position_embeddings: 8192,
    };
    expect(parseModelConfig({ ...STORIES_CONFIG, rope_theta: 500000, rope_scaling: llama3 })).toMatchObject({
      ropeTheta: 500000,
      ropeScaling: { type: 'llama3', factor: 32, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 8192 },
    });
    expect(parseModelConfig({ ...STORIES_CONFIG, rope_scaling: { rope_type: 'default' } }).ropeScaling).toBeNull();
  });

  it('reads transformers v5 rope_parameters', () => {
    const { rope_theta: _, rope_scaling: __, ...withoutRope } = STORIES_CONFIG;
    const config = parseModelConfig({
      ...withoutRope,
      rope_parameters: { rope_type: 'linear', factor: 4, rope_theta: 1e6 },
    });
    expect(config).toMatchObject({ ropeTheta: 1e6, ropeScaling: { type: 'linear', factor: 4 } });
  });

  describe('errors name the file, the field, what was found and the fix', () => {
    it('unsupported architecture', () => {
      const error = configError({ ...STORIES_CONFIG, model_type: 'gpt2', architectures: ['GPT2LMHeadModel'] });
      expect(error.message).toContain('model_type is "gpt2"');
      expect(error.message).toContain('"llama"');
      expect(error.message).toContain('"qwen2"');
      const { model_type: _, ...withoutType } = STORIES_CONFIG;
      expect(configError({ ...withoutType, architectures: ['GPT2LMHeadModel'] }).message).toContain('GPT2LMHeadModel');
    });

    it('grouped-query heads that do not divide', () => {
      expect(configError({ ...STORIES_CONFIG, num_key_value_heads: 3 }).message).toBe(
        'config.json: num_key_value_heads is 3 but num_attention_heads (8) is not a multiple of it; ' +
          'this is not a valid grouped-query attention config',
      );
    });

    it('missing, non-integer and non-positive sizes', () => {
      const { hidden_size: _, ...withoutHidden } = STORIES_CONFIG;
      expect(configError(withoutHidden).message).toContain('hidden_size is missing');
      expect(configError({ ...STORIES_CONFIG, vocab_size: '512' }).message).toContain(
        'vocab_size is "512" but must be a positive integer',
      );
      expect(configError({ ...STORIES_CONFIG, num_hidden_layers: 0 }).message).toContain('num_hidden_layers is 0');
      expect(configError({ ...STORIES_CONFIG, intermediate_size: 1.5 }).message).toContain('intermediate_size is 1.5');
      expect(configError({ ...STORIES_CONFIG, rms_norm_eps: -1 }).message).toContain('rms_norm_eps is -1');
    });

    it('odd or underivable head_dim', () => {
      expect(configError({ ...STORIES_CONFIG, head_dim: 7 }).message).toContain('head_dim is 7 but must be even');
      const { head_dim: _, ...withoutHeadDim } = STORIES_CONFIG;
      expect(configError({ ...withoutHeadDim, hidden_size: 60 }).message).toContain(
        'hidden_size (60) is not a multiple of num_attention_heads (8)',
      );
    });

    it('unsupported rope scaling', () => {
      const error = configError({ ...STORIES_CONFIG, rope_scaling: { rope_type: 'yarn', factor: 4 } });
      expect(error.message).toContain('rope_scaling.rope_type is "yarn"');
      expect(error.message).toContain('"linear" and "llama3"');
      expect(configError({ ...STORIES_CONFIG, rope_scaling: { type: 'linear' } }).message).toContain(
        'rope_scaling.factor is missing',
      );
    });

    it('unsupported MLP and attention variants', () => {
      expect(configError({ ...STORIES_CONFIG, mlp_bias: true }).message).toContain('mlp_bias is true');
      expect(configError({ ...STORIES_CONFIG, hidden_act: 'gelu' }).message).toContain('hidden_act is "gelu"');
      expect(
        configError({ ...STORIES_CONFIG, model_type: 'qwen2', use_sliding_window: true }).message,
      ).toContain('use_sliding_window is true');
      expect(
        configError({ ...STORIES_CONFIG, quantization_config: { quant_method: 'gptq' } }).message,
      ).toContain('quant_method "gptq"');
    });

    it('bad token ids and a config that is not an object', () => {
      expect(configError({ ...STORIES_CONFIG, eos_token_id: [2, 'x'] }).message).toContain('eos_token_id is [2,"x"]');
      expect(configError([1, 2]).message).toContain('must hold a JSON object');
    });
  });
});
