// LoRA adapters in Hugging Face PEFT's format, read and written exactly as PEFT does, so that an
// adapter moves between rlplay, transformers/PEFT and vLLM:
//   adapter_config.json          peft_type "LORA", r, lora_alpha, target_modules, base_model_name_or_path, ...
//   adapter_model.safetensors    base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight [r, in]
//                                ... .lora_B.weight [out, r]   (mlp.* for gate/up/down)
import { float32Tensor, parseSafetensors, serializeSafetensors, tensorToFloat32 } from '../model/safetensors.ts';
import { readJsonFile } from '../model/source.ts';
import { ModelLoadError, type ModelConfig, type ModelSource } from '../model/types.ts';
import { LORA_TARGETS, projectionShape, validateLoraSettings, type HostLoraAdapter, type LoraModule, type LoraSettings, type LoraTarget } from './adapter.ts';

export const ADAPTER_CONFIG = 'adapter_config.json';
export const ADAPTER_WEIGHTS = 'adapter_model.safetensors';

/**
 * The two PEFT files among a checkpoint's `files`, or a clear error naming `owner` (e.g. "run
 * ppo-1") when they are missing: a full-parameter run checkpoints whole model weights instead.
 */
export function peftFilesOf(files: ReadonlyMap<string, Uint8Array> | undefined, owner: string): Map<string, Uint8Array> {
  const config = files?.get(ADAPTER_CONFIG);
  const weights = files?.get(ADAPTER_WEIGHTS);
  if (!config || !weights) throw new Error(`${owner} has no adapter in its last checkpoint (a full-parameter run stores whole model weights instead)`);
  return new Map([[ADAPTER_CONFIG, config], [ADAPTER_WEIGHTS, weights]]);
}

function moduleKey(layer: number, target: LoraTarget): string {
  const block = ['gate_proj', 'up_proj', 'down_proj'].includes(target) ? 'mlp' : 'self_attn';
  return `base_model.model.model.layers.${layer}.${block}.${target}`;
}

function fail(message: string, file = ADAPTER_CONFIG, tensor: string | null = null): never {
  throw new ModelLoadError(message, file, tensor);
}

/** An adapter whose tensors do not fit this base model's shapes: it was made for another model (or rank). */
export class AdapterShapeError extends ModelLoadError {
  constructor(diagnosis: string, tensor: string) {
    super(diagnosis, ADAPTER_WEIGHTS, tensor);
    this.name = 'AdapterShapeError';
  }
}

/** Validated LoRA settings from a PEFT adapter_config.json. */
export function parseAdapterConfig(json: unknown, config: ModelConfig): { settings: LoraSettings; baseModel: string } {
  if (typeof json !== 'object' || json === null) fail(`${ADAPTER_CONFIG} must hold a JSON object`);
  const c = json as Record<string, unknown>;
  if (c.peft_type !== 'LORA') fail(`${ADAPTER_CONFIG}: peft_type is ${JSON.stringify(c.peft_type)}; only LoRA adapters (peft_type "LORA") are supported`);
  if (c.use_dora) fail(`${ADAPTER_CONFIG}: use_dora is true; DoRA adapters are not supported, train a plain LoRA adapter`);
  if (c.fan_in_fan_out) fail(`${ADAPTER_CONFIG}: fan_in_fan_out is true, which is for GPT-2-style Conv1D layers; Llama-family adapters have it false`);
  if (c.bias !== undefined && c.bias !== 'none') fail(`${ADAPTER_CONFIG}: bias is ${JSON.stringify(c.bias)}; only adapters without trained biases (bias "none") are supported`);
  if (Array.isArray(c.modules_to_save) && c.modules_to_save.length > 0) {
    fail(`${ADAPTER_CONFIG}: modules_to_save lists ${JSON.stringify(c.modules_to_save)}; full copies of modules are not supported (vLLM and llama.cpp reject them too)`);
  }
  for (const field of ['rank_pattern', 'alpha_pattern']) {
    const pattern = c[field];
    if (pattern && typeof pattern === 'object' && Object.keys(pattern).length > 0) fail(`${ADAPTER_CONFIG}: ${field} sets per-module values, which are not supported; use one r and lora_alpha for all modules`);
  }
  const r = c.r;
  if (typeof r !== 'number') fail(`${ADAPTER_CONFIG}: r (the LoRA rank) is missing or not a number`);
  const alpha = c.lora_alpha ?? r;
  if (typeof alpha !== 'number') fail(`${ADAPTER_CONFIG}: lora_alpha must be a number, got ${JSON.stringify(c.lora_alpha)}`);
  let targets: LoraTarget[];
  if (typeof c.target_modules === 'string') {
    // PEFT treats a string as a regular expression over full module names.
    const pattern = new RegExp(`^(?:${c.target_modules})$`);
    targets = LORA_TARGETS.filter((t) => pattern.test(moduleKey(0, t).replace('base_model.model.', '')) || pattern.test(t));
  } else if (Array.isArray(c.target_modules)) {
    const unknown = c.target_modules.filter((t) => !LORA_TARGETS.includes(t as LoraTarget));
    if (unknown.length) fail(`${ADAPTER_CONFIG}: target_modules ${JSON.stringify(unknown)} cannot be adapted; LoRA here targets ${LORA_TARGETS.join(', ')} (no embeddings or lm_head)`);
    targets = LORA_TARGETS.filter((t) => (c.target_modules as string[]).includes(t));
  } else {
    fail(`${ADAPTER_CONFIG}: target_modules must be a list of module names such as ["q_proj", "v_proj"]`);
  }
  const layersToTransform = c.layers_to_transform;
  const layers = layersToTransform === undefined || layersToTransform === null ? null : Array.isArray(layersToTransform) ? (layersToTransform as number[]) : [layersToTransform as number];
  const settings: LoraSettings = { r, alpha, targets, rslora: Boolean(c.use_rslora), dropout: typeof c.lora_dropout === 'number' ? c.lora_dropout : 0, layers };
  try {
    validateLoraSettings(settings, config);
  } catch (error) {
    fail(`${ADAPTER_CONFIG}: ${(error as Error).message}`);
  }
  return { settings, baseModel: typeof c.base_model_name_or_path === 'string' ? c.base_model_name_or_path : '' };
}

