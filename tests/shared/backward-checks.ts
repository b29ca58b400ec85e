// The backward kernels (shaders/*.wgsl, each beside its forward) against their float64 references on random small shapes,
// and the references themselves against central finite differences of the float64 forwards.
// backwardChecks run on a GPU (tests/unit/backward.test.ts on Dawn; they can join the browser harness);
// backwardReferenceChecks are plain float64 and need no GPU.
import { readFloat32, storageBuffer, storageFrom, uniformBuffer } from '../../src/engine/gpu/buffers.ts';
import type { GpuContext } from '../../src/engine/gpu/device.ts';
import { Kernels } from '../../src/engine/gpu/kernels.ts';
import { OpBuilder, type AttentionShape } from '../../src/engine/ops.ts';
import * as ref from '../../src/engine/reference/ops.ts';
import { assert, assertClose, maxAbsDiff, randomArray, seededRandom } from './assert.ts';
import { cursorBuffer, paddingMask, queryColumns, randomRopeTable, run } from './gpu-cases.ts';
import { type GpuCheck, withRowLanes } from './kernel-checks.ts';

export interface ReferenceCheck {
  name: string;
  run(): void;
}

async function withOps(gpu: GpuContext, headDim: number, body: (ops: OpBuilder) => Promise<void>, rowLanes: 1 | 64 = 64): Promise<void> {
  const ops = new OpBuilder(new Kernels(gpu.device, headDim, rowLanes));
  try {
    await body(ops);
  } finally {
    ops.dispose();
  }
}

/** The reference attention gradients laid out as the GPU writes them: dqkv [B*T, (H+2Hk)*D], keys of slot t in row b*T + t. */
function packedGradient(g: { dq: ArrayLike<number>; dk: ArrayLike<number>; dv: ArrayLike<number> }, s: AttentionShape): Float64Array {
  const { B, T, H, Hk, D, S } = s;
  const width = (H + 2 * Hk) * D;
  const out = new Float64Array(B * T * width);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) {
      const r = b * T + t;
      for (let i = 0; i < H * D; i++) out[r * width + i] = g.dq[r * H * D + i];
      for (let j = 0; j < Hk; j++) {
        for (let d = 0; d < D; d++) {
          const cacheAt = ((b * Hk + j) * S + t) * D + d;
          out[r * width + (H + j) * D + d] = g.dk[cacheAt];
          out[r * width + (H + Hk + j) * D + d] = g.dv[cacheAt];
        }
      }
    }
  }
  return out;
}

const rmsnormBackwardCheck: GpuCheck = {
  name: 'rmsnorm_backward and rmsnorm_weight_grad: overwrite and accumulate, with 64 and with 1 invocation per row',
  async run(gpu) {
    const random = seededRandom(101);
    for (const { R, C, lanes } of withRowLanes([{ R: 1, C: 8 }, { R: 5, C: 37 }, { R: 70, C: 130 }])) {
      for (const accumulate of [false, true]) {
        await withOps(gpu, 8, async (ops) => {
          const eps = 1e-5;
          const x = randomArray(random, R * C, 3);
          const weight = randomArray(random, C);
          const dy = randomArray(random, R * C);
          const dx0 = randomArray(random, R * C);
          const dw0 = randomArray(random, C);
          const dxGpu = storageFrom(gpu.device, dx0, 'dx');
          const dwGpu = storageFrom(gpu.device, dw0, 'dw');
          const rsGpu = storageBuffer(gpu.device, R * 4, 'rs');
          const xGpu = storageFrom(gpu.device, x, 'x');
          const dyGpu = storageFrom(gpu.device, dy, 'dy');
          run(gpu, [
            ops.rmsnormBackward(xGpu, storageFrom(gpu.device, weight, 'w'), dyGpu, dxGpu, rsGpu, { R, C, eps, accumulate }),
            ops.rmsnormWeightGrad(xGpu, dyGpu, rsGpu, dwGpu, { R, C, accumulate }),
          ]);
          const expected = ref.rmsnormBackward(x, weight, dy, R, C, eps);
          const what = `R=${R} C=${C} accumulate=${accumulate} lanes=${lanes}`;
          assertClose(await readFloat32(gpu.device, rsGpu, R), expected.rs, `rs ${what}`, 1e-5, 1e-5);
          const plus = (base: Float32Array, add: Float64Array) => (accumulate ? add.map((v, i) => v + base[i]) : add);
          assertClose(await readFloat32(gpu.device, dxGpu, R * C), plus(dx0, expected.dx), `dx ${what}`, 1e-5, 1e-5);
          assertClose(await readFloat32(gpu.device, dwGpu, C), plus(dw0, expected.dweight), `dweight ${what}`, 1e-5, 1e-5);
        }, lanes);
      }
    }
  },
};

