// The GPU optimiser (shaders/optimizer.wgsl through AdamW) against its float64 reference. Like the kernel
// checks, these run in Node on Dawn (tests/unit/optimizer.test.ts) and can run in the browser.
import { grid, readBuffers, readFloat32, storageBuffer, storageFrom } from '../../src/engine/gpu/buffers.ts';
import type { GpuContext } from '../../src/engine/gpu/device.ts';
import { encodeDispatches, Kernels } from '../../src/engine/gpu/kernels.ts';
import { ReferenceAdamW, type ReferenceAdamWHyperparameters } from '../../src/engine/reference/optimizer.ts';
import { AdamW, GRAD_NORM_BYTES, type AdamWOptions, type AdamWState, type StepReport } from '../../src/engine/train/optimizer.ts';
import { learningRate } from '../../src/engine/train/schedule.ts';
import { assert, assertClose, assertEqual, randomArray, seededRandom } from './assert.ts';
import type { GpuCheck } from './kernel-checks.ts';

/** An AdamW over fresh params and grads buffers. */
class Setup {
  readonly params: GPUBuffer;
  readonly grads: GPUBuffer;
  readonly adamw: AdamW;

  constructor(readonly gpu: GpuContext, initial: Float32Array, options: AdamWOptions) {
    this.params = storageFrom(gpu.device, initial, 'params');
    this.grads = storageBuffer(gpu.device, initial.byteLength, 'grads');
    this.adamw = new AdamW(gpu.device, new Kernels(gpu.device, 8), this.params, this.grads, initial.length, options);
  }

  /** One step on `grads` in one submit, then one readback of the grad norm and the parameters. */
  async step(grads: Float32Array, gradScale?: number): Promise<{ report: StepReport; params: Float32Array }> {
    const { device } = this.gpu;
    device.queue.writeBuffer(this.grads, 0, grads.buffer, grads.byteOffset, grads.byteLength);
    this.adamw.prepareStep({ gradScale });
    const encoder = device.createCommandEncoder();
    encodeDispatches(encoder, this.adamw.dispatches());
    device.queue.submit([encoder.finish()]);
    const data = await readBuffers(device, [
      { buffer: this.adamw.gradNormBuffer, bytes: GRAD_NORM_BYTES },
      { buffer: this.params, bytes: grads.byteLength },
    ]);
    return { report: this.adamw.finishStep(new Float32Array(data, 0, 4)), params: new Float32Array(data, GRAD_NORM_BYTES, grads.length) };
  }

  dispose(): void {
    this.adamw.dispose();
    this.params.destroy();
    this.grads.destroy();
  }
}

async function withSetup<T>(gpu: GpuContext, initial: Float32Array, options: AdamWOptions, body: (setup: Setup) => Promise<T>): Promise<T> {
  const setup = new Setup(gpu, initial, options);
  try {
    return await body(setup);
  } finally {
    setup.dispose();
  }
}

function hyperparameters(adamw: AdamW): ReferenceAdamWHyperparameters {
  return { beta1: adamw.beta1, beta2: adamw.beta2, eps: adamw.eps, weightDecay: adamw.weightDecay, maxGradNorm: adamw.maxGradNorm };
}

function assertBitEqual(actual: Float32Array, expected: Float32Array, what: string): void {
  const a = new Uint32Array(actual.buffer, actual.byteOffset, actual.length);
  const e = new Uint32Array(expected.buffer, expected.byteOffset, expected.length);
  assertEqual(a.length, e.length, `${what}: length`);
  const first = a.findIndex((bits, i) => bits !== e[i]);
  if (first >= 0) throw new Error(`${what}: element ${first} is ${actual[first]}, expected exactly ${expected[first]}`);
}

