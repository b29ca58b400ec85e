// Every WGSL kernel against its float64 reference on random small shapes. These checks run twice:
// in Node on Dawn (tests/unit/kernels.test.ts) and in headless Chromium (tests/browser/gpu.spec.ts).
import { grid, readFloat32, storageBuffer, storageFrom, uniformBuffer } from '../../src/engine/gpu/buffers.ts';
import type { GpuContext } from '../../src/engine/gpu/device.ts';
import { Kernels } from '../../src/engine/gpu/kernels.ts';
import { uploadMatrix } from '../../src/engine/gpu/matrix.ts';
import { OpBuilder } from '../../src/engine/ops.ts';
import * as ref from '../../src/engine/reference/ops.ts';
import { dropoutKeeps, resolveSampling, samplingUniform, sequenceUniform } from '../../src/engine/sampling-params.ts';
import { assert, assertClose, assertEqual, randomArray, seededRandom } from './assert.ts';
import { cursorBuffer, paddingMask, queryColumns, randomRopeTable, run } from './gpu-cases.ts';

export interface GpuCheck {
  name: string;
  run(gpu: GpuContext): Promise<void>;
}

/** Both ways the row-reduction kernels run (rows.wgsl): 64 invocations per row on GPUs, 1 on CPU adapters. */
export const ROW_LANES = [64, 1] as const;

/** Each case once per ROW_LANES setting. */
export function withRowLanes<T extends object>(cases: T[]): (T & { lanes: 1 | 64 })[] {
  return ROW_LANES.flatMap((lanes) => cases.map((c) => ({ ...c, lanes })));
}

async function withOps(gpu: GpuContext, headDim: number, body: (ops: OpBuilder) => Promise<void>, rowLanes: 1 | 64 = 64): Promise<void> {
  const ops = new OpBuilder(new Kernels(gpu.device, headDim, rowLanes));
  try {
    await body(ops);
  } finally {
    ops.dispose();
  }
}

const matmulCheck: GpuCheck = {
  name: 'matmul: tiled (scalar and vec4 loads) and row variants, bias, accumulate, alpha, split weights, output column offset and stride',
  async run(gpu) {
    const random = seededRandom(1);
    const cases = [
      { M: 1, N: 7, K: 5, kernel: 'matmul_rows' },
      { M: 3, N: 33, K: 17, kernel: 'matmul_rows' },
      { M: 16, N: 64, K: 12, kernel: 'matmul_tiled4' },
      { M: 37, N: 70, K: 29, kernel: 'matmul_tiled' },
      { M: 64, N: 130, K: 64, kernel: 'matmul_tiled4' },
    ];
    for (const { M, N, K, kernel } of cases) {
      for (const variant of [{ bias: false, accumulate: false, split: false, column0: 0 }, { bias: true, accumulate: true, split: true, column0: 2 }]) {
        await withOps(gpu, 8, async (ops) => {
          const x = randomArray(random, M * K);
          const w = randomArray(random, N * K);
          const bias = randomArray(random, N);
          const extra = 3; // y has 3 more columns than w has rows, to check the stride
          const y0 = randomArray(random, M * (N + extra));
          const maxBinding = variant.split ? Math.max(K * 4, Math.floor(N / 3) * K * 4) : gpu.maxBindingBytes;
          const wGpu = uploadMatrix(gpu.device, w, N, K, maxBinding, 'w');
          if (variant.split) assert(wGpu.chunks.length > 1 || N < 3, 'weight should be split into chunks');
          const xGpu = storageFrom(gpu.device, x, 'x');
          const yGpu = storageFrom(gpu.device, y0, 'y');
          const biasGpu = variant.bias ? storageFrom(gpu.device, bias, 'bias') : null;
          const alpha = variant.accumulate ? 0.5 : 1;
          const dispatches = ops.matmul(xGpu, wGpu, biasGpu, yGpu, { M, ldY: N + extra, accumulate: variant.accumulate, alpha, column0: variant.column0 });
          assert(dispatches.every((d) => d.kernel === kernel), `matmul M=${M} K=${K} runs ${kernel}`);
          run(gpu, dispatches);
          const got = await readFloat32(gpu.device, yGpu, M * (N + extra));
          const product = ref.matmul(x, w, M, N, K, variant.bias ? bias : null, alpha);
          const expected = Float64Array.from(y0);
          for (let m = 0; m < M; m++)
            for (let n = 0; n < N; n++) {
              const at = m * (N + extra) + variant.column0 + n;
              expected[at] = product[m * N + n] + (variant.accumulate ? y0[at] : 0);
            }
          assertClose(got, expected, `matmul M=${M} N=${N} K=${K} ${JSON.stringify(variant)}`, 1e-5, 1e-5);
        });
      }
    }
  },
};

