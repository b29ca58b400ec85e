// Float64 references of every WGSL kernel, written for clarity, not speed. Each mirrors one entry
// point in shaders/ with the same shapes and layout (row-major, B/T/C as in the shader headers), each
// backward right after its forward and the exact gradient of it; the kernel tests compare the GPU
// against these, and tests/shared/backward-checks.ts these backwards against finite differences.
import type { AttentionShape as KernelAttentionShape, GemmShape } from '../ops.ts';
import type { ResolvedSampling } from '../sampling-params.ts';

type Vec = ArrayLike<number>;

/**
 * The strided product of matmul.wgsl (OpBuilder.gemm): y[m, column0 + n] = alpha sum_k A(m, k) B(n, k),
 * plus y's old value with `accumulate`, where A(m, k) = a[aOffset + m sAm + k sAk] and
 * B(n, k) = b[bOffset + n sBn + k sBk]. y [M, ldY] starts as a copy of `y0` (zeros without it); its
 * columns outside [column0, column0 + N) keep their values.
 */
export function gemm(a: Vec, b: Vec, g: GemmShape, y0: Vec | null = null): Float64Array {
  const ldY = g.ldY ?? g.N;
  const column0 = g.column0 ?? 0;
  const y = y0 ? Float64Array.from(y0) : new Float64Array(g.M * ldY);
  for (let m = 0; m < g.M; m++) {
    for (let n = 0; n < g.N; n++) {
      let sum = 0;
      for (let k = 0; k < g.K; k++) sum += a[(g.aOffset ?? 0) + m * g.sAm + k * g.sAk] * b[(g.bOffset ?? 0) + n * g.sBn + k * g.sBk];
      const at = m * ldY + column0 + n;
      y[at] = (g.alpha ?? 1) * sum + (g.accumulate ? y[at] : 0);
    }
  }
  return y;
}

/** y[m, n] = alpha * sum_k x[m, k] w[n, k] + bias[n]; x [M, K], w [N, K] (nn.Linear layout). */
export function matmul(x: Vec, w: Vec, M: number, N: number, K: number, bias: Vec | null = null, alpha = 1): Float64Array {
  const y = gemm(x, w, { M, N, K, sAm: K, sAk: 1, sBn: K, sBk: 1, alpha });
  if (bias) for (let m = 0; m < M; m++) for (let n = 0; n < N; n++) y[m * N + n] += bias[n];
  return y;
}

/** RMSNorm of each row of x [R, C]. */
export function rmsnorm(x: Vec, weight: Vec, R: number, C: number, eps: number): Float64Array {
  const y = new Float64Array(R * C);
  for (let r = 0; r < R; r++) {
    let sumSquares = 0;
    for (let c = 0; c < C; c++) sumSquares += x[r * C + c] ** 2;
    const scale = 1 / Math.sqrt(sumSquares / C + eps);
    for (let c = 0; c < C; c++) y[r * C + c] = x[r * C + c] * scale * weight[c];
  }
  return y;
}

/**
 * Gradients of y = rmsnorm(x, weight) given dy, all [R, C]: dx [R, C], dweight [C], and rs [R] (each row's
 * 1 / sqrt(mean(x^2) + eps), which rmsnorm_backward also writes).
 */
export function rmsnormBackward(x: Vec, weight: Vec, dy: Vec, R: number, C: number, eps: number): { dx: Float64Array; dweight: Float64Array; rs: Float64Array } {
  const dx = new Float64Array(R * C);
  const dweight = new Float64Array(C);
  const rs = new Float64Array(R);
  for (let r = 0; r < R; r++) {
    let sumSquares = 0;
    let dot = 0; // sum_c w dy x
    for (let c = 0; c < C; c++) {
      sumSquares += x[r * C + c] ** 2;
      dot += weight[c] * dy[r * C + c] * x[r * C + c];
    }
    rs[r] = 1 / Math.sqrt(sumSquares / C + eps);
    for (let c = 0; c < C; c++) {
      const at = r * C + c;
      dx[at] = rs[r] * weight[c] * dy[at] - (x[at] * rs[r] ** 3 * dot) / C;
      dweight[c] += dy[at] * x[at] * rs[r];
    }
  }
  return { dx, dweight, rs };
}

/**
 * rotate_half RoPE of one head vector (length D) at `position`, from a [positions, D/2, 2] table;
 * direction -1 rotates back (the transpose, which is also the backward pass).
 */