const siluMulBackwardCheck: GpuCheck = {
  name: 'silu_mul_backward, with saturated gates',
  async run(gpu) {
    const random = seededRandom(102);
    for (const { R, F } of [{ R: 1, F: 5 }, { R: 9, F: 23 }, { R: 4, F: 70 }]) {
      await withOps(gpu, 8, async (ops) => {
        const gateUp = randomArray(random, R * 2 * F, 6);
        gateUp[0] = -100; // exp(100) overflows f32: the gradient must still be finite
        gateUp[F - 1] = 100;
        const dout = randomArray(random, R * F);
        const dgGpu = storageFrom(gpu.device, randomArray(random, R * 2 * F), 'dgateUp');
        run(gpu, [ops.siluMulBackward(storageFrom(gpu.device, gateUp, 'gateUp'), storageFrom(gpu.device, dout, 'dout'), dgGpu, R, F)]);
        assertClose(await readFloat32(gpu.device, dgGpu, R * 2 * F), ref.siluMulBackward(gateUp, dout, R, F), `dgateUp R=${R} F=${F}`, 1e-5, 1e-5);
      });
    }
  },
};

const ropeBackwardCheck: GpuCheck = {
  name: 'rope_backward: un-rotates the q and k heads of dqkv in place, value heads untouched (GQA)',
  async run(gpu) {
    const random = seededRandom(103);
    for (const { R, H, Hk, D } of [{ R: 6, H: 4, Hk: 2, D: 8 }, { R: 5, H: 6, Hk: 2, D: 4 }, { R: 3, H: 2, Hk: 2, D: 16 }]) {
      await withOps(gpu, D, async (ops) => {
        const maxPos = 9;
        const dqkv = randomArray(random, R * (H + 2 * Hk) * D);
        const positions = Uint32Array.from({ length: R }, () => Math.floor(random() * maxPos));
        const table = randomRopeTable(random, maxPos, D / 2);
        const dqkvGpu = storageFrom(gpu.device, dqkv, 'dqkv');
        run(gpu, [ops.ropeBackward(dqkvGpu, storageFrom(gpu.device, positions, 'positions'), storageFrom(gpu.device, table, 'rope'), { R, H, Hk, D })]);
        assertClose(await readFloat32(gpu.device, dqkvGpu, dqkv.length), ref.ropeBackward(dqkv, positions, table, { R, H, Hk, D }), `dqkv R=${R} H=${H} Hk=${Hk} D=${D}`, 1e-6, 1e-6);
      });
    }
  },
};

// Training shapes: slot0 = 0, T <= S; GQA groups of 2 and 3 and MHA; keyMask over the whole
// sequence or only a prompt (later slots always real); left padding with a hole.
const ATTENTION_SHAPES: AttentionShape[] = [
  { B: 3, T: 5, H: 4, Hk: 2, D: 8, S: 5, maskLen: 5 },
  { B: 2, T: 6, H: 6, Hk: 2, D: 4, S: 6, maskLen: 4 },
  { B: 2, T: 4, H: 3, Hk: 1, D: 16, S: 7, maskLen: 3 },
  { B: 1, T: 3, H: 2, Hk: 2, D: 8, S: 3, maskLen: 3 },
  { B: 2, T: 4, H: 4, Hk: 2, D: 64, S: 4, maskLen: 4 }, // the head dimension of the small Llama models
];

