// Structs and helpers shared by several modules; the engine (src/engine/gpu/kernels.ts) prepends
// this file to every module.

// The decode position of a forward, written by the host before each replay of a plan:
// slot0 = the first cache slot of this forward's tokens, step = the decode step (seeds the sampler).
struct Cursor {
  slot0: u32,
  step: u32,
  _pad0: u32,
  _pad1: u32,
}

// PCG hash (Jarzynski & Olano, 2020): the counter-based random numbers of sampling and dropout.
fn pcg(v: u32) -> u32 {
  let state = v * 747796405u + 2891336453u;
  let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
  return (word >> 22u) ^ word;
}