const gemmCheck: GpuCheck = {
  name: 'gemm: strided operands (transposed, offset), output columns and stride, accumulate, alpha, against the strided float64 reference',
  async run(gpu) {
    const random = seededRandom(10);
    const kernels = new Set<string>();
    for (const { M, N, K, aTransposed, bTransposed, aOffset, bOffset, column0, extra } of [
      { M: 3, N: 7, K: 5, aTransposed: true, bTransposed: false, aOffset: 3, bOffset: 0, column0: 2, extra: 3 },
      { M: 37, N: 21, K: 18, aTransposed: false, bTransposed: true, aOffset: 0, bOffset: 5, column0: 0, extra: 1 },
      { M: 32, N: 16, K: 8, aTransposed: true, bTransposed: true, aOffset: 4, bOffset: 8, column0: 4, extra: 4 },
    ]) {
      const a = randomArray(random, aOffset + M * K);
      const b = randomArray(random, bOffset + N * K);
      const g = {
        M, N, K, aOffset, bOffset, column0, ldY: column0 + N + extra, accumulate: true, alpha: 0.5,
        ...(aTransposed ? { sAm: 1, sAk: M } : { sAm: K, sAk: 1 }),
        ...(bTransposed ? { sBn: 1, sBk: N } : { sBn: K, sBk: 1 }),
      };
      // the reference against the nn.Linear one on explicitly laid out copies
      const x = Float64Array.from({ length: M * K }, (_, i) => a[aOffset + Math.floor(i / K) * g.sAm + (i % K) * g.sAk]);
      const w = Float64Array.from({ length: N * K }, (_, i) => b[bOffset + Math.floor(i / K) * g.sBn + (i % K) * g.sBk]);
      const linear = ref.matmul(x, w, M, N, K, null, g.alpha);
      const product = ref.gemm(a, b, { ...g, accumulate: false, column0: 0, ldY: N });
      assertClose(product, linear, `strided reference M=${M} N=${N} K=${K}`, 1e-12, 1e-12);
      await withOps(gpu, 8, async (ops) => {
        const y0 = randomArray(random, M * g.ldY);
        const yGpu = storageFrom(gpu.device, y0, 'y');
        const dispatch = ops.gemm(storageFrom(gpu.device, a, 'a'), storageFrom(gpu.device, b, 'b'), yGpu, g);
        kernels.add(dispatch.kernel);
        run(gpu, [dispatch]);
        assertClose(await readFloat32(gpu.device, yGpu, M * g.ldY), ref.gemm(a, b, g, y0), `gemm ${JSON.stringify(g)}`, 1e-5, 1e-5);
      });
    }
    assertEqual([...kernels].sort(), ['matmul_rows', 'matmul_tiled', 'matmul_tiled4'], 'the cases run every matmul variant');
  },
};

