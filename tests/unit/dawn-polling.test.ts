// Dawn's event polling in Node: a chain of native polls spins briefly, then waits on a timer; the
// GPU's readbacks still arrive.
import { afterAll, describe, expect, it } from 'vitest';
import { promisify } from 'node:util';
import { pollDawnPolitely, spinDawnPolls } from '../../src/engine/gpu/dawn-polling.ts';
import { requestNodeGpu } from '../../src/engine/gpu/node-gpu.ts';
import { readFloat32, storageFrom } from '../../src/engine/gpu/buffers.ts';

const SPIN_MS = 5;

/**
 * Runs a chain of polls the way Dawn does: a native callback (a bound function reads as native
 * code) that schedules itself again from inside, for `chainMs`. Returns what each setImmediate
 * call handed back.
 */
function nativeChain(chainMs: number): Promise<string[]> {
  return new Promise((resolve) => {
    const handles: string[] = [];
    const started = performance.now();
    const poll = function () {
      if (performance.now() - started >= chainMs) return resolve(handles);
      handles.push(globalThis.setImmediate(poll).constructor.name);
    }.bind(null);
    handles.push(globalThis.setImmediate(poll).constructor.name);
  });
}

describe('polite Dawn polling', () => {
  afterAll(() => pollDawnPolitely());

  it('spins for the first milliseconds of a chain of native polls, then polls on a timer', async () => {
    spinDawnPolls();
    pollDawnPolitely(SPIN_MS);
    const handles = await nativeChain(4 * SPIN_MS);
    expect(handles[0]).toBe('Immediate');
    expect(handles.at(-1)).toBe('Timeout');
    // Once on the timer, the chain stays there.
    const firstTimer = handles.indexOf('Timeout');
    expect(handles.slice(firstTimer).every((h) => h === 'Timeout')).toBe(true);
    // A new chain, started from outside a poll, spins again.
    expect((await nativeChain(1))[0]).toBe('Immediate');
  });

  it('leaves JavaScript callbacks and util.promisify(setImmediate) as they were', async () => {
    spinDawnPolls();
    pollDawnPolitely(0);
    const handle = globalThis.setImmediate(() => {});
    expect(handle.constructor.name).toBe('Immediate');
    expect(await promisify(setImmediate)('value')).toBe('value');
  });

  it('restores busy polling on request', async () => {
    spinDawnPolls();
    pollDawnPolitely(0);
    expect((await nativeChain(2)).every((h) => h === 'Timeout')).toBe(true);
    spinDawnPolls();
    expect((await nativeChain(2)).every((h) => h === 'Immediate')).toBe(true);
  });

  it('still delivers GPU readbacks when every poll is on the timer', async () => {
    const { device } = await requestNodeGpu();
    spinDawnPolls();
    pollDawnPolitely(0);
    const buffer = storageFrom(device, new Float32Array([1, 2, 3, 4]), 'polled');
    expect(Array.from(await readFloat32(device, buffer, 4))).toEqual([1, 2, 3, 4]);
    buffer.destroy();
  });
});
