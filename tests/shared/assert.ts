// Assertions usable both under Vitest and inside a browser page (the GPU checks run in both).

export function maxAbsDiff(actual: ArrayLike<number>, expected: ArrayLike<number>): number {
  if (actual.length !== expected.length) throw new Error(`length ${actual.length} != expected ${expected.length}`);
  let worst = 0;
  for (let i = 0; i < actual.length; i++) {
    const diff = Math.abs(actual[i] - expected[i]);
    if (!(diff <= worst)) worst = Number.isNaN(diff) ? Infinity : diff;
  }
  return worst;
}

/** Throws unless |actual - expected| <= atol + rtol * |expected| everywhere; the message locates the worst element. */
export function assertClose(actual: ArrayLike<number>, expected: ArrayLike<number>, what: string, atol = 1e-4, rtol = 1e-4): void {
  if (actual.length !== expected.length) throw new Error(`${what}: length ${actual.length} != expected ${expected.length}`);
  let worstIndex = -1;
  let worstExcess = 0;
  for (let i = 0; i < actual.length; i++) {
    const excess = Math.abs(actual[i] - expected[i]) - (atol + rtol * Math.abs(expected[i]));
    if (!(excess <= worstExcess)) {
      worstExcess = Number.isNaN(excess) ? Infinity : excess;
      worstIndex = i;
    }
  }
  if (worstIndex >= 0) {
    throw new Error(`${what}: element ${worstIndex} is ${actual[worstIndex]}, expected ${expected[worstIndex]} (max abs diff ${maxAbsDiff(actual, expected)})`);
  }
}

export function assertEqual<T>(actual: T, expected: T, what: string): void {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  if (a !== e) throw new Error(`${what}: got ${a.slice(0, 400)}, expected ${e.slice(0, 400)}`);
}

export function assert(condition: unknown, what: string): asserts condition {
  if (!condition) throw new Error(what);
}

/** The seeded generator of the test cases. */
export { mulberry32 as seededRandom } from '../../src/common/random.ts';

export function randomArray(random: () => number, n: number, scale = 1): Float32Array {
  return Float32Array.from({ length: n }, () => (random() * 2 - 1) * scale);
}
