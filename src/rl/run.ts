// A training run, the same in the Node CLI and the browser app: a policy on a model, an algorithm
// and a trajectory store. Update after update it plays episodes, stores them, trains, stores the
// metrics and a checkpoint (adapter, value head, optimiser moments, the algorithm's own state and the
// run's progress). Started again on the same run, it resumes from the last checkpoint: the update
// that was cut short is played again from the same seeds with the same weights, so it produces the
// same episodes, and those already stored are kept as they are.
import { MAX_VALID_ACTIONS } from '../agent/choice-policy.ts';
import { makePolicy } from '../agent/policies.ts';
import type { PlayedEpisode, PolicyMode } from '../agent/policy.ts';
import type { PromptFormat } from '../agent/transcript.ts';
import type { HostLoraAdapter, LoraSettings } from '../engine/lora/adapter.ts';
import type { GpuLoraAdapter } from '../engine/lora/gpu-adapter.ts';
import type { Model } from '../engine/model.ts';
import { MemoryModelSource } from '../engine/model/memory-source.ts';
import { checkpointFiles, hasCheckpoint, readCheckpoint, type Checkpoint as TrainingCheckpoint } from '../engine/train/checkpoint.ts';
import { ADAPTER_CONFIG, ADAPTER_WEIGHTS, readPeftAdapter } from '../engine/lora/peft.ts';
import { ModelLoadError, type ModelConfig } from '../engine/model/types.ts';
import { Trainer } from '../engine/train/trainer.ts';
import { ValueHead } from '../engine/train/value-head.ts';
import type { EnvModule } from '../env/types.ts';
import { StoreError, type StepInput, type TrajectoryStore } from '../store/types.ts';
import { DEFAULTS_VERSION, makeAlgorithm, settingsAsOf, settingsNamedToday, type AlgorithmName } from './index.ts';
import type { Algorithm } from './algorithm.ts';
import { booleanSetting, checkSettings, defaultsOf, enumSetting, integerSetting, numberSetting, type SettingsSchema } from '../common/settings.ts';

/** Everything that defines a run (stored with it, JSON). */
export interface TrainConfig {
  /** Where the model came from (a folder or URL), for the record and for resuming checks. */
  model: string;
  /** A built-in environment id or a custom environment's file. */
  env: string;
  mode: PolicyMode;
  algo: AlgorithmName;
  /** Episodes to play in total. */
  episodes: number;
  seed: number;
  difficulty: number;
  format: PromptFormat;
  /** Choice mode: score actions by their mean token log-prob. */
  lengthNormalize: boolean;
  /** Text mode: sampling temperature and the longest action. */
  temperature: number;
  maxActionTokens: number;
  /** Choice mode: the most valid actions a state may offer. */
  maxActions: number;
  /** Training sequences per forward/backward. */
  microBatch: number;
  lora: LoraSettings;
  /** Overrides of the algorithm's defaults. */
  algorithm: Record<string, unknown>;
  /** Which defaults `algorithm` overrides (DEFAULTS_VERSION in src/rl/index.ts); runs stored without it predate it: 1. */
  defaultsVersion: number;
  /**
   * A custom environment's source, kept with the run in the browser so that it resumes and
   * evaluates after a reload without the editor (the CLI names the file in `env` instead).
   */
  envSource?: string;
}

/**
 * Episodes of a first run where nothing else is said (the app's Train card, `rlplay quickstart`):
 * enough PPO episodes to raise the default model's tool-use success beyond the noise of its test
 * episodes (the README's quickstart gives the figures).
 */
export const FIRST_RUN_EPISODES = 256;

/** The run's own scalar settings (the LoRA settings are checked by the engine, validateLoraSettings). */
export const RUN_SETTINGS = {
  episodes: integerSetting(FIRST_RUN_EPISODES, 'Episodes to play in total.', { min: 1, unit: 'episodes' }),
  mode: enumSetting('choice', ['choice', 'text'], 'choice: a softmax over the listed valid actions; text: the model writes its actions.'),
  seed: integerSetting(0, 'Seed of the adapter, the episodes and the sampling.', { min: 0 }),
  difficulty: integerSetting(1, 'Difficulty level of the instances.', { min: 1, max: 3 }),
  format: enumSetting('plain', ['plain', 'chat'], 'The transcript: plain text, or the model’s chat template.'),
  lengthNormalize: booleanSetting(true, 'Choice mode: score actions by their mean token log-prob (off: summed, which penalises long actions).'),
  temperature: numberSetting(1, 'Sampling temperature (choice mode: τ of the softmax over the valid actions; below 1 sharper).', { min: 0, exclusiveMin: true }),
  maxActionTokens: integerSetting(32, 'Text mode: the longest action.', { min: 1, unit: 'tokens' }),
  maxActions: integerSetting(MAX_VALID_ACTIONS, 'Choice mode: the most valid actions a state may offer (each is scored every step); an episode offered more fails at that step.', { min: 1, unit: 'actions' }),
  microBatch: integerSetting(16, 'Training sequences per forward/backward.', { min: 1, unit: 'sequences' }),
} satisfies SettingsSchema;

