// Where runs, episodes (with their steps), metrics and checkpoints live (F9): one interface, kept in
// IndexedDB in the browser (indexeddb.ts) and in a folder per run under Node (files.ts). Both pass the
// same conformance suite (tests/unit/store-conformance.ts). Everything but checkpoint files is JSON.

import type { Split } from '../env/types.ts';

/** 'stopped': ended by its user before all its episodes were played; its last checkpoint stays, it is not offered for resuming. */
export type RunStatus = 'running' | 'paused' | 'finished' | 'stopped' | 'failed';

export const RUN_STATUSES: readonly RunStatus[] = ['running', 'paused', 'finished', 'stopped', 'failed'];

export interface Run {
  /** Letters, digits, '.', '_' and '-' (it names a folder in the files store). */
  id: string;
  /** Milliseconds since the epoch. */
  createdAt: number;
  /** The experiment's configuration, JSON. */
  config: Record<string, unknown>;
  status: RunStatus;
  note?: string;
}

export interface NewRun {
  /** Default: a fresh id. */
  id?: string;
  config: Record<string, unknown>;
  /** Default 'running'. */
  status?: RunStatus;
  note?: string;
  /** Default: now. */
  createdAt?: number;
}

export type RunUpdate = Partial<Pick<Run, 'config' | 'status' | 'note'>>;

export interface Episode {
  runId: string;
  /** Unique within its run. */
  index: number;
  envId: string;
  seed: number;
  split: Split;
  totalReward: number;
  success: boolean;
  /** Number of steps. */
  length: number;
  createdAt: number;
  /** A custom environment that threw ends its episode with the message here. */
  error?: string;
}

export interface StepTokens {
  ids: number[];
  /** 1 where the token is the agent's own (an action), 0 where it came from the environment. */
  actionMask: number[];
  logprobs?: number[];
}

export interface Step {
  runId: string;
  episodeIndex: number;
  /** 0, 1, 2... within the episode. */
  t: number;
  observation: string;
  action: string;
  reward: number;
  terminated: boolean;
  truncated: boolean;
  /** JSON. */
  info: Record<string, unknown>;
  tokens?: StepTokens;
}

/** A step as given to addEpisode: runId and episodeIndex come from the episode. */
export type StepInput = Omit<Step, 'runId' | 'episodeIndex'> & Partial<Pick<Step, 'runId' | 'episodeIndex'>>;

export interface EpisodeWithSteps extends Episode {
  steps: Step[];
}

export interface Metric {
  runId: string;
  /** Training step. */
  step: number;
  name: string;
  /** May be NaN or ±Infinity (a diverging loss): both stores keep them. */
  value: number;
  /** Milliseconds since the epoch. */
  time: number;
}

export interface Checkpoint {
  runId: string;
  step: number;
  /** File name (may hold '/' for subfolders) → bytes, as checkpointFiles() makes them. */
  files: Map<string, Uint8Array>;
}

export interface EpisodeFilter {
  split?: Split;
  success?: boolean;
  /** Inclusive bounds on totalReward. */
  minReward?: number;
  maxReward?: number;
}

export interface Paging {
  /** Default 0. */
  offset?: number;
  /** Default: all. */
  limit?: number;
}

export interface Page<T> {
  /** Ordered by episode index. */
  items: T[];
  /** How many match the filter, over all pages. */
  total: number;
}

export interface ImportResult {
  runId: string;
  episodes: number;
}

export interface TrajectoryStore {
  createRun(run: NewRun): Promise<Run>;
  /** Throws StoreError when the run does not exist. */
  updateRun(id: string, update: RunUpdate): Promise<Run>;
  getRun(id: string): Promise<Run | undefined>;
  /** Newest first. */
  listRuns(): Promise<Run[]>;
  /** Deletes the run with its episodes, steps, metrics and checkpoints; nothing when it does not exist. */
  deleteRun(id: string): Promise<void>;

  /** Stores an episode with its steps, atomically: either all of it or none. Its index must be new in the run. */
  addEpisode(episode: Episode, steps: StepInput[]): Promise<void>;
  listEpisodes(runId: string, filter?: EpisodeFilter, paging?: Paging): Promise<Page<Episode>>;
  getEpisode(runId: string, index: number): Promise<EpisodeWithSteps | undefined>;

  addMetrics(batch: Metric[]): Promise<void>;
  /** Ordered by step (then by the order they were added). */
  listMetrics(runId: string, name?: string): Promise<Metric[]>;

  /** Keeps the last `keep` checkpoints of the run (default the store's, 3); older ones go only once this one is stored. */
  saveCheckpoint(checkpoint: Checkpoint, options?: { keep?: number }): Promise<void>;
  latestCheckpoint(runId: string): Promise<Checkpoint | undefined>;
  /** One of the checkpoints kept (see listCheckpoints); undefined when there is none at that step. */
  getCheckpoint(runId: string, step: number): Promise<Checkpoint | undefined>;
  /** The steps of the checkpoints kept, ascending. */
  listCheckpoints(runId: string): Promise<number[]>;

  /** One JSON object per line: an episode (without runId) with its steps; ends with a newline. */
  exportJsonl(runId: string): Promise<string>;
  /**
   * Validates every line first (JsonlImportError names the first bad line; nothing is stored then), then adds
   * the episodes to `runId` (created when missing) or to a new run.
   */
  importJsonl(text: string, runId?: string): Promise<ImportResult>;

  close(): Promise<void>;
}

export class StoreError extends Error {
  override name = 'StoreError';
}

/** The browser's quota or the disk is full. Nothing of the failed write was kept, and nothing older was dropped. */
export class StoreQuotaError extends StoreError {
  override name = 'StoreQuotaError';
  constructor(
    /** Bytes used, where known. */
    readonly usedBytes: number | undefined,
    options?: { cause?: unknown },
  ) {
    super(
      usedBytes === undefined
        ? 'storage is full; delete old runs or export them'
        : `storage is full: ${(usedBytes / 1e6).toFixed(1)} MB used; delete old runs or export them`,
      options,
    );
  }
}

export class JsonlImportError extends StoreError {
  override name = 'JsonlImportError';
  constructor(
    /** 1-based line number. */
    readonly line: number,
    readonly reason: string,
  ) {
    super(`line ${line}: ${reason}`);
  }
}
