// A loaded model ready to run: the files read from its folder and its weights on the GPU.
import type { GpuContext } from './gpu/device.ts';
import { GpuModel, type GpuModelOptions } from './gpu-model.ts';
import { generate, type GenerateOptions, type GenerateResult } from './generate.ts';
import { loadModelFiles } from './model/load.ts';
import type { LoadedModelFiles, ModelConfig, ModelSource, Tokenizer } from './model/types.ts';
import type { WeightsProgress } from './model/weights.ts';
import { score, type ScoreOptions, type ScoreResult } from './score.ts';
import { scoreContinuations, type ContinuationOptions, type ContinuationRequest, type ContinuationScores } from './continuations.ts';
import { initLoraAdapter, type HostLoraAdapter, type LoraSettings } from './lora/adapter.ts';
import { GpuLoraAdapter } from './lora/gpu-adapter.ts';
import { readPeftAdapter } from './lora/peft.ts';
import { peftBaseModelName } from './model/hub.ts';

export class Model {
  readonly gpuModel: GpuModel;

  constructor(
    readonly gpu: GpuContext,
    readonly files: LoadedModelFiles,
    options: GpuModelOptions = {},
  ) {
    this.gpuModel = new GpuModel(gpu, files.config, files.weights, options);
  }

  get config(): ModelConfig {
    return this.files.config;
  }

  get tokenizer(): Tokenizer {
    return this.files.tokenizer;
  }

  /** Continues each prompt (token ids) by up to maxNewTokens tokens, all prompts as one batch. */
  generate(prompts: number[][], options: GenerateOptions): Promise<GenerateResult> {
    return generate(this.gpuModel, prompts, options);
  }

  /** Log-probabilities (and optionally logits and hidden states) of given token sequences. */
  score(sequences: number[][], options?: ScoreOptions): Promise<ScoreResult> {
    return score(this.gpuModel, sequences, options);
  }

  /**
   * Log-probabilities of each request's continuations after its prompt (and, with options.hidden,
   * the final hidden states at the prompt's and each continuation's last token). All prompts run
   * once, as one batch; then all candidates of all requests as one batch; one read-back.
   */
  scoreContinuations(requests: ContinuationRequest[], options?: ContinuationOptions): Promise<ContinuationScores[]> {
    return scoreContinuations(this.gpuModel, requests, options);
  }

  /** Puts a LoRA adapter on the GPU; pass it as `adapter` to generate or score with it. */
  uploadAdapter(adapter: HostLoraAdapter): GpuLoraAdapter {
    return new GpuLoraAdapter(this.gpu, adapter);
  }

  /** Reads a PEFT adapter folder made for this model and puts it on the GPU. */
  async loadAdapter(source: ModelSource): Promise<GpuLoraAdapter> {
    return this.uploadAdapter(await readPeftAdapter(source, this.config));
  }

  /** A fresh PEFT-initialised adapter (B = 0: the model is unchanged until it trains). */
  createAdapter(settings: LoraSettings, seed: number): HostLoraAdapter {
    return initLoraAdapter(this.config, settings, seed, peftBaseModelName(this.files.source.location));
  }

  dispose(): void {
    this.gpuModel.dispose();
  }
}

/** Reads a model folder and uploads its weights (as one trainable set with `trainable`, for full-parameter training). */
export async function loadModel(gpu: GpuContext, source: ModelSource, onProgress?: (progress: WeightsProgress) => void, options: GpuModelOptions = {}): Promise<Model> {
  return new Model(gpu, await loadModelFiles(source, onProgress), options);
}