const gradientMatmulCheck: GpuCheck = {
  name: 'matmul: the input and weight gradients of the backward pass (across split weights, from a column slice of dy), scalar and vec4 loads',
  async run(gpu) {
    const random = seededRandom(9);
    // dy is a slice of wider rows, starting at column `column0`; with everything a multiple of 4
    // (the last case), both products read their operands as vec4s (matmul_tiled4), the weight
    // gradient with a tail of K = M rows
    for (const { M, N, K, column0, vec4 } of [
      { M: 2, N: 9, K: 5, column0: 3, vec4: false },
      { M: 37, N: 21, K: 18, column0: 3, vec4: false },
      { M: 37, N: 24, K: 20, column0: 4, vec4: true },
    ]) {
      await withOps(gpu, 8, async (ops) => {
        const ldDy = N + 4;
        const dy = randomArray(random, M * ldDy);
        const w = randomArray(random, N * K);
        const x = randomArray(random, M * K);
        // dx = dy[:, column0:column0+N] . w, with w split in row chunks
        const dxGpu = storageBuffer(gpu.device, M * K * 4, 'dx');
        const wGpu = uploadMatrix(gpu.device, w, N, K, Math.max(K * 4, Math.floor(N / 2) * K * 4), 'w');
        const inputGrad = ops.matmulInputGrad(storageFrom(gpu.device, dy, 'dy'), wGpu, dxGpu, { M, ldDy, dyColumn0: column0 });
        assert(inputGrad.every((d) => (d.kernel === 'matmul_tiled4') === vec4), `input gradient M=${M}: vec4 loads ${vec4}`);
        run(gpu, inputGrad);
        const dx = ref.gemm(dy, w, { M, N: K, K: N, sAm: ldDy, sAk: 1, aOffset: column0, sBn: 1, sBk: K });
        assertClose(await readFloat32(gpu.device, dxGpu, M * K), dx, `input gradient M=${M} N=${N} K=${K}`, 1e-5, 1e-5);
        // dW = dy[:, column0:column0+N]^T . x  (reduction over the M rows), added to an existing gradient
        const dw0 = randomArray(random, N * K);
        const dwGpu = storageFrom(gpu.device, dw0, 'dw');
        const weightGrad = ops.matmulWeightGrad(storageFrom(gpu.device, dy, 'dy'), storageFrom(gpu.device, x, 'x'), dwGpu, { M, N, K, ldDy, dyColumn0: column0 });
        assert((weightGrad.kernel === 'matmul_tiled4') === vec4, `weight gradient M=${M}: vec4 loads ${vec4}`);
        run(gpu, [weightGrad]);
        const dw = ref.gemm(dy, x, { M: N, N: K, K: M, sAm: 1, sAk: ldDy, aOffset: column0, sBn: 1, sBk: K, accumulate: true }, dw0);
        assertClose(await readFloat32(gpu.device, dwGpu, N * K), dw, `weight gradient M=${M} N=${N} K=${K}`, 1e-5, 1e-5);
        // db = the column sums of dy [M, N], added to an existing gradient
        const bias = randomArray(random, M * N);
        const db0 = randomArray(random, N);
        const dbGpu = storageFrom(gpu.device, db0, 'db');
        run(gpu, [ops.biasGrad(storageFrom(gpu.device, bias, 'dy'), storageFrom(gpu.device, new Float32Array(M).fill(1), 'ones'), dbGpu, { M, N })]);
        const db = Float64Array.from(db0, (value, n) => value + Array.from({ length: M }, (_, m) => bias[m * N + n]).reduce((sum, v) => sum + v, 0));
        assertClose(await readFloat32(gpu.device, dbGpu, N), db, `bias gradient M=${M} N=${N}`, 1e-5, 1e-5);
      });
    }
  },
};

