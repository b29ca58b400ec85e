import { describe, expect, test } from 'vitest';
import { storageBuffer } from '../../src/engine/gpu/buffers.ts';
import { Kernels } from '../../src/engine/gpu/kernels.ts';
import { gradNorm, ReferenceAdamW } from '../../src/engine/reference/optimizer.ts';
import { AdamW, type AdamWOptions } from '../../src/engine/train/optimizer.ts';
import { learningRate, validateLrSchedule, type LrSchedule } from '../../src/engine/train/schedule.ts';
import { optimizerChecks } from '../shared/optimizer-checks.ts';
import { nodeGpu } from '../support/node-gpu.ts';

const steps = (schedule: LrSchedule, ts: number[]) => ts.map((t) => learningRate(t, schedule));

describe('learning-rate schedules', () => {
  test('constant', () => {
    expect(steps({ kind: 'constant', lr: 0.1 }, [1, 2, 1000])).toEqual([0.1, 0.1, 0.1]);
  });

  test('linear warm-up then constant: step 1 gets lr / warmupSteps, step warmupSteps the full lr', () => {
    expect(steps({ kind: 'warmup-constant', lr: 1e-3, warmupSteps: 4 }, [1, 2, 3, 4, 5, 100])).toEqual([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3]);
    expect(steps({ kind: 'warmup-constant', lr: 1e-3, warmupSteps: 0 }, [1, 2])).toEqual([1e-3, 1e-3]);
  });

  test('linear warm-up then cosine decay to the floor', () => {
    const schedule: LrSchedule = { kind: 'warmup-cosine', lr: 1, warmupSteps: 2, totalSteps: 6, minLrRatio: 0.2 };
    // Decay progress (t - 3) / 4 from step 3: 0, 1/4, 1/2, 3/4, then 1 (the floor) from step 7 on.
    const expected = [0.5, 1, 1, 0.2 + 0.4 * (1 + Math.SQRT1_2), 0.6, 0.2 + 0.4 * (1 - Math.SQRT1_2), 0.2, 0.2];
    const got = steps(schedule, [1, 2, 3, 4, 5, 6, 7, 100]);
    got.forEach((lr, i) => expect(lr).toBeCloseTo(expected[i], 15));
    expect(steps({ kind: 'warmup-cosine', lr: 2, warmupSteps: 0, totalSteps: 2 }, [1, 2, 3])).toEqual([2, 1, 0]);
  });

  test('linear decay, with and without warm-up and floor', () => {
    expect(steps({ kind: 'linear-decay', lr: 1, totalSteps: 4 }, [1, 2, 3, 4, 5, 9])).toEqual([1, 0.75, 0.5, 0.25, 0, 0]);
    expect(steps({ kind: 'linear-decay', lr: 1, totalSteps: 4, warmupSteps: 2 }, [1, 2, 3, 4, 5])).toEqual([0.5, 1, 1, 0.5, 0]);
    expect(steps({ kind: 'linear-decay', lr: 1, totalSteps: 4, minLrRatio: 0.5 }, [1, 3, 5])).toEqual([1, 0.75, 0.5]);
  });

  test('invalid schedules and steps are rejected with the field named', () => {
    const bad: [unknown, RegExp][] = [
      [{ kind: 'cosine', lr: 1 }, /Unknown learning-rate schedule kind "cosine"; expected one of constant, warmup-constant, warmup-cosine, linear-decay/],
      [null, /Unknown learning-rate schedule kind undefined/],
      [{ kind: 'constant', lr: -1 }, /'constant': lr must be a finite number >= 0, got -1/],
      [{ kind: 'constant', lr: NaN }, /lr must be a finite number >= 0, got NaN/],
      [{ kind: 'warmup-constant', lr: 1, warmupSteps: 1.5 }, /'warmup-constant': warmupSteps must be an integer >= 0, got 1.5/],
      [{ kind: 'warmup-cosine', lr: 1, warmupSteps: 10, totalSteps: 10 }, /'warmup-cosine': totalSteps must be an integer greater than warmupSteps \(10\), got 10/],
      [{ kind: 'linear-decay', lr: 1 }, /totalSteps must be an integer greater than warmupSteps \(0\), got undefined/],
      [{ kind: 'linear-decay', lr: 1, totalSteps: 5, minLrRatio: 1.5 }, /'linear-decay': minLrRatio must be in \[0, 1\], got 1.5/],
    ];
    for (const [schedule, message] of bad) expect(() => validateLrSchedule(schedule as LrSchedule)).toThrow(message);
    expect(() => learningRate(0, { kind: 'constant', lr: 1 })).toThrow(/step must be an integer >= 1, got 0/);
    expect(() => learningRate(2.5, { kind: 'constant', lr: 1 })).toThrow(/got 2.5/);
  });
});

