// LoRA adapters in host memory: which projections they adapt, their matrices, their scaling.
//   W' = W + scaling * B A,   A [r, in], B [out, r],   scaling = alpha / r  (rsLoRA: alpha / sqrt(r))
import { mulberry32 } from '../../common/random.ts';
import type { HostLinear, HostWeights, ModelConfig } from '../model/types.ts';

export const LORA_TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;
export type LoraTarget = (typeof LORA_TARGETS)[number];

export interface LoraSettings {
  r: number;
  alpha: number;
  targets: LoraTarget[];
  /** rsLoRA: scale by alpha / sqrt(r) instead of alpha / r. */
  rslora: boolean;
  /** Dropout on the adapter's input during training (0 = none). */
  dropout: number;
  /** Layers that carry the adapter (null = all). */
  layers: number[] | null;
}

export interface LoraModule {
  layer: number;
  target: LoraTarget;
  inFeatures: number;
  outFeatures: number;
  /** [r, inFeatures] row-major. */
  A: Float32Array;
  /** [outFeatures, r] row-major. */
  B: Float32Array;
}

export interface HostLoraAdapter {
  settings: LoraSettings;
  /** Name or path of the base model, as PEFT's base_model_name_or_path. */
  baseModel: string;
  /** One module per (layer, target), ordered by layer then by LORA_TARGETS order. */
  modules: LoraModule[];
}

export function loraScaling(settings: Pick<LoraSettings, 'r' | 'alpha' | 'rslora'>): number {
  return settings.rslora ? settings.alpha / Math.sqrt(settings.r) : settings.alpha / settings.r;
}

/** The scaling formula of these settings, for messages. */
export function loraScalingFormula(settings: Pick<LoraSettings, 'rslora'>): string {
  return settings.rslora ? 'alpha / sqrt(r)' : 'alpha / r';
}

/**
 * The largest scaling accepted. PEFT's defaults and common recipes (alpha r or 2r, rsLoRA's
 * alpha / sqrt(r)) give 0.5 to a few tens; a scaling far beyond is a damaged or mistyped alpha.
 */
export const MAX_LORA_SCALING = 1e4;

/**
 * The largest gain an adapted projection may have: how far one output can move for inputs of
 * magnitude 1, bounded by in_features · max|A| (for A x) and scaling · r · max|B| · in_features ·
 * max|A| (for the update). A freshly initialised A has in_features · max|A| = sqrt(in_features);
 * under 1e8, outputs for activations up to 1e4 keep the sums of squares of the next RMSNorm
 * inside float32 for hidden sizes up to 16k.
 */
export const MAX_LORA_GAIN = 1e8;

/** in and out features of a projection of this model. */
export function projectionShape(config: ModelConfig, target: LoraTarget): { inFeatures: number; outFeatures: number } {
  const { hiddenSize: C, numHeads: H, numKvHeads: Hk, headDim: D, intermediateSize: F } = config;
  switch (target) {
    case 'q_proj':
      return { inFeatures: C, outFeatures: H * D };
    case 'k_proj':
    case 'v_proj':
      return { inFeatures: C, outFeatures: Hk * D };
    case 'o_proj':
      return { inFeatures: H * D, outFeatures: C };
    case 'gate_proj':
    case 'up_proj':
      return { inFeatures: C, outFeatures: F };
    case 'down_proj':
      return { inFeatures: F, outFeatures: C };
  }
}

export function validateLoraSettings(settings: LoraSettings, config: ModelConfig): void {
  if (!Number.isInteger(settings.r) || settings.r < 1) throw new RangeError(`LoRA rank r must be a whole number >= 1, got ${settings.r}`);
  if (!(Number.isFinite(settings.alpha) && settings.alpha > 0)) throw new RangeError(`LoRA alpha must be a positive number, got ${settings.alpha}`);
  const scaling = loraScaling(settings);
  if (!(scaling <= MAX_LORA_SCALING)) {
    throw new RangeError(`LoRA alpha ${settings.alpha} with r ${settings.r} gives a scaling (${loraScalingFormula(settings)}) of ${scaling}, above the ${MAX_LORA_SCALING} an adapter can use; lower alpha (it is usually r or 2r)`);
  }
  if (!(settings.dropout >= 0 && settings.dropout < 1)) throw new RangeError(`LoRA dropout must be in [0, 1), got ${settings.dropout}`);
  if (settings.targets.length === 0) throw new RangeError(`LoRA needs at least one target module among ${LORA_TARGETS.join(', ')}`);
  for (const target of settings.targets) {
    if (!LORA_TARGETS.includes(target)) throw new RangeError(`unknown LoRA target "${target}"; choose among ${LORA_TARGETS.join(', ')}`);
  }
  for (const layer of settings.layers ?? []) {
    if (!Number.isInteger(layer) || layer < 0 || layer >= config.numLayers) throw new RangeError(`LoRA layer ${layer} does not exist: the model has layers 0..${config.numLayers - 1}`);
  }
}

/**
 * A fresh adapter initialised as PEFT does: A with PyTorch's kaiming_uniform_(a = sqrt(5)), i.e.
 * U(-1/sqrt(in), 1/sqrt(in)); B zero, so the adapted model starts as the base model.
 */
export function initLoraAdapter(config: ModelConfig, settings: LoraSettings, seed: number, baseModel: string): HostLoraAdapter {
  validateLoraSettings(settings, config);
  const uniform = mulberry32(seed);
  const modules: LoraModule[] = [];
  for (let layer = 0; layer < config.numLayers; layer++) {
    if (settings.layers && !settings.layers.includes(layer)) continue;
    for (const target of LORA_TARGETS.filter((t) => settings.targets.includes(t))) {
      const { inFeatures, outFeatures } = projectionShape(config, target);
      const bound = 1 / Math.sqrt(inFeatures);
      const A = Float32Array.from({ length: settings.r * inFeatures }, () => (2 * uniform() - 1) * bound);
      modules.push({ layer, target, inFeatures, outFeatures, A, B: new Float32Array(outFeatures * settings.r) });
    }
  }
  return { settings, baseModel, modules };
}

const LINEAR_OF: Record<LoraTarget, (layer: HostWeights['layers'][number]) => HostLinear> = {
  q_proj: (l) => l.q,
  k_proj: (l) => l.k,
  v_proj: (l) => l.v,
  o_proj: (l) => l.o,
  gate_proj: (l) => l.gate,
  up_proj: (l) => l.up,
  down_proj: (l) => l.down,
};

/** Base weights with the adapter merged in (W + scaling B A), leaving the originals untouched. */
export function mergeLoraAdapter(weights: HostWeights, adapter: HostLoraAdapter): HostWeights {
  const scaling = loraScaling(adapter.settings);
  const r = adapter.settings.r;
  const merged: HostWeights = {
    ...weights,
    layers: weights.layers.map((layer) => ({ ...layer, q: { ...layer.q }, k: { ...layer.k }, v: { ...layer.v }, o: { ...layer.o }, gate: { ...layer.gate }, up: { ...layer.up }, down: { ...layer.down } })),
  };
  for (const m of adapter.modules) {
    const linear = LINEAR_OF[m.target](merged.layers[m.layer]);
    const w = Float32Array.from(linear.weight.data);
    for (let o = 0; o < m.outFeatures; o++) {
      for (let i = 0; i < m.inFeatures; i++) {
        let delta = 0;
        for (let k = 0; k < r; k++) delta += m.B[o * r + k] * m.A[k * m.inFeatures + i];
        w[o * m.inFeatures + i] += scaling * delta;
      }
    }
    linear.weight = { ...linear.weight, data: w };
  }
  return merged;
}