const loraBackwardCheck: GpuCheck = {
  name: 'LoRA backward: dB, dA and dx (added or overwritten) of y[:, column0 ..] += alpha (x A^T) B^T from a column slice of dy',
  async run(gpu) {
    const random = seededRandom(11);
    const [M, inFeatures, r, out, column0, alpha] = [20, 12, 4, 8, 4, 0.75];
    const ldDy = column0 + out + 4;
    for (const accumulateDx of [true, false]) {
      await withOps(gpu, 8, async (ops) => {
        const [x, A, B, dy, dA0, dB0, dx0] = [M * inFeatures, r * inFeatures, out * r, M * ldDy, r * inFeatures, out * r, M * inFeatures].map((n) => randomArray(random, n));
        const t = ref.matmul(x, A, M, r, inFeatures);
        const upload = (data: ArrayLike<number>, label: string) => storageFrom(gpu.device, Float32Array.from(data), label);
        const [dAGpu, dBGpu, dxGpu] = [upload(dA0, 'dA'), upload(dB0, 'dB'), upload(dx0, 'dx')];
        const lora = { A: uploadMatrix(gpu.device, A, r, inFeatures, 1 << 20, 'A'), B: uploadMatrix(gpu.device, B, out, r, 1 << 20, 'B'), dA: dAGpu, dB: dBGpu, alpha };
        const io = { x: upload(x, 'x'), t: upload(t, 't'), dy: upload(dy, 'dy'), dt: storageBuffer(gpu.device, M * r * 4, 'dt'), dx: dxGpu };
        run(gpu, ops.loraBackward(lora, io, { M, ldDy, dyColumn0: column0, accumulateDx }));
        const dyOut = { sAm: ldDy, aOffset: column0 };
        const dt = ref.gemm(dy, B, { M, N: r, K: out, ...dyOut, sAk: 1, sBn: 1, sBk: r, alpha });
        const dB = ref.gemm(dy, t, { M: out, N: r, K: M, sAm: 1, sAk: ldDy, aOffset: column0, sBn: 1, sBk: r, alpha, accumulate: true }, dB0);
        const dA = ref.gemm(dt, x, { M: r, N: inFeatures, K: M, sAm: 1, sAk: r, sBn: 1, sBk: inFeatures, accumulate: true }, dA0);
        const dx = ref.gemm(dt, A, { M, N: inFeatures, K: r, sAm: r, sAk: 1, sBn: 1, sBk: inFeatures, accumulate: accumulateDx }, dx0);
        assertClose(await readFloat32(gpu.device, dBGpu, out * r), dB, 'LoRA dB', 1e-5, 1e-5);
        assertClose(await readFloat32(gpu.device, dAGpu, r * inFeatures), dA, 'LoRA dA', 1e-5, 1e-5);
        assertClose(await readFloat32(gpu.device, dxGpu, M * inFeatures), dx, `LoRA dx, accumulate ${accumulateDx}`, 1e-5, 1e-5);
      });
    }
  },
};

const rmsnormCheck: GpuCheck = {
  name: 'rmsnorm, with 64 and with 1 invocation per row',
  async run(gpu) {
    const random = seededRandom(2);
    for (const { R, C, lanes } of withRowLanes([{ R: 1, C: 8 }, { R: 5, C: 37 }, { R: 70, C: 130 }])) {
      await withOps(gpu, 8, async (ops) => {
        const x = randomArray(random, R * C, 3);
        const weight = randomArray(random, C);
        const yGpu = storageBuffer(gpu.device, R * C * 4, 'y');
        run(gpu, [ops.rmsnorm(storageFrom(gpu.device, x, 'x'), storageFrom(gpu.device, weight, 'w'), yGpu, R, C, 1e-5)]);
        assertClose(await readFloat32(gpu.device, yGpu, R * C), ref.rmsnorm(x, weight, R, C, 1e-5), `rmsnorm R=${R} C=${C} lanes=${lanes}`, 1e-5, 1e-5);
      }, lanes);
    }
  },
};

