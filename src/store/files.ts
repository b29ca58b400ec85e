// The trajectory store on the file system (Node only). A folder per run under `root`:
//   <runId>/run.json                  written to a temp file, then renamed
//   <runId>/trajectories.jsonl        one line per episode with its steps (the export format), one write each
//   <runId>/metrics.jsonl             one line per metric
//   <runId>/checkpoints/<step>/...    written in a temp folder, then renamed
// Killed mid-write, a .jsonl can end in a torn line (no newline): reads ignore it and report it, and the
// next append cuts it off first, so it never corrupts the episodes before or after it. A failed append
// (the disk is full: StoreQuotaError) is cut off the same way, so nothing of it is kept.
import { mkdir, open, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import {
  DEFAULT_KEEP_CHECKPOINTS,
  applyRunUpdate,
  checkCheckpointFiles,
  checkEpisode,
  checkMetric,
  checkRunId,
  episodeLine,
  filterAndPage,
  importJsonl,
  isQuotaError,
  makeRun,
  parseEpisodeLine,
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
  type StepInput,
  type TrajectoryStore,
} from './types.ts';

export interface FileStoreOptions {
  /** Checkpoints kept per run; default 3. */
  keepCheckpoints?: number;
  /** Where torn or unreadable lines are reported; default console.warn. */
  onWarning?: (message: string) => void;
  /** Called before every write with the file's path; a test makes it throw (ENOSPC) to simulate a full disk. */
  beforeWrite?: (path: string) => void | Promise<void>;
}

const RUN_FILE = 'run.json';
const EPISODES_FILE = 'trajectories.jsonl';
const METRICS_FILE = 'metrics.jsonl';
const CHECKPOINTS_DIR = 'checkpoints';
const NEWLINE = 0x0a;

interface EpisodeEntry {
  episode: Episode;
  start: number;
  end: number;
}

interface JsonlLine {
  text: string;
  start: number;
  end: number;
  /** 1-based. */
  number: number;
}

const tmpName = (prefix: string) => `.${prefix}-${process.pid}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;

function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    (e: NodeJS.ErrnoException) => {
      if (e.code === 'ENOENT') return false;
      throw e;
    },
  );
}

async function folderSize(path: string): Promise<number> {
  let total = 0;
  let entries;
  try {
    entries = await readdir(path, { withFileTypes: true });
  } catch {
    return 0;
  }
  for (const entry of entries) {
    const p = join(path, entry.name);
    if (entry.isDirectory()) total += await folderSize(p);
    else if (entry.isFile()) total += (await stat(p)).size;
  }
  return total;
}

async function listFiles(dir: string, prefix = ''): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const rel = prefix ? `${prefix}/${entry.name}` : entry.name;
    if (entry.isDirectory()) out.push(...(await listFiles(join(dir, entry.name), rel)));
    else if (entry.isFile()) out.push(rel);
  }
  return out.sort();
}

/** Metric values may be NaN or ±Infinity, which JSON lacks: they travel as strings. */
function encodeMetric(m: Metric): string {
  return JSON.stringify({ ...m, value: Number.isFinite(m.value) ? m.value : String(m.value) });
}

function decodeMetric(value: unknown): Metric {
  const m = value as Metric & { value: number | string };
  if (typeof m !== 'object' || m === null) throw new Error('not a JSON object');
  const v = typeof m.value === 'string' ? Number(m.value) : m.value;
  return checkMetric({ ...m, value: v });
}

/** A run folder whose run.json cannot be read: the error names it and how to go on. */
function damagedRun(dir: string, problem: string): StoreError {
  return new StoreError(`${join(dir, RUN_FILE)} ${problem}: the run folder ${dir} is damaged; move it away (or delete it) to start the run again, or pass another --out`);
}

export class FileTrajectoryStore implements TrajectoryStore {
  private readonly keep: number;
  private readonly warn: (message: string) => void;
  private readonly beforeWrite: (path: string) => void | Promise<void>;
  private readonly locks = new Map<string, Promise<unknown>>();
  private readonly episodeCache = new Map<string, { size: number; mtimeMs: number; entries: Map<number, EpisodeEntry> }>();

  constructor(
    readonly root: string,
    options: FileStoreOptions = {},
  ) {
    this.keep = options.keepCheckpoints ?? DEFAULT_KEEP_CHECKPOINTS;
    this.warn = options.onWarning ?? ((m) => console.warn(m));
    this.beforeWrite = options.beforeWrite ?? (() => {});
  }

  private runDir(id: string): string {
    return join(this.root, checkRunId(id));
  }

  /** Serialises the writes to one run within this process. */
  private lock<T>(runId: string, body: () => Promise<T>): Promise<T> {
    const previous = this.locks.get(runId) ?? Promise.resolve();
    const next = previous.then(body, body);
    const settled = next.then(
      () => {},
      () => {},
    );
    this.locks.set(runId, settled);
    void settled.then(() => {
      if (this.locks.get(runId) === settled) this.locks.delete(runId);
    });
    return next;
  }

  private async mapError(e: unknown): Promise<unknown> {
    if (!isQuotaError(e)) return e;
    return new StoreQuotaError(await folderSize(this.root), { cause: e });
  }

  private async guard<T>(body: () => Promise<T>): Promise<T> {
    try {
      return await body();
    } catch (e) {
      throw await this.mapError(e);
    }
  }

  private async writeAtomic(path: string, text: string): Promise<void> {
    const tmp = join(dirname(path), tmpName('tmp'));
    try {
      await this.beforeWrite(path);
      await writeFile(tmp, text);
      await rename(tmp, path);
    } catch (e) {
      await rm(tmp, { force: true });
      throw e;
    }
  }

  /** Appends `text` (whole lines) in one write, first cutting off a torn last line; on failure, cuts off what it wrote. */
  private async append(path: string, text: string): Promise<{ start: number; size: number; mtimeMs: number }> {
    const fh = await open(path, 'a+');
    try {
      let size = (await fh.stat()).size;
      if (size > 0) {
        const last = Buffer.alloc(1);
        await fh.read(last, 0, 1, size - 1);
        if (last[0] !== NEWLINE) {
          const content = await readFile(path);
          const cut = content.lastIndexOf(NEWLINE) + 1;
          this.warn(`${path}: cut off a torn last line (${size - cut} bytes) left by an interrupted write`);
          await fh.truncate(cut);
          size = cut;
        }
      }
      try {
        await this.beforeWrite(path);
        await fh.write(text);
      } catch (e) {
        await fh.truncate(size).catch(() => {});
        throw e;
      }
      const after = await fh.stat();
      return { start: size, size: after.size, mtimeMs: after.mtimeMs };
    } finally {
      await fh.close();
    }
  }

  /** The complete lines of a .jsonl; a torn last line is reported and left out. */
  private splitLines(path: string, content: Buffer): JsonlLine[] {
    const lines: JsonlLine[] = [];
    let start = 0;
    let number = 1;
    while (start < content.length) {
      const nl = content.indexOf(NEWLINE, start);
      if (nl < 0) {
        this.warn(`${path}: ignored a torn last line (line ${number}, ${content.length - start} bytes) left by an interrupted write`);
        break;
      }
      const text = content.subarray(start, nl).toString('utf8');
      if (text.trim() !== '') lines.push({ text, start, end: nl, number });
      start = nl + 1;
      number++;
    }
    return lines;
  }

  private async readLines(path: string): Promise<{ content: Buffer; lines: JsonlLine[] }> {
    let content: Buffer;
    try {
      content = await readFile(path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { content: Buffer.alloc(0), lines: [] };
      throw e;
    }
    return { content, lines: this.splitLines(path, content) };
  }

  private async episodes(runId: string): Promise<Map<number, EpisodeEntry>> {
    const path = join(this.runDir(runId), EPISODES_FILE);
    let info;
    try {
      info = await stat(path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return new Map();
      throw e;
    }
    const cached = this.episodeCache.get(runId);
    if (cached && cached.size === info.size && cached.mtimeMs === info.mtimeMs) return cached.entries;
    const { content, lines } = await this.readLines(path);
    const entries = new Map<number, EpisodeEntry>();
    for (const line of lines) {
      try {
        const { steps: _steps, ...episode } = parseEpisodeLine(line.text, runId);
        if (entries.has(episode.index)) throw new Error(`episode ${episode.index} appears twice`);
        entries.set(episode.index, { episode, start: line.start, end: line.end });
      } catch (e) {
        this.warn(`${path}: skipped line ${line.number}: ${(e as Error).message}`);
      }
    }
    this.episodeCache.set(runId, { size: content.length, mtimeMs: info.mtimeMs, entries });
    return entries;
  }

  private async requireRun(id: string): Promise<Run> {
    const run = await this.getRun(id);
    if (!run) throw new StoreError(`run ${id} does not exist`);
    return run;
  }

  async createRun(input: NewRun): Promise<Run> {
    const run = makeRun(input);
    return this.lock(run.id, () =>
      this.guard(async () => {
        const dir = this.runDir(run.id);
        if (await exists(join(dir, RUN_FILE))) throw new StoreError(`run ${run.id} already exists`);
        await mkdir(dir, { recursive: true });
        await this.writeAtomic(join(dir, RUN_FILE), `${JSON.stringify(run, null, 2)}\n`);
        return run;
      }),
    );
  }

  async updateRun(id: string, update: RunUpdate): Promise<Run> {
    return this.lock(id, () =>
      this.guard(async () => {
        const next = applyRunUpdate(await this.requireRun(id), update);
        await this.writeAtomic(join(this.runDir(id), RUN_FILE), `${JSON.stringify(next, null, 2)}\n`);
        return next;
      }),
    );
  }

  async getRun(id: string): Promise<Run | undefined> {
    let text: string;
    try {
      text = await readFile(join(this.runDir(id), RUN_FILE), 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw e;
    }
    let run: unknown;
    try {
      run = JSON.parse(text);
    } catch (e) {
      throw damagedRun(this.runDir(id), `is not valid JSON (${(e as Error).message})`);
    }
    if (typeof run !== 'object' || run === null || Array.isArray(run)) throw damagedRun(this.runDir(id), `holds ${JSON.stringify(run)}, not a run record`);
    return run as Run;
  }

  async listRuns(): Promise<Run[]> {
    let entries;
    try {
      entries = await readdir(this.root, { withFileTypes: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw e;
    }
    const runs: Run[] = [];
    for (const entry of entries) {
      if (!entry.isDirectory() || entry.name.startsWith('.')) continue;
      const run = await this.getRun(entry.name).catch(() => undefined);
      if (run) runs.push(run);
    }
    return runs.sort((a, b) => b.createdAt - a.createdAt || (a.id < b.id ? 1 : -1));
  }

  async deleteRun(id: string): Promise<void> {
    await this.lock(id, async () => {
      const dir = this.runDir(id);
      if (!(await exists(dir))) return;
      // Out of sight at once (one rename), then removed.
      const trash = join(this.root, tmpName(`deleted-${id}`));
      await rename(dir, trash);
      this.episodeCache.delete(id);
      await rm(trash, { recursive: true, force: true });
    });
  }

  async addEpisode(input: Episode, stepInputs: StepInput[]): Promise<void> {
    const { episode, steps } = checkEpisode(input, stepInputs);
    await this.lock(episode.runId, () =>
      this.guard(async () => {
        await this.requireRun(episode.runId);
        const entries = await this.episodes(episode.runId);
        if (entries.has(episode.index)) throw new StoreError(`run ${episode.runId} already has episode ${episode.index}`);
        const line = Buffer.from(`${episodeLine(episode, steps)}\n`);
        const { start, size, mtimeMs } = await this.append(join(this.runDir(episode.runId), EPISODES_FILE), line.toString('utf8'));
        // Keep the index current without reading the file again (when nobody else wrote meanwhile).
        const cached = this.episodeCache.get(episode.runId);
        if (cached && cached.entries === entries && size === start + line.length) {
          entries.set(episode.index, { episode, start, end: size - 1 });
          cached.size = size;
          cached.mtimeMs = mtimeMs;
        } else {
          this.episodeCache.delete(episode.runId);
        }
      }),
    );
  }

  async listEpisodes(runId: string, filter?: EpisodeFilter, paging?: Paging): Promise<Page<Episode>> {
    return filterAndPage(
      [...(await this.episodes(runId)).values()].map((e) => ({ ...e.episode })),
      filter,
      paging,
    );
  }

  async getEpisode(runId: string, index: number): Promise<EpisodeWithSteps | undefined> {
    const entry = (await this.episodes(runId)).get(index);
    if (!entry) return undefined;
    const fh = await open(join(this.runDir(runId), EPISODES_FILE), 'r');
    try {
      const buffer = Buffer.alloc(entry.end - entry.start);
      await fh.read(buffer, 0, buffer.length, entry.start);
      return parseEpisodeLine(buffer.toString('utf8'), runId);
    } finally {
      await fh.close();
    }
  }

  async addMetrics(batch: Metric[]): Promise<void> {
    const metrics = batch.map(checkMetric);
    const byRun = new Map<string, Metric[]>();
    for (const m of metrics) byRun.set(m.runId, [...(byRun.get(m.runId) ?? []), m]);
    for (const runId of byRun.keys()) await this.requireRun(runId);
    for (const [runId, list] of byRun)
      await this.lock(runId, () => this.guard(() => this.append(join(this.runDir(runId), METRICS_FILE), list.map((m) => `${encodeMetric(m)}\n`).join(''))));
  }

  async listMetrics(runId: string, name?: string): Promise<Metric[]> {
    const path = join(this.runDir(runId), METRICS_FILE);
    const { lines } = await this.readLines(path);
    const metrics: Metric[] = [];
    for (const line of lines) {
      try {
        const m = decodeMetric(JSON.parse(line.text));
        if (name === undefined || m.name === name) metrics.push({ ...m, runId });
      } catch (e) {
        this.warn(`${path}: skipped line ${line.number}: ${(e as Error).message}`);
      }
    }
    return sortMetrics(metrics);
  }

  private async checkpointSteps(runId: string): Promise<number[]> {
    let names: string[];
    try {
      names = await readdir(join(this.runDir(runId), CHECKPOINTS_DIR));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw e;
    }
    return names
      .filter((n) => /^\d+$/.test(n))
      .map(Number)
      .sort((a, b) => a - b);
  }

  async saveCheckpoint(checkpoint: Checkpoint, options: { keep?: number } = {}): Promise<void> {
    const { runId, step, files } = checkpoint;
    checkRunId(runId);
    if (!Number.isInteger(step) || step < 0) throw new StoreError(`checkpoint step must be an integer ≥ 0, not ${step}`);
    checkCheckpointFiles(files);
    const keep = Math.max(1, options.keep ?? this.keep);
    await this.lock(runId, () =>
      this.guard(async () => {
        await this.requireRun(runId);
        const dir = join(this.runDir(runId), CHECKPOINTS_DIR);
        await mkdir(dir, { recursive: true });
        // Leftovers of a killed write.
        for (const name of await readdir(dir)) if (name.startsWith('.')) await rm(join(dir, name), { recursive: true, force: true });
        const tmp = join(dir, tmpName(`tmp-${step}`));
        try {
          for (const [name, bytes] of files) {
            const path = join(tmp, ...name.split('/'));
            await mkdir(dirname(path), { recursive: true });
            await this.beforeWrite(path);
            await writeFile(path, bytes);
          }
          const final = join(dir, String(step));
          if (await exists(final)) {
            const old = join(dir, tmpName(`old-${step}`));
            await rename(final, old);
            await rename(tmp, final);
            await rm(old, { recursive: true, force: true });
          } else {
            await rename(tmp, final);
          }
        } catch (e) {
          await rm(tmp, { recursive: true, force: true });
          throw e;
        }
        // Only now that the new one is in place do the old ones go.
        const steps = await this.checkpointSteps(runId);
        for (const s of steps.slice(0, Math.max(0, steps.length - keep))) await rm(join(dir, String(s)), { recursive: true, force: true });
      }),
    );
  }

  async latestCheckpoint(runId: string): Promise<Checkpoint | undefined> {
    const steps = await this.checkpointSteps(runId);
    return steps.length === 0 ? undefined : this.getCheckpoint(runId, steps[steps.length - 1]);
  }

  async getCheckpoint(runId: string, step: number): Promise<Checkpoint | undefined> {
    if (!Number.isInteger(step) || step < 0) return undefined;
    const dir = join(this.runDir(runId), CHECKPOINTS_DIR, String(step));
    if (!(await exists(dir))) return undefined;
    const files = new Map<string, Uint8Array>();
    for (const name of await listFiles(dir)) files.set(name, new Uint8Array(await readFile(join(dir, ...name.split('/')))));
    return { runId, step, files };
  }

  listCheckpoints(runId: string): Promise<number[]> {
    return this.checkpointSteps(runId);
  }

  async exportJsonl(runId: string): Promise<string> {
    await this.requireRun(runId);
    const entries = [...(await this.episodes(runId)).values()].sort((a, b) => a.episode.index - b.episode.index);
    if (entries.length === 0) return '';
    const content = await readFile(join(this.runDir(runId), EPISODES_FILE));
    return entries.map((e) => `${content.subarray(e.start, e.end).toString('utf8')}\n`).join('');
  }

  importJsonl(text: string, runId?: string): Promise<ImportResult> {
    return importJsonl(this, text, runId);
  }

  async close(): Promise<void> {
    await Promise.all([...this.locks.values()]);
  }
}
