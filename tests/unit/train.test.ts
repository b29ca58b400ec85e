import { describe, expect, test } from 'vitest';
import { referenceTokenLoss } from '../../src/engine/reference/loss.ts';
import type { LossWeights } from '../../src/engine/train/loss.ts';
import { trainChecks } from '../shared/train-checks.ts';
import { nodeGpu } from '../support/node-gpu.ts';

describe('training on the GPU (Node, Dawn)', () => {
  for (const check of trainChecks) test(check.name, async () => check.run(await nodeGpu()));
});

describe('loss reference', () => {
  test('its gradients are the derivatives of its loss (central differences)', () => {
    const R = 12;
    const lp = Array.from({ length: R }, (_, r) => -0.3 - 0.2 * r);
    const ent = Array.from({ length: R }, (_, r) => 0.5 + 0.1 * r);
    const v = Array.from({ length: R }, (_, r) => Math.sin(r));
    const inputs = {
      mask: lp.map((_, r) => (r % 4 === 3 ? 0 : 1)),
      advantage: lp.map((_, r) => Math.cos(3 * r)),
      oldLogprob: lp.map((x, r) => x + 0.15 * Math.sin(5 * r)),
      referenceLogProb: lp.map((x, r) => x + 0.3 * Math.cos(7 * r)),
      returns: lp.map((_, r) => Math.cos(r)),
      oldValue: v.map((x, r) => x + 0.3 * Math.sin(2 * r)),
    };
    const weights: LossWeights[] = [{ nll: 1 }, { pg: 1 }, { ppo: 1, clip: 0.1, entropy: 0.1, kl: 0.3, value: 0.7, valueClip: 0.2 }];
    for (const w of weights) {
      const ref = referenceTokenLoss(w, lp, ent, v, inputs);
      const h = 1e-6;
      for (let r = 0; r < R; r++) {
        for (const [name, values, grad] of [['logprob', lp, ref.gLogprob], ['entropy', ent, ref.gEntropy], ['value', v, ref.gValue]] as const) {
          const plus = [...values];
          const minus = [...values];
          plus[r] += h;
          minus[r] -= h;
          const at = (x: number[]) => referenceTokenLoss(w, name === 'logprob' ? x : lp, name === 'entropy' ? x : ent, name === 'value' ? x : v, inputs).loss;
          expect(Math.abs((at(plus) - at(minus)) / (2 * h) - grad[r]), `${JSON.stringify(w)} d/d${name}[${r}]`).toBeLessThan(1e-6);
        }
      }
    }
  });
});