const ropeCheck: GpuCheck = {
  name: 'rope_and_store_kv: rotates q in place, stores rotated k and v at the cursor slot (GQA)',
  async run(gpu) {
    const random = seededRandom(3);
    const B = 2, T = 3, H = 4, Hk = 2, D = 8, S = 7, slot0 = 2, maxPos = 9;
    const width = (H + 2 * Hk) * D;
    await withOps(gpu, D, async (ops) => {
      const qkv = randomArray(random, B * T * width);
      const positions = Uint32Array.from({ length: B * T }, () => Math.floor(random() * maxPos));
      const table = randomRopeTable(random, maxPos, D / 2);
      const kCache0 = randomArray(random, B * Hk * S * D);
      const vCache0 = randomArray(random, B * Hk * S * D);
      const qkvGpu = storageFrom(gpu.device, qkv, 'qkv');
      const kGpu = storageFrom(gpu.device, kCache0, 'k');
      const vGpu = storageFrom(gpu.device, vCache0, 'v');
      run(gpu, [ops.ropeAndStoreKv(qkvGpu, storageFrom(gpu.device, positions, 'pos'), storageFrom(gpu.device, table, 'rope'), kGpu, vGpu, cursorBuffer(gpu.device, slot0, 0), { B, T, H, Hk, D, S })]);
      const expectedQkv = Float64Array.from(qkv);
      const expectedK = Float64Array.from(kCache0);
      const expectedV = Float64Array.from(vCache0);
      for (let b = 0; b < B; b++) {
        for (let t = 0; t < T; t++) {
          const r = b * T + t;
          for (let h = 0; h < H; h++) expectedQkv.set(ref.rotate(qkv.subarray(r * width + h * D, r * width + (h + 1) * D), positions[r], table), r * width + h * D);
          for (let h = 0; h < Hk; h++) {
            const cacheAt = ((b * Hk + h) * S + slot0 + t) * D;
            expectedK.set(ref.rotate(qkv.subarray(r * width + (H + h) * D, r * width + (H + h + 1) * D), positions[r], table), cacheAt);
            expectedV.set(qkv.subarray(r * width + (H + Hk + h) * D, r * width + (H + Hk + h + 1) * D), cacheAt);
          }
        }
      }
      assertClose(await readFloat32(gpu.device, qkvGpu, qkv.length), expectedQkv, 'rotated q (k and v columns untouched)', 1e-6, 1e-6);
      assertClose(await readFloat32(gpu.device, kGpu, kCache0.length), expectedK, 'k cache', 1e-6, 1e-6);
      assertClose(await readFloat32(gpu.device, vGpu, vCache0.length), expectedV, 'v cache', 0, 0);
    });
  },
};

const attentionCheck: GpuCheck = {
  name: 'attention: causal GQA with left padding, prompt and decode slots',
  async run(gpu) {
    const random = seededRandom(4);
    const configs = [
      { B: 3, T: 5, H: 4, Hk: 2, D: 8, S: 5, maskLen: 5, slot0: 0 }, // prompt
      { B: 3, T: 1, H: 4, Hk: 1, D: 16, S: 9, maskLen: 5, slot0: 6 }, // decode step after a padded prompt
      { B: 2, T: 3, H: 6, Hk: 3, D: 4, S: 8, maskLen: 4, slot0: 4 }, // a later prompt chunk
    ];
    for (const s of configs) {
      await withOps(gpu, s.D, async (ops) => {
        const width = (s.H + 2 * s.Hk) * s.D;
        const qkv = randomArray(random, s.B * s.T * width, 2);
        const kCache = randomArray(random, s.B * s.Hk * s.S * s.D, 2);
        const vCache = randomArray(random, s.B * s.Hk * s.S * s.D);
        const mask = paddingMask(s.B, s.maskLen);
        const outGpu = storageBuffer(gpu.device, s.B * s.T * s.H * s.D * 4, 'out');
        const lseGpu = storageBuffer(gpu.device, s.B * s.T * s.H * 4, 'lse');
        run(gpu, [ops.attention(storageFrom(gpu.device, qkv, 'qkv'), storageFrom(gpu.device, kCache, 'k'), storageFrom(gpu.device, vCache, 'v'), storageFrom(gpu.device, mask, 'mask'), outGpu, lseGpu, cursorBuffer(gpu.device, s.slot0, 0), s)]);
        const expected = ref.attention(queryColumns(qkv, s.B * s.T, s.H, s.Hk, s.D), kCache, vCache, mask, s);
        assertClose(await readFloat32(gpu.device, outGpu, expected.out.length), expected.out, `attention ${JSON.stringify(s)}`, 1e-5, 1e-5);
        assertClose(await readFloat32(gpu.device, lseGpu, expected.lse.length), expected.lse, `attention log-sum-exp ${JSON.stringify(s)}`, 1e-5, 1e-5);
      });
    }
  },
};

