// A model's weights on the GPU, laid out for the forward pass: q/k/v fused into one matrix and
// gate/up into another (one matmul each instead of three and two), plus the RoPE table.
//
// Normally every weight has a buffer of its own (split by rows where one binding cannot hold it). With
// `trainable` (full-parameter training of tiny models) every weight instead lives in one ParameterSet:
// one flat buffer, gradients in a second of the same layout, so one AdamW updates them all. The fused
// qkv and gate_up matrices are single tensors of the set, and so are the biases and norm weights; the
// forward sees ranges of the flat buffer and runs unchanged.
import { readBuffers, storageFrom } from './gpu/buffers.ts';
import type { GpuContext } from './gpu/device.ts';
import { Kernels } from './gpu/kernels.ts';
import { destroyMatrix, uploadMatrix, type GpuMatrix } from './gpu/matrix.ts';
import type { HostLayer, HostLinear, HostTensor, HostWeights, ModelConfig } from './model/types.ts';
import { ropeTable } from './rope.ts';
import { ParameterSet, type ParameterView } from './train/parameters.ts';

/** A weight vector (norm weight, bias) as bound to a kernel: a buffer of its own, or a range of the parameter buffer. */
export type WeightBinding = GPUBuffer | GPUBufferBinding;

export interface GpuLayer {
  inputNorm: WeightBinding;
  /** Rows: H*D query, then Hk*D key, then Hk*D value outputs. */
  qkv: GpuMatrix;
  qkvBias: WeightBinding | null;
  o: GpuMatrix;
  oBias: WeightBinding | null;
  postAttentionNorm: WeightBinding;
  /** Rows: F gate, then F up outputs. */
  gateUp: GpuMatrix;
  down: GpuMatrix;
}

export interface GpuModelOptions {
  /**
   * Hold every weight in one ParameterSet (`GpuModel.trainable`), for full-parameter training. Only for
   * tiny models: the whole set must fit one storage binding and MAX_TRAINABLE_PARAMETERS.
   */
  trainable?: boolean;
}

/** Most floats (alignment padding included) a trainable model may hold. */
export const MAX_TRAINABLE_PARAMETERS = 64 * 2 ** 20;

/** One layer's tensors in the parameter set; `matrix` of each is what the forward binds, `grad` its gradient. */
export interface TrainableLayer {
  inputNorm: ParameterView;
  /** [(H + 2Hk) * D, C], rows as GpuLayer.qkv. */
  qkv: ParameterView;
  /** [1, (H + 2Hk) * D] */
  qkvBias: ParameterView | null;
  o: ParameterView;
  /** [1, C] */
  oBias: ParameterView | null;
  postAttentionNorm: ParameterView;
  /** [2F, C], rows as GpuLayer.gateUp. */
  gateUp: ParameterView;
  down: ParameterView;
}

/** Every weight of a trainable model as a view of its one ParameterSet. Vectors are [1, n] views. */
export interface TrainableWeights {
  parameters: ParameterSet;
  /** [V, C] */
  embedding: ParameterView;
  /** [V, C]; the embedding's own view when the embeddings are tied. */
  lmHead: ParameterView;
  tied: boolean;
  layers: TrainableLayer[];
  finalNorm: ParameterView;
}

interface TensorName {
  name: string;
  shape: number[];
}

interface LinearNames {
  weight: TensorName;
  bias: TensorName | null;
}

type LayerNames = { [K in keyof HostLayer]: HostLayer[K] extends HostLinear ? LinearNames : TensorName };

/** The checkpoint's names and shapes, to hand the weights back under them. */
interface WeightNames {
  embedding: TensorName;
  /** null when tied to the embedding. */
  lmHead: TensorName | null;
  layers: LayerNames[];
  finalNorm: TensorName;
}

