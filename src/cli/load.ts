// Loading a model for a CLI command: the GPU, the folder (path or URL), with progress on stderr.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { requestNodeGpu } from '../engine/gpu/node-gpu.ts';
import { loadModel, type Model } from '../engine/model.ts';
import type { GpuLoraAdapter } from '../engine/lora/gpu-adapter.ts';
import { AdapterShapeError } from '../engine/lora/peft.ts';
import { openAdapterSource, openModelSource } from '../engine/model/source-node.ts';
import { byteProgress } from './progress.ts';

/** The embedded default model, made by `npm run model:default` (scripts/default-model/). */
export const DEFAULT_MODEL_DIR = fileURLToPath(new URL('../../public/models/rlplay-agent-mini', import.meta.url));

/** What --model takes, for every command's help. */
export const MODEL_HELP =
  'a model folder in Hugging Face layout, an http(s) URL of one, or hf:OWNER/REPO[@REV] from the Hugging Face Hub ' +
  '(downloaded once into a cache: RLPLAY_CACHE, default ~/.cache/rlplay; HF_TOKEN for gated repos; HF_ENDPOINT for a mirror)';

export async function loadModelForCli(location: string, options: { quiet?: boolean; trainable?: boolean } = {}): Promise<Model> {
  if (location === DEFAULT_MODEL_DIR && !existsSync(join(location, 'config.json'))) {
    throw new Error(`the embedded default model is not in ${location}: build it with \`npm run model:default\`, or pass --model with another model`);
  }
  const source = openModelSource(location);
  const gpu = await requestNodeGpu({ onLost: (reason) => process.stderr.write(`GPU device lost: ${reason}\n`) });
  const progress = options.quiet ? null : byteProgress();
  const model = await loadModel(gpu, source, (p) => progress?.update(`loading ${p.file}`, p.loadedBytes, p.totalBytes), { trainable: options.trainable });
  progress?.done(`${source.location}: ${model.config.architecture}, ${model.config.numLayers} layers, vocabulary ${model.config.vocabSize} (WebGPU: ${gpu.adapterName})`);
  return model;
}

/** The model and, when --adapter is given, that PEFT adapter on the GPU. */
export async function loadModelAndAdapter(location: string, adapterLocation: string | undefined, options: { quiet?: boolean } = {}): Promise<{ model: Model; adapter: GpuLoraAdapter | null }> {
  const model = await loadModelForCli(location, options);
  if (!adapterLocation) return { model, adapter: null };
  try {
    const adapter = await model.loadAdapter(openAdapterSource(adapterLocation));
    if (!options.quiet) process.stderr.write(`adapter ${adapterLocation}: LoRA r=${adapter.settings.r}, alpha ${adapter.settings.alpha}, on ${adapter.settings.targets.join(', ')}\n`);
    return { model, adapter };
  } catch (error) {
    model.dispose();
    if (location === DEFAULT_MODEL_DIR && error instanceof AdapterShapeError) {
      throw new Error(`${error.message}. Without --model the embedded default model is used: pass the adapter's base model with --model`, { cause: error });
    }
    throw error;
  }
}
