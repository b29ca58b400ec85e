// The training Worker: it owns the GPUDevice, the model and the run, so that the page never
// freezes while the GPU works. The page drives it through comlink (protocol.ts); the run itself is
// rl/run.ts, the same as `rlplay train`, on the IndexedDB store.
import * as Comlink from 'comlink';
import { requestGpu, type GpuContext } from '../../engine/gpu/device.ts';
import { loadModel, type Model } from '../../engine/model.ts';
import { HttpModelSource } from '../../engine/model/source.ts';
import { BUILTIN_ENVIRONMENTS } from '../../env/builtin/index.ts';
import { guardEnvModule } from '../../env/guard.ts';
import { ALGORITHM_DEFAULTS, ALGORITHMS, makeAlgorithm } from '../../rl/index.ts';
import { trainRun } from '../../rl/run.ts';
import { openIndexedDbStore } from '../../store/indexeddb.ts';
import type { StartRequest, TrainerApi, TrainerEvents, TrainSummary } from './protocol.ts';

let gpu: GpuContext | null = null;
let loaded: { url: string; model: Model } | null = null;
let controller: AbortController | null = null;

async function modelFor(url: string, events: TrainerEvents): Promise<Model> {
  if (loaded?.url === url && gpu) {
    events.loading({ kind: 'ready', adapterName: gpu.adapterName });
    return loaded.model;
  }
  loaded?.model.dispose();
  loaded = null;
  if (!gpu) {
    events.loading({ kind: 'gpu' });
    gpu = await requestGpu(navigator.gpu, {
      onLost: (reason) => {
        gpu = null;
        loaded = null;
        events.log(`The GPU device was lost (${reason}); start the run again to resume it from its last checkpoint.`);
      },
    });
  }
  const model = await loadModel(gpu, new HttpModelSource(url), (p) => events.loading({ kind: 'download', file: p.file, loadedBytes: p.loadedBytes, totalBytes: p.totalBytes ?? null }));
  loaded = { url, model };
  events.loading({ kind: 'ready', adapterName: gpu.adapterName });
  return model;
}

const api: TrainerApi = {
  environments: () => [...BUILTIN_ENVIRONMENTS.values()].map(({ id, description, maxEpisodeSteps }) => ({ id, description, maxEpisodeSteps })),
  algorithms: () =>
    ALGORITHMS.map((name) => {
      const algorithm = makeAlgorithm(name);
      algorithm.dispose?.();
      return { name, modes: [...algorithm.modes], defaults: { ...ALGORITHM_DEFAULTS[name] } };
    }),
  async start(request: StartRequest, events: TrainerEvents): Promise<TrainSummary> {
    if (controller) throw new Error('a run is already training in this tab; pause it first');
    controller = new AbortController();
    const builtin = BUILTIN_ENVIRONMENTS.get(request.config.env);
    if (!builtin) throw new Error(`unknown environment ${request.config.env}; the built-ins are ${[...BUILTIN_ENVIRONMENTS.keys()].join(', ')}`);
    const store = await openIndexedDbStore();
    try {
      const model = await modelFor(request.modelUrl, events);
      const config = { ...request.config, format: model.tokenizer.hasChatTemplate ? ('chat' as const) : ('plain' as const) };
      const outcome = await trainRun(model, guardEnvModule(builtin), store, request.runId, config, {
        signal: controller.signal,
        onLog: (message) => events.log(message),
        onUpdate: (progress) => events.update(progress),
        onEpisode: (episode) =>
          events.episode({
            seed: episode.seed,
            totalReward: episode.totalReward,
            success: episode.success,
            error: episode.error,
            steps: episode.steps.map((s) => ({ observation: s.observation, action: s.action, reward: s.reward })),
          }),
      });
      outcome.adapter.dispose();
      return { status: outcome.status, updates: outcome.updates, episodes: outcome.episodes, resumedFrom: outcome.resumedFrom };
    } finally {
      controller = null;
      await store.close();
    }
  },
  pause() {
    controller?.abort();
  },
};

Comlink.expose(api);