/** Reads a PEFT LoRA adapter folder and checks it against the base model's shapes. */
export async function readPeftAdapter(source: ModelSource, config: ModelConfig): Promise<HostLoraAdapter> {
  if (!(await source.exists(ADAPTER_CONFIG))) fail(`${source.location}: no ${ADAPTER_CONFIG}; an adapter folder holds ${ADAPTER_CONFIG} and ${ADAPTER_WEIGHTS} as PEFT's save_pretrained writes them`);
  const { settings, baseModel } = parseAdapterConfig(await readJsonFile(source, ADAPTER_CONFIG), config);
  if (!(await source.exists(ADAPTER_WEIGHTS))) {
    const hint = (await source.exists('adapter_model.bin')) ? ' It has adapter_model.bin (pickle): save it again with safe_serialization=True.' : '';
    fail(`${source.location}: no ${ADAPTER_WEIGHTS}; an adapter folder holds ${ADAPTER_CONFIG} and ${ADAPTER_WEIGHTS} as PEFT's save_pretrained writes them.${hint}`, ADAPTER_WEIGHTS);
  }
  const tensors = parseSafetensors(await source.readBytes(ADAPTER_WEIGHTS), ADAPTER_WEIGHTS);
  const byName = new Map<string, string>();
  for (const name of tensors.keys()) byName.set(name.replace('.default.', '.'), name);
  const used = new Set<string>();
  const read = (key: string, rows: number, cols: number, what: string): Float32Array => {
    const name = byName.get(key);
    if (!name) fail(`${ADAPTER_WEIGHTS}: tensor ${key} is missing although adapter_config.json targets this module; the adapter is incomplete or was saved for other layers`, ADAPTER_WEIGHTS, key);
    const tensor = tensors.get(name)!;
    if (tensor.shape.length !== 2 || tensor.shape[0] !== rows || tensor.shape[1] !== cols) {
      throw new AdapterShapeError(
        `${ADAPTER_WEIGHTS}: ${key} has shape [${tensor.shape}] but this base model needs [${rows}, ${cols}] (${what}); ` +
          `the adapter was made for another base model${baseModel ? ` (${baseModel})` : ''} or another rank`,
        key,
      );
    }
    used.add(name);
    const values = tensorToFloat32(tensor, ADAPTER_WEIGHTS);
    // Caught here, a damaged file or a diverged save names itself; let through, it surfaces much
    // later as NaN log-probabilities with no hint of where they came from.
    const bad = values.findIndex((v) => !Number.isFinite(v));
    if (bad >= 0) fail(`${ADAPTER_WEIGHTS}: ${key} holds ${values[bad]} at index ${bad}; the file is damaged or was saved from a run that diverged — use an earlier checkpoint or train it again`, ADAPTER_WEIGHTS, key);
    return values;
  };
  const modules: LoraModule[] = [];
  for (let layer = 0; layer < config.numLayers; layer++) {
    if (settings.layers && !settings.layers.includes(layer)) continue;
    for (const target of settings.targets) {
      const { inFeatures, outFeatures } = projectionShape(config, target);
      const key = moduleKey(layer, target);
      const A = read(`${key}.lora_A.weight`, settings.r, inFeatures, `[r, in_features] of ${target}`);
      const B = read(`${key}.lora_B.weight`, outFeatures, settings.r, `[out_features, r] of ${target}`);
      modules.push({ layer, target, inFeatures, outFeatures, A, B });
    }
  }
  const extra = [...tensors.keys()].filter((name) => !used.has(name));
  if (extra.length) fail(`${ADAPTER_WEIGHTS}: unexpected tensors ${extra.slice(0, 3).join(', ')}${extra.length > 3 ? ', ...' : ''}; only lora_A/lora_B of the targeted projections are supported`, ADAPTER_WEIGHTS, extra[0]);
  return { settings, baseModel, modules };
}

/** The two files of a PEFT adapter folder. */
export function peftAdapterFiles(adapter: HostLoraAdapter): Map<string, Uint8Array> {
  const { settings } = adapter;
  const config = {
    peft_type: 'LORA',
    task_type: 'CAUSAL_LM',
    base_model_name_or_path: adapter.baseModel,
    r: settings.r,
    lora_alpha: settings.alpha,
    lora_dropout: settings.dropout,
    target_modules: [...settings.targets],
    layers_to_transform: settings.layers,
    bias: 'none',
    fan_in_fan_out: false,
    use_rslora: settings.rslora,
    use_dora: false,
    modules_to_save: null,
    init_lora_weights: true,
    inference_mode: true,
    rank_pattern: {},
    alpha_pattern: {},
    revision: null,
  };
  const tensors = adapter.modules.flatMap((m) => {
    const key = moduleKey(m.layer, m.target);
    return [float32Tensor(`${key}.lora_A.weight`, [settings.r, m.inFeatures], m.A), float32Tensor(`${key}.lora_B.weight`, [m.outFeatures, settings.r], m.B)];
  });
  return new Map([
    [ADAPTER_CONFIG, new TextEncoder().encode(`${JSON.stringify(config, null, 2)}\n`)],
    [ADAPTER_WEIGHTS, serializeSafetensors(tensors)],
  ]);
}
