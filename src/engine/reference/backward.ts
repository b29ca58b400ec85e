// Float64 references of the backward kernels (shaders/backward.wgsl), written for clarity, not speed.
// Each is the exact gradient of the matching forward in ./ops.ts, with the same shapes and layouts;
// tests/shared/backward-checks.ts compares the GPU against these and these against finite differences.
import { logSoftmax, rotate, seesKey, type AttentionShape } from './ops.ts';

type Vec = ArrayLike<number>;

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

/**
 * Gradients of `attention` (./ops.ts) given dout [B, T, H, D], the gradient of its output: dq [B, T, H, D]
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
