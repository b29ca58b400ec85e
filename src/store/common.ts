// What both stores share: validation, filtering and paging, the JSONL episode line, and import.
import {
  JsonlImportError,
  RUN_STATUSES,
  StoreError,
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

export const DEFAULT_KEEP_CHECKPOINTS = 3;

const RUN_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

export function checkRunId(id: unknown): string {
  if (typeof id !== 'string' || !RUN_ID.test(id)) throw new StoreError(`run id ${JSON.stringify(id)} is not valid: use letters, digits, '.', '_' and '-' (at most 128)`);
  return id;
}

/** A new run's id: `prefix`, the time and a random suffix, e.g. run-2026-12-08T01-02-03-456Z-k3x9qa. */
export function newRunId(prefix = 'run', now = Date.now()): string {
  const random = Math.floor(Math.random() * 36 ** 6).toString(36).padStart(6, '0');
  return `${prefix}-${new Date(now).toISOString().replace(/[:.]/g, '-')}-${random}`;
}

/** A JSON copy (what either store gives back), so both stores keep exactly the same values. */
export function jsonCopy<T>(value: T): T {
  return value === undefined ? value : (JSON.parse(JSON.stringify(value)) as T);
}

export function makeRun(input: NewRun): Run {
  const run: Run = {
    id: checkRunId(input.id ?? newRunId()),
    createdAt: input.createdAt ?? Date.now(),
    config: jsonCopy(input.config ?? {}),
    status: input.status ?? 'running',
  };
  if (input.note !== undefined) run.note = input.note;
  checkRun(run);
  return run;
}

export function applyRunUpdate(run: Run, update: RunUpdate): Run {
  const next: Run = { ...run };
  if (update.config !== undefined) next.config = jsonCopy(update.config);
  if (update.status !== undefined) next.status = update.status;
  if ('note' in update) {
    if (update.note === undefined) delete next.note;
    else next.note = update.note;
  }
  checkRun(next);
  return next;
}

function checkRun(run: Run): void {
  if (!RUN_STATUSES.includes(run.status)) throw new StoreError(`run status ${JSON.stringify(run.status)} is not one of ${RUN_STATUSES.join(', ')}`);
  if (typeof run.config !== 'object' || run.config === null || Array.isArray(run.config)) throw new StoreError('run config must be a JSON object');
  if (run.note !== undefined && typeof run.note !== 'string') throw new StoreError('run note must be a string');
}

// ---- validation: returns a reason, or undefined when the value is fine ----

const isInt = (v: unknown) => typeof v === 'number' && Number.isInteger(v) && v >= 0;
const isFinite = (v: unknown) => typeof v === 'number' && Number.isFinite(v);
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isNumberArray = (v: unknown) => Array.isArray(v) && v.every((x) => typeof x === 'number');

/** Checks an episode without its runId. */
export function episodeProblem(e: Record<string, unknown>): string | undefined {
  if (!isInt(e.index)) return 'index must be an integer ≥ 0';
  if (typeof e.envId !== 'string' || e.envId === '') return 'envId must be a non-empty string';
  if (!isFinite(e.seed)) return 'seed must be a number';
  if (e.split !== 'train' && e.split !== 'test') return "split must be 'train' or 'test'";
  if (!isFinite(e.totalReward)) return 'totalReward must be a finite number';
  if (typeof e.success !== 'boolean') return 'success must be true or false';
  if (!isInt(e.length)) return 'length must be an integer ≥ 0';
  if (!isFinite(e.createdAt)) return 'createdAt must be a number';
  if (e.error !== undefined && typeof e.error !== 'string') return 'error must be a string';
  return undefined;
}

export function stepProblem(s: unknown): string | undefined {
  if (!isObject(s)) return 'is not an object';
  if (!isInt(s.t)) return 't must be an integer ≥ 0';
  if (typeof s.observation !== 'string') return 'observation must be a string';
  if (typeof s.action !== 'string') return 'action must be a string';
  if (!isFinite(s.reward)) return 'reward must be a finite number';
  if (typeof s.terminated !== 'boolean') return 'terminated must be true or false';
  if (typeof s.truncated !== 'boolean') return 'truncated must be true or false';
  if (!isObject(s.info)) return 'info must be a JSON object';
  if (s.tokens !== undefined) {
    const k = s.tokens;
    if (!isObject(k) || !isNumberArray(k.ids) || !isNumberArray(k.actionMask)) return 'tokens must hold ids and actionMask, arrays of numbers';
    if ((k.actionMask as number[]).length !== (k.ids as number[]).length) return 'tokens.actionMask must be as long as tokens.ids';
    if (k.logprobs !== undefined && !isNumberArray(k.logprobs)) return 'tokens.logprobs must be an array of numbers';
  }
  return undefined;
}

/** Validates an episode and its steps for addEpisode; gives back the steps with runId and episodeIndex filled in. */
export function checkEpisode(episode: Episode, steps: StepInput[]): { episode: Episode; steps: Step[] } {
  checkRunId(episode.runId);
  const problem = episodeProblem(episode as unknown as Record<string, unknown>);
  if (problem) throw new StoreError(`episode ${episode.index} of run ${episode.runId}: ${problem}`);
  if (!Array.isArray(steps)) throw new StoreError(`episode ${episode.index}: steps must be an array`);
  const seen = new Set<number>();
  const full = steps.map((s, i) => {
    const p = stepProblem(s);
    if (p) throw new StoreError(`episode ${episode.index}, step ${i}: ${p}`);
    if ((s.runId !== undefined && s.runId !== episode.runId) || (s.episodeIndex !== undefined && s.episodeIndex !== episode.index))
      throw new StoreError(`episode ${episode.index}, step ${i}: belongs to run ${s.runId} episode ${s.episodeIndex}`);
    if (seen.has(s.t)) throw new StoreError(`episode ${episode.index}: two steps have t = ${s.t}`);
    seen.add(s.t);
    return normaliseStep({ ...s, runId: episode.runId, episodeIndex: episode.index });
  });
  full.sort((a, b) => a.t - b.t);
  return { episode: normaliseEpisode(episode), steps: full };
}

function normaliseEpisode(e: Episode): Episode {
  const out: Episode = {
    runId: e.runId,
    index: e.index,
    envId: e.envId,
    seed: e.seed,
    split: e.split,
    totalReward: e.totalReward,
    success: e.success,
    length: e.length,
    createdAt: e.createdAt,
  };
  if (e.error !== undefined) out.error = e.error;
  return out;
}

function normaliseStep(s: Step): Step {
  const out: Step = {
    runId: s.runId,
    episodeIndex: s.episodeIndex,
    t: s.t,
    observation: s.observation,
    action: s.action,
    reward: s.reward,
    terminated: s.terminated,
    truncated: s.truncated,
    info: jsonCopy(s.info),
  };
  if (s.tokens !== undefined) {
    out.tokens = { ids: [...s.tokens.ids], actionMask: [...s.tokens.actionMask] };
    if (s.tokens.logprobs !== undefined) out.tokens.logprobs = [...s.tokens.logprobs];
  }
  return out;
}

export function checkMetric(m: Metric): Metric {
  checkRunId(m.runId);
  if (!isInt(m.step)) throw new StoreError(`metric ${m.name}: step must be an integer ≥ 0`);
  if (typeof m.name !== 'string' || m.name === '') throw new StoreError('metric name must be a non-empty string');
  if (typeof m.value !== 'number') throw new StoreError(`metric ${m.name}: value must be a number`);
  if (!isFinite(m.time)) throw new StoreError(`metric ${m.name}: time must be a number`);
  return { runId: m.runId, step: m.step, name: m.name, value: m.value, time: m.time };
}

export function checkCheckpointFiles(files: Map<string, Uint8Array>): void {
  if (!(files instanceof Map) || files.size === 0) throw new StoreError('a checkpoint needs at least one file');
  for (const [name, data] of files) {
    if (!(data instanceof Uint8Array)) throw new StoreError(`checkpoint file ${name} is not a Uint8Array`);
    const parts = name.split('/');
    if (name.startsWith('/') || parts.some((p) => p === '' || p === '.' || p === '..' || p.includes('\\') || p.includes('\0')))
      throw new StoreError(`checkpoint file name ${JSON.stringify(name)} is not a plain relative path`);
  }
}

export function filterAndPage(episodes: Episode[], filter: EpisodeFilter = {}, paging: Paging = {}): Page<Episode> {
  const matching = episodes
    .filter(
      (e) =>
        (filter.split === undefined || e.split === filter.split) &&
        (filter.success === undefined || e.success === filter.success) &&
        (filter.minReward === undefined || e.totalReward >= filter.minReward) &&
        (filter.maxReward === undefined || e.totalReward <= filter.maxReward),
    )
    .sort((a, b) => a.index - b.index);
  const offset = Math.max(0, paging.offset ?? 0);
  const end = paging.limit === undefined ? undefined : offset + Math.max(0, paging.limit);
  return { items: matching.slice(offset, end), total: matching.length };
}

export function sortMetrics(metrics: Metric[]): Metric[] {
  // Array.prototype.sort is stable: same step keeps the order of addition.
  return metrics.sort((a, b) => a.step - b.step);
}

// ---- the JSONL episode line, shared by export/import and the files store's trajectories.jsonl ----

/** One line (without the newline): the episode without runId, and its steps without runId and episodeIndex. */
export function episodeLine(episode: Episode, steps: Step[]): string {
  const { runId: _r, ...rest } = episode;
  return JSON.stringify({ ...rest, steps: steps.map(({ runId: _a, episodeIndex: _b, ...s }) => s) });
}

/** Parses and validates one line; throws an Error whose message is the reason. */
export function parseEpisodeLine(line: string, runId: string): EpisodeWithSteps {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch (e) {
    throw new Error(`not valid JSON (${(e as Error).message})`);
  }
  if (!isObject(value)) throw new Error('not a JSON object');
  const problem = episodeProblem(value);
  if (problem) throw new Error(problem);
  if (!Array.isArray(value.steps)) throw new Error('steps must be an array');
  const { episode, steps } = (() => {
    try {
      return checkEpisode({ ...(value as unknown as Episode), runId }, value.steps as StepInput[]);
    } catch (e) {
      throw new Error((e as Error).message);
    }
  })();
  return { ...episode, steps };
}

export async function exportJsonl(store: TrajectoryStore, runId: string): Promise<string> {
  if (!(await store.getRun(runId))) throw new StoreError(`run ${runId} does not exist`);
  const { items } = await store.listEpisodes(runId);
  let out = '';
  for (const e of items) {
    const full = await store.getEpisode(runId, e.index);
    if (full) out += `${episodeLine(full, full.steps)}\n`;
  }
  return out;
}

export async function importJsonl(store: TrajectoryStore, text: string, runId?: string): Promise<ImportResult> {
  const target = runId ?? newRunId();
  checkRunId(target);
  const parsed: EpisodeWithSteps[] = [];
  const lines = text.split('\n');
  const seen = new Set<number>();
  lines.forEach((raw, i) => {
    const line = raw.replace(/\r$/, '');
    if (line.trim() === '') return;
    let episode: EpisodeWithSteps;
    try {
      episode = parseEpisodeLine(line, target);
    } catch (e) {
      throw new JsonlImportError(i + 1, (e as Error).message);
    }
    if (seen.has(episode.index)) throw new JsonlImportError(i + 1, `episode index ${episode.index} appears twice`);
    seen.add(episode.index);
    parsed.push(episode);
  });
  const existing = await store.getRun(target);
  if (existing) {
    const taken = new Set((await store.listEpisodes(target)).items.map((e) => e.index));
    const clash = parsed.findIndex((e) => taken.has(e.index));
    if (clash >= 0) throw new StoreError(`run ${target} already has episode ${parsed[clash].index}; import into a new run instead`);
  } else {
    await store.createRun({ id: target, config: { importedAt: new Date().toISOString() }, status: 'finished', note: 'imported from JSONL' });
  }
  for (const { steps, ...episode } of parsed) await store.addEpisode(episode, steps);
  return { runId: target, episodes: parsed.length };
}

/** Whether an error means the storage is full: QuotaExceededError (browsers), ENOSPC or EDQUOT (disks). */
export function isQuotaError(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const e = error as { name?: unknown; code?: unknown; inner?: unknown; cause?: unknown };
  if (e.name === 'QuotaExceededError' || e.name === 'NS_ERROR_DOM_QUOTA_REACHED' || e.code === 'ENOSPC' || e.code === 'EDQUOT' || e.code === 22) return true;
  return e.cause !== undefined && e.cause !== error && isQuotaError(e.cause);
}