const attentionBackwardCheck: GpuCheck = {
  name: 'attention_backward_query and attention_backward_key: causal GQA with padding holes',
  async run(gpu) {
    const random = seededRandom(104);
    for (const s of ATTENTION_SHAPES) {
      await withOps(gpu, s.D, async (ops) => {
        const { B, T, H, Hk, D, S, maskLen } = s;
        const R = B * T;
        const width = (H + 2 * Hk) * D;
        const qkv = randomArray(random, R * width, 2);
        const kCache = randomArray(random, B * Hk * S * D, 2);
        const vCache = randomArray(random, B * Hk * S * D);
        const mask = paddingMask(B, maskLen);
        const dout = randomArray(random, R * H * D);
        const q = queryColumns(qkv, R, H, Hk, D);
        const forward = ref.attention(q, kCache, vCache, mask, { ...s, slot0: 0 });
        const deltaGpu = storageBuffer(gpu.device, R * H * 4, 'delta');
        const dqkvGpu = storageFrom(gpu.device, randomArray(random, R * width, 100), 'dqkv'); // all overwritten
        const args = [qkv, kCache, vCache, mask, dout, Float32Array.from(forward.lse)].map((data) => storageFrom(gpu.device, data, 'input'));
        const [qkvGpu, kGpu, vGpu, maskGpu, doutGpu, lseGpu] = args;
        run(gpu, [
          ops.attentionBackwardQuery(qkvGpu, kGpu, vGpu, maskGpu, doutGpu, lseGpu, deltaGpu, dqkvGpu, s),
          ops.attentionBackwardKey(qkvGpu, kGpu, vGpu, maskGpu, doutGpu, lseGpu, deltaGpu, dqkvGpu, s),
        ]);
        const expected = ref.attentionBackward(q, kCache, vCache, mask, dout, { ...s, slot0: 0 });
        assertClose(await readFloat32(gpu.device, deltaGpu, R * H), expected.delta, `delta ${JSON.stringify(s)}`, 1e-5, 1e-5);
        assertClose(await readFloat32(gpu.device, dqkvGpu, R * width), packedGradient(expected, s), `dqkv ${JSON.stringify(s)}`, 1e-5, 1e-5);
      });
    }
  },
};

/**
 * Random tree limits: a (prefix, segment) pair per query row b*T + t with prefix <= segment <= t (slot0 = 0),
 * mixing plain causal rows (0, 0), rows that see only themselves (prefix 0, segment t) and rows with a hidden range.
 */
export function randomRowLimits(random: () => number, B: number, T: number): Uint32Array {
  const limits = new Uint32Array(B * T * 2);
  for (let r = 0; r < B * T; r++) {
    const t = r % T;
    const kind = random();
    const segment = kind < 0.15 ? 0 : kind < 0.3 ? t : Math.floor(random() * (t + 1));
    limits[2 * r] = kind < 0.15 ? 0 : Math.floor(random() * (segment + 1));
    limits[2 * r + 1] = segment;
  }
  // and each sequence's last query sees only itself, so that the limits always hide something
  for (let b = 0; b < B; b++) limits[2 * (b * T + T - 1) + 1] = T - 1;
  return limits;
}

/** keyMask [B, maskLen] followed by the row limits, as the tree-structured attention kernels read them. */
function withLimits(mask: Uint32Array, limits: Uint32Array): Uint32Array {
  const out = new Uint32Array(mask.length + limits.length);
  out.set(mask);
  out.set(limits, mask.length);
  return out;
}

