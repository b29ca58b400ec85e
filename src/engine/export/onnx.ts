// A model folder that transformers.js (@huggingface/transformers) loads and generates with: the
// base model, with a LoRA adapter merged into its weights when one is given, as float32 ONNX.
//   config.json              the source's, with "transformers.js_config": {"dtype": "fp32"}, so that
//                            transformers.js picks onnx/model.onnx (its browser default asks for a
//                            quantized file)
//   tokenizer.json, tokenizer_config.json, and generation_config.json, special_tokens_map.json,
//   chat_template.jinja when the source has them, copied unchanged
//   onnx/model.onnx          the decoder with its KV cache (onnx-decoder.ts)
// Browser-safe: the files come back in memory; the CLI writes them, the app can zip or store them.
import { mergeLoraAdapter, projectionShape, type HostLoraAdapter } from '../lora/adapter.ts';
import type { LoadedModelFiles } from '../model/types.ts';
import { decoderGraph, decoderWeightBytes } from './onnx-decoder.ts';
import { ONNX_PROTOBUF_LIMIT_BYTES } from './onnx-graph.ts';

export const ONNX_MODEL_FILE = 'onnx/model.onnx';
const COPIED_FILES = ['tokenizer.json', 'tokenizer_config.json'];
const COPIED_IF_PRESENT = ['generation_config.json', 'special_tokens_map.json', 'chat_template.jinja'];

/** A model or adapter that cannot be exported, with the reason. */
export class OnnxExportError extends Error {
  override name = 'OnnxExportError';
}

/** The files of a transformers.js model folder, by path within the folder. */
export async function exportOnnx(files: LoadedModelFiles, adapter?: HostLoraAdapter): Promise<Map<string, Uint8Array>> {
  const { config, source } = files;
  const weightBytes = decoderWeightBytes(config);
  if (weightBytes > ONNX_PROTOBUF_LIMIT_BYTES) {
    throw new OnnxExportError(
      `${source.location} needs ${(weightBytes / 2 ** 30).toFixed(2)} GiB of float32 weights in ONNX, more than the 2 GiB ` +
        'one ONNX (protobuf) file can hold; ONNX external data is not written here, so export a smaller model',
    );
  }
  if (adapter) checkAdapterFits(adapter, files);
  const weights = adapter ? mergeLoraAdapter(files.weights, adapter) : files.weights;
  const model = decoderGraph(config, weights).encode({
    'rlplay.base_model': source.location,
    'rlplay.adapter': adapter ? describeAdapter(adapter) : 'none',
  });

  const folder = new Map<string, Uint8Array>();
  const sourceConfig = JSON.parse(await source.readText('config.json')) as Record<string, unknown>;
  folder.set('config.json', json({ ...sourceConfig, 'transformers.js_config': { dtype: 'fp32' } }));
  for (const file of COPIED_FILES) {
    // transformers.js reads tokenizer_config.json for every tokenizer; an empty one stands for defaults.
    folder.set(file, (await source.exists(file)) ? await source.readBytes(file) : json({}));
  }
  for (const file of COPIED_IF_PRESENT) {
    if (await source.exists(file)) folder.set(file, await source.readBytes(file));
  }
  folder.set(ONNX_MODEL_FILE, model);
  return folder;
}

function checkAdapterFits(adapter: HostLoraAdapter, { config, source }: LoadedModelFiles): void {
  const { r } = adapter.settings;
  for (const m of adapter.modules) {
    const where = `layer ${m.layer} ${m.target}`;
    if (!(Number.isInteger(m.layer) && m.layer >= 0 && m.layer < config.numLayers)) {
      throw new OnnxExportError(`the adapter has ${where}, but ${source.location} has layers 0..${config.numLayers - 1}: it was made for another base model`);
    }
    const { inFeatures, outFeatures } = projectionShape(config, m.target);
    if (m.inFeatures !== inFeatures || m.outFeatures !== outFeatures || m.A.length !== r * inFeatures || m.B.length !== outFeatures * r) {
      throw new OnnxExportError(
        `the adapter's ${where} is [${m.outFeatures} x ${m.inFeatures}] (rank ${r}) but that projection of ${source.location} is ` +
          `[${outFeatures} x ${inFeatures}]: the adapter was made for another base model${adapter.baseModel ? ` (${adapter.baseModel})` : ''}`,
      );
    }
  }
}

function describeAdapter({ settings, baseModel }: HostLoraAdapter): string {
  return `LoRA r=${settings.r} alpha=${settings.alpha}${settings.rslora ? ' rslora' : ''} on ${settings.targets.join(',')}${baseModel ? ` (for ${baseModel})` : ''}`;
}

function json(value: unknown): Uint8Array {
  return new TextEncoder().encode(`${JSON.stringify(value, null, 2)}\n`);
}
