// A model folder (Hugging Face layout) holding weights trained on the GPU: the source folder's config
// and tokenizer files with the new model.safetensors.
import { hostWeightTensors } from '../gpu-model.ts';
import type { Model } from '../model.ts';
import { float32Tensor, serializeSafetensors } from './safetensors.ts';
import type { HostWeights } from './types.ts';

/** Files besides the weights that make a model folder usable: config, tokenizer, chat template. */
const MODEL_FOLDER_FILES = ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json', 'chat_template.jinja'];

/** A complete model folder holding `weights`, with the source model's config and tokenizer. */
export async function modelFolderFiles(model: Model, weights: HostWeights): Promise<Map<string, Uint8Array>> {
  const files = new Map<string, Uint8Array>();
  for (const name of MODEL_FOLDER_FILES) if (await model.files.source.exists(name)) files.set(name, await model.files.source.readBytes(name));
  files.set('model.safetensors', serializeSafetensors(hostWeightTensors(weights).map((t) => float32Tensor(t.name, t.shape, t.data))));
  return files;
}