/** Steps GPU and reference side by side on seeded gradients and compares everything after each step. */
async function compareSteps(
  gpu: GpuContext, size: number, options: AdamWOptions, steps: { gradScale?: number; gradScaleOfGrads: number }[], seed: number, label: string,
): Promise<StepReport[]> {
  const random = seededRandom(seed);
  const initial = randomArray(random, size);
  const reports: StepReport[] = [];
  await withSetup(gpu, initial, options, async (setup) => {
    const reference = new ReferenceAdamW(size, hyperparameters(setup.adamw));
    const expected = Float64Array.from(initial);
    for (const [i, s] of steps.entries()) {
      const grads = randomArray(random, size, s.gradScaleOfGrads);
      const { report, params } = await setup.step(grads, s.gradScale);
      const want = reference.update(expected, grads, report.lr, s.gradScale ?? setup.adamw.gradScale);
      const what = `${label}, step ${i + 1}`;
      assertEqual([report.step, report.skipped], [reference.step, false], `${what}: step count and skipped`);
      assertClose([report.gradNorm, report.clipCoefficient], [want.gradNorm, want.clipCoefficient], `${what}: grad norm and clip coefficient`, 0, 2e-6);
      assertClose(params, expected, `${what}: params`, 1e-6, 1e-5);
      const state = await setup.adamw.state();
      assertClose(state.m, reference.m, `${what}: m`, 1e-7, 1e-5);
      assertClose(state.v, reference.v, `${what}: v`, 1e-9, 1e-5);
      reports.push(report);
    }
  });
  return reports;
}

const adamwCheck: GpuCheck = {
  name: 'adamw: steps against the float64 reference with clipping active and inactive, weight decay, gradient scale, schedule',
  async run(gpu) {
    const schedule = { kind: 'warmup-cosine', lr: 1e-2, warmupSteps: 2, totalSteps: 5, minLrRatio: 0.1 } as const;
    // 5000 elements: two first-pass workgroups of the grad norm, the second one partial.
    for (const size of [5000, 37]) {
      // Uniform gradients in [-a, a] have a norm of about a * sqrt(size / 3) (> 1 here, even times 0.25).
      const clipped = await compareSteps(
        gpu, size, { schedule, weightDecay: 0.1, maxGradNorm: 1, gradScale: 0.5 },
        [{ gradScaleOfGrads: 2 }, { gradScaleOfGrads: 2, gradScale: 0.25 }, { gradScaleOfGrads: 4 }, { gradScaleOfGrads: 2 }, { gradScaleOfGrads: 2 }],
        size, `clipped, size ${size}`,
      );
      assert(clipped.every((r) => r.clipCoefficient < 1), 'clipping is active');
      const unclipped = await compareSteps(
        gpu, size, { schedule, weightDecay: 0.1, maxGradNorm: 1e6 },
        [{ gradScaleOfGrads: 0.5 }, { gradScaleOfGrads: 0.5 }, { gradScaleOfGrads: 0.5, gradScale: 0.25 }],
        size + 1, `not clipped, size ${size}`,
      );
      assert(unclipped.every((r) => r.clipCoefficient === 1), 'clipping is inactive below maxGradNorm');
      const noClipping = await compareSteps(gpu, size, { schedule, maxGradNorm: 0 }, [{ gradScaleOfGrads: 10 }, { gradScaleOfGrads: 10 }], size + 2, `maxGradNorm 0, size ${size}`);
      assert(noClipping.every((r) => r.clipCoefficient === 1 && r.gradNorm > 1), 'maxGradNorm 0 disables clipping');
      assertEqual(clipped.map((r) => r.lr), [1, 2, 3, 4, 5].map((t) => learningRate(t, schedule)), 'lr follows the schedule');
    }
  },
};

const nonFiniteCheck: GpuCheck = {
  name: 'adamw: a NaN or Inf gradient leaves params and moments unchanged, is reported, and the step is retried',
  async run(gpu) {
    const size = 5000;
    const random = seededRandom(7);
    const initial = randomArray(random, size);
    await withSetup(gpu, initial, { schedule: { kind: 'constant', lr: 1e-2 }, weightDecay: 0.1 }, async (setup) => {
      const reference = new ReferenceAdamW(size, hyperparameters(setup.adamw));
      const expected = Float64Array.from(initial);
      const good = async (): Promise<Float32Array> => {
        const grads = randomArray(random, size);
        const { report, params } = await setup.step(grads);
        reference.update(expected, grads, report.lr);
        assert(!report.skipped, 'a finite step is not skipped');
        return params;
      };
      let params = await good();
      params = await good();
      for (const bad of [NaN, Infinity, -Infinity]) {
        const before = await setup.adamw.state();
        const grads = randomArray(random, size);
        grads[4321] = bad; // in the second grad-norm workgroup
        const { report, params: after } = await setup.step(grads);
        assertEqual({ skipped: report.skipped, step: report.step, counted: setup.adamw.step }, { skipped: true, step: 3, counted: 2 }, `report of a ${bad} gradient`);
        assert(!Number.isFinite(report.gradNorm), `the grad norm of a ${bad} gradient is reported as ${report.gradNorm}`);
        assert(reference.update(expected, grads, report.lr).skipped && reference.step === 2, 'the reference skips too');
        const state = await setup.adamw.state();
        assertBitEqual(after, params, `params after a ${bad} gradient`);
        assertBitEqual(state.m, before.m, `m after a ${bad} gradient`);
        assertBitEqual(state.v, before.v, `v after a ${bad} gradient`);
      }
      // The skipped step is retried as step 3, with the same bias corrections as the reference.
      params = await good();
      assertEqual(setup.adamw.step, 3, 'step count after the retried step');
      assertClose(params, expected, 'params after the retried step', 1e-6, 1e-5);
    });
  },
};