const { episodes: _firstRunEpisodes, ...RUN_DEFAULTS } = defaultsOf(RUN_SETTINGS);

export const TRAIN_DEFAULTS: Omit<TrainConfig, 'model' | 'env' | 'algo' | 'episodes'> = {
  ...RUN_DEFAULTS,
  lora: { r: 8, alpha: 16, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], rslora: false, dropout: 0, layers: null },
  algorithm: {},
  defaultsVersion: DEFAULTS_VERSION,
};

/** What a checkpoint records about the run beyond the weights. */
interface Progress {
  updates: number;
  episodes: number;
  algorithm: unknown;
}

export interface RunProgress {
  update: number;
  episodes: number;
  totalEpisodes: number;
  metrics: Record<string, number>;
}

export interface RunHooks {
  /** After every update (its metrics are stored by then). */
  onUpdate?: (progress: RunProgress) => void;
  /** As each episode finishes (before the update trains on it). */
  onEpisode?: (episode: PlayedEpisode) => void;
  /** Environment failures and resumption notes, one line each. */
  onLog?: (message: string) => void;
  /** After each checkpoint, with the trained adapter's host copy (e.g. to write the PEFT folder). */
  onCheckpoint?: (checkpoint: TrainingCheckpoint<Progress>) => void | Promise<void>;
  /** Stops between updates (the run is 'paused' and resumes later). */
  signal?: AbortSignal;
}

export interface RunOutcome {
  status: 'finished' | 'paused';
  updates: number;
  episodes: number;
  resumedFrom: number | null;
  /** The trained adapter, on the GPU (the caller disposes it). */
  adapter: GpuLoraAdapter;
  /** Metrics of the last update. */
  lastMetrics: Record<string, number>;
  /** The episodes this call played, and those of them that failed (describeFailures, checkSomethingPlayed in evaluate.ts). */
  played: { episodes: number; failedEpisodes: number; firstError?: string };
}

/** The settings that must match for a run to be resumed. */
const IDENTITY: (keyof TrainConfig)[] = ['model', 'env', 'mode', 'algo', 'seed', 'difficulty', 'format', 'lengthNormalize', 'lora', 'algorithm', 'temperature', 'maxActionTokens'];

const sameLora = (a: LoraSettings, b: LoraSettings) =>
  (Object.keys(a) as (keyof LoraSettings)[]).every((key) => JSON.stringify(a[key]) === JSON.stringify(b[key])) && Object.keys(a).length === Object.keys(b).length;

/**
 * Stores a PEFT adapter (adapter_config.json and adapter_model.safetensors) as a new run that starts
 * from it: checked against the model first (a clear error for another model's or a corrupted
 * adapter), then saved as the run's update-0 checkpoint, paused. trainRun on it trains from the
 * adapter; evaluation and export read it like any run's. The run's LoRA settings are the adapter's.
 */
export async function importAdapterRun(store: TrajectoryStore, modelConfig: ModelConfig, runId: string, config: TrainConfig, files: Map<string, Uint8Array>, name: string): Promise<TrainConfig> {
  for (const file of [ADAPTER_CONFIG, ADAPTER_WEIGHTS]) {
    if (!files.has(file)) throw new Error(`${name} has no ${file}: a PEFT adapter holds ${ADAPTER_CONFIG} and ${ADAPTER_WEIGHTS}, as PEFT's save_pretrained and rlplay's export write them`);
  }
  const adapterFiles = new Map([ADAPTER_CONFIG, ADAPTER_WEIGHTS].map((file) => [file, files.get(file)!]));
  const adapter = await readPeftAdapter(new MemoryModelSource(adapterFiles, `${name}: `), modelConfig);
  const imported: TrainConfig = { ...config, lora: adapter.settings };
  await store.createRun({ id: runId, config: imported as unknown as Record<string, unknown> });
  await store.saveCheckpoint({ runId, step: 0, files: adapterFiles });
  await store.updateRun(runId, { status: 'paused', note: `imported from ${name}` });
  return imported;
}

