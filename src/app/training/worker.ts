// The training Worker: it owns the GPUDevice, the model and the run, so that the page never
// freezes while the GPU works. The page drives it through comlink (protocol.ts); the run itself is
// rl/run.ts, the same as `rlplay train`, on the IndexedDB store.
import * as Comlink from 'comlink';
import { requestGpu, type GpuContext } from '../../engine/gpu/device.ts';
import { loadModel, type Model } from '../../engine/model.ts';
import { openBrowserModelSource } from '../../engine/model/source-browser.ts';
import { loadModelFiles } from '../../engine/model/load.ts';
import { exportOnnx, ONNX_MODEL_FILE } from '../../engine/export/onnx.ts';
import { peftFilesOf, readPeftAdapter } from '../../engine/lora/peft.ts';
import { zipSync } from 'fflate';
import { makePolicy } from '../../agent/policies.ts';
import { mulberry32 } from '../../common/random.ts';
import { BUILTIN_ENVIRONMENTS } from '../../env/builtin/index.ts';
import { describeThrown, guardEnvModule } from '../../env/guard.ts';
import { loadEnvSource, type SandboxHost } from '../../env/load-browser.ts';
import type { EnvModule } from '../../env/types.ts';
import { ALGORITHM_DEFAULTS, ALGORITHMS, makeAlgorithm } from '../../rl/index.ts';
import { importAdapterRun, TRAIN_DEFAULTS, trainRun } from '../../rl/run.ts';
import { openIndexedDbStore } from '../../store/indexeddb.ts';
import type { PlayedEpisode } from '../../agent/policy.ts';
import { MemoryModelSource } from '../../engine/model/memory-source.ts';
import { evaluatePolicy } from '../../rl/evaluate.ts';
import type { TrainConfig } from '../../rl/run.ts';
import type {
  CustomEnvSource,
  EpisodeView,
  EvaluateRequest,
  ModelRef,
  EvaluationComparison,
  ExportOnnxRequest,
  ImportAdapterRequest,
  StartRequest,
  TrainerApi,
  TrainerEvents,
  TrainSummary,
  ValidatedEpisode,
  ValidationReport,
  ValidateRequest,
} from './protocol.ts';
import { mean } from '../../common/stats.ts';

let gpu: GpuContext | null = null;
let loaded: { key: string; model: Model } | null = null;
let controller: AbortController | null = null;
/** Why the current device was lost, until a new one is requested: what a run that failed then is told. */
let deviceLoss: string | null = null;

/** The location, and for a picked folder its files' sizes: picking another folder of the same name loads again. */
function modelKey(ref: ModelRef): string {
  const folder = [...(ref.options.folders?.values() ?? [])].map((f) => [...f.files].map(([path, blob]) => `${path}:${blob.size}`).join(','));
  return JSON.stringify([ref.location, folder]);
}

async function modelFor(ref: ModelRef, events: TrainerEvents): Promise<Model> {
  const key = modelKey(ref);
  if (loaded?.key === key && gpu) {
    events.loading({ kind: 'ready', adapterName: gpu.adapterName });
    return loaded.model;
  }
  loaded?.model.dispose();
  loaded = null;
  if (!gpu) {
    events.loading({ kind: 'gpu' });
    deviceLoss = null;
    gpu = await requestGpu(navigator.gpu, {
      onLost: (reason) => {
        gpu = null;
        loaded = null;
        deviceLoss = reason;
        events.log(`The GPU device was lost (${reason}); resume the run to continue from its last checkpoint on a new device.`);
      },
    });
  }
  const model = await loadModel(gpu, openBrowserModelSource(ref.location, ref.options), (p) => events.loading({ kind: 'download', file: p.file, loadedBytes: p.loadedBytes, totalBytes: p.totalBytes ?? null }));
  loaded = { key, model };
  events.loading({ kind: 'ready', adapterName: gpu.adapterName });
  return model;
}

/** The page's sandbox host seen from here: ports and callbacks cross by transfer and by proxy. */
function remoteSandboxHost(remote: SandboxHost): SandboxHost {
  return {
    open: (port, onDeath) => remote.open(Comlink.transfer(port, [port]), Comlink.proxy(onDeath)),
    close: (id) => void remote.close(id),
  };
}

/** A built-in by id, or the custom environment's source in the page's sandboxes (dispose it after). */
async function environmentFor(envId: string, custom: CustomEnvSource | undefined, sandbox: SandboxHost | undefined): Promise<{ env: EnvModule; dispose(): Promise<void> }> {
  if (custom) {
    if (!sandbox) throw new Error('a custom environment needs the page to host its sandbox');
    const module = await loadEnvSource(custom.source, { label: custom.label, host: remoteSandboxHost(sandbox) });
    if (module.id !== envId) throw new Error(`the custom environment's id is "${module.id}", not "${envId}"`);
    return { env: module, dispose: () => module.dispose() };
  }
  const builtin = BUILTIN_ENVIRONMENTS.get(envId);
  if (!builtin) throw new Error(`unknown environment ${envId}; the built-ins are ${[...BUILTIN_ENVIRONMENTS.keys()].join(', ')}`);
  return { env: guardEnvModule(builtin), dispose: async () => {} };
}

