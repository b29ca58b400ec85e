// Loading a model for a CLI command: the GPU, the folder (path or URL), with progress on stderr.
import { requestNodeGpu } from '../engine/gpu/node-gpu.ts';
import { loadModel, type Model } from '../engine/model.ts';
import { openModelSource } from '../engine/model/source-node.ts';
import { byteProgress } from './progress.ts';

export async function loadModelForCli(location: string, options: { quiet?: boolean } = {}): Promise<Model> {
  const source = openModelSource(location);
  const gpu = await requestNodeGpu({ onLost: (reason) => process.stderr.write(`GPU device lost: ${reason}\n`) });
  const progress = options.quiet ? null : byteProgress();
  const model = await loadModel(gpu, source, (p) => progress?.update(`loading ${p.file}`, p.loadedBytes, p.totalBytes));
  progress?.done(`${source.location}: ${model.config.architecture}, ${model.config.numLayers} layers, vocabulary ${model.config.vocabSize} (WebGPU: ${gpu.adapterName})`);
  return model;
}