/**
 * The learning rate of update `update` (0-based) of a run of `totalUpdates`: the algorithm's rate, or
 * with annealing (CleanRL's anneal_lr) that rate × (1 − update / totalUpdates), the full rate at the
 * first update and rate / totalUpdates at the last. Why anneal: Adam moves every weight by about the
 * rate whatever the gradient's size, and a policy gradient from a few episodes is mostly noise, so a
 * rate that learns a format in 50 episodes keeps the adapter wandering later and never settles on
 * content (docs/training.md: copying a number, 39% at a constant 3e-3, 60% annealed from it).
 */
export function updateLearningRate(algorithm: Pick<Algorithm, 'learningRate' | 'annealLearningRate'>, update: number, totalUpdates: number): number {
  if (!algorithm.annealLearningRate) return algorithm.learningRate;
  // A resumed run given fewer episodes than it has played keeps the last update's rate.
  return algorithm.learningRate * Math.max(1 - update / totalUpdates, 1 / totalUpdates);
}

/** A stored run's progress: the episodes and updates of its last logged update. */
export interface StoredProgress {
  episodes: number;
  updates: number;
}

async function storedProgress(store: TrajectoryStore, runId: string): Promise<StoredProgress> {
  const last = async (name: string) => (await store.listMetrics(runId, name)).at(-1)?.value ?? 0;
  return { episodes: await last('charts/episodes'), updates: await last('charts/updates') };
}

/**
 * Checks a request for `episodes` in all against run `runId` as stored. Fewer than the run has played
 * and than it was started for is refused: its record would name fewer episodes than it holds. Returns
 * the run's progress when it is finished and asks for no more episodes than it has played (there is
 * nothing to do), else null (a new run, or one to resume or continue).
 */
export async function checkRequestedEpisodes(store: TrajectoryStore, runId: string, episodes: number): Promise<StoredProgress | null> {
  const run = await store.getRun(runId);
  if (!run) return null;
  const progress = await storedProgress(store, runId);
  const startedFor = (run.config as unknown as TrainConfig).episodes;
  if (episodes < Math.min(progress.episodes, startedFor)) {
    throw new Error(
      `run ${runId} has played ${progress.episodes} episodes (it was started for ${startedFor}), more than the ${episodes} asked for now: ` +
        `ask for ${Math.min(progress.episodes, startedFor)} or more (more continues it), or start a new run elsewhere`,
    );
  }
  return run.status === 'finished' && progress.episodes >= episodes ? progress : null;
}

/**
 * Trains (or resumes, or continues) run `runId` in `store`. A finished run asked for no more episodes
 * than it has played is left as it is: the outcome is its last checkpoint's, with its last update's metrics.
 */