export function rotate(head: Vec, position: number, table: Vec, direction: 1 | -1 = 1): Float64Array {
  const D = head.length;
  const half = D / 2;
  const out = new Float64Array(D);
  for (let i = 0; i < half; i++) {
    const c = table[(position * half + i) * 2];
    const s = direction * table[(position * half + i) * 2 + 1];
    out[i] = head[i] * c - head[i + half] * s;
    out[i + half] = head[i + half] * c + head[i] * s;
  }
  return out;
}

/** The transpose (and inverse) of `rotate`: the gradient of one head vector before rotation. */
export function unrotate(head: Vec, position: number, table: Vec): Float64Array {
  return rotate(head, position, table, -1);
}

/** rope_backward: a copy of dqkv [R, (H+2Hk)*D] with its q and k heads un-rotated at positions [R]. */
export function ropeBackward(dqkv: Vec, positions: Vec, table: Vec, s: { R: number; H: number; Hk: number; D: number }): Float64Array {
  const width = (s.H + 2 * s.Hk) * s.D;
  const out = Float64Array.from(dqkv);
  for (let r = 0; r < s.R; r++) {
    for (let head = 0; head < s.H + s.Hk; head++) {
      const at = r * width + head * s.D;
      out.set(unrotate(out.subarray(at, at + s.D), positions[r], table), at);
    }
  }
  return out;
}

/** The shape of `attention` and its backward, the kernels' (OpBuilder) with the cache slot of the first query; `rowLimits` makes it tree-structured. */
export interface AttentionShape extends Omit<KernelAttentionShape, 'tree'> {
  slot0: number;
  /**
   * Tree-structured batches: a (prefix, segment) pair per query row b*T + t, [B*T*2]; the query then sees only
   * the slots s < prefix and segment <= s <= its own slot (besides the padding rule).
   */
  rowLimits?: Vec;
}

/** Whether query t of sequence b sees cache slot `key` (key <= its slot): the rule of attention.wgsl. */
export function seesKey(keyMask: Vec, s: AttentionShape, b: number, t: number, key: number): boolean {
  const slot = s.slot0 + t;
  if (key === slot) return true;
  if (key > slot || !(key >= s.maskLen || keyMask[b * s.maskLen + key] !== 0)) return false;
  if (!s.rowLimits) return true;
  const r = b * s.T + t;
  return key < s.rowLimits[2 * r] || key >= s.rowLimits[2 * r + 1];
}

/**
 * Causal grouped-query attention of T new tokens per sequence against a KV cache, as attention.wgsl.
 * q [B, T, H, D] (already rotated); kCache, vCache [B, Hk, S, D]; keyMask [B, maskLen] (1 real, 0 padding;
 * slots >= maskLen are real). Query t sits at slot slot0 + t and sees real slots s <= slot0 + t, and itself
 * (with s.rowLimits, only those outside its hidden range: see seesKey).
 * Also returns each query's log-sum-exp of scaled scores, lse [B, T, H].
 */
export function attention(q: Vec, kCache: Vec, vCache: Vec, keyMask: Vec, s: AttentionShape): { out: Float64Array; lse: Float64Array } {
  const { B, T, H, Hk, D, S, slot0 } = s;
  const out = new Float64Array(B * T * H * D);
  const lse = new Float64Array(B * T * H);
  const scale = 1 / Math.sqrt(D);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) {
      const slot = slot0 + t;
      for (let h = 0; h < H; h++) {
        const kvBase = (b * Hk + Math.floor(h / (H / Hk))) * S;
        const scores: number[] = [];
        const slots: number[] = [];
        for (let key = 0; key <= slot; key++) {
          if (!seesKey(keyMask, s, b, t, key)) continue;
          let score = 0;
          for (let d = 0; d < D; d++) score += q[((b * T + t) * H + h) * D + d] * kCache[(kvBase + key) * D + d];
          scores.push(score * scale);
          slots.push(key);
        }
        const max = Math.max(...scores);
        const weights = scores.map((score) => Math.exp(score - max));
        const total = weights.reduce((a, c) => a + c, 0);
        lse[(b * T + t) * H + h] = max + Math.log(total);
        for (let d = 0; d < D; d++) {
          let sum = 0;
          slots.forEach((key, i) => (sum += weights[i] * vCache[(kvBase + key) * D + d]));
          out[((b * T + t) * H + h) * D + d] = sum / total;
        }
      }
    }
  }
  return { out, lse };
}

