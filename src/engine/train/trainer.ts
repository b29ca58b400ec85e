// The training-step API the RL algorithms and the SFT command call:
//
//   const trainer = new Trainer(model.gpuModel, { train: adapter, optimizer: { schedule: { kind: 'constant', lr: 1e-3 } } });
//   const metrics = await trainer.step(microBatches, { ppo: 1, value: 0.5, entropy: 0.01 });
//
// A step runs forward, loss and backward for each micro-batch (gradients accumulate, the loss is
// averaged over all action tokens of the step), then AdamW with global-norm clipping on the LoRA
// matrices (or every weight, in full mode) and on the value head, and reads back only the scalar metrics: one readback per step.
import { readBuffers } from '../gpu/buffers.ts';
import { encodeDispatches } from '../gpu/kernels.ts';
import type { GpuModel } from '../gpu-model.ts';
import type { GpuLoraAdapter } from '../lora/gpu-adapter.ts';
import { packBatch, type TrainBatch } from './batch.ts';
import { TrainingState } from './graph.ts';
import { LOSS_METRICS, resolveLossWeights, type LossWeights } from './loss.ts';
import { AdamW, GRAD_NORM_BYTES, type AdamWOptions, type AdamWState } from './optimizer.ts';
import type { ParameterSet } from './parameters.ts';
import type { LrSchedule } from './schedule.ts';
import { ValueHead } from './value-head.ts';

export interface TrainerOptions {
  /**
   * The LoRA adapter to train (updated in place on the GPU), or 'full' to train every weight of a
   * model built with `trainable` (tiny models only).
   */
  train: GpuLoraAdapter | 'full';
  /** AdamW settings, shared by the adapter and the value head. */
  optimizer: AdamWOptions;
  /** A value head to continue training (default: a new one, initialised to zero). */
  valueHead?: ValueHead;
  /** Training states kept for reuse, one per micro-batch shape [B, T] (default 4). */
  cachedShapes?: number;
  /** Seed of the LoRA dropout masks (default 0). */
  seed?: number;
}

export interface StepMetrics {
  /** The weighted loss, averaged over the step's action tokens. */
  'losses/total': number;
  /** Each term averaged over action tokens, before its weight (losses/clipfrac: share of clipped tokens). */
  terms: Record<(typeof LOSS_METRICS)[number], number>;
  'charts/learning_rate': number;
  /** Global gradient norm of the trained parameters (adapter or all weights) before clipping. */
  'losses/grad_norm': number;
  'losses/value_grad_norm': number;
  /** True when a non-finite gradient made the optimiser skip the update. */
  skipped: boolean;
  step: number;
  tokens: number;
  actionTokens: number;
}

export interface TrainerState {
  /** Moments of the trained parameters: the adapter's, or every weight's in full mode. */
  adapter: AdamWState;
  valueHead: AdamWState;
}

export class Trainer {
  /** The adapter being trained; null in full-parameter mode. */
  readonly adapter: GpuLoraAdapter | null;
  readonly parameters: ParameterSet;
  readonly valueHead: ValueHead;
  private readonly adapterOptimizer: AdamW;
  private readonly valueOptimizer: AdamW;
  private readonly states = new Map<string, TrainingState>();
  private readonly cachedShapes: number;
  private readonly ownsValueHead: boolean;
  private readonly seed: number;
  private stepSums: GPUBuffer | null = null;

  constructor(
    readonly model: GpuModel,
    options: TrainerOptions,
  ) {
    const device = model.gpu.device;
    if (options.train === 'full') {
      if (!model.trainable) throw new RangeError('full-parameter training needs the model loaded with trainable weights');
      this.adapter = null;
      this.parameters = model.trainable.parameters;
    } else {
      this.adapter = options.train;
      this.parameters = options.train.parameters;
    }
    this.ownsValueHead = !options.valueHead;
    this.valueHead = options.valueHead ?? new ValueHead(model.gpu, model.config.hiddenSize);
    this.cachedShapes = options.cachedShapes ?? 4;
    this.seed = options.seed ?? 0;
    const params = this.parameters;
    this.adapterOptimizer = new AdamW(device, model.kernels, params.params, params.grads, params.size, options.optimizer);
    const value = this.valueHead.parameters;
    this.valueOptimizer = new AdamW(device, model.kernels, value.params, value.grads, value.size, options.optimizer);
  }

  /** The learning-rate schedule of the adapter (or weights) and the value head from the next step on. */
  setSchedule(schedule: LrSchedule): void {
    this.adapterOptimizer.setSchedule(schedule);
    this.valueOptimizer.setSchedule(schedule);
  }

  /** Optimiser steps taken so far. */
  get stepsTaken(): number {
    return this.adapterOptimizer.step;
  }

  /** GPU memory one micro-batch of B sequences of T tokens needs for activations and their gradients. */
  bytesPerMicroBatch(B: number, T: number): number {
    const targets = this.adapter ? this.adapter.host.modules.length / this.model.config.numLayers : 0;
    return TrainingState.bytesNeeded(this.model, B, T, this.adapter?.rank ?? 0, targets);
  }

  /** Dispatches of one optimiser step over a single micro-batch of this shape. */
  dispatchesPerStep(B: number, T: number): number {
    return this.stateFor(B, T).plan().length + this.adapterOptimizer.dispatches().length + this.valueOptimizer.dispatches().length;
  }