/** One episode of a uniformly random policy over the valid actions (seeded). */
async function randomEpisode(module: EnvModule, seed: number): Promise<ValidatedEpisode> {
  const random = mulberry32(seed);
  const env = await module.make();
  let totalReward = 0;
  let steps = 0;
  try {
    await env.reset({ seed, options: { split: 'test' } });
    for (let t = 0; t < module.maxEpisodeSteps; t++) {
      const actions = env.validActions ? await env.validActions() : [];
      if (actions.length === 0) throw new Error('validActions() is missing or empty: a random policy needs a list of actions to choose from');
      const result = await env.step(actions[Math.floor(random() * actions.length)]);
      totalReward += result.reward;
      steps++;
      if (result.terminated || result.truncated) return { policy: 'random', seed, totalReward, success: result.info.success === true, steps };
    }
    return { policy: 'random', seed, totalReward, success: false, steps };
  } catch (error) {
    return { policy: 'random', seed, totalReward, success: false, steps, error: (error as Error).message ?? describeThrown(error) };
  } finally {
    await Promise.resolve(env.close?.()).catch(() => undefined);
  }
}

/** Do successful episodes return more than failed ones? */
function separation(episodes: ValidatedEpisode[]): Pick<ValidationReport, 'separation' | 'separates'> {
  const ok = episodes.filter((e) => !e.error);
  const wins = ok.filter((e) => e.success).map((e) => e.totalReward);
  const losses = ok.filter((e) => !e.success).map((e) => e.totalReward);
  if (wins.length === 0 || losses.length === 0) {
    return { separates: null, separation: `Every episode that finished ${wins.length ? 'succeeded' : 'failed'}: play more episodes, or check info.success, to see whether the reward tells good from bad.` };
  }
  const separates = Math.min(...wins) > Math.max(...losses);
  const gap = `successes return ${mean(wins).toFixed(2)} on average, failures ${mean(losses).toFixed(2)}`;
  return {
    separates,
    separation: separates
      ? `The reward separates good from bad episodes: every success returned more than every failure (${gap}).`
      : `The reward does not separate good from bad episodes: some failures returned as much as a success (${gap}). An agent would learn to chase reward, not success.`,
  };
}

const episodeView = (episode: PlayedEpisode): EpisodeView => ({
  seed: episode.seed,
  totalReward: episode.totalReward,
  success: episode.success,
  ...(episode.error ? { error: episode.error } : {}),
  steps: episode.steps.map((s) => ({ observation: s.observation, action: s.action, reward: s.reward })),
});

const SAMPLE_TRANSCRIPTS = 3;
const quiet: TrainerEvents = { loading: () => {}, update: () => {}, episode: () => {}, log: () => {} };

