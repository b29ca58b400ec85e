// AdamW with global gradient-norm clipping on the GPU, over one flat parameter buffer (see
// shaders/optimizer.wgsl). The three dispatches of a step are built once; each step only rewrites a
// small uniform, so the caller can encode forward, backward and the optimiser in one submit:
//
//   const step = adamw.prepareStep();             // before the submit that contains the step
//   adamw.zeroGrads(encoder);                      // once per accumulation cycle, before backward
//   ... encode forward and backward (they accumulate into `grads`) ...
//   encodeDispatches(encoder, adamw.dispatches());
//   ... one readback of the metrics, including GRAD_NORM_BYTES from adamw.gradNormBuffer ...
//   const report = adamw.finishStep(gradNormValues);
import { grid, readBuffers, storageBuffer, uniformBuffer } from '../gpu/buffers.ts';
import type { Dispatch, Kernels } from '../gpu/kernels.ts';
import { learningRate, validateLrSchedule, type LrSchedule } from './schedule.ts';

/** Gradients reduced per workgroup by the first grad-norm pass (CHUNK in optimizer.wgsl). */
const GRAD_NORM_CHUNK = 4096;
/** adamw_step's workgroup size (WG in optimizer.wgsl). */
const ADAMW_WORKGROUP = 64;

/** Bytes of gradNormBuffer to read back: f32 [norm, nonFinite, clipCoefficient, unused]. */
export const GRAD_NORM_BYTES = 16;

/** Size in bytes of the per-step uniform (StepParams in optimizer.wgsl). */
const STEP_UNIFORM_BYTES = 48;

export interface AdamWOptions {
  schedule: LrSchedule;
  /** Default 0.9. */
  beta1?: number;
  /** Default 0.999. */
  beta2?: number;
  /** Default 1e-8. */
  eps?: number;
  /** Decoupled weight decay for the whole buffer; default 0. */
  weightDecay?: number;
  /** Clip the global gradient norm to this; 0 disables clipping. Default 1. */
  maxGradNorm?: number;
  /** Multiplier of the raw gradients (e.g. 1 / accumulation steps), default 1; prepareStep may override it. */
  gradScale?: number;
}

export interface PreparedStep {
  /** 1-based update number t, used for the bias corrections and the schedule. */
  step: number;
  lr: number;
  gradScale: number;
}

export interface StepReport extends PreparedStep {
  /** Global L2 norm of the scaled gradients, before clipping (NaN or Infinity when skipped). */
  gradNorm: number;
  /** Factor the gradients were clipped by (1: not clipped). */
  clipCoefficient: number;
  /** The gradient norm was not finite: params and moments were left unchanged and the step count did not advance. */
  skipped: boolean;
}

/** Everything besides the parameters that a resumed run needs to continue bit-exactly. */
export interface AdamWState {
  /** Updates applied so far. */
  step: number;
  m: Float32Array;
  v: Float32Array;
}

function checkRange(name: string, value: number, ok: boolean, expected: string): void {
  if (!(Number.isFinite(value) && ok)) throw new RangeError(`AdamW: ${name} must be ${expected}, got ${value}`);
}

export class AdamW {
  private schedule: LrSchedule;
  readonly beta1: number;
  readonly beta2: number;
  readonly eps: number;
  readonly weightDecay: number;
  readonly maxGradNorm: number;
  readonly gradScale: number;
  /** f32 [norm, nonFinite, clipCoefficient, unused] of the latest step, written on the GPU; read GRAD_NORM_BYTES. */
  readonly gradNormBuffer: GPUBuffer;

  private readonly m: GPUBuffer;
  private readonly v: GPUBuffer;
  private readonly owned: GPUBuffer[];
  private readonly stepUniform: GPUBuffer;
  private readonly plan: Dispatch[];
  private stepCount = 0;
  private pending: PreparedStep | null = null;