describe('float64 reference AdamW', () => {
  const hyper = { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1, maxGradNorm: 0 };

  test('first step by hand: decay, then lr * m_hat / (sqrt(v_hat) + eps)', () => {
    const adamw = new ReferenceAdamW(1, hyper);
    const params = Float64Array.of(1);
    expect(adamw.update(params, [0.5], 0.1)).toEqual({ gradNorm: 0.5, clipCoefficient: 1, skipped: false });
    // p = 1 * (1 - 0.1 * 0.1) - 0.1 * 0.5 / (0.5 + 1e-8) = 0.99 - 0.1 / (1 + 2e-8)
    expect(params[0]).toBeCloseTo(0.890000002, 15);
    expect(adamw.m[0]).toBeCloseTo(0.05, 15);
    expect(adamw.v[0]).toBeCloseTo(0.00025, 15);
    expect(adamw.step).toBe(1);
  });

  test('second step by hand: bias corrections 1 - beta^2', () => {
    const adamw = new ReferenceAdamW(1, { ...hyper, weightDecay: 0 });
    const params = Float64Array.of(0);
    adamw.update(params, [1], 0.1);
    adamw.update(params, [-1], 0.1);
    // m = 0.9 * 0.1 - 0.1 = 0.01, v = 0.999 * 0.001 + 0.001 = 0.001999; m_hat = 0.01 / 0.19, v_hat = 0.001999 / 0.001999 = 1
    expect(adamw.m[0]).toBeCloseTo(-0.01, 15);
    expect(params[0]).toBeCloseTo(-0.1 / (1 + 1e-8) - (0.1 * (-0.01 / 0.19)) / (1 + 1e-8), 14);
  });

  test('global-norm clipping with a gradient scale, as clip_grad_norm_', () => {
    const adamw = new ReferenceAdamW(2, { ...hyper, weightDecay: 0, maxGradNorm: 1 });
    const params = new Float64Array(2);
    const result = adamw.update(params, [3, 4], 0.1, 2);
    expect(gradNorm([3, 4], 2)).toBe(10);
    expect(result).toEqual({ gradNorm: 10, clipCoefficient: 1 / (10 + 1e-6), skipped: false });
    expect(adamw.m[0]).toBeCloseTo(0.1 * 6 / (10 + 1e-6), 15);
    expect(adamw.m[1]).toBeCloseTo(0.1 * 8 / (10 + 1e-6), 15);
  });

  test('a non-finite gradient skips the step without touching anything', () => {
    const adamw = new ReferenceAdamW(2, hyper);
    const params = Float64Array.of(1, 2);
    for (const bad of [NaN, Infinity]) {
      expect(adamw.update(params, [bad, 1], 0.1).skipped).toBe(true);
      expect([...params, ...adamw.m, ...adamw.v, adamw.step]).toEqual([1, 2, 0, 0, 0, 0, 0]);
    }
  });
});

describe('AdamW on the GPU against the float64 reference (Node, Dawn)', () => {
  for (const check of optimizerChecks) test(check.name, async () => check.run(await nodeGpu()));

  test('invalid sizes, buffers, hyperparameters and call order are rejected', async () => {
    const { device } = await nodeGpu();
    const kernels = new Kernels(device, 8);
    const buffer = storageBuffer(device, 40, 'ten floats');
    const schedule: LrSchedule = { kind: 'constant', lr: 1e-3 };
    const make = (size: number, options: Partial<AdamWOptions> = {}) => new AdamW(device, kernels, buffer, buffer, size, { schedule, ...options });
    expect(() => make(0)).toThrow(/size must be a positive integer, got 0/);
    expect(() => make(11)).toThrow(/11 parameters need 44 bytes, but params has 40 and grads 40/);
    expect(() => make(10, { beta1: 1 })).toThrow(/beta1 must be in \[0, 1\), got 1/);
    expect(() => make(10, { beta2: -0.1 })).toThrow(/beta2 must be in \[0, 1\), got -0.1/);
    expect(() => make(10, { eps: -1 })).toThrow(/eps must be >= 0, got -1/);
    expect(() => make(10, { weightDecay: NaN })).toThrow(/weightDecay must be >= 0, got NaN/);
    expect(() => make(10, { maxGradNorm: -1 })).toThrow(/maxGradNorm must be >= 0 \(0 disables clipping\), got -1/);
    expect(() => make(10, { gradScale: 0 })).toThrow(/gradScale must be > 0, got 0/);
    expect(() => make(10, { schedule: { kind: 'warmup-cosine', lr: 1, warmupSteps: 3, totalSteps: 2 } })).toThrow(/totalSteps must be an integer greater than warmupSteps/);

    const adamw = make(10);
    try {
      expect(() => adamw.finishStep([0, 0, 1, 0])).toThrow(/no step was prepared/);
      expect(() => adamw.prepareStep({ gradScale: -1 })).toThrow(/gradScale must be > 0, got -1/);
      expect(adamw.prepareStep()).toEqual({ step: 1, lr: 1e-3, gradScale: 1 });
      expect(() => adamw.finishStep([0, 0])).toThrow(/expected the 4 floats of gradNormBuffer, got 2/);
      expect(() => adamw.loadState({ step: 0, m: new Float32Array(9), v: new Float32Array(10) })).toThrow(/moments of 9 and 10 elements, expected 10/);
      expect(() => adamw.loadState({ step: -1, m: new Float32Array(10), v: new Float32Array(10) })).toThrow(/step must be an integer >= 0, got -1/);
    } finally {
      adamw.dispose();
      buffer.destroy();
    }
  });
});
