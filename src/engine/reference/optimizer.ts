// Float64 reference of shaders/optimizer.wgsl: global gradient-norm clipping as
// torch.nn.utils.clip_grad_norm_, then torch.optim.AdamW, over one flat parameter vector.

type Vec = ArrayLike<number>;

export interface ReferenceAdamWHyperparameters {
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  /** 0: no clipping. */
  maxGradNorm: number;
}

export interface ReferenceStepResult {
  /** gradScale * ||grads||, before clipping. */
  gradNorm: number;
  /** min(1, maxGradNorm / (gradNorm + 1e-6)), or 1 without clipping. */
  clipCoefficient: number;
  /** The norm was not finite: nothing was updated and the step count did not advance. */
  skipped: boolean;
}

/** gradScale * sqrt(sum of grads[i]^2). */
export function gradNorm(grads: Vec, gradScale = 1): number {
  let sumSquares = 0;
  for (let i = 0; i < grads.length; i++) sumSquares += grads[i] * grads[i];
  return Math.sqrt(sumSquares) * gradScale;
}

export class ReferenceAdamW {
  readonly m: Float64Array;
  readonly v: Float64Array;
  /** Updates applied so far. */
  step = 0;

  constructor(size: number, readonly hyper: ReferenceAdamWHyperparameters) {
    this.m = new Float64Array(size);
    this.v = new Float64Array(size);
  }

  /** One update of params in place with gradients grads * gradScale at learning rate lr. */
  update(params: Float64Array, grads: Vec, lr: number, gradScale = 1): ReferenceStepResult {
    const { beta1, beta2, eps, weightDecay, maxGradNorm } = this.hyper;
    const norm = gradNorm(grads, gradScale);
    const clipCoefficient = maxGradNorm > 0 ? Math.min(1, maxGradNorm / (norm + 1e-6)) : 1;
    if (!Number.isFinite(norm)) return { gradNorm: norm, clipCoefficient, skipped: true };
    const t = ++this.step;
    const stepSize = lr / (1 - beta1 ** t);
    const biasCorrection2Sqrt = Math.sqrt(1 - beta2 ** t);
    for (let i = 0; i < params.length; i++) {
      const g = grads[i] * gradScale * clipCoefficient;
      params[i] *= 1 - lr * weightDecay;
      this.m[i] = beta1 * this.m[i] + (1 - beta1) * g;
      this.v[i] = beta2 * this.v[i] + (1 - beta2) * g * g;
      params[i] -= (stepSize * this.m[i]) / (Math.sqrt(this.v[i]) / biasCorrection2Sqrt + eps);
    }
    return { gradNorm: norm, clipCoefficient, skipped: false };
  }
}