  constructor(
    private readonly device: GPUDevice,
    kernels: Kernels,
    params: GPUBuffer,
    private readonly grads: GPUBuffer,
    readonly size: number,
    options: AdamWOptions,
  ) {
    if (!(Number.isInteger(size) && size > 0)) throw new RangeError(`AdamW: size must be a positive integer, got ${size}`);
    const bytes = size * 4;
    if (params.size < bytes || grads.size < bytes) {
      throw new RangeError(`AdamW: ${size} parameters need ${bytes} bytes, but params has ${params.size} and grads ${grads.size}`);
    }
    if (bytes > device.limits.maxStorageBufferBindingSize) {
      throw new RangeError(`AdamW: ${bytes} bytes of parameters exceed this device's largest binding (${device.limits.maxStorageBufferBindingSize})`);
    }
    validateLrSchedule(options.schedule);
    this.schedule = options.schedule;
    this.beta1 = options.beta1 ?? 0.9;
    this.beta2 = options.beta2 ?? 0.999;
    this.eps = options.eps ?? 1e-8;
    this.weightDecay = options.weightDecay ?? 0;
    this.maxGradNorm = options.maxGradNorm ?? 1;
    this.gradScale = options.gradScale ?? 1;
    checkRange('beta1', this.beta1, this.beta1 >= 0 && this.beta1 < 1, 'in [0, 1)');
    checkRange('beta2', this.beta2, this.beta2 >= 0 && this.beta2 < 1, 'in [0, 1)');
    checkRange('eps', this.eps, this.eps >= 0, '>= 0');
    checkRange('weightDecay', this.weightDecay, this.weightDecay >= 0, '>= 0');
    checkRange('maxGradNorm', this.maxGradNorm, this.maxGradNorm >= 0, '>= 0 (0 disables clipping)');
    checkRange('gradScale', this.gradScale, this.gradScale > 0, '> 0');

    const partialCount = Math.ceil(size / GRAD_NORM_CHUNK);
    this.m = storageBuffer(device, bytes, 'adamw m');
    this.v = storageBuffer(device, bytes, 'adamw v');
    this.gradNormBuffer = storageBuffer(device, GRAD_NORM_BYTES, 'adamw grad norm');
    const partials = storageBuffer(device, partialCount * 2 * 4, 'adamw grad norm partials');
    this.stepUniform = device.createBuffer({ size: STEP_UNIFORM_BYTES, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST, label: 'adamw step' });
    const firstPass = uniformBuffer(device, [size, 0], 'adamw grad norm pass 1');
    const finalPass = uniformBuffer(device, [partialCount, 1], 'adamw grad norm pass 2');
    this.owned = [this.m, this.v, this.gradNormBuffer, partials, this.stepUniform, firstPass, finalPass];

    const paramsBinding = { buffer: params, size: bytes };
    const gradsBinding = { buffer: grads, size: bytes };
    this.plan = [
      kernels.dispatch('grad_sum_squares', [this.stepUniform, firstPass, gradsBinding, partials], grid(partialCount, 1)),
      kernels.dispatch('grad_sum_squares', [this.stepUniform, finalPass, partials, this.gradNormBuffer], [1, 1, 1]),
      kernels.dispatch('adamw_step', [this.stepUniform, this.gradNormBuffer, gradsBinding, paramsBinding, this.m, this.v], grid(size, ADAMW_WORKGROUP)),
    ];
  }

  /**
   * Replaces the schedule from the next step on; the step count, and with it the bias corrections,
   * goes on. (The RL run driver anneals the rate per update this way: an update takes a varying
   * number of steps, so no schedule over steps fits it.)
   */
  setSchedule(schedule: LrSchedule): void {
    validateLrSchedule(schedule);
    this.schedule = schedule;
  }

  /** Updates applied so far, counting a prepared step until finishStep reports it skipped. */
  get step(): number {
    return this.stepCount;
  }

