// Loss definitions as weights on standard per-token terms (see shaders/loss.wgsl for the math):
// each algorithm is a few lines of weights, e.g. PPO = ppo + value + entropy (+ kl), GRPO = ppo + kl,
// REINFORCE = pg, BC/SFT = nll. The terms, their gradients and their sums all run on the GPU.
import { grid } from '../gpu/buffers.ts';
import type { Dispatch, Kernels } from '../gpu/kernels.ts';

export interface LossWeights {
  /** Negative log-likelihood of the action tokens (behaviour cloning, SFT). */
  nll?: number;
  /** Policy gradient -A * logp (REINFORCE, A2C). */
  pg?: number;
  /** PPO's clipped surrogate. */
  ppo?: number;
  /** PPO clip range c: the ratio is clipped to [1 - c, 1 + c]. Default 0.2. */
  clip?: number;
  /** Entropy bonus (subtracted from the loss). */
  entropy?: number;
  /** KL penalty to the reference model (k3 estimator). */
  kl?: number;
  /** Value-function regression 1/2 (v - R)^2. */
  value?: number;
  /** Clip range of the value update around the old value (0: no clipping). */
  valueClip?: number;
}

/** Names of the summed metrics, in the order token_loss writes them. */
export const LOSS_METRICS = ['losses/nll', 'losses/policy_gradient', 'losses/ppo', 'losses/entropy', 'losses/kl', 'losses/value', 'losses/clipfrac', 'losses/approx_kl'] as const;
export type LossMetric = (typeof LOSS_METRICS)[number];

/** Per-token inputs of the loss, as token_loss reads them (8 floats per row). */
export interface TokenLossInputs {
  /** 1 = an action token the loss sees, 0 = prompt, observation, tool output or padding. */
  mask: ArrayLike<number>;
  advantage?: ArrayLike<number>;
  oldLogprob?: ArrayLike<number>;
  referenceLogProb?: ArrayLike<number>;
  returns?: ArrayLike<number>;
  oldValue?: ArrayLike<number>;
  /** Rows whose value-head output the value loss regresses to the return (default: the action mask). */
  valueMask?: ArrayLike<number>;
}

export const INPUT_FLOATS = 8;
const MASK_COLUMN = 0;
const VALUE_MASK_COLUMN = 6;

/**
 * The rows of packed loss inputs [R * INPUT_FLOATS] that some loss term sees (action mask or value
 * mask not 0), in order. Every other row adds nothing to the loss or any gradient: the LM head and
 * the value head need not run there.
 */
export function lossRows(packed: Float32Array): number[] {
  const rows: number[] = [];
  for (let r = 0; r * INPUT_FLOATS < packed.length; r++) {
    if (packed[r * INPUT_FLOATS + MASK_COLUMN] !== 0 || packed[r * INPUT_FLOATS + VALUE_MASK_COLUMN] !== 0) rows.push(r);
  }
  return rows;
}

export function packLossInputs(inputs: TokenLossInputs): Float32Array {
  const R = inputs.mask.length;
  const packed = new Float32Array(R * INPUT_FLOATS);
  const columns = [inputs.mask, inputs.advantage, inputs.oldLogprob, inputs.referenceLogProb, inputs.returns, inputs.oldValue, inputs.valueMask ?? inputs.mask];
  columns.forEach((column, c) => {
    if (!column) return;
    if (column.length !== R) throw new RangeError(`loss input ${c} has ${column.length} rows, the mask ${R}`);
    for (let r = 0; r < R; r++) {
      if (!Number.isFinite(column[r])) throw new RangeError(`loss input ${['mask', 'advantage', 'old log-prob', 'reference log-prob', 'return', 'old value', 'value mask'][c]} of token ${r} is ${column[r]}; every value must be finite`);
      packed[r * INPUT_FLOATS + c] = column[r];
    }
  });
  return packed;
}

export function resolveLossWeights(w: LossWeights): Required<LossWeights> {
  const resolved = { nll: 0, pg: 0, ppo: 0, clip: 0.2, entropy: 0, kl: 0, value: 0, valueClip: 0, ...w };
  for (const [name, value] of Object.entries(resolved)) {
    if (!Number.isFinite(value)) throw new RangeError(`loss weight ${name} must be a finite number, got ${value}`);
  }
  if (resolved.clip < 0 || resolved.valueClip < 0) throw new RangeError('clip ranges must be >= 0');
  return resolved;
}

/** Writes a loss's weights and its averaging scale (1 / action tokens of the whole step) into its uniform. */
export function writeLossParams(device: GPUDevice, params: GPUBuffer, weights: LossWeights, R: number, actionTokens: number): void {
  const w = resolveLossWeights(weights);
  const scale = actionTokens > 0 ? 1 / actionTokens : 0;
  const floats = new Float32Array([0, scale, w.nll, w.pg, w.ppo, w.clip, w.entropy, w.kl, w.value, w.valueClip, 0, 0]);
  new Uint32Array(floats.buffer)[0] = R;
  device.queue.writeBuffer(params, 0, floats);
}

export const LOSS_PARAMS_BYTES = 48;

/**
 * The two dispatches of a loss over R rows: per-token terms and gradients, then the metric sums
 * (added to `sums`). Weights and scale come from `params`, written by writeLossParams before each submit.
 */
export function lossDispatches(
  kernels: Kernels,
  params: GPUBuffer,
  R: number,
  b: { logprob: GPUBuffer; entropy: GPUBuffer; value: GPUBuffer; inputs: GPUBuffer; gLogprob: GPUBuffer; gEntropy: GPUBuffer; gValue: GPUBuffer; rowMetrics: GPUBuffer; sums: GPUBuffer },
): Dispatch[] {
  return [
    kernels.dispatch('token_loss', [params, b.logprob, b.entropy, b.value, b.inputs, b.gLogprob, b.gEntropy, b.gValue, b.rowMetrics], grid(R, 64)),
    kernels.dispatch('sum_metrics', { 0: params, 8: b.rowMetrics, 9: b.sums }, [1, 1, 1]),
  ];
}
