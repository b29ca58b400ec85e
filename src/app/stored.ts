// The page's small shared helpers around IndexedDB and files: one store connection per piece of
// work, the runs that have a checkpoint, and saving bytes or text as a download.
import { openIndexedDbStore, type IndexedDbTrajectoryStore } from '../store/indexeddb.ts';
import type { Run } from '../store/types.ts';

/** Opens the store for `work` and closes it after, whatever happens. */
export async function withStore<T>(work: (store: IndexedDbTrajectoryStore) => Promise<T>): Promise<T> {
  const store = await openIndexedDbStore();
  try {
    return await work(store);
  } finally {
    await store.close();
  }
}

/** Runs with at least one checkpoint (an adapter to evaluate or export), newest first, with the last one's update. */
export function runsWithCheckpoints(): Promise<(Run & { checkpoint: number })[]> {
  return withStore(async (store) => {
    const listed = [];
    for (const run of await store.listRuns()) {
      const steps = await store.listCheckpoints(run.id);
      if (steps.length) listed.push({ ...run, checkpoint: steps.at(-1)! });
    }
    return listed;
  });
}

/** Saves `content` as a file through the browser's download. */
export function download(name: string, content: string | Uint8Array, type: string): void {
  const url = URL.createObjectURL(new Blob([content as BlobPart], { type }));
  Object.assign(document.createElement('a'), { href: url, download: name }).click();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
