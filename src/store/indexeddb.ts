// The trajectory store in IndexedDB (browser), through idb. Object stores:
//   runs            key id
//   episodes        key [runId, index]
//   steps           key [runId, episodeIndex, t]
//   metrics         auto key; indexes runId and [runId, name]
//   checkpoints     key [runId, step] → { runId, step, names }
//   checkpointFiles key [runId, step, name] → { data: ArrayBuffer }
// Every write is one transaction (an episode with its steps; a checkpoint with the pruning of older
// ones), so a failure — QuotaExceededError above all, surfaced as StoreQuotaError — keeps nothing of it.
import { wrap, type DBSchema, type IDBPDatabase, type IDBPTransaction } from 'idb';
import {
  DEFAULT_KEEP_CHECKPOINTS,
  applyRunUpdate,
  checkCheckpointFiles,
  checkEpisode,
  checkMetric,
  checkRunId,
  exportJsonl,
  filterAndPage,
  importJsonl,
  isQuotaError,
  makeRun,
  sortMetrics,
} from './common.ts';
import {
  StoreError,
  StoreQuotaError,
  type Checkpoint,
  type Episode,
  type EpisodeFilter,
  type EpisodeWithSteps,
  type ImportResult,
  type Metric,
  type NewRun,
  type Page,
  type Paging,
  type Run,
  type RunUpdate,
  type Step,
  type StepInput,
  type TrajectoryStore,
} from './types.ts';

interface StoredMetric extends Metric {
  id?: number;
}

interface Schema extends DBSchema {
  runs: { key: string; value: Run; indexes: { createdAt: number } };
  episodes: { key: [string, number]; value: Episode };
  steps: { key: [string, number, number]; value: Step };
  metrics: { key: number; value: StoredMetric; indexes: { runId: string; runName: [string, string] } };
  checkpoints: { key: [string, number]; value: { runId: string; step: number; names: string[] } };
  checkpointFiles: { key: [string, number, string]; value: { runId: string; step: number; name: string; data: ArrayBuffer } };
}

type StoreName = 'runs' | 'episodes' | 'steps' | 'metrics' | 'checkpoints' | 'checkpointFiles';
const ALL: StoreName[] = ['runs', 'episodes', 'steps', 'metrics', 'checkpoints', 'checkpointFiles'];

export interface IndexedDbStoreOptions {
  /** Database name; default 'rlplay'. */
  name?: string;
  /** Default: globalThis.indexedDB. */
  factory?: IDBFactory;
  /** Checkpoints kept per run; default 3. */
  keepCheckpoints?: number;
  /** Bytes used, for StoreQuotaError's message; default navigator.storage.estimate(). */
  estimateUsage?: () => Promise<number | undefined>;
}

const DB_VERSION = 1;

/** All keys whose first element is `prefix` (arrays sort after every other key type). */
function prefixRange(...prefix: (string | number)[]): IDBKeyRange {
  return IDBKeyRange.bound(prefix, [...prefix, []]);
}

/**
 * Starts requests in order and waits for all. A request that throws at once (QuotaExceededError) leaves the
 * ones started before it to be aborted with the transaction: their rejections are handled here.
 */
function requests(starts: (() => Promise<unknown>)[]): Promise<unknown[]> {
  const started: Promise<unknown>[] = [];
  for (const start of starts) {
    const p = start();
    p.catch(() => {});
    started.push(p);
  }
  return Promise.all(started);
}

export class IndexedDbTrajectoryStore implements TrajectoryStore {
  private constructor(
    private readonly db: IDBPDatabase<Schema>,
    private readonly keep: number,
    private readonly estimateUsage: () => Promise<number | undefined>,
  ) {}

  static async open(options: IndexedDbStoreOptions = {}): Promise<IndexedDbTrajectoryStore> {
    const factory = options.factory ?? globalThis.indexedDB;
    if (!factory) throw new StoreError('IndexedDB is not available here');
    let db: IDBPDatabase<Schema>;
    try {
      const request = factory.open(options.name ?? 'rlplay', DB_VERSION);
      request.addEventListener('upgradeneeded', () => {
        const db = wrap(request.result) as unknown as IDBPDatabase<Schema>;
        const runs = db.createObjectStore('runs', { keyPath: 'id' });
        runs.createIndex('createdAt', 'createdAt');
        db.createObjectStore('episodes', { keyPath: ['runId', 'index'] });
        db.createObjectStore('steps', { keyPath: ['runId', 'episodeIndex', 't'] });
        const metrics = db.createObjectStore('metrics', { keyPath: 'id', autoIncrement: true });
        metrics.createIndex('runId', 'runId');
        metrics.createIndex('runName', ['runId', 'name']);
        db.createObjectStore('checkpoints', { keyPath: ['runId', 'step'] });
        db.createObjectStore('checkpointFiles', { keyPath: ['runId', 'step', 'name'] });
      });
      db = (await wrap(request)) as unknown as IDBPDatabase<Schema>;
    } catch (e) {
      if (isQuotaError(e)) throw new StoreQuotaError(undefined, { cause: e });
      throw e;
    }
    // A newer version elsewhere (another tab) waits for us: let it proceed.
    db.addEventListener('versionchange', () => db.close());
    const estimate =
      options.estimateUsage ??
      (async () => {
        const storage = (globalThis as { navigator?: { storage?: { estimate?: () => Promise<{ usage?: number }> } } }).navigator?.storage;
        return storage?.estimate ? (await storage.estimate()).usage : undefined;
      });
    return new IndexedDbTrajectoryStore(db, options.keepCheckpoints ?? DEFAULT_KEEP_CHECKPOINTS, estimate);
  }