const gradNormSizesCheck: GpuCheck = {
  name: 'adamw: grad norm and update for 1, 3 and 4097 elements and for more than 65535 * 64 (2-D grid)',
  async run(gpu) {
    for (const size of [1, 3, 4097, 65535 * 64 + 100]) {
      const random = seededRandom(size);
      const initial = randomArray(random, size);
      const grads = randomArray(random, size, 1e-3);
      await withSetup(gpu, initial, { schedule: { kind: 'constant', lr: 1e-3 }, weightDecay: 0.01 }, async (setup) => {
        const reference = new ReferenceAdamW(size, hyperparameters(setup.adamw));
        const expected = Float64Array.from(initial);
        const want = reference.update(expected, grads, 1e-3);
        const { report, params } = await setup.step(grads);
        if (size > 65535 * 64) assert(grid(size, 64)[1] > 1, 'adamw_step runs on a 2-D grid');
        assertClose([report.gradNorm, report.clipCoefficient], [want.gradNorm, want.clipCoefficient], `size ${size}: grad norm`, 0, 2e-6);
        assertClose(params, expected, `size ${size}: params`, 1e-6, 1e-5);
      });
    }
  },
};

const resumeCheck: GpuCheck = {
  name: 'adamw: state → new AdamW → loadState resumes bit-exactly',
  async run(gpu) {
    const size = 4999;
    const random = seededRandom(11);
    const initial = randomArray(random, size);
    const gradients = Array.from({ length: 5 }, () => randomArray(random, size));
    const options: AdamWOptions = { schedule: { kind: 'linear-decay', lr: 1e-2, warmupSteps: 1, totalSteps: 5 }, weightDecay: 0.05, maxGradNorm: 2 };

    const run = (grads: Float32Array[], from: Float32Array, state?: AdamWState) =>
      withSetup(gpu, from, options, async (setup) => {
        if (state) setup.adamw.loadState(state);
        let params = from;
        for (const g of grads) params = (await setup.step(g)).params;
        return { params, state: await setup.adamw.state() };
      });
    const done = await run(gradients, initial);
    const saved = await run(gradients.slice(0, 3), initial);
    assertEqual(saved.state.step, 3, 'saved step count');
    const resumed = await run(gradients.slice(3), saved.params, saved.state);
    assertEqual(resumed.state.step, done.state.step, 'step count');
    assertBitEqual(resumed.params, done.params, 'resumed params');
    assertBitEqual(resumed.state.m, done.state.m, 'resumed m');
    assertBitEqual(resumed.state.v, done.state.v, 'resumed v');
  },
};

const zeroGradsCheck: GpuCheck = {
  name: 'adamw: zeroGrads clears the gradients of the optimised range only',
  async run(gpu) {
    const size = 10;
    const { device } = gpu;
    const params = storageFrom(device, new Float32Array(size), 'params');
    const grads = storageFrom(device, new Float32Array(size + 2).fill(3), 'grads'); // 2 elements past the range
    const adamw = new AdamW(device, new Kernels(device, 8), params, grads, size, { schedule: { kind: 'constant', lr: 1 } });
    try {
      const encoder = device.createCommandEncoder();
      adamw.zeroGrads(encoder);
      device.queue.submit([encoder.finish()]);
      assertEqual(Array.from(await readFloat32(device, grads, size + 2)), [...new Array(size).fill(0), 3, 3], 'grads after zeroGrads');
    } finally {
      adamw.dispose();
      params.destroy();
      grads.destroy();
    }
  },
};

export const optimizerChecks: GpuCheck[] = [adamwCheck, nonFiniteCheck, gradNormSizesCheck, resumeCheck, zeroGradsCheck];