const gatherCheck: GpuCheck = {
  name: 'gather_rows: embedding lookup across a split table; strided first columns',
  async run(gpu) {
    const random = seededRandom(5);
    const rows = 50, C = 12;
    await withOps(gpu, 8, async (ops) => {
      const table = randomArray(random, rows * C);
      const tableGpu = uploadMatrix(gpu.device, table, rows, C, 7 * C * 4, 'table');
      assert(tableGpu.chunks.length === 8, 'table split into 8 chunks');
      const ids = Uint32Array.from([0, 49, 7, 6, 13, 13, 28]);
      const outGpu = storageBuffer(gpu.device, ids.length * C * 4, 'out');
      run(gpu, ops.gatherRows(tableGpu, storageFrom(gpu.device, ids, 'ids'), outGpu, ids.length));
      assertClose(await readFloat32(gpu.device, outGpu, ids.length * C), ref.gatherRows(table, ids, C), 'gathered rows', 0, 0);
      // strided: the first 5 columns of each row into output rows of 9 (a prompt's cache slots into a smaller cache)
      const stridedGpu = storageBuffer(gpu.device, ids.length * 9 * 4, 'strided out');
      run(gpu, ops.gatherRows(tableGpu, storageFrom(gpu.device, ids, 'ids'), stridedGpu, ids.length, { columns: 5, outStride: 9 }));
      assertClose(await readFloat32(gpu.device, stridedGpu, ids.length * 9), ref.gatherRows(table, ids, C, 5, 9), 'gathered first columns, strided', 0, 0);
    });
  },
};

const siluCheck: GpuCheck = {
  name: 'silu_mul',
  async run(gpu) {
    const random = seededRandom(6);
    const R = 9, F = 23;
    await withOps(gpu, 8, async (ops) => {
      const gateUp = randomArray(random, R * 2 * F, 6);
      const outGpu = storageBuffer(gpu.device, R * F * 4, 'out');
      run(gpu, [ops.siluMul(storageFrom(gpu.device, gateUp, 'gu'), outGpu, R, F)]);
      assertClose(await readFloat32(gpu.device, outGpu, R * F), ref.siluMul(gateUp, R, F), 'silu_mul', 1e-5, 1e-5);
    });
  },
};

const logprobsCheck: GpuCheck = {
  name: 'token_logprobs: log-probabilities of targets and entropies, with 64 and with 1 invocation per row',
  async run(gpu) {
    const random = seededRandom(7);
    for (const { R, V, lanes } of withRowLanes([{ R: 6, V: 301 }, { R: 70, V: 40 }])) {
      await withOps(gpu, 8, async (ops) => {
        const logits = randomArray(random, R * V, 8);
        const targets = Int32Array.from({ length: R }, (_, r) => (r === 3 ? -1 : r === 1 ? V - 1 : Math.floor(random() * V)));
        const logprobGpu = storageBuffer(gpu.device, R * 4, 'lp');
        const entropyGpu = storageBuffer(gpu.device, R * 4, 'h');
        run(gpu, [ops.tokenLogprobs(storageFrom(gpu.device, logits, 'logits'), storageFrom(gpu.device, targets, 't'), logprobGpu, entropyGpu, R, V)]);
        const rows = Array.from({ length: R }, (_, r) => logits.subarray(r * V, (r + 1) * V));
        const expectedLogprob = rows.map((row, r) => (targets[r] < 0 ? 0 : ref.logSoftmax(row)[targets[r]]));
        assertClose(await readFloat32(gpu.device, logprobGpu, R), expectedLogprob, `logprobs R=${R} lanes=${lanes}`, 1e-5, 1e-5);
        assertClose(await readFloat32(gpu.device, entropyGpu, R), rows.map(ref.entropy), `entropies R=${R} lanes=${lanes}`, 1e-5, 1e-5);
      }, lanes);
    }
  },
};

