// Float64 reference of shaders/loss.wgsl: per-token gradients and metric sums of a weighted loss.
import { resolveLossWeights, type LossWeights, type TokenLossInputs } from '../train/loss.ts';

export interface ReferenceLoss {
  loss: number;
  gLogprob: Float64Array;
  gEntropy: Float64Array;
  gValue: Float64Array;
  /** Sums in LOSS_METRICS order. */
  metrics: number[];
}

export function referenceTokenLoss(weights: LossWeights, logprob: ArrayLike<number>, entropy: ArrayLike<number>, value: ArrayLike<number>, inputs: TokenLossInputs): ReferenceLoss {
  const w = resolveLossWeights(weights);
  const R = inputs.mask.length;
  const count = Array.from(inputs.mask).reduce((a, m) => a + m, 0);
  const scale = count > 0 ? 1 / count : 0;
  const at = (column: ArrayLike<number> | undefined, r: number) => column?.[r] ?? 0;
  const out: ReferenceLoss = { loss: 0, gLogprob: new Float64Array(R), gEntropy: new Float64Array(R), gValue: new Float64Array(R), metrics: new Array(8).fill(0) };
  for (let r = 0; r < R; r++) {
    const m = inputs.mask[r] * scale;
    const lp = logprob[r];
    const a = at(inputs.advantage, r);
    const oldLp = at(inputs.oldLogprob, r);
    const rho = Math.exp(lp - oldLp);
    const clipped = Math.min(Math.max(rho, 1 - w.clip), 1 + w.clip);
    const ppoActive = rho * a <= clipped * a;
    const ppo = -Math.min(rho * a, clipped * a);
    const gap = at(inputs.referenceLogProb, r) - lp;
    const kl = Math.exp(gap) - gap - 1;
    const v = value[r];
    const ret = at(inputs.returns, r);
    const oldV = at(inputs.oldValue, r);
    const vClipped = oldV + Math.min(Math.max(v - oldV, -w.valueClip), w.valueClip);
    const useClipped = w.valueClip > 0 && (vClipped - ret) ** 2 > (v - ret) ** 2;
    const valueLoss = 0.5 * (useClipped ? (vClipped - ret) ** 2 : (v - ret) ** 2);
    const dValue = useClipped ? (Math.abs(v - oldV) < w.valueClip ? vClipped - ret : 0) : v - ret;
    out.gLogprob[r] = m * (-w.nll - w.pg * a + w.ppo * (ppoActive ? -rho * a : 0) + w.kl * (1 - Math.exp(gap)));
    out.gEntropy[r] = -m * w.entropy;
    const mv = (inputs.valueMask ?? inputs.mask)[r] * scale;
    out.gValue[r] = mv * w.value * dValue;
    const parts = [-lp, -a * lp, ppo, entropy[r], kl, valueLoss, rho !== clipped ? 1 : 0, rho - 1 - (lp - oldLp)];
    parts.forEach((part, i) => (out.metrics[i] += (i === 5 ? mv : m) * part));
    out.loss += m * (w.nll * parts[0] + w.pg * parts[1] + w.ppo * parts[2] - w.entropy * parts[3] + w.kl * parts[4]) + mv * w.value * parts[5];
  }
  return out;
}
