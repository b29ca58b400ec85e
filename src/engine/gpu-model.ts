// A model's weights on the GPU, laid out for the forward pass: q/k/v fused into one matrix and
// gate/up into another (one matmul each instead of three and two), plus the RoPE table.
import { storageFrom } from './gpu/buffers.ts';
import type { GpuContext } from './gpu/device.ts';
import { Kernels } from './gpu/kernels.ts';
import { destroyMatrix, uploadMatrix, type GpuMatrix } from './gpu/matrix.ts';
import type { HostLinear, HostTensor, HostWeights, ModelConfig } from './model/types.ts';
import { ropeTable } from './rope.ts';

export interface GpuLayer {
  inputNorm: GPUBuffer;
  /** Rows: H*D query, then Hk*D key, then Hk*D value outputs. */
  qkv: GpuMatrix;
  qkvBias: GPUBuffer | null;
  o: GpuMatrix;
  oBias: GPUBuffer | null;
  postAttentionNorm: GPUBuffer;
  /** Rows: F gate, then F up outputs. */
  gateUp: GpuMatrix;
  down: GpuMatrix;
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

export class GpuModel {
  readonly kernels: Kernels;
  readonly embedding: GpuMatrix;
  readonly lmHead: GpuMatrix;
  readonly layers: GpuLayer[];
  readonly finalNorm: GPUBuffer;
  /** (cos, sin) for positions 0 .. ropePositions-1, [positions, D/2, 2]. */
  readonly rope: GPUBuffer;
  readonly ropePositions: number;

  constructor(
    readonly gpu: GpuContext,
    readonly config: ModelConfig,
    weights: HostWeights,
  ) {
    const device = gpu.device;
    const { hiddenSize: C, numHeads: H, numKvHeads: Hk, headDim: D, intermediateSize: F } = config;
    this.kernels = new Kernels(device, D);
    const matrix = (data: Float32Array, rows: number, cols: number, label: string) => uploadMatrix(device, data, rows, cols, gpu.maxBindingBytes, label);
    const vector = (tensor: HostTensor) => storageFrom(device, tensor.data, tensor.name);
    const bias = (linears: HostLinear[], label: string) =>
      linears.every((l) => l.bias) ? storageFrom(device, concatRows(linears.map((l) => l.bias!.data)), label) : null;

    this.embedding = matrix(weights.embedding.data, config.vocabSize, C, weights.embedding.name);
    this.lmHead = weights.lmHead === weights.embedding ? this.embedding : matrix(weights.lmHead.data, config.vocabSize, C, weights.lmHead.name);
    this.layers = weights.layers.map((layer, i) => ({
      inputNorm: vector(layer.inputNorm),
      qkv: matrix(concatRows([layer.q.weight.data, layer.k.weight.data, layer.v.weight.data]), (H + 2 * Hk) * D, C, `layers.${i}.qkv`),
      qkvBias: config.qkvBias ? bias([layer.q, layer.k, layer.v], `layers.${i}.qkv.bias`) : null,
      o: matrix(layer.o.weight.data, C, H * D, layer.o.weight.name),
      oBias: config.oBias ? bias([layer.o], `layers.${i}.o.bias`) : null,
      postAttentionNorm: vector(layer.postAttentionNorm),
      gateUp: matrix(concatRows([layer.gate.weight.data, layer.up.weight.data]), 2 * F, C, `layers.${i}.gate_up`),
      down: matrix(layer.down.weight.data, C, F, layer.down.weight.name),
    }));
    this.finalNorm = vector(weights.finalNorm);
    this.ropePositions = config.maxPositions;
    this.rope = storageFrom(device, Float32Array.from(ropeTable(config, this.ropePositions)), 'rope');
  }

  dispose(): void {
    destroyMatrix(this.embedding);
    if (this.lmHead !== this.embedding) destroyMatrix(this.lmHead);
    for (const layer of this.layers) {
      for (const m of [layer.qkv, layer.o, layer.gateUp, layer.down]) destroyMatrix(m);
      for (const b of [layer.inputNorm, layer.postAttentionNorm, layer.qkvBias, layer.oBias]) b?.destroy();
    }
    this.finalNorm.destroy();
    this.rope.destroy();
  }
}
