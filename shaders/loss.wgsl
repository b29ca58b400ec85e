// Per-token RL and supervised losses, their gradients, and their batch sums.
//
// Every token row r carries the forward's log-probability lp[r] of its token, the entropy ent[r] of
// its next-token distribution... (both from token_logprobs) and the value head's output value[r],
// plus the loss inputs given by the algorithm: mask (1 = an action token that the loss sees),
// advantage, old log-prob (at collection time), reference log-prob (adapter off), return, old value,
// and the value mask (1 = the value head's output on this row is regressed to the return; algorithms
// that need V only at some rows, e.g. a state's last token, set it apart from the action mask).
// The loss is a weighted sum of standard terms, averaged over action tokens (scale = 1 / their count):
//
//   nll      -lp                                          (behaviour cloning, SFT)
//   pg       -A lp                                        (REINFORCE, A2C)
//   ppo      -min(rho A, clip(rho, 1 - c, 1 + c) A),  rho = exp(lp - oldLp)     (PPO, GRPO)
//   entropy  -ent                                         (entropy bonus)
//   kl       exp(ref - lp) - (ref - lp) - 1               (k3 estimator of KL(policy || reference))
//   value    1/2 max((v - R)^2, (v_clipped - R)^2),  v_clipped = oldV + clamp(v - oldV, -cv, cv)  (cv = 0: no clip),
//            on value-mask rows (every other term is on action-mask rows)
//
// token_loss: one invocation per row; writes dL/dlp, dL/dent, dL/dvalue and the row's metrics
//   metrics [R, METRICS]: nll, pg, ppo, entropy, kl, value (each weighted part of the loss, unweighted
//   by coefficient but scaled), clipped (PPO ratio outside the clip range), approx_kl ((rho - 1) - log rho).
// sum_metrics: one invocation per metric column, adding its rows (masked rows contribute 0) to sums,
//   which the caller clears once per optimiser step: the only numbers a training step reads back.

const METRICS: u32 = 8u;

struct Params {
  R: u32,
  scale: f32,
  wNll: f32,
  wPg: f32,
  wPpo: f32,
  clip: f32,
  wEntropy: f32,
  wKl: f32,
  wValue: f32,
  valueClip: f32,
  _pad0: u32,
  _pad1: u32,
}

struct Inputs {
  mask: f32,
  advantage: f32,
  oldLogprob: f32,
  referenceLogProb: f32,
  ret: f32,
  oldValue: f32,
  valueMask: f32,
  _pad: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logprob: array<f32>;
@group(0) @binding(2) var<storage, read> entropy: array<f32>;
@group(0) @binding(3) var<storage, read> value: array<f32>;
@group(0) @binding(4) var<storage, read> inputs: array<Inputs>;
@group(0) @binding(5) var<storage, read_write> gLogprob: array<f32>;
@group(0) @binding(6) var<storage, read_write> gEntropy: array<f32>;
@group(0) @binding(7) var<storage, read_write> gValue: array<f32>;
@group(0) @binding(8) var<storage, read_write> metrics: array<f32>;

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn token_loss(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let r = gid.x + gid.y * nwg.x * WG;
  if (r >= p.R) {
    return;
  }
  let x = inputs[r];
  let w = x.mask * p.scale;
  let lp = logprob[r];
  let a = x.advantage;

  let rho = exp(lp - x.oldLogprob);
  let clippedRho = clamp(rho, 1.0 - p.clip, 1.0 + p.clip);
  let unclippedObjective = rho * a;
  let clippedObjective = clippedRho * a;
  // The gradient flows through the unclipped ratio only where it is the smaller objective.
  let ppoActive = unclippedObjective <= clippedObjective;
  let ppo = -min(unclippedObjective, clippedObjective);
  let dPpo = select(0.0, -rho * a, ppoActive);

  let refGap = x.referenceLogProb - lp;
  let kl = exp(refGap) - refGap - 1.0;
  let dKl = 1.0 - exp(refGap);

  let v = value[r];
  let vClipped = x.oldValue + clamp(v - x.oldValue, -p.valueClip, p.valueClip);
  let plainError = (v - x.ret) * (v - x.ret);
  let clippedError = (vClipped - x.ret) * (vClipped - x.ret);
  let useClipped = p.valueClip > 0.0 && clippedError > plainError;
  let valueLoss = 0.5 * select(plainError, clippedError, useClipped);
  let insideClip = abs(v - x.oldValue) < p.valueClip;
  let dValue = select(v - x.ret, select(0.0, vClipped - x.ret, insideClip), useClipped);

  gLogprob[r] = w * (-p.wNll - p.wPg * a + p.wPpo * dPpo + p.wKl * dKl);
  gEntropy[r] = -w * p.wEntropy;
  let wv = x.valueMask * p.scale;
  gValue[r] = wv * p.wValue * dValue;

  let m = r * METRICS;
  metrics[m + 0u] = w * -lp;
  metrics[m + 1u] = w * -a * lp;
  metrics[m + 2u] = w * ppo;
  metrics[m + 3u] = w * entropy[r];
  metrics[m + 4u] = w * kl;
  metrics[m + 5u] = wv * valueLoss;
  metrics[m + 6u] = w * select(0.0, 1.0, rho != clippedRho);
  metrics[m + 7u] = w * ((rho - 1.0) - (lp - x.oldLogprob));
}

@group(0) @binding(9) var<storage, read_write> sums: array<f32>;

// Bindings 0 (params), 8 (metrics) and 9 (sums).
@compute @workgroup_size(METRICS)
fn sum_metrics(@builtin(local_invocation_index) column: u32) {
  var total = 0.0;
  for (var r = 0u; r < p.R; r++) {
    total += metrics[r * METRICS + column];
  }
  sums[column] += total;
}