  /** Runs `body` in one readwrite transaction and waits for it to commit; aborts it on any error. */
  private async write<N extends StoreName>(names: N[], body: (tx: IDBPTransaction<Schema, N[], 'readwrite'>) => Promise<void> | void): Promise<void> {
    let tx: IDBPTransaction<Schema, N[], 'readwrite'>;
    try {
      tx = this.db.transaction(names, 'readwrite');
    } catch (e) {
      throw await this.mapError(e);
    }
    const done = tx.done;
    // tx.done rejects on abort; a rejection we handle below must not go unhandled meanwhile.
    done.catch(() => {});
    try {
      await body(tx);
    } catch (e) {
      try {
        tx.abort();
      } catch {
        // already finished or aborted
      }
      throw await this.mapError(e);
    }
    try {
      await done;
    } catch (e) {
      throw await this.mapError(e ?? tx.error);
    }
  }

  private async mapError(e: unknown): Promise<unknown> {
    if (!isQuotaError(e)) return e;
    let used: number | undefined;
    try {
      used = await this.estimateUsage();
    } catch {
      used = undefined;
    }
    return new StoreQuotaError(used, { cause: e });
  }

  async createRun(input: NewRun): Promise<Run> {
    const run = makeRun(input);
    await this.write(['runs'], async (tx) => {
      const runs = tx.objectStore('runs');
      if (await runs.get(run.id)) throw new StoreError(`run ${run.id} already exists`);
      await runs.add(run);
    });
    return run;
  }

  async updateRun(id: string, update: RunUpdate): Promise<Run> {
    let next: Run | undefined;
    await this.write(['runs'], async (tx) => {
      const runs = tx.objectStore('runs');
      const run = await runs.get(id);
      if (!run) throw new StoreError(`run ${id} does not exist`);
      next = applyRunUpdate(run, update);
      await runs.put(next);
    });
    return next!;
  }

  async getRun(id: string): Promise<Run | undefined> {
    return this.db.get('runs', id);
  }

  async listRuns(): Promise<Run[]> {
    return (await this.db.getAll('runs')).sort((a, b) => b.createdAt - a.createdAt || (a.id < b.id ? 1 : -1));
  }

  async deleteRun(id: string): Promise<void> {
    await this.write(ALL, async (tx) => {
      const metrics = tx.objectStore('metrics');
      const metricKeys = await metrics.index('runId').getAllKeys(id);
      await requests([
        () => tx.objectStore('runs').delete(id),
        ...(['episodes', 'steps', 'checkpoints', 'checkpointFiles'] as const).map((name) => () => tx.objectStore(name).delete(prefixRange(id))),
        ...metricKeys.map((key) => () => metrics.delete(key)),
      ]);
    });
  }

  async addEpisode(input: Episode, stepInputs: StepInput[]): Promise<void> {
    const { episode, steps } = checkEpisode(input, stepInputs);
    await this.write(['runs', 'episodes', 'steps'], async (tx) => {
      if (!(await tx.objectStore('runs').get(episode.runId))) throw new StoreError(`run ${episode.runId} does not exist`);
      const episodes = tx.objectStore('episodes');
      if (await episodes.get([episode.runId, episode.index])) throw new StoreError(`run ${episode.runId} already has episode ${episode.index}`);
      const stepStore = tx.objectStore('steps');
      // Queue every request before awaiting, so the transaction stays active.
      await requests([() => episodes.add(episode), ...steps.map((s) => () => stepStore.add(s))]);
    });
  }

  async listEpisodes(runId: string, filter?: EpisodeFilter, paging?: Paging): Promise<Page<Episode>> {
    return filterAndPage(await this.db.getAll('episodes', prefixRange(runId)), filter, paging);
  }

  async getEpisode(runId: string, index: number): Promise<EpisodeWithSteps | undefined> {
    const tx = this.db.transaction(['episodes', 'steps'], 'readonly');
    const [episode, steps] = await Promise.all([tx.objectStore('episodes').get([runId, index]), tx.objectStore('steps').getAll(prefixRange(runId, index))]);
    await tx.done;
    return episode ? { ...episode, steps } : undefined;
  }

