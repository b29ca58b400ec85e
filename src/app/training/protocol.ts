// What the page and the training Worker (worker.ts) say to each other, through comlink. The Worker
// owns the GPUDevice, the model and the run; the page only sends settings and receives progress.
import type { AlgorithmName } from '../../rl/algorithm.ts';
import type { RunProgress, TrainConfig } from '../../rl/run.ts';

export interface StartRequest {
  /** Absolute URL of the model folder. */
  modelUrl: string;
  /** The run in IndexedDB: a new id starts a run, an existing one resumes it. */
  runId: string;
  /** The run's settings (config.model is the URL, config.env the built-in id); the prompt format follows the model. */
  config: Omit<TrainConfig, 'format'>;
}

export interface EpisodeView {
  seed: number;
  totalReward: number;
  success: boolean;
  error?: string;
  steps: { observation: string; action: string; reward: number }[];
}

export type LoadPhase = { kind: 'gpu' } | { kind: 'download'; file: string; loadedBytes: number; totalBytes: number | null } | { kind: 'ready'; adapterName: string };

/** Called by the Worker (comlink proxies): every call is one-way, the Worker never waits on the page. */
export interface TrainerEvents {
  loading(phase: LoadPhase): void;
  update(progress: RunProgress): void;
  episode(episode: EpisodeView): void;
  log(message: string): void;
}

export interface TrainSummary {
  status: 'finished' | 'paused';
  updates: number;
  episodes: number;
  resumedFrom: number | null;
}

export interface EnvironmentInfo {
  id: string;
  description: string;
  maxEpisodeSteps: number;
}

export interface AlgorithmInfo {
  name: AlgorithmName;
  modes: ('choice' | 'text')[];
  defaults: Record<string, unknown>;
}

export interface TrainerApi {
  /** The built-in environments (they live in the Worker, with their sandboxes). */
  environments(): EnvironmentInfo[];
  algorithms(): AlgorithmInfo[];
  /** Loads the model (kept for the next run on the same URL) and trains or resumes the run. */
  start(request: StartRequest, events: TrainerEvents): Promise<TrainSummary>;
  /** Asks the run to stop after the update in progress; start() then resolves with status 'paused'. */
  pause(): void;
}