const treeAttentionCheck: GpuCheck = {
  name: 'tree-structured attention: forward, attention_backward_query and attention_backward_key honour per-row (prefix, segment) limits',
  async run(gpu) {
    const random = seededRandom(109);
    // the training shapes, and a longer sequence where the query kernels skip whole hidden ranges
    for (const s of [...ATTENTION_SHAPES, { B: 2, T: 19, H: 4, Hk: 2, D: 8, S: 19, maskLen: 19 }]) {
      await withOps(gpu, s.D, async (ops) => {
        const { B, T, H, Hk, D, S, maskLen } = s;
        const R = B * T;
        const width = (H + 2 * Hk) * D;
        const qkv = randomArray(random, R * width, 2);
        const kCache = randomArray(random, B * Hk * S * D, 2);
        const vCache = randomArray(random, B * Hk * S * D);
        const mask = paddingMask(B, maskLen);
        const limits = randomRowLimits(random, B, T);
        const dout = randomArray(random, R * H * D);
        const q = queryColumns(qkv, R, H, Hk, D);
        const tree = { ...s, slot0: 0, rowLimits: limits };
        const forward = ref.attention(q, kCache, vCache, mask, tree);
        // the limits must matter, or this checks nothing beyond the causal case
        const causal = ref.attention(q, kCache, vCache, mask, { ...s, slot0: 0 });
        assert(maxAbsDiff(forward.out, causal.out) > 1e-2, `the random tree limits of ${JSON.stringify(s)} change no output`);

        const [qkvGpu, kGpu, vGpu, maskGpu, doutGpu] = [qkv, kCache, vCache, withLimits(mask, limits), dout].map((data) => storageFrom(gpu.device, data, 'input'));
        const outGpu = storageFrom(gpu.device, randomArray(random, R * H * D, 100), 'out');
        const lseGpu = storageFrom(gpu.device, randomArray(random, R * H, 100), 'lse');
        const deltaGpu = storageBuffer(gpu.device, R * H * 4, 'delta');
        const dqkvGpu = storageFrom(gpu.device, randomArray(random, R * width, 100), 'dqkv');
        const shape = { ...s, tree: true };
        run(gpu, [
          ops.attention(qkvGpu, kGpu, vGpu, maskGpu, outGpu, lseGpu, cursorBuffer(gpu.device, 0, 0), shape),
          ops.attentionBackwardQuery(qkvGpu, kGpu, vGpu, maskGpu, doutGpu, lseGpu, deltaGpu, dqkvGpu, shape),
          ops.attentionBackwardKey(qkvGpu, kGpu, vGpu, maskGpu, doutGpu, lseGpu, deltaGpu, dqkvGpu, shape),
        ]);
        const what = JSON.stringify(s);
        assertClose(await readFloat32(gpu.device, outGpu, R * H * D), forward.out, `tree attention out ${what}`, 1e-5, 1e-5);
        assertClose(await readFloat32(gpu.device, lseGpu, R * H), forward.lse, `tree attention lse ${what}`, 1e-5, 1e-5);
        const expected = ref.attentionBackward(q, kCache, vCache, mask, dout, tree);
        assertClose(await readFloat32(gpu.device, deltaGpu, R * H), expected.delta, `tree delta ${what}`, 1e-5, 1e-5);
        assertClose(await readFloat32(gpu.device, dqkvGpu, R * width), packedGradient(expected, s), `tree dqkv ${what}`, 1e-5, 1e-5);
      });
    }
  },
};

/** The reference forward of rope on a qkv row layout: q and k heads rotated, v heads copied. */
function ropeQk(qkv: ArrayLike<number>, positions: ArrayLike<number>, table: ArrayLike<number>, s: { R: number; H: number; Hk: number; D: number }): Float64Array {
  const width = (s.H + 2 * s.Hk) * s.D;
  const out = Float64Array.from(qkv);
  for (let r = 0; r < s.R; r++) {
    for (let head = 0; head < s.H + s.Hk; head++) {
      const at = r * width + head * s.D;
      out.set(ref.rotate(out.subarray(at, at + s.D), positions[r], table), at);
    }
  }
  return out;
}