function concatRows(parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

const nameOf = (t: HostTensor): TensorName => ({ name: t.name, shape: [...t.shape] });
const linearNames = (l: HostLinear): LinearNames => ({ weight: nameOf(l.weight), bias: l.bias ? nameOf(l.bias) : null });

/** Each distinct tensor of `weights` once (a tied LM head is the embedding), in checkpoint order: for saving as safetensors. */
export function hostWeightTensors(weights: HostWeights): HostTensor[] {
  const tensors: HostTensor[] = [weights.embedding];
  for (const layer of weights.layers) {
    tensors.push(layer.inputNorm);
    for (const l of [layer.q, layer.k, layer.v, layer.o]) tensors.push(l.weight, ...(l.bias ? [l.bias] : []));
    tensors.push(layer.postAttentionNorm);
    for (const l of [layer.gate, layer.up, layer.down]) tensors.push(l.weight, ...(l.bias ? [l.bias] : []));
  }
  tensors.push(weights.finalNorm);
  if (weights.lmHead !== weights.embedding) tensors.push(weights.lmHead);
  return tensors;
}

export class GpuModel {
  readonly kernels: Kernels;
  readonly embedding: GpuMatrix;
  readonly lmHead: GpuMatrix;
  readonly layers: GpuLayer[];
  readonly finalNorm: WeightBinding;
  /** (cos, sin) for positions 0 .. ropePositions-1, [positions, D/2, 2]. */
  readonly rope: GPUBuffer;
  readonly ropePositions: number;
  /** Every weight in one ParameterSet, when built with `trainable`; null otherwise. */
  readonly trainable: TrainableWeights | null;
  private readonly names: WeightNames;

  constructor(
    readonly gpu: GpuContext,
    readonly config: ModelConfig,
    weights: HostWeights,
    options: GpuModelOptions = {},
  ) {
    const device = gpu.device;
    const { hiddenSize: C, numHeads: H, numKvHeads: Hk, headDim: D, intermediateSize: F, vocabSize: V } = config;
    this.kernels = new Kernels(device, D, gpu.cpu ? 1 : 64);
    const tied = weights.lmHead === weights.embedding;
    this.names = {
      embedding: nameOf(weights.embedding),
      lmHead: tied ? null : nameOf(weights.lmHead),
      layers: weights.layers.map((l) => ({
        inputNorm: nameOf(l.inputNorm), q: linearNames(l.q), k: linearNames(l.k), v: linearNames(l.v), o: linearNames(l.o),
        postAttentionNorm: nameOf(l.postAttentionNorm), gate: linearNames(l.gate), up: linearNames(l.up), down: linearNames(l.down),
      })),
      finalNorm: nameOf(weights.finalNorm),
    };
    const bias = (linears: HostLinear[]) => (linears.every((l) => l.bias) ? concatRows(linears.map((l) => l.bias!.data)) : null);
    // the host data of each layer as the GPU holds it
    const hostLayers = weights.layers.map((layer) => ({
      inputNorm: layer.inputNorm.data,
      qkv: concatRows([layer.q.weight.data, layer.k.weight.data, layer.v.weight.data]),
      qkvBias: config.qkvBias ? bias([layer.q, layer.k, layer.v]) : null,
      o: layer.o.weight.data,
      oBias: config.oBias ? bias([layer.o]) : null,
      postAttentionNorm: layer.postAttentionNorm.data,
      gateUp: concatRows([layer.gate.weight.data, layer.up.weight.data]),
      down: layer.down.weight.data,
    }));
    const qkvRows = (H + 2 * Hk) * D;

    if (options.trainable) {
      const tensors: { name: string; rows: number; cols: number; data: Float32Array }[] = [];
      const add = (name: string, rows: number, cols: number, data: Float32Array) => {
        tensors.push({ name, rows, cols, data });
        return name;
      };
      const embedding = add('embedding', V, C, weights.embedding.data);
      const lmHead = tied ? embedding : add('lm_head', V, C, weights.lmHead.data);
      const layerNames = hostLayers.map((l, i) => ({
        inputNorm: add(`layers.${i}.input_norm`, 1, C, l.inputNorm),
        qkv: add(`layers.${i}.qkv`, qkvRows, C, l.qkv),
        qkvBias: l.qkvBias ? add(`layers.${i}.qkv.bias`, 1, qkvRows, l.qkvBias) : null,
        o: add(`layers.${i}.o`, C, H * D, l.o),
        oBias: l.oBias ? add(`layers.${i}.o.bias`, 1, C, l.oBias) : null,
        postAttentionNorm: add(`layers.${i}.post_attention_norm`, 1, C, l.postAttentionNorm),
        gateUp: add(`layers.${i}.gate_up`, 2 * F, C, l.gateUp),
        down: add(`layers.${i}.down`, C, F, l.down),
      }));
      const finalNorm = add('final_norm', 1, C, weights.finalNorm.data);
      const floats = ParameterSet.sizeFor(tensors);
      const count = tensors.reduce((n, t) => n + t.rows * t.cols, 0);
      if (floats > MAX_TRAINABLE_PARAMETERS || floats * 4 > gpu.maxBindingBytes) {
        throw new RangeError(
          `Full-parameter training keeps every weight in one GPU buffer and is meant for tiny models: this model has ${count} parameters ` +
            `(${floats * 4} bytes), over the limit of ${Math.min(MAX_TRAINABLE_PARAMETERS, Math.floor(gpu.maxBindingBytes / 4))} ` +
            `(${MAX_TRAINABLE_PARAMETERS} parameters, ${gpu.maxBindingBytes} bytes per GPU binding). Train a LoRA adapter instead.`,
        );
      }
      const parameters = new ParameterSet(device, tensors);
      const view = (name: string) => parameters.view(name);
      const optional = (name: string | null) => (name ? view(name) : null);
      this.trainable = {
        parameters,
        embedding: view(embedding),
        lmHead: view(lmHead),
        tied,
        layers: layerNames.map((n) => ({
          inputNorm: view(n.inputNorm), qkv: view(n.qkv), qkvBias: optional(n.qkvBias), o: view(n.o), oBias: optional(n.oBias),
          postAttentionNorm: view(n.postAttentionNorm), gateUp: view(n.gateUp), down: view(n.down),
        })),
        finalNorm: view(finalNorm),
      };
      const vector = (v: ParameterView) => v.matrix.chunks[0].buffer;
      this.embedding = this.trainable.embedding.matrix;
      this.lmHead = this.trainable.lmHead.matrix;
      this.layers = this.trainable.layers.map((t) => ({
        inputNorm: vector(t.inputNorm),
        qkv: t.qkv.matrix,
        qkvBias: t.qkvBias && vector(t.qkvBias),
        o: t.o.matrix,
        oBias: t.oBias && vector(t.oBias),
        postAttentionNorm: vector(t.postAttentionNorm),
        gateUp: t.gateUp.matrix,
        down: t.down.matrix,
      }));
      this.finalNorm = vector(this.trainable.finalNorm);
    } else {
      this.trainable = null;
      const matrix = (data: Float32Array, rows: number, cols: number, label: string) => uploadMatrix(device, data, rows, cols, gpu.maxBindingBytes, label);
      const vector = (data: Float32Array, label: string) => storageFrom(device, data, label);
      this.embedding = matrix(weights.embedding.data, V, C, weights.embedding.name);
      this.lmHead = tied ? this.embedding : matrix(weights.lmHead.data, V, C, weights.lmHead.name);
      this.layers = hostLayers.map((l, i) => ({
        inputNorm: vector(l.inputNorm, weights.layers[i].inputNorm.name),
        qkv: matrix(l.qkv, qkvRows, C, `layers.${i}.qkv`),
        qkvBias: l.qkvBias && vector(l.qkvBias, `layers.${i}.qkv.bias`),
        o: matrix(l.o, C, H * D, weights.layers[i].o.weight.name),
        oBias: l.oBias && vector(l.oBias, `layers.${i}.o.bias`),
        postAttentionNorm: vector(l.postAttentionNorm, weights.layers[i].postAttentionNorm.name),
        gateUp: matrix(l.gateUp, 2 * F, C, `layers.${i}.gate_up`),
        down: matrix(l.down, C, F, weights.layers[i].down.weight.name),
      }));
      this.finalNorm = vector(weights.finalNorm.data, weights.finalNorm.name);
    }
    this.ropePositions = config.maxPositions;
    this.rope = storageFrom(device, Float32Array.from(ropeTable(config, this.ropePositions)), 'rope');
  }

  /**
   * Reads every weight back from the GPU (a trainable model's current values) as HostWeights under the
   * checkpoint's names and shapes: q/k/v and gate/up un-fused, biases split back per projection; a tied
   * LM head is the embedding object. hostWeightTensors() lists its tensors for saving.
   */
  async readWeights(): Promise<HostWeights> {
    const { hiddenSize: C, numHeads: H, numKvHeads: Hk, headDim: D, intermediateSize: F } = this.config;
    // every GPU tensor, read in as few copies as fit a staging buffer
    const tensors: { floats: number; parts: { buffer: GPUBuffer; offset: number; bytes: number }[] }[] = [];
    const part = (b: WeightBinding, floats: number) =>
      'buffer' in b ? { buffer: b.buffer, offset: b.offset ?? 0, bytes: floats * 4 } : { buffer: b, offset: 0, bytes: floats * 4 };
    const request = (parts: { buffer: GPUBuffer; offset: number; bytes: number }[]) => {
      tensors.push({ floats: parts.reduce((n, p) => n + p.bytes / 4, 0), parts });
      return tensors.length - 1;
    };
    const matrix = (m: GpuMatrix) => request(m.chunks.map((chunk) => part(chunk.buffer, chunk.rows * m.cols)));
    const vector = (b: WeightBinding, floats: number) => request([part(b, floats)]);
    const qkvRows = (H + 2 * Hk) * D;
    const requested = {
      embedding: matrix(this.embedding),
      lmHead: this.lmHead === this.embedding ? null : matrix(this.lmHead),
      layers: this.layers.map((l) => ({
        inputNorm: vector(l.inputNorm, C),
        qkv: matrix(l.qkv),
        qkvBias: l.qkvBias ? vector(l.qkvBias, qkvRows) : null,
        o: matrix(l.o),
        oBias: l.oBias ? vector(l.oBias, C) : null,
        postAttentionNorm: vector(l.postAttentionNorm, C),
        gateUp: matrix(l.gateUp),
        down: matrix(l.down),
      })),
      finalNorm: vector(this.finalNorm, C),
    };
    const data: Float32Array[] = [];
    const STAGING_BYTES = 128 * 2 ** 20;
    for (let first = 0; first < tensors.length; ) {
      let last = first + 1;
      let bytes = tensors[first].floats * 4;
      while (last < tensors.length && bytes + tensors[last].floats * 4 <= STAGING_BYTES) bytes += tensors[last++].floats * 4;
      const all = new Float32Array(await readBuffers(this.gpu.device, tensors.slice(first, last).flatMap((t) => t.parts)));
      let at = 0;
      for (const t of tensors.slice(first, last)) {
        data.push(all.slice(at, at + t.floats));
        at += t.floats;
      }
      first = last;
    }

    const tensor = (n: TensorName, values: Float32Array): HostTensor => ({ name: n.name, shape: [...n.shape], data: values });
    /** Consecutive row blocks of a fused tensor, each `sizes[i]` floats. */
    const split = (values: Float32Array, sizes: number[]) => {
      let at = 0;
      return sizes.map((size) => values.slice(at, (at += size)));
    };
    const embedding = tensor(this.names.embedding, data[requested.embedding]);
    return {
      embedding,
      lmHead: requested.lmHead === null ? embedding : tensor(this.names.lmHead!, data[requested.lmHead]),
      layers: requested.layers.map((r, i) => {
        const n = this.names.layers[i];
        const [q, k, v] = split(data[r.qkv], [H * D * C, Hk * D * C, Hk * D * C]);
        const qkvBias = r.qkvBias === null ? null : split(data[r.qkvBias], [H * D, Hk * D, Hk * D]);
        const [gate, up] = split(data[r.gateUp], [F * C, F * C]);
        const linear = (names: LinearNames, weight: Float32Array, biasValues: Float32Array | null): HostLinear => ({
          weight: tensor(names.weight, weight),
          bias: biasValues && names.bias ? tensor(names.bias, biasValues) : null,
        });
        return {
          inputNorm: tensor(n.inputNorm, data[r.inputNorm]),
          q: linear(n.q, q, qkvBias?.[0] ?? null),
          k: linear(n.k, k, qkvBias?.[1] ?? null),
          v: linear(n.v, v, qkvBias?.[2] ?? null),
          o: linear(n.o, data[r.o], r.oBias === null ? null : data[r.oBias]),
          postAttentionNorm: tensor(n.postAttentionNorm, data[r.postAttentionNorm]),
          gate: linear(n.gate, gate, null),
          up: linear(n.up, up, null),
          down: linear(n.down, data[r.down], null),
        };
      }),
      finalNorm: tensor(this.names.finalNorm, data[requested.finalNorm]),
    };
  }

  dispose(): void {
    if (this.trainable) {
      this.trainable.parameters.dispose(); // every weight is a range of it
    } else {
      destroyMatrix(this.embedding);
      if (this.lmHead !== this.embedding) destroyMatrix(this.lmHead);
      const destroy = (b: WeightBinding | null) => {
        if (b && !('buffer' in b)) b.destroy();
      };
      for (const layer of this.layers) {
        for (const m of [layer.qkv, layer.o, layer.gateUp, layer.down]) destroyMatrix(m);
        for (const b of [layer.inputNorm, layer.postAttentionNorm, layer.qkvBias, layer.oBias]) destroy(b);
      }
      destroy(this.finalNorm);
    }
    this.rope.destroy();
  }
}
