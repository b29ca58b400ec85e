// The IndexedDB store on fake-indexeddb: the shared conformance cases. A full quota is simulated by
// making the object stores' writes throw QuotaExceededError, as a browser's do.
import 'fake-indexeddb/auto';
import { IDBFactory } from 'fake-indexeddb';
import { expect, test } from 'vitest';
import { IndexedDbTrajectoryStore } from '../../src/store/indexeddb.ts';
import { StoreQuotaError } from '../../src/store/types.ts';
import { episode, steps, storeConformance } from './store-conformance.ts';

let full = false;
const proto = IDBObjectStore.prototype;
for (const method of ['add', 'put'] as const) {
  const original = proto[method];
  proto[method] = function (this: IDBObjectStore, ...args: Parameters<IDBObjectStore['add']>) {
    // The episode's and checkpoint's own records go through, so the failure comes mid-transaction and must abort it.
    if (full && this.name !== 'episodes' && this.name !== 'checkpoints') throw new DOMException('The quota has been exceeded.', 'QuotaExceededError');
    return original.apply(this, args);
  };
}

let n = 0;
storeConformance('indexeddb', async () => {
  const factory = new IDBFactory();
  const name = `rlplay-test-${n++}`;
  const opened: IndexedDbTrajectoryStore[] = [];
  const open = async () => {
    const s = await IndexedDbTrajectoryStore.open({ factory, name, estimateUsage: async () => 12_345_678 });
    opened.push(s);
    return s;
  };
  return {
    store: await open(),
    setFull: (f: boolean) => {
      full = f;
    },
    reopen: open,
    cleanup: async () => {
      full = false;
      for (const s of opened) await s.close();
    },
  };
});

test('the quota message gives the usage in MB; without an estimate it still says what to do', async () => {
  const factory = new IDBFactory();
  const store = await IndexedDbTrajectoryStore.open({ factory, estimateUsage: async () => 12_345_678 });
  await store.createRun({ id: 'r', config: {} });
  full = true;
  try {
    await expect(store.addEpisode(episode('r', 0), steps(2))).rejects.toThrow('storage is full: 12.3 MB used; delete old runs or export them');
  } finally {
    full = false;
  }
  const bare = await IndexedDbTrajectoryStore.open({ factory, name: 'other', estimateUsage: async () => undefined });
  await bare.createRun({ id: 'r', config: {} });
  full = true;
  try {
    const error = await bare.addMetrics([{ runId: 'r', step: 1, name: 'x', value: 1, time: 1 }]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreQuotaError);
    expect((error as Error).message).toMatch(/storage is full.*delete old runs or export them/);
  } finally {
    full = false;
  }
  await store.close();
  await bare.close();
});
