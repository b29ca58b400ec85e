// The forward pass of a Llama-family decoder (Llama, SmolLM2, Qwen2) as an ONNX graph with a KV
// cache, in the form transformers.js runs for text generation:
//   inputs   input_ids [B, S], attention_mask [B, T], position_ids [B, S]   (int64)
//            past_key_values.{i}.key / .value [B, Hk, P, D]                 (float32, P may be 0)
//   outputs  logits [B, S, V], present.{i}.key / .value [B, Hk, T, D]       (T = P + S)
// The math is Hugging Face's LlamaForCausalLM / Qwen2ForCausalLM in float32:
//   RMSNorm x / sqrt(mean(x²) + eps) * w; rotate_half RoPE indexed by position_ids; grouped-query
//   attention (query head h reads kv head h / (H / Hk)) with the causal and padding masks; SwiGLU MLP.
// Design choices:
//   - RoPE cos/sin are a table over all max_position_embeddings positions, computed in float64 as
//     the engine's rope.ts does (rope_scaling included), so both read the same numbers.
//   - GQA without repeating the cache: queries are grouped [B, Hk, G, S, D] and multiply the keys
//     [B, Hk, 1, D, T] by broadcasting.
//   - Linear weights are stored transposed ([in, out]) for MatMul; a tied LM head is a Transpose of
//     the embedding (folded by onnxruntime when the session starts), so it is stored once.
import { ropeTable } from '../rope.ts';
import type { HostLinear, HostTensor, HostWeights, ModelConfig } from '../model/types.ts';
import { ELEMENT_TYPE, OnnxGraph, type Dim } from './onnx-graph.ts';

const BATCH = 'batch_size';
const SEQUENCE = 'sequence_length';
const PAST = 'past_sequence_length';
const TOTAL = 'total_sequence_length';
/** torch.finfo(float32).min: what transformers writes into masked attention scores. */
const MASKED_SCORE = -3.4028234663852886e38;

export function decoderGraph(config: ModelConfig, weights: HostWeights): OnnxGraph {
  const { numLayers, numHeads: H, numKvHeads: Hk, headDim: D, vocabSize: V, hiddenSize: C } = config;
  const g = new OnnxGraph(`${config.architecture} decoder`);
  const inputIds = g.input('input_ids', 'int64', [BATCH, SEQUENCE]);
  const attentionMask = g.input('attention_mask', 'int64', [BATCH, TOTAL]);
  const positionIds = g.input('position_ids', 'int64', [BATCH, SEQUENCE]);
  const cacheShape: Dim[] = [BATCH, Hk, PAST, D];
  const past = Array.from({ length: numLayers }, (_, i) => ({
    key: g.input(`past_key_values.${i}.key`, 'float32', cacheShape),
    value: g.input(`past_key_values.${i}.value`, 'float32', cacheShape),
  }));

  const embedding = g.weight(weights.embedding.name, weights.embedding.shape, weights.embedding.data);
  let x = g.op('Gather', [embedding, inputIds], { axis: 0 }); // [B, S, C]
  const rope = ropeAt(g, config, positionIds);
  const allowed = attentionAllowed(g, inputIds, attentionMask);

  weights.layers.forEach((layer, i) => {
    g.scope = `/layers.${i}/self_attn`;
    const h = rmsNorm(g, x, layer.inputNorm, config.rmsNormEps);
    const heads = (linearOut: string, count: number) => g.op('Reshape', [linearOut, g.int64([0, 0, count, D])]); // [B, S, count, D]
    const q = applyRope(g, heads(linear(g, h, layer.q), H), rope, D);
    const k = applyRope(g, heads(linear(g, h, layer.k), Hk), rope, D);
    const v = heads(linear(g, h, layer.v), Hk);
    // The cache holds keys after RoPE, one head per kv head: [B, Hk, T, D].
    const presentKey = g.op('Concat', [past[i].key, g.op('Transpose', [k], { perm: [0, 2, 1, 3] })], { axis: 2 }, `present.${i}.key`);
    const presentValue = g.op('Concat', [past[i].value, g.op('Transpose', [v], { perm: [0, 2, 1, 3] })], { axis: 2 }, `present.${i}.value`);
    g.output(presentKey, 'float32', [BATCH, Hk, TOTAL, D]);
    g.output(presentValue, 'float32', [BATCH, Hk, TOTAL, D]);

    // Query head h = kv * G + j reads kv head kv: [B, S, H, D] -> [B, Hk, G, S, D].
    const grouped = g.op('Transpose', [g.op('Reshape', [q, g.int64([0, 0, Hk, H / Hk, D])])], { perm: [0, 2, 3, 1, 4] });
    const keysT = g.op('Unsqueeze', [g.op('Transpose', [presentKey], { perm: [0, 1, 3, 2] }), g.int64([2])]); // [B, Hk, 1, D, T]
    const scores = g.op('Mul', [g.op('MatMul', [grouped, keysT]), g.float32([1 / Math.sqrt(D)], [])]); // [B, Hk, G, S, T]
    const probs = g.op('Softmax', [g.op('Where', [allowed, scores, g.float32([MASKED_SCORE], [])])], { axis: -1 });
    const context = g.op('MatMul', [probs, g.op('Unsqueeze', [presentValue, g.int64([2])])]); // [B, Hk, G, S, D]
    const merged = g.op('Reshape', [g.op('Transpose', [context], { perm: [0, 3, 1, 2, 4] }), g.int64([0, 0, H * D])]);
    x = g.op('Add', [x, linear(g, merged, layer.o)]);

    g.scope = `/layers.${i}/mlp`;
    const h2 = rmsNorm(g, x, layer.postAttentionNorm, config.rmsNormEps);
    const gate = linear(g, h2, layer.gate);
    const swish = g.op('Mul', [gate, g.op('Sigmoid', [gate])]);
    x = g.op('Add', [x, linear(g, g.op('Mul', [swish, linear(g, h2, layer.up)]), layer.down)]);
  });

  g.scope = '/lm_head';
  const final = rmsNorm(g, x, weights.finalNorm, config.rmsNormEps);
  const head =
    weights.lmHead === weights.embedding
      ? g.op('Transpose', [embedding], { perm: [1, 0] })
      : g.weight(`${weights.lmHead.name}.T`, [C, V], transpose(weights.lmHead));
  g.output(g.op('MatMul', [final, head], {}, 'logits'), 'float32', [BATCH, SEQUENCE, V]);
  return g;
}

