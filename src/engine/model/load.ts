// A model folder, read into host memory: config first, then the tokenizer (small, so a wrong folder
// fails fast), then the weights (the long download).
import { parseModelConfig } from './config.ts';
import { readJsonFile } from './source.ts';
import { loadTokenizer } from './tokenizer.ts';
import { loadHostWeights } from './weights.ts';
import type { WeightsProgress } from './weights.ts';
import type { LoadedModelFiles, ModelSource } from './types.ts';

export async function loadModelFiles(
  source: ModelSource,
  onProgress?: (progress: WeightsProgress) => void,
): Promise<LoadedModelFiles> {
  const config = parseModelConfig(await readJsonFile(source, 'config.json'));
  const tokenizer = await loadTokenizer(source, config);
  const weights = await loadHostWeights(source, config, onProgress);
  return { source, config, weights, tokenizer };
}