/**
 * Gradients of `attention` given dout [B, T, H, D], the gradient of its output: dq [B, T, H, D]
 * (of the rotated queries), dk and dv [B, Hk, S, D] (of the caches; zero for slots no query sees), and
 * delta [B, T, H] = dout . out per query head, as attention_backward_query writes it.
 */
export function attentionBackward(
  q: Vec, kCache: Vec, vCache: Vec, keyMask: Vec, dout: Vec, s: AttentionShape,
): { dq: Float64Array; dk: Float64Array; dv: Float64Array; delta: Float64Array } {
  const { B, T, H, Hk, D, S, slot0 } = s;
  const scale = 1 / Math.sqrt(D);
  const dq = new Float64Array(B * T * H * D);
  const dk = new Float64Array(B * Hk * S * D);
  const dv = new Float64Array(B * Hk * S * D);
  const delta = new Float64Array(B * T * H);
  const dot = (x: Vec, xAt: number, y: Vec, yAt: number) => {
    let sum = 0;
    for (let d = 0; d < D; d++) sum += x[xAt + d] * y[yAt + d];
    return sum;
  };
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) {
      const slot = slot0 + t;
      for (let h = 0; h < H; h++) {
        const qAt = ((b * T + t) * H + h) * D;
        const kvBase = (b * Hk + Math.floor(h / (H / Hk))) * S;
        const slots: number[] = [];
        for (let key = 0; key <= slot; key++) if (seesKey(keyMask, s, b, t, key)) slots.push(key);
        const scores = slots.map((key) => scale * dot(q, qAt, kCache, (kvBase + key) * D));
        const max = Math.max(...scores);
        const weights = scores.map((score) => Math.exp(score - max));
        const total = weights.reduce((sum, w) => sum + w, 0);
        const p = weights.map((w) => w / total);
        // delta = dout . out with out = sum_s p v_s
        const a = slots.map((key) => dot(dout, qAt, vCache, (kvBase + key) * D));
        const deltaValue = p.reduce((sum, pi, i) => sum + pi * a[i], 0);
        delta[(b * T + t) * H + h] = deltaValue;
        slots.forEach((key, i) => {
          const dScore = p[i] * (a[i] - deltaValue);
          const kvAt = (kvBase + key) * D;
          for (let d = 0; d < D; d++) {
            dq[qAt + d] += scale * dScore * kCache[kvAt + d];
            dk[kvAt + d] += scale * dScore * q[qAt + d];
            dv[kvAt + d] += p[i] * dout[qAt + d];
          }
        });
      }
    }
  }
  return { dq, dk, dv, delta };
}

/** Rearranges per-token heads x [B, T, Hk, D] into the cache layout [B, Hk, T, D]. */
export function toCacheLayout(x: Vec, B: number, T: number, Hk: number, D: number): Float64Array {
  const out = new Float64Array(B * Hk * T * D);
  for (let b = 0; b < B; b++)
    for (let t = 0; t < T; t++)
      for (let h = 0; h < Hk; h++)
        for (let d = 0; d < D; d++) out[((b * Hk + h) * T + t) * D + d] = x[((b * T + t) * Hk + h) * D + d];
  return out;
}

/** silu(gate) * up for gateUp [R, 2F] (gate in the first F columns). */
export function siluMul(gateUp: Vec, R: number, F: number): Float64Array {
  const out = new Float64Array(R * F);
  for (let r = 0; r < R; r++) {
    for (let j = 0; j < F; j++) {
      const g = gateUp[r * 2 * F + j];
      out[r * F + j] = (g / (1 + Math.exp(-g))) * gateUp[r * 2 * F + F + j];
    }
  }
  return out;
}

/** dgateUp [R, 2F] of out = silu(gate) * up (siluMul) given dout [R, F]. */
export function siluMulBackward(gateUp: Vec, dout: Vec, R: number, F: number): Float64Array {
  const dgateUp = new Float64Array(R * 2 * F);
  for (let r = 0; r < R; r++) {
    for (let j = 0; j < F; j++) {
      const g = gateUp[r * 2 * F + j];
      const u = gateUp[r * 2 * F + F + j];
      const sig = 1 / (1 + Math.exp(-g));
      dgateUp[r * 2 * F + j] = dout[r * F + j] * u * sig * (1 + g * (1 - sig));
      dgateUp[r * 2 * F + F + j] = dout[r * F + j] * g * sig;
    }
  }
  return dgateUp;
}