const attentionChainCheck: GpuCheck = {
  name: 'attention layer backward chain: rope and attention forward on the GPU, then attention and rope backward',
  async run(gpu) {
    const random = seededRandom(105);
    for (const s of [ATTENTION_SHAPES[0], ATTENTION_SHAPES[1]]) {
      await withOps(gpu, s.D, async (ops) => {
        const { B, T, H, Hk, D, S, maskLen } = s;
        const R = B * T;
        const width = (H + 2 * Hk) * D;
        const qkv = randomArray(random, R * width, 2);
        const mask = paddingMask(B, maskLen);
        // positions count each sequence's real tokens, as the engine numbers them
        const positions = new Uint32Array(R);
        for (let b = 0; b < B; b++) {
          let position = 0;
          for (let t = 0; t < T; t++) {
            positions[b * T + t] = position;
            if (t >= maskLen || mask[b * maskLen + t] !== 0) position++;
          }
        }
        const table = randomRopeTable(random, T, D / 2);
        const dout = randomArray(random, R * H * D);

        const qkvGpu = storageFrom(gpu.device, qkv, 'qkv');
        const positionsGpu = storageFrom(gpu.device, positions, 'positions');
        const tableGpu = storageFrom(gpu.device, table, 'rope');
        const kGpu = storageBuffer(gpu.device, B * Hk * S * D * 4, 'k cache');
        const vGpu = storageBuffer(gpu.device, B * Hk * S * D * 4, 'v cache');
        const maskGpu = storageFrom(gpu.device, mask, 'mask');
        const outGpu = storageBuffer(gpu.device, R * H * D * 4, 'out');
        const lseGpu = storageBuffer(gpu.device, R * H * 4, 'lse');
        const doutGpu = storageFrom(gpu.device, dout, 'dout');
        const deltaGpu = storageBuffer(gpu.device, R * H * 4, 'delta');
        const dqkvGpu = storageBuffer(gpu.device, R * width * 4, 'dqkv');
        const cursor = uniformBuffer(gpu.device, [0, 0, 0, 0], 'cursor');
        run(gpu, [
          ops.ropeAndStoreKv(qkvGpu, positionsGpu, tableGpu, kGpu, vGpu, cursor, { B, T, H, Hk, D, S }),
          ops.attention(qkvGpu, kGpu, vGpu, maskGpu, outGpu, lseGpu, cursor, s),
          ops.attentionBackwardQuery(qkvGpu, kGpu, vGpu, maskGpu, doutGpu, lseGpu, deltaGpu, dqkvGpu, s),
          ops.attentionBackwardKey(qkvGpu, kGpu, vGpu, maskGpu, doutGpu, lseGpu, deltaGpu, dqkvGpu, s),
          ops.ropeBackward(dqkvGpu, positionsGpu, tableGpu, { R, H, Hk, D }),
        ]);

        // float64: rotate, attend, differentiate, un-rotate
        const rotated = ropeQk(qkv, positions, table, { R, H, Hk, D });
        const cache = (head0: number) => {
          const perToken = new Float64Array(R * Hk * D);
          for (let r = 0; r < R; r++) perToken.set(rotated.subarray(r * width + head0 * D, r * width + (head0 + Hk) * D), r * Hk * D);
          const inCache = new Float64Array(B * Hk * S * D);
          const packed = ref.toCacheLayout(perToken, B, T, Hk, D); // [B, Hk, T, D], then slots T..S-1 stay empty
          for (let bh = 0; bh < B * Hk; bh++) inCache.set(packed.subarray(bh * T * D, (bh + 1) * T * D), bh * S * D);
          return inCache;
        };
        const gradient = ref.attentionBackward(queryColumns(rotated, R, H, Hk, D), cache(H), cache(H + Hk), mask, dout, { ...s, slot0: 0 });
        const expected = ref.ropeBackward(packedGradient(gradient, s), positions, table, { R, H, Hk, D });
        assertClose(await readFloat32(gpu.device, dqkvGpu, R * width), expected, `dqkv before rope ${JSON.stringify(s)}`, 1e-5, 1e-5);
      });
    }
  },
};

const logitsBackwardCheck: GpuCheck = {
  name: 'logits_backward: logprob and entropy gradients, rows without a target, a bound row range, with 64 and with 1 invocation per row',
  async run(gpu) {
    const random = seededRandom(106);
    for (const { R, V, lanes } of withRowLanes([{ R: 6, V: 301 }, { R: 70, V: 40 }])) {
      await withOps(gpu, 8, async (ops) => {
        const logits = randomArray(random, R * V, 8);
        const targets = Int32Array.from({ length: R }, (_, r) => (r === 1 ? -1 : r === 2 ? V - 1 : Math.floor(random() * V)));
        const gLogprob = randomArray(random, R);
        const gEntropy = randomArray(random, R);
        const dGpu = storageFrom(gpu.device, randomArray(random, R * V), 'dlogits');
        const inputs = [logits, targets, gLogprob, gEntropy].map((data) => storageFrom(gpu.device, data, 'input'));
        run(gpu, [ops.logitsBackward(inputs[0], inputs[1], inputs[2], inputs[3], dGpu, R, V)]);
        assertClose(await readFloat32(gpu.device, dGpu, R * V), ref.logitsBackward(logits, targets, gLogprob, gEntropy, R, V), `dlogits R=${R} V=${V} lanes=${lanes}`, 1e-5, 1e-5);
      }, lanes);
    }
    // Rows 64..69 of 70, bound at an offset (offsets must be multiples of 256 bytes, so 64 rows of the
    // per-row arrays); rows outside the range must stay as they were.
    await withOps(gpu, 8, async (ops) => {
      const total = 70, first = 64, R = total - first, V = 77;
      const logits = randomArray(random, total * V, 8);
      const targets = Int32Array.from({ length: total }, (_, r) => (r === 66 ? -1 : Math.floor(random() * V)));
      const gLogprob = randomArray(random, total);
      const gEntropy = randomArray(random, total);
      const dlogits0 = randomArray(random, total * V);
      const dGpu = storageFrom(gpu.device, dlogits0, 'dlogits');
      const rows = (buffer: GPUBuffer, rowBytes: number): GPUBufferBinding => ({ buffer, offset: first * rowBytes, size: R * rowBytes });
      run(gpu, [
        ops.logitsBackward(
          rows(storageFrom(gpu.device, logits, 'logits'), V * 4),
          rows(storageFrom(gpu.device, targets, 'targets'), 4),
          rows(storageFrom(gpu.device, gLogprob, 'gLogprob'), 4),
          rows(storageFrom(gpu.device, gEntropy, 'gEntropy'), 4),
          rows(dGpu, V * 4),
          R,
          V,
        ),
      ]);
      const expected = Float64Array.from(dlogits0);
      const slice = (data: Float32Array | Int32Array, width: number) => data.subarray(first * width, total * width);
      expected.set(ref.logitsBackward(slice(logits, V), slice(targets, 1), slice(gLogprob, 1), slice(gEntropy, 1), R, V), first * V);
      assertClose(await readFloat32(gpu.device, dGpu, total * V), expected, 'dlogits of a bound row range', 1e-5, 1e-5);
    });
  },
};