const samplingCheck: GpuCheck = {
  name: 'sample: greedy, temperature, top-k, top-p, ties, seeded draws',
  async run(gpu) {
    const random = seededRandom(8);
    const B = 5, V = 700;
    const settings = [
      { greedy: true },
      { temperature: 1 },
      { temperature: 0.7, topK: 5 },
      { temperature: 1.3, topP: 0.8 },
      { temperature: 0.9, topK: 40, topP: 0.5 },
      { topK: 1 },
    ];
    for (const [i, setting] of settings.entries()) {
      await withOps(gpu, 8, async (ops) => {
        const logits = randomArray(random, B * V, 4);
        // ties: a repeated maximum, and a plateau that straddles the top-k cut-off
        logits[3] = logits[10] = 9;
        for (let v = 0; v < 8; v++) logits[V + 100 + v] = 5;
        const seed = 1234 + i;
        const sampling = { ...resolveSampling(setting), seed };
        const idsGpu = storageBuffer(gpu.device, B * 4, 'ids');
        const lpGpu = storageBuffer(gpu.device, B * 4, 'lp');
        const step = 3 + i;
        const logitsGpu = storageFrom(gpu.device, logits, 'logits');
        run(gpu, [ops.sample(logitsGpu, idsGpu, lpGpu, cursorBuffer(gpu.device, 0, step), { B, V, ...sampling })]);
        const ids = new Uint32Array((await readFloat32(gpu.device, idsGpu, B)).buffer);
        const rows = Array.from({ length: B }, (_, b) => logits.subarray(b * V, (b + 1) * V));
        const expected = rows.map((row, b) => ref.sampleToken(row, sampling, samplingUniform(seed, b, step)));
        assertEqual(Array.from(ids), expected, `sampled ids for ${JSON.stringify(setting)}`);
        assertClose(await readFloat32(gpu.device, lpGpu, B), rows.map((row, b) => ref.logSoftmax(row)[expected[b]]), 'sampled token log-probs', 1e-5, 1e-5);
      });
    }
  },
};

const samplingRowSeedsCheck: GpuCheck = {
  name: 'sample: one seed per row (seeds after the ids in outIds) draws each row from its own seed and the step only',
  async run(gpu) {
    const random = seededRandom(9);
    const B = 4, V = 300, step = 6;
    const seeds = [7, 0xfffffff0, 7, 12345];
    for (const setting of [{ temperature: 1.4 }, { temperature: 0.8, topK: 30, topP: 0.9 }]) {
      await withOps(gpu, 8, async (ops) => {
        const sampling = resolveSampling({ ...setting, seed: seeds });
        const rows = Array.from({ length: B }, () => randomArray(random, V, 2));
        rows[2] = rows[0]; // the same logits and seed in another row: the same draw
        const idsGpu = storageFrom(gpu.device, Uint32Array.from([...new Array<number>(B).fill(0), ...seeds]), 'ids and seeds');
        const lpGpu = storageBuffer(gpu.device, B * 4, 'lp');
        // sampling.wgsl's Params with rowSeeds = 1 (OpBuilder.sample writes it as 0); generate builds the same dispatch.
        const params = uniformBuffer(gpu.device, [B, V, 0, sampling.topK, { f32: sampling.topP }, { f32: 1 / sampling.temperature }, 999, 1], 'sample');
        const logitsGpu = storageFrom(gpu.device, Float32Array.from(rows.flatMap((row) => [...row])), 'logits');
        run(gpu, [ops.kernels.dispatch('sample', [params, cursorBuffer(gpu.device, 0, step), logitsGpu, idsGpu, lpGpu], [B, 1, 1])]);
        const words = new Uint32Array((await readFloat32(gpu.device, idsGpu, 2 * B)).buffer);
        const expected = rows.map((row, b) => ref.sampleToken(row, sampling, sequenceUniform(seeds[b], step)));
        assertEqual(Array.from(words.subarray(0, B)), expected, `sampled ids for ${JSON.stringify(setting)}`);
        assertEqual(Array.from(words.subarray(B)), seeds, 'the seeds are left as they were');
        assertEqual(expected[2], expected[0], 'the same logits and seed in another row draw the same token');
        assert(sequenceUniform(seeds[0], step) === samplingUniform(seeds[0], 0, step), 'a per-row seed draws as row 0 of a one-seed call');
        assertClose(await readFloat32(gpu.device, lpGpu, B), rows.map((row, b) => ref.logSoftmax(row)[expected[b]]), 'sampled token log-probs', 1e-5, 1e-5);
      });
    }
  },
};