const api: TrainerApi = {
  environments: () => [...BUILTIN_ENVIRONMENTS.values()].map(({ id, description, maxEpisodeSteps }) => ({ id, description, maxEpisodeSteps })),
  algorithms: () =>
    ALGORITHMS.map((name) => {
      const algorithm = makeAlgorithm(name);
      algorithm.dispose?.();
      return { name, modes: [...algorithm.modes], defaults: { ...ALGORITHM_DEFAULTS[name] } };
    }),
  async start(request: StartRequest, events: TrainerEvents, sandbox?: SandboxHost): Promise<TrainSummary> {
    if (controller) throw new Error('a run is already training in this tab; pause it first');
    controller = new AbortController();
    let environment: Awaited<ReturnType<typeof environmentFor>> | null = null;
    const store = await openIndexedDbStore();
    try {
      environment = await environmentFor(request.config.env, request.customEnv, sandbox);
      const model = await modelFor(request.model, events);
      const config = { ...request.config, format: model.tokenizer.hasChatTemplate ? ('chat' as const) : ('plain' as const) };
      const outcome = await trainRun(model, environment.env, store, request.runId, config, {
        signal: controller.signal,
        onLog: (message) => events.log(message),
        onUpdate: (progress) => events.update(progress),
        onEpisode: (episode) => events.episode(episodeView(episode)),
      }).catch(async (error: unknown) => {
        // After a lost device every GPU call fails with the driver's words; say what happened instead,
        // here and in the stored run (what the resume offer shows after a reload).
        if (deviceLoss === null) throw error;
        const message = `the GPU device was lost (${deviceLoss}). The run's last checkpoint is kept: resume the run to continue from it on a new device.`;
        await store.updateRun(request.runId, { status: 'failed', note: message }).catch(() => undefined);
        throw new Error(message);
      });
      outcome.adapter.dispose();
      return { status: outcome.status, updates: outcome.updates, episodes: outcome.episodes, resumedFrom: outcome.resumedFrom };
    } finally {
      controller = null;
      await environment?.dispose();
      await store.close();
    }
  },

  async validate(request: ValidateRequest, sandbox: SandboxHost): Promise<ValidationReport> {
    const module = await loadEnvSource(request.source, { label: request.label, host: remoteSandboxHost(sandbox) });
    try {
      const seeds = Array.from({ length: request.episodes }, (_, i) => 1_000_000 + i);
      const episodes: ValidatedEpisode[] = [];
      for (const seed of seeds) episodes.push(await randomEpisode(module, seed));
      const model = await modelFor(request.model, quiet);
      const policy = makePolicy(model, {
        ...TRAIN_DEFAULTS,
        env: module,
        reset: { split: 'test' },
        format: model.tokenizer.hasChatTemplate ? 'chat' : 'plain',
        adapter: null,
      });
      const played = await policy.play(seeds.map((seed) => ({ seed })), { greedy: true });
      for (const e of played) episodes.push({ policy: 'model', seed: e.seed, totalReward: e.totalReward, success: e.success, steps: e.steps.length, ...(e.error ? { error: e.error } : {}) });
      return { id: module.id, description: module.description, maxEpisodeSteps: module.maxEpisodeSteps, episodes, ...separation(episodes) };
    } finally {
      await module.dispose();
    }
  },
  async evaluate(request: EvaluateRequest, sandbox?: SandboxHost): Promise<EvaluationComparison> {
    const store = await openIndexedDbStore();
    let environment: Awaited<ReturnType<typeof environmentFor>> | null = null;
    try {
      const run = await store.getRun(request.runId);
      if (!run) throw new Error(`there is no run ${request.runId} in this browser`);
      const config = run.config as unknown as TrainConfig;
      const checkpoint = await store.latestCheckpoint(run.id);
      if (!checkpoint) throw new Error(`run ${run.id} has no checkpoint yet: train for at least one update first`);
      environment = await environmentFor(config.env, request.customEnv, sandbox);
      const model = await modelFor(request.model, quiet);
      const adapter = await model.loadAdapter(new MemoryModelSource(checkpoint.files, `${run.id} update ${checkpoint.step}: `));
      try {
        const evaluateWith = async (which: typeof adapter | null, samples: EpisodeView[]) => {
          const policy = makePolicy(model, { ...config, env: environment!.env, reset: { split: 'test', difficulty: config.difficulty }, adapter: which });
          return evaluatePolicy(policy, { episodes: request.episodes, firstSeed: 1_000_000, onPlayed: (e) => samples.length < SAMPLE_TRANSCRIPTS && samples.push(episodeView(e)) });
        };
        const samples = { before: [] as EpisodeView[], after: [] as EpisodeView[] };
        const before = await evaluateWith(null, samples.before);
        const after = await evaluateWith(adapter, samples.after);
        return { runId: run.id, config: run.config, update: checkpoint.step, before, after, samples, metrics: await store.listMetrics(run.id), createdAt: Date.now() };
      } finally {
        adapter.dispose();
      }
    } finally {
      await environment?.dispose();
      await store.close();
    }
  },

  async importAdapter(request: ImportAdapterRequest): Promise<TrainConfig> {
    const model = await modelFor(request.model, quiet);
    const store = await openIndexedDbStore();
    try {
      const config = { ...request.config, format: model.tokenizer.hasChatTemplate ? ('chat' as const) : ('plain' as const) };
      return await importAdapterRun(store, model.config, request.runId, config, request.files, request.name);
    } finally {
      await store.close();
    }
  },

  async exportOnnx(request: ExportOnnxRequest, events: Pick<TrainerEvents, 'loading'>): Promise<Uint8Array> {
    const store = await openIndexedDbStore();
    try {
      const checkpoint = await store.latestCheckpoint(request.runId);
      if (!checkpoint) throw new Error(`run ${request.runId} has no checkpoint yet: train for at least one update first`);
      // Before the base model is read: the same clear error as the other formats when there is no adapter.
      const peft = peftFilesOf(checkpoint.files, `run ${request.runId}`);
      // The host copy of the weights: the loaded model's when it is this one, otherwise read (no GPU needed).
      const files =
        loaded?.key === modelKey(request.model)
          ? loaded.model.files
          : await loadModelFiles(openBrowserModelSource(request.model.location, request.model.options), (p) =>
              events.loading({ kind: 'download', file: p.file, loadedBytes: p.loadedBytes, totalBytes: p.totalBytes ?? null }),
            );
      const adapter = await readPeftAdapter(new MemoryModelSource(peft, `${request.runId} update ${checkpoint.step}: `), files.config);
      // float32 weights hardly compress: the ONNX file is stored as it is, the JSON files deflated.
      const folder = [...(await exportOnnx(files, adapter))].map(([path, bytes]) => [path, path === ONNX_MODEL_FILE ? ([bytes, { level: 0 }] as const) : bytes]);
      const zipped = zipSync(Object.fromEntries(folder));
      return Comlink.transfer(zipped, [zipped.buffer]);
    } finally {
      await store.close();
    }
  },

  pause() {
    controller?.abort();
  },
};

Comlink.expose(api);
