// Inverted dropout with a counter-based mask, so that the backward pass recomputes exactly the mask
// the forward used instead of storing it:
//
//   out[i] (+)= keep(i) ? x[i] * scale : 0,   scale = 1 / (1 - p)
//   keep(i) = pcg(seed ^ pcg(stream ^ pcg(step ^ pcg(i)))) >= threshold,   threshold = p * 2^32   (pcg: common.wgsl)
//
// Shapes: x, out [N] f32 (N = rows * features of one LoRA input). `stream` numbers the adapted
// projections (layer * 7 + projection), `counter.step` the training steps: the same (seed, stream,
// step) always gives the same mask. With accumulate = 1 the result is added to out (the backward
// pass adds the masked input gradient into the residual's). One invocation per element, 2-D grid.

struct Params {
  N: u32,
  seed: u32,
  stream: u32,
  threshold: u32,
  scale: f32,
  accumulate: u32,
  _pad0: u32,
  _pad1: u32,
}

struct Counter {
  step: u32,
  _pad0: u32,
  _pad1: u32,
  _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> counter: Counter;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn dropout(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= p.N) {
    return;
  }
  let keep = pcg(p.seed ^ pcg(p.stream ^ pcg(counter.step ^ pcg(i)))) >= p.threshold;
  var value = select(0.0, x[i] * p.scale, keep);
  if (p.accumulate == 1u) {
    value += out[i];
  }
  out[i] = value;
}