const dropoutCheck: GpuCheck = {
  name: 'dropout: counter-based inverted dropout matches its reference mask, and accumulates',
  async run(gpu) {
    const random = seededRandom(10);
    const N = 5000, p = 0.3, seed = 77, stream = 12, step = 5;
    await withOps(gpu, 8, async (ops) => {
      const x = randomArray(random, N);
      const base = randomArray(random, N);
      const outGpu = storageFrom(gpu.device, base, 'out');
      const counter = cursorBuffer(gpu.device, step, 0); // the counter's first field is the step
      run(gpu, [ops.dropout(storageFrom(gpu.device, x, 'x'), outGpu, counter, { N, seed, stream, p, accumulate: true })]);
      const expected = Array.from(x, (v, i) => base[i] + (dropoutKeeps(seed, stream, step, i, p) ? v / (1 - p) : 0));
      assertClose(await readFloat32(gpu.device, outGpu, N), expected, 'dropout (accumulated)', 1e-6, 1e-6);
      const kept = expected.filter((_, i) => dropoutKeeps(seed, stream, step, i, p)).length / N;
      assert(Math.abs(kept - (1 - p)) < 0.03, `kept fraction ${kept} is near ${1 - p}`);
      assert(Array.from({ length: 200 }, (_, i) => dropoutKeeps(seed, stream, step + 1, i, p) !== dropoutKeeps(seed, stream, step, i, p)).some(Boolean), 'another step draws another mask');
    });
  },
};

const gridCheck: GpuCheck = {
  name: 'grid: element kernels cover more than 65535 workgroups',
  async run(gpu) {
    const R = 1, F = 65536 * 64 + 5; // 65,537 workgroups of 64: needs a 2-D grid
    assert(grid(R * F, 64)[1] > 1, 'the grid is two-dimensional');
    await withOps(gpu, 8, async (ops) => {
      const gateUp = new Float32Array(2 * F).fill(1);
      gateUp[F - 1] = 2; // last gate
      const outGpu = storageBuffer(gpu.device, F * 4, 'out');
      run(gpu, [ops.siluMul(storageFrom(gpu.device, gateUp, 'gu'), outGpu, R, F)]);
      const out = await readFloat32(gpu.device, outGpu, F);
      assertClose([out[0], out[F - 1]], [1 / (1 + Math.exp(-1)), 2 / (1 + Math.exp(-2))], 'first and last element', 1e-6, 1e-6);
    });
  },
};

export const kernelChecks: GpuCheck[] = [matmulCheck, gemmCheck, gradientMatmulCheck, loraBackwardCheck, rmsnormCheck, ropeCheck, attentionCheck, gatherCheck, siluCheck, dropoutCheck, logprobsCheck, samplingCheck, samplingRowSeedsCheck, gridCheck];