  /** The grad-norm and update dispatches of one step, the same objects every call; encode after backward. */
  dispatches(): Dispatch[] {
    return this.plan;
  }

  /** Encodes zeroing the gradients, for the start of an accumulation cycle. */
  zeroGrads(encoder: GPUCommandEncoder): void {
    encoder.clearBuffer(this.grads, 0, this.size * 4);
  }

  /**
   * Writes the next step's uniform (learning rate from the schedule, bias corrections in float64) and
   * counts the step. Call before the submit that contains dispatches(); one step in flight at a time.
   */
  prepareStep(options: { gradScale?: number } = {}): PreparedStep {
    const gradScale = options.gradScale ?? this.gradScale;
    checkRange('gradScale', gradScale, gradScale > 0, '> 0');
    const step = this.stepCount + 1;
    const lr = learningRate(step, this.schedule);
    // The scalars of torch.optim.AdamW's single-tensor update, computed in float64 as PyTorch does.
    const data = new ArrayBuffer(STEP_UNIFORM_BYTES);
    const view = new DataView(data);
    view.setUint32(0, this.size, true);
    [
      gradScale,
      this.maxGradNorm,
      this.beta1,
      1 - this.beta1,
      this.beta2,
      1 - this.beta2,
      lr / (1 - this.beta1 ** step),
      Math.sqrt(1 - this.beta2 ** step),
      this.eps,
      1 - lr * this.weightDecay,
    ].forEach((value, i) => view.setFloat32(4 + i * 4, value, true));
    this.device.queue.writeBuffer(this.stepUniform, 0, data);
    this.stepCount = step;
    this.pending = { step, lr, gradScale };
    return this.pending;
  }

  /**
   * Reports the prepared step from the GRAD_NORM_BYTES read back from gradNormBuffer after it ran. A
   * skipped step (non-finite gradient norm) is uncounted, so the next prepareStep retries step t, as
   * PyTorch does when optimizer.step() is skipped. Without this call a skipped step still counts.
   */
  finishStep(gradNorm: ArrayLike<number>): StepReport {
    if (!this.pending) throw new Error('AdamW.finishStep: no step was prepared since the last finishStep or loadState');
    if (gradNorm.length < GRAD_NORM_BYTES / 4) throw new RangeError(`AdamW.finishStep: expected the ${GRAD_NORM_BYTES / 4} floats of gradNormBuffer, got ${gradNorm.length}`);
    const skipped = gradNorm[1] !== 0;
    const report = { ...this.pending, gradNorm: gradNorm[0], clipCoefficient: gradNorm[2], skipped };
    if (skipped) this.stepCount--;
    this.pending = null;
    return report;
  }

  /** Reads the moments back; with the parameters, enough to resume bit-exactly through loadState. */
  async state(): Promise<AdamWState> {
    const bytes = this.size * 4;
    const data = await readBuffers(this.device, [
      { buffer: this.m, bytes },
      { buffer: this.v, bytes },
    ]);
    return { step: this.stepCount, m: new Float32Array(data, 0, this.size), v: new Float32Array(data, bytes, this.size) };
  }

  loadState(state: AdamWState): void {
    if (state.m.length !== this.size || state.v.length !== this.size) {
      throw new RangeError(`AdamW.loadState: moments of ${state.m.length} and ${state.v.length} elements, expected ${this.size}`);
    }
    if (!(Number.isInteger(state.step) && state.step >= 0)) throw new RangeError(`AdamW.loadState: step must be an integer >= 0, got ${state.step}`);
    this.device.queue.writeBuffer(this.m, 0, state.m.buffer, state.m.byteOffset, state.m.byteLength);
    this.device.queue.writeBuffer(this.v, 0, state.v.buffer, state.v.byteOffset, state.v.byteLength);
    this.stepCount = state.step;
    this.pending = null;
  }

  dispose(): void {
    for (const buffer of this.owned) buffer.destroy();
    this.owned.length = 0;
  }
}