/** Bytes of float32 weights the graph of this config stores (weights, biases, norms, RoPE tables). */
export function decoderWeightBytes(config: ModelConfig): number {
  const { hiddenSize: C, intermediateSize: F, numHeads: H, numKvHeads: Hk, headDim: D, vocabSize: V } = config;
  const attention = C * H * D * 2 + C * Hk * D * 2 + (config.qkvBias ? H * D + 2 * Hk * D : 0) + (config.oBias ? C : 0);
  const layer = attention + 3 * C * F + 2 * C;
  const values = V * C * (config.tieWordEmbeddings ? 1 : 2) + config.numLayers * layer + C + config.maxPositions * D;
  return 4 * values;
}

/** x W^T + b, with W stored transposed as `<name>.T` [in, out]. */
function linear(g: OnnxGraph, x: string, { weight, bias }: HostLinear): string {
  const [outFeatures, inFeatures] = weight.shape;
  const y = g.op('MatMul', [x, g.weight(`${weight.name}.T`, [inFeatures, outFeatures], transpose(weight))]);
  return bias ? g.op('Add', [y, g.weight(bias.name, bias.shape, bias.data)]) : y;
}

function transpose({ data, shape: [rows, cols] }: HostTensor): Float32Array {
  const out = new Float32Array(data.length);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) out[c * rows + r] = data[r * cols + c];
  }
  return out;
}

function rmsNorm(g: OnnxGraph, x: string, weight: HostTensor, eps: number): string {
  const meanSquare = g.op('ReduceMean', [g.op('Pow', [x, g.float32([2], [])])], { axes: [-1], keepdims: 1 });
  const normed = g.op('Div', [x, g.op('Sqrt', [g.op('Add', [meanSquare, g.float32([eps], [])])])]);
  return g.op('Mul', [normed, g.weight(weight.name, weight.shape, weight.data)]);
}

interface Rope {
  /** cos and sin of position * inv_freq, [B, S, 1, D/2]: broadcast over heads. */
  cos: string;
  sin: string;
}

function ropeAt(g: OnnxGraph, config: ModelConfig, positionIds: string): Rope {
  const half = config.headDim / 2;
  const table = ropeTable(config, config.maxPositions); // [positions, D/2, (cos, sin)]
  const cos = new Float32Array(config.maxPositions * half);
  const sin = new Float32Array(config.maxPositions * half);
  for (let i = 0; i < cos.length; i++) {
    cos[i] = table[2 * i];
    sin[i] = table[2 * i + 1];
  }
  g.scope = '/rotary_emb';
  const at = (name: string, values: Float32Array) =>
    g.op('Unsqueeze', [g.op('Gather', [g.weight(name, [config.maxPositions, half], values), positionIds], { axis: 0 }), g.int64([2])]);
  return { cos: at('rotary_emb.cos', cos), sin: at('rotary_emb.sin', sin) };
}

/** rotate_half RoPE on [B, S, heads, D]: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin). */
function applyRope(g: OnnxGraph, x: string, { cos, sin }: Rope, D: number): string {
  const [x1, x2] = g.node('Split', [x, g.int64([D / 2, D / 2])], 2, { axis: -1 });
  const first = g.op('Sub', [g.op('Mul', [x1, cos]), g.op('Mul', [x2, sin])]);
  const second = g.op('Add', [g.op('Mul', [x2, cos]), g.op('Mul', [x1, sin])]);
  return g.op('Concat', [first, second], { axis: -1 });
}

/**
 * Which keys each query may attend to, [B, 1, 1, S, T] (bool): key j <= P + i (causal, with the
 * cached positions first) and attention_mask[b, j] = 1 (not padding).
 */
function attentionAllowed(g: OnnxGraph, inputIds: string, attentionMask: string): string {
  g.scope = '/attention_mask';
  const dim = (value: string, axis: number) => g.op('Gather', [g.op('Shape', [value]), g.int64([axis], [])], { axis: 0 });
  const S = dim(inputIds, 1);
  const T = dim(attentionMask, 1);
  const one = g.int64([1], []);
  const queryPositions = g.op('Range', [g.op('Sub', [T, S]), T, one]); // [S]
  const keyPositions = g.op('Range', [g.int64([0], []), T, one]); // [T]
  const causal = g.op('LessOrEqual', [g.op('Unsqueeze', [keyPositions, g.int64([0])]), g.op('Unsqueeze', [queryPositions, g.int64([1])])]); // [S, T]
  const notPadding = g.op('Cast', [g.op('Unsqueeze', [attentionMask, g.int64([1, 2, 3])])], { to: ELEMENT_TYPE.bool }); // [B, 1, 1, 1, T]
  return g.op('And', [notPadding, causal]);
}