  async addMetrics(batch: Metric[]): Promise<void> {
    const metrics = batch.map(checkMetric);
    if (metrics.length === 0) return;
    await this.write(['runs', 'metrics'], async (tx) => {
      const runs = tx.objectStore('runs');
      for (const runId of new Set(metrics.map((m) => m.runId))) if (!(await runs.get(runId))) throw new StoreError(`run ${runId} does not exist`);
      const store = tx.objectStore('metrics');
      await requests(metrics.map((m) => () => store.add(m)));
    });
  }

  async listMetrics(runId: string, name?: string): Promise<Metric[]> {
    const stored = name === undefined ? await this.db.getAllFromIndex('metrics', 'runId', runId) : await this.db.getAllFromIndex('metrics', 'runName', [runId, name]);
    // Auto keys give the order of addition; the sort by step is stable.
    stored.sort((a, b) => (a.id ?? 0) - (b.id ?? 0));
    return sortMetrics(stored.map(({ id: _id, ...m }) => m));
  }

  async saveCheckpoint(checkpoint: Checkpoint, options: { keep?: number } = {}): Promise<void> {
    const { runId, step, files } = checkpoint;
    checkRunId(runId);
    if (!Number.isInteger(step) || step < 0) throw new StoreError(`checkpoint step must be an integer ≥ 0, not ${step}`);
    checkCheckpointFiles(files);
    const keep = Math.max(1, options.keep ?? this.keep);
    // Exact copies: a Uint8Array may be a view on a larger buffer.
    const records = [...files].map(([name, bytes]) => ({ runId, step, name, data: new Uint8Array(bytes).buffer as ArrayBuffer }));
    await this.write(['runs', 'checkpoints', 'checkpointFiles'], async (tx) => {
      if (!(await tx.objectStore('runs').get(runId))) throw new StoreError(`run ${runId} does not exist`);
      const meta = tx.objectStore('checkpoints');
      const fileStore = tx.objectStore('checkpointFiles');
      await fileStore.delete(prefixRange(runId, step));
      await requests([() => meta.put({ runId, step, names: records.map((r) => r.name) }), ...records.map((r) => () => fileStore.put(r))]);
      // Prune only within this transaction: if the new checkpoint fails, the old ones stay.
      const steps = (await meta.getAllKeys(prefixRange(runId))).map((k) => k[1]).sort((a, b) => a - b);
      const drop = steps.slice(0, Math.max(0, steps.length - keep));
      await requests(drop.flatMap((s) => [() => meta.delete([runId, s]), () => fileStore.delete(prefixRange(runId, s))]));
    });
  }

  latestCheckpoint(runId: string): Promise<Checkpoint | undefined> {
    return this.readCheckpoint(runId, 'latest');
  }

  getCheckpoint(runId: string, step: number): Promise<Checkpoint | undefined> {
    return this.readCheckpoint(runId, step);
  }

  /** In one transaction, so that a checkpoint saved meanwhile cannot prune the one being read. */
  private async readCheckpoint(runId: string, which: number | 'latest'): Promise<Checkpoint | undefined> {
    const tx = this.db.transaction(['checkpoints', 'checkpointFiles'], 'readonly');
    const checkpoints = tx.objectStore('checkpoints');
    const meta = which === 'latest' ? (await checkpoints.openCursor(prefixRange(runId), 'prev'))?.value : await checkpoints.get([runId, which]);
    if (!meta) {
      await tx.done;
      return undefined;
    }
    const { step, names } = meta;
    const records = await tx.objectStore('checkpointFiles').getAll(prefixRange(runId, step));
    await tx.done;
    const byName = new Map(records.map((r) => [r.name, r.data]));
    const files = new Map<string, Uint8Array>();
    for (const name of names) {
      const data = byName.get(name);
      if (!data) throw new StoreError(`checkpoint ${step} of run ${runId} lacks ${name}`);
      files.set(name, new Uint8Array(data));
    }
    return { runId, step, files };
  }

  async listCheckpoints(runId: string): Promise<number[]> {
    return (await this.db.getAllKeys('checkpoints', prefixRange(runId))).map((k) => k[1]).sort((a, b) => a - b);
  }

  exportJsonl(runId: string): Promise<string> {
    return exportJsonl(this, runId);
  }

  importJsonl(text: string, runId?: string): Promise<ImportResult> {
    return importJsonl(this, text, runId);
  }

  async close(): Promise<void> {
    this.db.close();
  }
}

export function openIndexedDbStore(options?: IndexedDbStoreOptions): Promise<IndexedDbTrajectoryStore> {
  return IndexedDbTrajectoryStore.open(options);
}
