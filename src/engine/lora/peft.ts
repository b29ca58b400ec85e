// LoRA adapters in Hugging Face PEFT's format, read and written exactly as PEFT does, so that an
// adapter moves between rlplay, transformers/PEFT and vLLM:
//   adapter_config.json          peft_type "LORA", r, lora_alpha, target_modules, base_model_name_or_path, ...
//   adapter_model.safetensors    base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight [r, in]
//                                ... .lora_B.weight [out, r]   (mlp.* for gate/up/down)
import { decodeTensor, float32Tensor, parseSafetensors, serializeSafetensors } from '../model/safetensors.ts';
import type { DecodedTensor } from '../model/safetensors.ts';
import { readJsonFile } from '../model/source.ts';
import { ModelLoadError, type ModelConfig, type ModelSource } from '../model/types.ts';
import { LORA_TARGETS, MAX_LORA_GAIN, MAX_LORA_SCALING, loraScaling, loraScalingFormula, projectionShape, validateLoraSettings, type HostLoraAdapter, type LoraModule, type LoraSettings, type LoraTarget } from './adapter.ts';

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
  const rslora = Boolean(c.use_rslora);
  const scaling = loraScaling({ r, alpha, rslora });
  if (Number.isInteger(r) && r >= 1 && !(scaling <= MAX_LORA_SCALING)) {
    fail(
      `${ADAPTER_CONFIG}: lora_alpha ${alpha} with r ${r}${rslora ? ' and use_rslora' : ''} gives a scaling (${loraScalingFormula({ rslora })}) of ${scaling}, ` +
        `above the ${MAX_LORA_SCALING} an adapter can use: the file is damaged or lora_alpha mistyped (it is usually r or 2r)`,
    );
  }
  const { targets, layers } = selectModules(c, config);
  const settings: LoraSettings = { r, alpha, targets, rslora, dropout: typeof c.lora_dropout === 'number' ? c.lora_dropout : 0, layers };
  try {
    validateLoraSettings(settings, config);
  } catch (error) {
    fail(`${ADAPTER_CONFIG}: ${(error as Error).message}`);
  }
  return { settings, baseModel: typeof c.base_model_name_or_path === 'string' ? c.base_model_name_or_path : '' };
}

/** A module's name as PEFT matches target_modules against it: the base model's named_modules() name. */
function moduleName(layer: number, target: LoraTarget): string {
  return moduleKey(layer, target).slice('base_model.model.'.length);
}

/** Modules of a Llama-family model that no adapter here may change. */
const UNADAPTABLE_MODULES = ['model.embed_tokens', 'lm_head'];

/**
 * The projections and layers that target_modules and layers_to_transform select, as PEFT reads
 * them: a list names modules by their last name parts ("q_proj", "self_attn.q_proj"), narrowed by
 * layers_to_transform (a layer index or a list of them); a string is a regular expression that
 * must match a whole module name (re.fullmatch), with no layers_to_transform; "all-linear" is
 * every projection. The same projections must be adapted in every adapted layer.
 */
