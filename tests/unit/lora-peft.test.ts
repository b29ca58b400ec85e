// PEFT adapter files: the exact names and shapes PEFT writes, and clear errors for adapters that
// do not fit the base model.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { initLoraAdapter, type LoraSettings } from '../../src/engine/lora/adapter.ts';
import { peftAdapterFiles, peftFilesOf, readPeftAdapter } from '../../src/engine/lora/peft.ts';
import { parseModelConfig } from '../../src/engine/model/config.ts';
import { parseSafetensors } from '../../src/engine/model/safetensors.ts';
import { FileModelSource } from '../../src/engine/model/source-node.ts';
import { ModelLoadError } from '../../src/engine/model/types.ts';
import { STORIES260K_DIR } from '../support/model-folder.ts';
import { MemoryModelSource, tinyModelConfig } from '../shared/tiny-model.ts';

const config = parseModelConfig(tinyModelConfig({ numHeads: 4, numKvHeads: 2, hiddenSize: 16, intermediateSize: 40, numLayers: 2 }));
const settings: LoraSettings = { r: 4, alpha: 8, targets: ['q_proj', 'k_proj', 'down_proj'], rslora: false, dropout: 0.05, layers: null };

function files(overrides: { config?: Record<string, unknown> } = {}): MemoryModelSource {
  const f = peftAdapterFiles(initLoraAdapter(config, settings, 3, 'tiny'));
  if (overrides.config) {
    const json = { ...JSON.parse(new TextDecoder().decode(f.get('adapter_config.json'))), ...overrides.config };
    f.set('adapter_config.json', new TextEncoder().encode(JSON.stringify(json)));
  }
  return new MemoryModelSource(f, 'memory:adapter/');
}

async function loadError(source: MemoryModelSource, modelConfig = config): Promise<ModelLoadError> {
  const error = await readPeftAdapter(source, modelConfig).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(ModelLoadError);
  return error as ModelLoadError;
}