  private stateFor(B: number, T: number, tree = false): TrainingState {
    const key = `${B}x${T}${tree ? ' tree' : ''}`;
    let state = this.states.get(key);
    if (state) {
      this.states.delete(key); // re-insert as the most recently used
    } else {
      state = new TrainingState(this.model, B, T, this.adapter, this.valueHead, { fullParameters: !this.adapter, dropoutSeed: this.seed, tree });
      if (this.states.size >= this.cachedShapes) {
        const [oldestKey, oldest] = this.states.entries().next().value!;
        oldest.dispose();
        this.states.delete(oldestKey);
      }
    }
    this.states.set(key, state);
    return state;
  }

  /** A buffer for the metric sums of `microBatches` micro-batches, one row each (grown as needed). */
  private stepSumsFor(microBatches: number): GPUBuffer {
    const bytes = microBatches * LOSS_METRICS.length * 4;
    if (!this.stepSums || this.stepSums.size < bytes) {
      this.stepSums?.destroy();
      this.stepSums = this.model.gpu.device.createBuffer({ size: bytes, usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST, label: 'step metric sums' });
    }
    return this.stepSums;
  }

  /** One optimiser step over the micro-batches. */
  async step(microBatches: TrainBatch[], loss: LossWeights): Promise<StepMetrics> {
    if (microBatches.length === 0) throw new RangeError('a training step needs at least one micro-batch');
    const weights = resolveLossWeights(loss);
    const packed = microBatches.map(packBatch);
    const actionTokens = packed.reduce((n, p) => n + p.actionTokens, 0);
    if (actionTokens === 0) throw new RangeError('no token of this step is marked as an action: nothing to learn from (check the action masks)');
    const device = this.model.gpu.device;
    const prepared = this.adapterOptimizer.prepareStep();
    this.valueOptimizer.prepareStep();

    // Each micro-batch's metric sums are copied out as it finishes: a step with more shapes than the cache
    // holds evicts (frees) the states of its earlier micro-batches.
    const metricBytes = LOSS_METRICS.length * 4;
    const stepSums = this.stepSumsFor(packed.length);
    for (const [i, batch] of packed.entries()) {
      const state = this.stateFor(batch.B, batch.T, batch.rowLimits !== undefined);
      state.load(batch);
      // Every micro-batch of every step draws its own dropout masks, reproducibly.
      state.setDropoutStep(prepared.step * 1024 + i);
      state.setLoss(weights, actionTokens);
      const encoder = device.createCommandEncoder();
      if (i === 0) {
        this.adapterOptimizer.zeroGrads(encoder);
        this.valueOptimizer.zeroGrads(encoder);
      }
      encoder.clearBuffer(state.metricSums);
      encodeDispatches(encoder, state.plan());
      encoder.copyBufferToBuffer(state.metricSums, 0, stepSums, i * metricBytes, metricBytes);
      device.queue.submit([encoder.finish()]);
    }
    const encoder = device.createCommandEncoder();
    encodeDispatches(encoder, [...this.adapterOptimizer.dispatches(), ...this.valueOptimizer.dispatches()]);
    device.queue.submit([encoder.finish()]);
    this.parameters.markChanged();

    const bytes = await readBuffers(device, [
      { buffer: this.adapterOptimizer.gradNormBuffer, bytes: GRAD_NORM_BYTES },
      { buffer: this.valueOptimizer.gradNormBuffer, bytes: GRAD_NORM_BYTES },
      { buffer: stepSums, bytes: packed.length * metricBytes },
    ]);
    const adapterReport = this.adapterOptimizer.finishStep(new Float32Array(bytes, 0, 4));
    const valueReport = this.valueOptimizer.finishStep(new Float32Array(bytes, GRAD_NORM_BYTES, 4));
    const sums = new Array<number>(LOSS_METRICS.length).fill(0);
    packed.forEach((_, s) => new Float32Array(bytes, 2 * GRAD_NORM_BYTES + s * metricBytes, LOSS_METRICS.length).forEach((v, i) => (sums[i] += v)));
    const terms = Object.fromEntries(LOSS_METRICS.map((name, i) => [name, sums[i]])) as StepMetrics['terms'];
    const total =
      weights.nll * sums[0] + weights.pg * sums[1] + weights.ppo * sums[2] - weights.entropy * sums[3] + weights.kl * sums[4] + weights.value * sums[5];
    return {
      'losses/total': total,
      terms,
      'charts/learning_rate': prepared.lr,
      'losses/grad_norm': adapterReport.gradNorm,
      'losses/value_grad_norm': valueReport.gradNorm,
      skipped: adapterReport.skipped || valueReport.skipped,
      step: this.stepsTaken,
      tokens: packed.reduce((n, p) => n + p.B * p.T, 0),
      actionTokens,
    };
  }

  /** Optimiser moments and step counts, to save with the adapter and value head; restore with loadState. */
  async optimizerState(): Promise<TrainerState> {
    return { adapter: await this.adapterOptimizer.state(), valueHead: await this.valueOptimizer.state() };
  }

  loadOptimizerState(state: TrainerState): void {
    this.adapterOptimizer.loadState(state.adapter);
    this.valueOptimizer.loadState(state.valueHead);
  }

  /** Frees the training states and optimisers (and the value head if the trainer made it); the adapter or model stays. */
  dispose(): void {
    for (const state of this.states.values()) state.dispose();
    this.states.clear();
    this.stepSums?.destroy();
    this.stepSums = null;
    this.adapterOptimizer.dispose();
    this.valueOptimizer.dispose();
    if (this.ownsValueHead) this.valueHead.dispose();
  }
}