function selectModules(c: Record<string, unknown>, config: ModelConfig): { targets: LoraTarget[]; layers: number[] | null } {
  const field = c.target_modules;
  const example = `such as "${moduleName(0, 'q_proj')}"`;
  let matches: (name: string) => boolean;
  if (field === 'all-linear') {
    matches = () => true;
  } else if (typeof field === 'string') {
    let pattern: RegExp;
    try {
      pattern = new RegExp(`^(?:${field})$`);
    } catch (error) {
      fail(
        `${ADAPTER_CONFIG}: target_modules ${JSON.stringify(field)} is not a valid regular expression (${(error as Error).message}); ` +
          `PEFT matches a string against whole module names ${example}, or give a list such as ["q_proj", "v_proj"]`,
      );
    }
    if (c.layers_to_transform !== undefined && c.layers_to_transform !== null) {
      fail(`${ADAPTER_CONFIG}: layers_to_transform cannot be used when target_modules is a string (a regular expression), as in PEFT; name the layers in the expression or make target_modules a list`);
    }
    const unadaptable = UNADAPTABLE_MODULES.filter((name) => pattern.test(name));
    if (unadaptable.length) fail(`${ADAPTER_CONFIG}: target_modules ${JSON.stringify(field)} matches ${unadaptable.join(' and ')}, which cannot be adapted; LoRA here targets ${LORA_TARGETS.join(', ')}`);
    matches = (name) => pattern.test(name);
  } else if (Array.isArray(field) && field.every((entry) => typeof entry === 'string')) {
    const names = Array.from({ length: config.numLayers }, (_, layer) => LORA_TARGETS.map((t) => moduleName(layer, t))).flat();
    const named = (name: string, entry: string) => name === entry || name.endsWith(`.${entry}`);
    const unknown = field.filter((entry) => !names.some((name) => named(name, entry)));
    if (unknown.length) fail(`${ADAPTER_CONFIG}: target_modules ${JSON.stringify(unknown)} cannot be adapted; LoRA here targets ${LORA_TARGETS.join(', ')} (no embeddings or lm_head)`);
    matches = (name) => field.some((entry) => named(name, entry));
  } else {
    fail(`${ADAPTER_CONFIG}: target_modules must be a list of module names such as ["q_proj", "v_proj"] or a regular expression string, got ${JSON.stringify(field)}`);
  }

  const layersField = c.layers_to_transform;
  let allowed: number[] | null = null;
  if (layersField !== undefined && layersField !== null) {
    allowed = Number.isInteger(layersField) ? [layersField as number] : Array.isArray(layersField) && layersField.every(Number.isInteger) ? (layersField as number[]) : null;
    if (!allowed) fail(`${ADAPTER_CONFIG}: layers_to_transform must be a layer index or a list of them, such as [0, 1], got ${JSON.stringify(layersField)}`);
    const missing = allowed.find((layer) => layer < 0 || layer >= config.numLayers);
    if (missing !== undefined) fail(`${ADAPTER_CONFIG}: layers_to_transform names layer ${missing}, but the base model has layers 0..${config.numLayers - 1}`);
  }

  const selected = new Map<number, LoraTarget[]>();
  for (let layer = 0; layer < config.numLayers; layer++) {
    if (allowed && !allowed.includes(layer)) continue;
    const targets = LORA_TARGETS.filter((t) => matches(moduleName(layer, t)));
    if (targets.length) selected.set(layer, targets);
  }
  const [first] = selected.values();
  if (!first) fail(`${ADAPTER_CONFIG}: target_modules ${JSON.stringify(field)}${allowed ? ` with layers_to_transform ${JSON.stringify(layersField)}` : ''} selects no module of this base model (whose projections have names ${example}); the adapter is for another model`);
  for (const [layer, targets] of selected) {
    if (targets.join() !== first.join()) {
      fail(`${ADAPTER_CONFIG}: target_modules ${JSON.stringify(field)} adapts ${targets.join(', ')} in layer ${layer} but ${first.join(', ')} in layer ${selected.keys().next().value}; adapters here adapt the same projections in every adapted layer`);
    }
  }
  const layers = [...selected.keys()];
  return { targets: first, layers: layers.length === config.numLayers ? null : layers };
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
  const scaling = loraScaling(settings);
  const read = (key: string, rows: number, cols: number, what: string): DecodedTensor => {
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
    return decodeTensor(tensor, ADAPTER_WEIGHTS);
  };
  const modules: LoraModule[] = [];
  for (let layer = 0; layer < config.numLayers; layer++) {
    if (settings.layers && !settings.layers.includes(layer)) continue;
    for (const target of settings.targets) {
      const { inFeatures, outFeatures } = projectionShape(config, target);
      const key = moduleKey(layer, target);
      const A = read(`${key}.lora_A.weight`, settings.r, inFeatures, `[r, in_features] of ${target}`);
      const B = read(`${key}.lora_B.weight`, outFeatures, settings.r, `[out_features, r] of ${target}`);
      // Bounds on how far an output can move for inputs of magnitude 1: first A x, then the update.
      const gainOfA = inFeatures * A.maxAbs;
      const gain = scaling * settings.r * B.maxAbs * gainOfA;
      if (!(gainOfA <= MAX_LORA_GAIN && gain <= MAX_LORA_GAIN)) {
        const tensor = `${key}.${gainOfA > MAX_LORA_GAIN ? 'lora_A' : 'lora_B'}.weight`;
        fail(
          `${ADAPTER_WEIGHTS}: ${tensor}: with max|lora_A| ${A.maxAbs}, max|lora_B| ${B.maxAbs}, in_features ${inFeatures} and scaling ${scaling} ` +
            `(lora_alpha ${settings.alpha}, r ${settings.r}), the update can move an output by up to ${Math.max(gain, gainOfA)} per unit of input, ` +
            `above the ${MAX_LORA_GAIN} float32 computes safely; the file is corrupt or was saved from a run that diverged — use an earlier checkpoint or train it again`,
          ADAPTER_WEIGHTS,
          tensor,
        );
      }
      modules.push({ layer, target, inFeatures, outFeatures, A: A.values, B: B.values });
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