export async function trainRun(model: Model, env: EnvModule, store: TrajectoryStore, runId: string, requested: TrainConfig, hooks: RunHooks = {}): Promise<RunOutcome> {
  checkSettings('run', RUN_SETTINGS, Object.fromEntries(Object.keys(RUN_SETTINGS).map((key) => [key, requested[key as keyof TrainConfig]])));
  const finished = await checkRequestedEpisodes(store, runId, requested.episodes);
  // 1. The run: new, or resumed with the same settings and the defaults it was made with.
  const existing = await store.getRun(runId);
  const storedConfig = existing?.config as unknown as TrainConfig | undefined;
  // Compared and resumed under today's setting names (a run made before a rename holds the old ones).
  const stored = storedConfig && { ...storedConfig, algorithm: settingsNamedToday(storedConfig.algo, storedConfig.defaultsVersion ?? 1, storedConfig.algorithm) };
  const config: TrainConfig = stored ? { ...requested, defaultsVersion: stored.defaultsVersion ?? 1 } : requested;
  const algorithm = makeAlgorithm(config.algo, settingsAsOf(config.algo, config.defaultsVersion, config.algorithm));
  if (!algorithm.modes.includes(config.mode)) throw new RangeError(`${config.algo} works in ${algorithm.modes.join(' or ')} mode, not ${config.mode}`);
  if (stored) {
    const different = IDENTITY.filter((key) => JSON.stringify(stored[key]) !== JSON.stringify(config[key]));
    if (different.length > 0) {
      throw new Error(
        `run ${runId} was started with other settings (${different.map((k) => `${k}: ${JSON.stringify(stored[k])} then, ${JSON.stringify(config[k])} now`).join('; ')}); ` +
          'resume it with the same settings, or start a new run elsewhere',
      );
    }
    if (!finished) await store.updateRun(runId, { status: 'running', config: config as unknown as Record<string, unknown> });
  } else {
    await store.createRun({ id: runId, config: config as unknown as Record<string, unknown> });
  }
  // A checkpoint with training state resumes the run; one holding only a PEFT adapter (imported,
  // see importAdapterRun) is where a new run starts: that adapter, the rest fresh.
  const { checkpoint, imported } = await newestIntactCheckpoint(store, runId, model.config, hooks.onLog).catch(async (error: unknown) => {
    await store.updateRun(runId, { status: 'failed', note: (error as Error).message }).catch(() => undefined);
    throw error;
  });
  if (checkpoint) hooks.onLog?.(`resuming ${runId} after update ${checkpoint.progress.updates} (${checkpoint.progress.episodes} episodes)`);
  if (imported) {
    if (!sameLora(imported.settings, config.lora)) {
      throw new Error(`run ${runId} starts from an imported adapter with LoRA settings ${JSON.stringify(imported.settings)}, but the run asks for ${JSON.stringify(config.lora)}: train it with the adapter's settings`);
    }
    hooks.onLog?.(`starting ${runId} from its imported adapter (LoRA r=${imported.settings.r})`);
  }

  // 2. The adapter, value head, optimiser and algorithm state, fresh or from the checkpoint.
  const adapter = model.uploadAdapter(checkpoint?.adapter ?? imported ?? model.createAdapter(config.lora, config.seed));
  const valueHead = new ValueHead(model.gpu, model.config.hiddenSize, checkpoint?.valueHead);
  const trainer = new Trainer(model.gpuModel, { train: adapter, valueHead, optimizer: { schedule: { kind: 'constant', lr: algorithm.learningRate } }, seed: config.seed });
  const policy = makePolicy(model, { ...config, env, reset: { split: 'train', difficulty: config.difficulty }, adapter, valueHead });
  let updates = checkpoint?.progress.updates ?? 0;
  let episodes = checkpoint?.progress.episodes ?? 0;
  let lastMetrics: Record<string, number> = {};
  const played: RunOutcome['played'] = { episodes: 0, failedEpisodes: 0 };
  try {
    if (checkpoint) {
      trainer.loadOptimizerState(checkpoint.optimizer);
      algorithm.restore(checkpoint.progress.algorithm);
    }
    // 3. Updates until the episode budget is spent.
    while (episodes < config.episodes) {
      if (hooks.signal?.aborted) {
        await store.updateRun(runId, { status: 'paused' });
        return { status: 'paused', updates, episodes, resumedFrom: checkpoint?.progress.updates ?? null, adapter, lastMetrics, played };
      }
      const updateStarted = performance.now();
      trainer.setSchedule({ kind: 'constant', lr: updateLearningRate(algorithm, updates, Math.ceil(config.episodes / algorithm.episodesPerUpdate)) });
      const result = await algorithm.update({
        model, policy, trainer, update: updates,
        seed: config.seed * 1_000_003 + updates * algorithm.episodesPerUpdate,
        onEpisode: hooks.onEpisode,
      });
      const first = updates * algorithm.episodesPerUpdate;
      for (const [i, episode] of result.episodes.entries()) {
        played.episodes++;
        if (episode.error) {
          hooks.onLog?.(`episode ${first + i} (seed ${episode.seed}) ended early: ${episode.error}`);
          played.failedEpisodes++;
          played.firstError ??= episode.error;
        }
        if (await store.getEpisode(runId, first + i)) continue; // stored before an interruption: the same episode
        await store.addEpisode(
          { runId, index: first + i, envId: env.id, seed: episode.seed, split: 'train', totalReward: episode.totalReward, success: episode.success, length: episode.steps.length, createdAt: Date.now(), ...(episode.error ? { error: episode.error } : {}) },
          episode.steps.map((step, t): StepInput => ({ t, observation: step.observation, action: step.action, reward: step.reward, terminated: step.terminated, truncated: step.truncated, info: step.info, tokens: step.tokens })),
        );
      }
      updates++;
      episodes += result.episodes.length;
      // Throughput of the whole update (playing and training): the episodes' transcript tokens per second.
      const seconds = (performance.now() - updateStarted) / 1000;
      const tokens = result.episodes.reduce((n, e) => n + (e.steps.at(-1)?.tokens.ids.length ?? 0), 0);
      lastMetrics = {
        ...result.metrics,
        'charts/episodes': episodes,
        'charts/updates': updates,
        'perf/tokens_per_second': tokens / seconds,
        'perf/episodes_per_second': result.episodes.length / seconds,
      };
      // Killed after the metrics but before the checkpoint, this update runs again: log it once.
      const logged = (await store.listMetrics(runId, 'charts/updates')).some((m) => m.value === updates);
      const time = Date.now();
      if (!logged) await store.addMetrics(Object.entries(lastMetrics).map(([name, value]) => ({ runId, step: episodes, name, value, time })));
      const saving: TrainingCheckpoint<Progress> = {
        adapter: await adapter.toHost(),
        valueHead: await valueHead.read(),
        optimizer: await trainer.optimizerState(),
        progress: { updates, episodes, algorithm: algorithm.state() },
      };
      await store.saveCheckpoint({ runId, step: updates, files: checkpointFiles(saving) });
      await hooks.onCheckpoint?.(saving);
      hooks.onUpdate?.({ update: updates, episodes, totalEpisodes: config.episodes, metrics: lastMetrics });
    }
    if (!finished) await store.updateRun(runId, { status: 'finished' });
    // No update in this call (a finished run, or one stopped after its last checkpoint): the metrics of the last stored one.
    if (played.episodes === 0) lastMetrics = await lastUpdateMetrics(store, runId);
    return { status: 'finished', updates, episodes, resumedFrom: checkpoint?.progress.updates ?? null, adapter, lastMetrics, played };
  } catch (error) {
    adapter.dispose();
    await store.updateRun(runId, { status: 'failed', note: (error as Error).message }).catch(() => undefined);
    throw error;
  } finally {
    algorithm.dispose?.();
    trainer.dispose();
    valueHead.dispose();
  }
}

