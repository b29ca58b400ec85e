// Dawn's Node binding (the `webgpu` package) learns that GPU work has finished by polling: while a
// mapAsync or onSubmittedWorkDone promise is pending, it hands a native callback to the global
// setImmediate, and that callback processes Dawn's events and, if work is still pending, schedules
// itself again. The main thread therefore spins at 100% for as long as the GPU works. On a real GPU
// the waits are short and that costs little; on SwiftShader the "GPU" is the CPU, its waits last
// tens to hundreds of milliseconds, and the spinning thread takes a core from the driver's own
// threads: on two cores a training run went twice as fast without it (the
// "Dawn's event polling" line of `npm run bench:train` measures it).
//
// So a chain of Dawn's polls spins only for its first few milliseconds, which keeps short waits
// (a real GPU, a decode step) as quick as before, and after that polls once a millisecond on a
// timer. Only native callbacks are affected: JavaScript's own setImmediate calls pass straight
// through.
import { promisify } from 'node:util';

/** How long a chain of Dawn's polls spins before it polls on a 1 ms timer. */
const DAWN_SPIN_MS = 5;

type SetImmediate = typeof globalThis.setImmediate;

const isNative = (callback: unknown): callback is () => void =>
  typeof callback === 'function' && Function.prototype.toString.call(callback).includes('[native code]');

let busyPolling: SetImmediate | null = null;

/**
 * Makes Dawn poll politely in this thread until `spinDawnPolls()` undoes it; while it is in place,
 * another call (whatever its `spinMs`) changes nothing. Called by `requestNodeGpu`, before Dawn's
 * first poll.
 */
export function pollDawnPolitely(spinMs = DAWN_SPIN_MS): void {
  if (busyPolling) return;
  const original = globalThis.setImmediate;
  busyPolling = original;
  /** Whether a Dawn poll is running now: a poll scheduled from inside one continues its chain. */
  let inPoll = false;
  let chainStarted = 0;
  const polite = function (callback: (...args: unknown[]) => void, ...args: unknown[]) {
    if (!isNative(callback)) return original(callback, ...args);
    if (!inPoll) chainStarted = performance.now();
    const poll = () => {
      inPoll = true;
      try {
        callback();
      } finally {
        inPoll = false;
      }
    };
    if (performance.now() - chainStarted < spinMs) return original(poll);
    // A Timeout, not an Immediate: Dawn only calls setImmediate, never clearImmediate, so nothing
    // ever holds the handle.
    return setTimeout(poll, 1) as unknown as NodeJS.Immediate;
  } as SetImmediate;
  // util.promisify(setImmediate) keeps working through the wrapper.
  Object.defineProperty(polite, promisify.custom, Object.getOwnPropertyDescriptor(original, promisify.custom)!);
  globalThis.setImmediate = polite;
}

/** Restores Dawn's busy polling (for `npm run bench:train`, which measures both). */
export function spinDawnPolls(): void {
  if (!busyPolling) return;
  globalThis.setImmediate = busyPolling;
  busyPolling = null;
}