const siluGridCheck: GpuCheck = {
  name: 'silu_mul_backward on a 2-D grid of more than 65535 workgroups',
  async run(gpu) {
    await withOps(gpu, 8, async (ops) => {
      // 65,537 workgroups of 64 elements; the last gate differs from the others
      const F = 65536 * 64 + 5;
      const gateUp = new Float32Array(2 * F).fill(1);
      gateUp[F - 1] = 2;
      const dgGpu = storageBuffer(gpu.device, 2 * F * 4, 'dgateUp');
      run(gpu, [ops.siluMulBackward(storageFrom(gpu.device, gateUp, 'gateUp'), storageFrom(gpu.device, new Float32Array(F).fill(1), 'dout'), dgGpu, 1, F)]);
      const expected = ref.siluMulBackward([1, 2, 1, 1], [1, 1], 1, 2);
      const got = await readFloat32(gpu.device, dgGpu, 2 * F);
      assertClose([got[0], got[F - 1], got[F], got[2 * F - 1]], expected, 'first and last elements', 1e-6, 1e-6);
    });
  },
};

const embeddingBackwardCheck: GpuCheck = {
  name: 'embedding_backward: repeated and absent ids, overwrite and accumulate, a bound vocabulary range',
  async run(gpu) {
    const random = seededRandom(108);
    for (const { R, V, C } of [{ R: 9, V: 13, C: 5 }, { R: 40, V: 70, C: 130 }]) {
      for (const accumulate of [false, true]) {
        await withOps(gpu, 8, async (ops) => {
          // ids 0 .. V/2 only, with repeats: the upper half of the vocabulary is absent
          const ids = Uint32Array.from({ length: R }, (_, r) => (r === 1 ? 0 : Math.floor(random() * (V / 2))));
          ids[R - 1] = ids[0];
          const dx = randomArray(random, R * C);
          const dtable0 = randomArray(random, V * C);
          const dGpu = storageFrom(gpu.device, dtable0, 'dtable');
          run(gpu, [ops.embeddingBackward(storageFrom(gpu.device, ids, 'ids'), storageFrom(gpu.device, dx, 'dx'), dGpu, { R, V, C, accumulate })]);
          const expected = ref.embeddingBackward(ids, dx, R, V, C);
          const what = `R=${R} V=${V} C=${C} accumulate=${accumulate}`;
          assertClose(await readFloat32(gpu.device, dGpu, V * C), accumulate ? expected.map((v, i) => v + dtable0[i]) : expected, `dtable ${what}`, 1e-5, 1e-5);
        });
      }
    }
    // vocabulary rows 64 .. 99 of 100 bound at an offset (C = 4: 64 rows are 1024 bytes); rows outside stay
    await withOps(gpu, 8, async (ops) => {
      const R = 20, total = 100, first = 64, V = total - first, C = 4;
      const ids = Uint32Array.from({ length: R }, (_, r) => (r % 3 === 0 ? Math.floor(random() * first) : first + Math.floor(random() * V)));
      const dx = randomArray(random, R * C);
      const dtable0 = randomArray(random, total * C);
      const dGpu = storageFrom(gpu.device, dtable0, 'dtable');
      const range: GPUBufferBinding = { buffer: dGpu, offset: first * C * 4, size: V * C * 4 };
      run(gpu, [ops.embeddingBackward(storageFrom(gpu.device, ids, 'ids'), storageFrom(gpu.device, dx, 'dx'), range, { R, V, C, row0: first, accumulate: true })]);
      const expected = Float64Array.from(dtable0);
      const full = ref.embeddingBackward(ids, dx, R, total, C);
      for (let i = first * C; i < total * C; i++) expected[i] += full[i];
      assertClose(await readFloat32(gpu.device, dGpu, total * C), expected, 'dtable of a bound vocabulary range', 1e-5, 1e-5);
    });
  },
};

