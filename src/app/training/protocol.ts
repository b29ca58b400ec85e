// What the page and the training Worker (worker.ts) say to each other, through comlink. The Worker
// owns the GPUDevice, the model and the run; the page only sends settings and receives progress.
import type { AlgorithmName } from '../../rl/algorithm.ts';
import type { SandboxHost } from '../../env/load-browser.ts';
import type { EvaluationReport } from '../../rl/evaluate.ts';
import type { Metric } from '../../store/types.ts';
import type { RunProgress, TrainConfig } from '../../rl/run.ts';
import type { BrowserSourceOptions } from '../../engine/model/source-browser.ts';

/** A model location (a folder URL, `hf:OWNER/REPO[@REV]` or `folder:NAME`) and what opening it needs. */
export interface ModelRef {
  location: string;
  /** The Hub settings, and the picked folder's files when the location is one. */
  options: BrowserSourceOptions;
}

export interface StartRequest {
  model: ModelRef;
  /** The run in IndexedDB: a new id starts a run, an existing one resumes it. */
  runId: string;
  /** The run's settings (config.model is model.location, config.env the built-in id or the custom environment's id); the prompt format follows the model. */
  config: Omit<TrainConfig, 'format'>;
  /** A custom environment's source (config.env is then its id); it runs in the page's sandboxes. */
  customEnv?: CustomEnvSource;
}

export interface CustomEnvSource {
  source: string;
  /** How errors name it, e.g. 'editor'. */
  label: string;
}

/** A custom environment that passed Validate: what the Train card offers. */
export interface CustomEnvironment {
  id: string;
  description: string;
  maxEpisodeSteps: number;
  source: string;
}

export interface ValidateRequest extends CustomEnvSource {
  model: ModelRef;
  /** Episodes per policy. */
  episodes: number;
}

export interface ValidatedEpisode {
  policy: 'random' | 'model';
  seed: number;
  totalReward: number;
  success: boolean;
  steps: number;
  error?: string;
}

export interface ValidationReport {
  id: string;
  description: string;
  maxEpisodeSteps: number;
  episodes: ValidatedEpisode[];
  /** Whether the returns of successful episodes are above those of failed ones, in words. */
  separation: string;
  /** True when every successful episode returned more than every failed one; null when all ended alike. */
  separates: boolean | null;
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

export interface EvaluateRequest {
  runId: string;
  /** The run's model (its config.model, with what opening it needs). */
  model: ModelRef;
  /** Test-split episodes per policy (the base model, then the run's adapter). */
  episodes: number;
  customEnv?: CustomEnvSource;
}

/** Before against after: the base model and the run's last adapter on the same test episodes. */
export interface EvaluationComparison {
  runId: string;
  config: Record<string, unknown>;
  /** The update of the checkpoint evaluated. */
  update: number;
  before: EvaluationReport;
  after: EvaluationReport;
  samples: { before: EpisodeView[]; after: EpisodeView[] };
  /** The run's training metrics, for the report's charts. */
  metrics: Metric[];
  createdAt: number;
}

export interface ImportAdapterRequest {
  model: ModelRef;
  runId: string;
  /** The setup the run will train with (its LoRA settings become the adapter's). */
  config: Omit<TrainConfig, 'format'>;
  /** adapter_config.json and adapter_model.safetensors (other files are ignored). */
  files: Map<string, Uint8Array>;
  /** The picked files' names, for messages and the run's note. */
  name: string;
}

export interface ExportOnnxRequest {
  runId: string;
  /** The run's base model (its config.model, with what opening it needs). */
  model: ModelRef;
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
  /** Loads the model (kept for the next run on the same location) and trains or resumes the run; `sandbox` is the page's, for a custom environment. */
  start(request: StartRequest, events: TrainerEvents, sandbox?: SandboxHost): Promise<TrainSummary>;
  /** Plays a custom environment with a uniform random policy and with the model, and reports. */
  validate(request: ValidateRequest, sandbox: SandboxHost): Promise<ValidationReport>;
  /** Evaluates a stored run's last adapter against the base model on the test split. */
  evaluate(request: EvaluateRequest, sandbox?: SandboxHost): Promise<EvaluationComparison>;
  /** Checks a PEFT adapter against the model and stores it as a paused run that starts from it; returns the run's config. */
  importAdapter(request: ImportAdapterRequest): Promise<TrainConfig>;
  /**
   * The run's base model with its last adapter merged in, as a transformers.js model folder
   * (config, tokenizer, onnx/model.onnx) zipped; `events` hears about the model's download.
   */
  exportOnnx(request: ExportOnnxRequest, events: Pick<TrainerEvents, 'loading'>): Promise<Uint8Array>;
  /** Asks the run to stop after the update in progress; start() then resolves with status 'paused'. */
  pause(): void;
}