describe('PEFT adapter format', () => {
  test('written files use PEFT names, shapes and config fields', () => {
    const f = peftAdapterFiles(initLoraAdapter(config, settings, 3, 'tiny-base'));
    const cfg = JSON.parse(new TextDecoder().decode(f.get('adapter_config.json')));
    expect(cfg).toMatchObject({ peft_type: 'LORA', task_type: 'CAUSAL_LM', r: 4, lora_alpha: 8, target_modules: ['q_proj', 'k_proj', 'down_proj'], base_model_name_or_path: 'tiny-base', bias: 'none', modules_to_save: null });
    const tensors = parseSafetensors(f.get('adapter_model.safetensors')!, 'adapter_model.safetensors');
    expect(tensors.get('base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight')?.shape).toEqual([4, 16]);
    expect(tensors.get('base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight')?.shape).toEqual([16, 4]);
    expect(tensors.get('base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight')?.shape).toEqual([8, 4]);
    expect(tensors.get('base_model.model.model.layers.1.mlp.down_proj.lora_A.weight')?.shape).toEqual([4, 40]);
    expect(tensors.size).toBe(2 * 3 * 2);
    expect([...tensors.keys()].some((k) => k.includes('.default.'))).toBe(false);
  });

  test('a checkpoint without PEFT files (a full-parameter run) is named, before anything is read', () => {
    const f = peftAdapterFiles(initLoraAdapter(config, settings, 3, 'tiny-base'));
    expect(peftFilesOf(new Map([...f, ['optimizer.bin', new Uint8Array(4)]]), 'run a')).toEqual(f);
    expect(() => peftFilesOf(new Map([['model.safetensors', new Uint8Array(8)]]), 'run full-1')).toThrow(/^run full-1 has no adapter in its last checkpoint \(a full-parameter run/);
    expect(() => peftFilesOf(undefined, 'run b')).toThrow(/run b has no adapter/);
  });

  test('PEFT initialisation: A uniform within 1/sqrt(in), B zero, reproducible by seed', () => {
    const a = initLoraAdapter(config, settings, 3, 'x');
    const b = initLoraAdapter(config, settings, 3, 'x');
    expect(a.modules[0].A).toEqual(b.modules[0].A);
    const bound = 1 / Math.sqrt(16);
    expect(Math.max(...a.modules[0].A.map(Math.abs))).toBeLessThanOrEqual(bound);
    expect(Math.max(...a.modules[0].A.map(Math.abs))).toBeGreaterThan(bound * 0.8);
    expect(a.modules.every((m) => m.B.every((v) => v === 0))).toBe(true);
  });

  test('unsupported or malformed adapter_config.json is named with its fix', async () => {
    expect((await loadError(files({ config: { peft_type: 'IA3' } }))).message).toMatch(/peft_type .*only LoRA/);
    expect((await loadError(files({ config: { target_modules: ['q_proj', 'lm_head'] } }))).message).toMatch(/"lm_head".*cannot be adapted/);
    expect((await loadError(files({ config: { use_dora: true } }))).message).toMatch(/DoRA/);
    expect((await loadError(files({ config: { modules_to_save: ['lm_head'] } }))).message).toMatch(/modules_to_save/);
    expect((await loadError(files({ config: { r: 'four' } }))).message).toMatch(/\br\b.*not a number/);
  });

  test('an adapter for another base model fails on the first mismatched tensor', async () => {
    const wider = parseModelConfig(tinyModelConfig({ numHeads: 4, numKvHeads: 2, hiddenSize: 32, intermediateSize: 40, numLayers: 2 }));
    const error = await loadError(files(), wider);
    expect(error.message).toMatch(/base_model\.model\.model\.layers\.0\.self_attn\.q_proj\.lora_A\.weight has shape \[4,16\] but this base model needs \[4, 32\]/);
    expect(error.tensor).toBe('base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight');
    const deeper = parseModelConfig(tinyModelConfig({ numHeads: 4, numKvHeads: 2, hiddenSize: 16, intermediateSize: 40, numLayers: 3 }));
    expect((await loadError(files(), deeper)).message).toMatch(/layers\.2\.self_attn\.q_proj\.lora_A\.weight is missing/);
  });

  test('damaged adapter weights (NaN or Infinity, a missing file) are named at load, not as NaN scores later', async () => {
    const adapter = initLoraAdapter(config, settings, 3, 'tiny');
    adapter.modules[1].B[5] = Number.NaN;
    const nan = await loadError(new MemoryModelSource(peftAdapterFiles(adapter), 'memory:adapter/'));
    expect(nan.message).toMatch(/^adapter_model\.safetensors: tensor 'base_model\.model\.model\.layers\.0\.self_attn\.k_proj\.lora_B\.weight' holds NaN at index 5 of 32; the file is corrupt, or its values overflowed when it was saved as F32 or came from a run that diverged/);
    expect(nan.tensor).toBe('base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight');
    adapter.modules[1].B[5] = Number.NEGATIVE_INFINITY;
    expect((await loadError(new MemoryModelSource(peftAdapterFiles(adapter), 'memory:adapter/'))).message).toMatch(/holds -Infinity at index 5/);
    const withoutWeights = peftAdapterFiles(initLoraAdapter(config, settings, 3, 'tiny'));
    withoutWeights.delete('adapter_model.safetensors');
    expect((await loadError(new MemoryModelSource(withoutWeights, 'memory:adapter/'))).message).toMatch(/^memory:adapter\/: no adapter_model\.safetensors; an adapter folder holds adapter_config\.json and adapter_model\.safetensors/);
  });

  test('finite values that overflow float32 once scaled and multiplied are refused, naming the tensor', async () => {
    for (const [matrix, value] of [['B', 3e38], ['A', 3e38], ['B', 1e9]] as const) {
      const adapter = initLoraAdapter(config, settings, 3, 'tiny');
      adapter.modules[2][matrix][7] = value;
      const error = await loadError(new MemoryModelSource(peftAdapterFiles(adapter), 'memory:adapter/'));
      const tensor = `base_model.model.model.layers.0.mlp.down_proj.lora_${matrix}.weight`;
      expect(error.tensor).toBe(tensor);
      expect(error.message).toContain(`adapter_model.safetensors: ${tensor}: with max|lora_A|`);
      expect(error.message).toMatch(/above the 100000000 float32 computes safely; the file is corrupt or was saved from a run that diverged/);
    }
    // A trained-looking adapter (B of the size A has) passes.
    const sound = initLoraAdapter(config, settings, 3, 'tiny');
    for (const m of sound.modules) m.B.fill(0.05);
    expect((await readPeftAdapter(new MemoryModelSource(peftAdapterFiles(sound), 'memory:adapter/'), config)).modules).toHaveLength(6);
  });

  test('a lora_alpha whose scaling float32 cannot hold is refused, naming the field', async () => {
    const error = await loadError(files({ config: { lora_alpha: 1e300 } }));
    expect(error.message).toMatch(/^adapter_config\.json: lora_alpha 1e\+300 with r 4 gives a scaling \(alpha \/ r\) of 2\.5e\+299, above the 10000 an adapter can use/);
    expect((await loadError(files({ config: { lora_alpha: 1e6, use_rslora: true } }))).message).toMatch(/lora_alpha 1000000 with r 4 and use_rslora gives a scaling \(alpha \/ sqrt\(r\)\) of 500000/);
  });

  test('target_modules and layers_to_transform follow PEFT: a list by name ends, a regular expression over whole names, layers by index', async () => {
    const load = async (overrides: Record<string, unknown>, adapterSettings = settings) => {
      const f = peftAdapterFiles(initLoraAdapter(config, adapterSettings, 3, 'tiny'));
      const json = { ...JSON.parse(new TextDecoder().decode(f.get('adapter_config.json'))), ...overrides };
      f.set('adapter_config.json', new TextEncoder().encode(JSON.stringify(json)));
      return readPeftAdapter(new MemoryModelSource(f, 'memory:adapter/'), config);
    };
    const all = { targets: ['q_proj', 'k_proj', 'down_proj'], layers: null };
    expect((await load({ target_modules: '.*\\.(q_proj|k_proj|down_proj)' })).settings).toMatchObject(all);
    expect((await load({ target_modules: ['self_attn.q_proj', 'k_proj', 'mlp.down_proj'] })).settings).toMatchObject(all);
    const firstLayer = { ...settings, layers: [0] };
    expect((await load({ target_modules: 'model\\.layers\\.0\\.(self_attn|mlp)\\.(q_proj|k_proj|down_proj)', layers_to_transform: null }, firstLayer)).settings.layers).toEqual([0]);
    expect((await load({ layers_to_transform: 0 }, firstLayer)).settings.layers).toEqual([0]);
    expect((await load({ layers_to_transform: [0, 1] })).settings.layers).toBeNull();
  });

  test('a bad target_modules or layers_to_transform names the file and the field', async () => {
    const message = async (config: Record<string, unknown>) => (await loadError(files({ config }))).message;
    expect(await message({ target_modules: '([' })).toMatch(/^adapter_config\.json: target_modules "\(\[" is not a valid regular expression \(.*\); PEFT matches a string against whole module names such as "model\.layers\.0\.self_attn\.q_proj"/);
    // re.fullmatch: a bare name as a string matches no whole module name, as in PEFT.
    expect(await message({ target_modules: 'q_proj' })).toMatch(/^adapter_config\.json: target_modules "q_proj" selects no module of this base model/);
    expect(await message({ target_modules: '.*' })).toMatch(/target_modules ".\*" matches model\.embed_tokens and lm_head, which cannot be adapted/);
    expect(await message({ target_modules: '.*layers\\.0\\..*q_proj|.*layers\\.1\\..*k_proj' })).toMatch(/adapts k_proj in layer 1 but q_proj in layer 0; adapters here adapt the same projections in every adapted layer/);
    expect(await message({ target_modules: '.*_proj', layers_to_transform: [0] })).toMatch(/layers_to_transform cannot be used when target_modules is a string/);
    expect(await message({ layers_to_transform: '0' })).toBe('adapter_config.json: layers_to_transform must be a layer index or a list of them, such as [0, 1], got "0"');
    expect(await message({ layers_to_transform: [0, 1.5] })).toMatch(/layers_to_transform must be a layer index or a list of them, such as \[0, 1\], got \[0,1\.5\]/);
    expect(await message({ layers_to_transform: [5] })).toMatch(/layers_to_transform names layer 5, but the base model has layers 0\.\.1/);
    expect(await message({ target_modules: 42 })).toMatch(/target_modules must be a list of module names such as \["q_proj", "v_proj"\] or a regular expression string, got 42/);
  });

  test.skipIf(!existsSync(STORIES260K_DIR))('the stories260K synthetic adapter (written by PEFT) loads', async () => {
    const model = parseModelConfig(JSON.parse(await new FileModelSource(STORIES260K_DIR).readText('config.json')));
    const adapter = await readPeftAdapter(new FileModelSource(join(STORIES260K_DIR, 'lora-synthetic-r4')), model);
    expect(adapter.modules).toHaveLength(35);
    expect(adapter.settings).toMatchObject({ r: 4, alpha: 8, rslora: false });
  });
});