export const backwardChecks: GpuCheck[] = [
  rmsnormBackwardCheck, siluMulBackwardCheck, ropeBackwardCheck, attentionBackwardCheck, treeAttentionCheck, attentionChainCheck, logitsBackwardCheck, siluGridCheck, embeddingBackwardCheck,
];

// ---- the float64 references against finite differences ----------------------------------------

const STEP = 1e-5;

/** Central differences of f at every element of x (x is restored). */
function numericGradient(f: () => number, x: Float64Array): Float64Array {
  const gradient = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) {
    const saved = x[i];
    x[i] = saved + STEP;
    const up = f();
    x[i] = saved - STEP;
    const down = f();
    x[i] = saved;
    gradient[i] = (up - down) / (2 * STEP);
  }
  return gradient;
}

/** |numeric - analytic| <= 1e-6 relative, with a floor of 1% of the largest component for the near-zero ones. */
function assertGradient(analytic: ArrayLike<number>, numeric: ArrayLike<number>, what: string): void {
  let largest = 0;
  for (let i = 0; i < analytic.length; i++) largest = Math.max(largest, Math.abs(analytic[i]));
  if (!(largest > 0)) throw new Error(`${what}: the gradient is zero, which checks nothing`);
  assertClose(numeric, analytic, `${what} (finite differences)`, 1e-8 * largest, 1e-6);
}

function dot(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += a[i] * b[i];
  return sum;
}

function random64(random: () => number, n: number, scale = 1): Float64Array {
  return Float64Array.from(randomArray(random, n, scale));
}