/**
 * out[i, :] = table[rows[i], :] for table [*, C]; strided, the first `columns` of each row into output
 * rows of `outStride` (zeros elsewhere).
 */
export function gatherRows(table: Vec, rows: Vec, C: number, columns = C, outStride = C): Float64Array {
  const out = new Float64Array(rows.length * outStride);
  for (let i = 0; i < rows.length; i++) for (let c = 0; c < columns; c++) out[i * outStride + c] = table[rows[i] * C + c];
  return out;
}

/** dtable [V, C] of the lookup x[r, :] = table[ids[r], :] (gatherRows) given dx [R, C]: each row's dx added to its token's row. */
export function embeddingBackward(ids: Vec, dx: Vec, R: number, V: number, C: number): Float64Array {
  const dtable = new Float64Array(V * C);
  for (let r = 0; r < R; r++) {
    const v = ids[r];
    if (v < 0 || v >= V) throw new RangeError(`embeddingBackward: id ${v} outside a vocabulary of ${V}`);
    for (let c = 0; c < C; c++) dtable[v * C + c] += dx[r * C + c];
  }
  return dtable;
}

/** log softmax of one row of logits. */
export function logSoftmax(logits: Vec): Float64Array {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) max = Math.max(max, logits[i]);
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i] - max);
  const logZ = max + Math.log(sum);
  return Float64Array.from(logits, (l) => l - logZ);
}

/** Entropy of softmax(logits) for one row. */
export function entropy(logits: Vec): number {
  const logp = logSoftmax(logits);
  return -logp.reduce((sum, lp) => sum + Math.exp(lp) * lp, 0);
}

/**
 * dlogits [R, V] of L = sum_r gLogprob[r] * logprob[r] + gEntropy[r] * entropy[r] (token_logprobs' outputs):
 * gLogprob * (onehot(target) - p) - gEntropy * p * (log p + H); rows with target < 0 have no logprob term.
 */
export function logitsBackward(logits: Vec, targets: Vec, gLogprob: Vec, gEntropy: Vec, R: number, V: number): Float64Array {
  const dlogits = new Float64Array(R * V);
  for (let r = 0; r < R; r++) {
    const logp = logSoftmax(Array.prototype.slice.call(logits, r * V, (r + 1) * V) as number[]);
    const entropy = -logp.reduce((sum, lp) => sum + Math.exp(lp) * lp, 0);
    const gLp = targets[r] >= 0 ? gLogprob[r] : 0;
    for (let v = 0; v < V; v++) {
      const p = Math.exp(logp[v]);
      dlogits[r * V + v] = (v === targets[r] ? gLp : 0) - gLp * p - gEntropy[r] * p * (logp[v] + entropy);
    }
  }
  return dlogits;
}

/**
 * The token that sampling.wgsl picks from one row of logits given the uniform draw u:
 * argmax when greedy; else top-k then top-p truncation of softmax(logits / temperature), ties at a
 * cut-off all kept, and the inverse CDF in vocabulary order at u times the kept mass.
 */
export function sampleToken(logits: Vec, params: ResolvedSampling, u: number): number {
  const V = logits.length;
  let argmax = 0;
  for (let i = 1; i < V; i++) if (logits[i] > logits[argmax]) argmax = i;
  if (params.greedy) return argmax;
  const sorted = Array.from(logits).sort((a, b) => b - a);
  const kCut = params.topK > 0 && params.topK < V ? sorted[params.topK - 1] : -Infinity;
  const max = logits[argmax];
  const weight = (l: number) => Math.exp((l - max) / params.temperature);
  let cut = kCut;
  if (params.topP < 1) {
    const kMass = sorted.filter((l) => l >= kCut).reduce((sum, l) => sum + weight(l), 0);
    // The highest cut-off whose kept mass still reaches topP of the top-k mass.
    let mass = 0;
    for (const l of sorted) {
      if (l < kCut) break;
      mass += weight(l);
      cut = l;
      if (mass >= params.topP * kMass) break;
    }
  }
  let kept = 0;
  for (let i = 0; i < V; i++) if (logits[i] >= cut) kept += weight(logits[i]);
  const target = u * kept;
  let running = 0;
  let last = argmax;
  for (let i = 0; i < V; i++) {
    if (logits[i] < cut) continue;
    running += weight(logits[i]);
    last = i;
    if (target < running) return i;
  }
  return last;
}