/**
 * The run's newest checkpoint that reads back whole: its training state, or the PEFT adapter a run
 * imported to start from. A damaged one (a disk fault, a file changed by hand) is reported and passed
 * over for the one before it, which loses nothing: the updates after it are played again from the
 * same seeds, and the episodes and metrics they stored the first time are kept, not stored twice.
 */
async function newestIntactCheckpoint(
  store: TrajectoryStore,
  runId: string,
  config: ModelConfig,
  log: ((line: string) => void) | undefined,
): Promise<{ checkpoint?: TrainingCheckpoint<Progress>; imported?: HostLoraAdapter }> {
  const damaged: string[] = [];
  for (const step of (await store.listCheckpoints(runId)).reverse()) {
    try {
      const saved = await store.getCheckpoint(runId, step);
      if (!saved) continue; // pruned since it was listed
      const source = new MemoryModelSource(saved.files, `${runId} checkpoint ${step}: `);
      return (await hasCheckpoint(source)) ? { checkpoint: await readCheckpoint<Progress>(source, config) } : { imported: await readPeftAdapter(source, config) };
    } catch (error) {
      if (!(error instanceof ModelLoadError || error instanceof StoreError)) throw error;
      // A loader's remedy ("download it again") is for downloaded files; a checkpoint is passed over.
      const diagnosis = error instanceof ModelLoadError ? error.diagnosis : error.message;
      damaged.push(`checkpoint ${step}: ${diagnosis}`);
      log?.(`checkpoint ${step} of run ${runId} is damaged and is passed over (${diagnosis})`);
    }
  }
  if (damaged.length > 0) {
    throw new Error(
      `run ${runId} cannot resume: every checkpoint it kept is damaged (${damaged.join('; ')}). ` +
        'Its stored episodes and metrics are intact and can still be exported; to train, start a new run.',
    );
  }
  return {};
}

/** The metrics logged by the run's last update (none before its first). */
async function lastUpdateMetrics(store: TrajectoryStore, runId: string): Promise<Record<string, number>> {
  const metrics = await store.listMetrics(runId);
  const step = metrics.at(-1)?.step;
  return Object.fromEntries(metrics.filter((m) => m.step === step).map((m) => [m.name, m.value]));
}