export const backwardReferenceChecks: ReferenceCheck[] = [
  {
    name: 'rmsnormBackward: finite differences of sum(dy * rmsnorm(x, w))',
    run() {
      const random = seededRandom(201);
      const R = 3, C = 7, eps = 1e-5;
      const x = random64(random, R * C, 3);
      const weight = random64(random, C);
      const dy = random64(random, R * C);
      const loss = () => dot(dy, ref.rmsnorm(x, weight, R, C, eps));
      const { dx, dweight } = ref.rmsnormBackward(x, weight, dy, R, C, eps);
      assertGradient(dx, numericGradient(loss, x), 'rmsnorm dx');
      assertGradient(dweight, numericGradient(loss, weight), 'rmsnorm dweight');
    },
  },
  {
    name: 'siluMulBackward: finite differences of sum(dout * silu(gate) * up)',
    run() {
      const random = seededRandom(202);
      const R = 3, F = 6;
      const gateUp = random64(random, R * 2 * F, 6);
      const dout = random64(random, R * F);
      assertGradient(ref.siluMulBackward(gateUp, dout, R, F), numericGradient(() => dot(dout, ref.siluMul(gateUp, R, F)), gateUp), 'silu_mul dgateUp');
    },
  },
  {
    name: 'ropeBackward: inverse of the rotation (orthogonality) and its transpose (finite differences)',
    run() {
      const random = seededRandom(203);
      const s = { R: 4, H: 4, Hk: 2, D: 8 };
      const maxPos = 6;
      const qkv = random64(random, s.R * (s.H + 2 * s.Hk) * s.D);
      const positions = Uint32Array.from({ length: s.R }, () => Math.floor(random() * maxPos));
      const table = Float64Array.from(randomRopeTable(random, maxPos, s.D / 2));
      // the float32 table's (cos, sin) pairs are unit vectors only to float32 accuracy
      assertClose(ref.ropeBackward(ropeQk(qkv, positions, table, s), positions, table, s), qkv, 'backward(forward(x)) == x', 1e-6, 1e-6);
      const g = random64(random, qkv.length);
      assertGradient(ref.ropeBackward(g, positions, table, s), numericGradient(() => dot(g, ropeQk(qkv, positions, table, s)), qkv), 'rope dqkv');
    },
  },
  {
    name: 'attentionBackward: finite differences of sum(dout * attention(q, k, v)) for q, k and v',
    run() {
      const random = seededRandom(204);
      const shapes = [
        { B: 2, T: 4, H: 4, Hk: 2, D: 4, S: 5, maskLen: 4, slot0: 0 },
        { B: 2, T: 3, H: 6, Hk: 2, D: 4, S: 6, maskLen: 3, slot0: 0 },
        { B: 2, T: 2, H: 3, Hk: 1, D: 4, S: 6, maskLen: 4, slot0: 3 }, // a later chunk against a padded prompt
        { B: 2, T: 6, H: 4, Hk: 2, D: 4, S: 6, maskLen: 6, slot0: 0, rowLimits: randomRowLimits(random, 2, 6) }, // tree-structured
      ];
      for (const s of shapes) {
        const q = random64(random, s.B * s.T * s.H * s.D, 2);
        const kCache = random64(random, s.B * s.Hk * s.S * s.D, 2);
        const vCache = random64(random, s.B * s.Hk * s.S * s.D);
        const mask = paddingMask(s.B, s.maskLen);
        const dout = random64(random, q.length);
        const loss = () => dot(dout, ref.attention(q, kCache, vCache, mask, s).out);
        const g = ref.attentionBackward(q, kCache, vCache, mask, dout, s);
        const what = JSON.stringify(s);
        assertGradient(g.dq, numericGradient(loss, q), `attention dq ${what}`);
        assertGradient(g.dk, numericGradient(loss, kCache), `attention dk ${what}`);
        assertGradient(g.dv, numericGradient(loss, vCache), `attention dv ${what}`);
        const out = ref.attention(q, kCache, vCache, mask, s).out;
        const delta = Array.from({ length: s.B * s.T * s.H }, (_, i) => dot(dout.subarray(i * s.D, (i + 1) * s.D), out.subarray(i * s.D, (i + 1) * s.D)));
        assertClose(g.delta, delta, `attention delta == dout . out ${what}`, 1e-12, 1e-12);
      }
    },
  },
  {
    name: 'embeddingBackward: finite differences of sum(dx * gatherRows(table, ids))',
    run() {
      const random = seededRandom(206);
      const R = 6, V = 5, C = 3;
      const ids = Uint32Array.from([2, 0, 2, 4, 0, 2]); // token 1 and 3 absent
      const table = random64(random, V * C);
      const dx = random64(random, R * C);
      const dtable = ref.embeddingBackward(ids, dx, R, V, C);
      assertGradient(dtable, numericGradient(() => dot(dx, ref.gatherRows(table, ids, C)), table), 'embedding dtable');
      for (const absent of [1, 3]) for (let c = 0; c < C; c++) if (dtable[absent * C + c] !== 0) throw new Error(`embedding dtable: absent token ${absent} has a gradient`);
    },
  },
  {
    name: 'logitsBackward: finite differences of sum(gLogprob * logprob + gEntropy * entropy)',
    run() {
      const random = seededRandom(205);
      const R = 4, V = 9;
      const logits = random64(random, R * V, 4);
      const targets = Int32Array.from([3, -1, 0, 8]);
      const gLogprob = random64(random, R);
      const gEntropy = random64(random, R);
      const loss = () => {
        let sum = 0;
        for (let r = 0; r < R; r++) {
          const row = logits.subarray(r * V, (r + 1) * V);
          if (targets[r] >= 0) sum += gLogprob[r] * ref.logSoftmax(row)[targets[r]];
          sum += gEntropy[r] * ref.entropy(row);
        }
        return sum;
      };
      assertGradient(ref.logitsBackward(logits, targets, gLogprob, gEntropy, R, V), numericGradient(loss, logits), 'dlogits');
    },
  },
];
