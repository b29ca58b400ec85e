// A training checkpoint as a set of files, so that Node keeps it in a folder and the browser in
// IndexedDB: the adapter in PEFT format (usable as is) or, in full-parameter mode, a whole model folder, the value head, the optimiser moments and
// step counts, and the caller's own progress (epoch, batch, RNG state...). Restoring all of it makes
// the next step exactly the step an uninterrupted run would have taken.
import type { HostLoraAdapter } from '../lora/adapter.ts';
import { ADAPTER_CONFIG, peftAdapterFiles, readPeftAdapter } from '../lora/peft.ts';
import { float32Tensor, parseSafetensors, serializeSafetensors, tensorToFloat32 } from '../model/safetensors.ts';
import { readJsonFile } from '../model/source.ts';
import { ModelLoadError, type ModelConfig, type ModelSource } from '../model/types.ts';
import type { TrainerState } from './trainer.ts';

const STATE_FILE = 'trainer_state.json';
const VALUE_HEAD_FILE = 'value_head.safetensors';
const OPTIMIZER_FILE = 'optimizer.safetensors';
const FORMAT = 'rlplay-checkpoint';

export interface Checkpoint<Progress> {
  /** The trained LoRA adapter; absent in full-parameter mode, where `modelFiles` hold the weights. */
  adapter?: HostLoraAdapter;
  /** A whole model folder (config, tokenizer, model.safetensors) in full-parameter mode. */
  modelFiles?: Map<string, Uint8Array>;
  valueHead: { weight: Float32Array; bias: number };
  optimizer: TrainerState;
  /** What the caller needs to continue (e.g. which batches are done); JSON. */
  progress: Progress;
}

export function checkpointFiles<Progress>(checkpoint: Checkpoint<Progress>): Map<string, Uint8Array> {
  const files = new Map(checkpoint.adapter ? peftAdapterFiles(checkpoint.adapter) : checkpoint.modelFiles);
  const { weight, bias } = checkpoint.valueHead;
  files.set(VALUE_HEAD_FILE, serializeSafetensors([float32Tensor('value.weight', [1, weight.length], weight), float32Tensor('value.bias', [1], Float32Array.of(bias))]));
  const o = checkpoint.optimizer;
  files.set(
    OPTIMIZER_FILE,
    serializeSafetensors([
      float32Tensor('adapter.exp_avg', [o.adapter.m.length], o.adapter.m),
      float32Tensor('adapter.exp_avg_sq', [o.adapter.v.length], o.adapter.v),
      float32Tensor('value_head.exp_avg', [o.valueHead.m.length], o.valueHead.m),
      float32Tensor('value_head.exp_avg_sq', [o.valueHead.v.length], o.valueHead.v),
    ]),
  );
  const state = { format: FORMAT, version: 1, adapterStep: o.adapter.step, valueHeadStep: o.valueHead.step, progress: checkpoint.progress };
  files.set(STATE_FILE, new TextEncoder().encode(`${JSON.stringify(state, null, 2)}\n`));
  return files;
}

/** Whether `source` holds a checkpoint (its state file). */
export function hasCheckpoint(source: ModelSource): Promise<boolean> {
  return source.exists(STATE_FILE);
}

export async function readCheckpoint<Progress>(source: ModelSource, config: ModelConfig): Promise<Checkpoint<Progress>> {
  const state = (await readJsonFile(source, STATE_FILE)) as { format?: string; adapterStep: number; valueHeadStep: number; progress: Progress };
  if (state.format !== FORMAT) throw new ModelLoadError(`${source.location}: ${STATE_FILE} is not an rlplay checkpoint (format ${JSON.stringify(state.format)})`, STATE_FILE);
  const adapter = (await source.exists(ADAPTER_CONFIG)) ? await readPeftAdapter(source, config) : undefined;
  const tensors = async (file: string) => parseSafetensors(await source.readBytes(file), file);
  const value = await tensors(VALUE_HEAD_FILE);
  const optimizer = await tensors(OPTIMIZER_FILE);
  const get = (map: Awaited<ReturnType<typeof tensors>>, name: string, file: string) => {
    const t = map.get(name);
    if (!t) throw new ModelLoadError(`${source.location}/${file} lacks ${name}: the checkpoint is incomplete; start again without it`, file, name);
    return tensorToFloat32(t, file);
  };
  return {
    adapter,
    valueHead: { weight: get(value, 'value.weight', VALUE_HEAD_FILE), bias: get(value, 'value.bias', VALUE_HEAD_FILE)[0] },
    optimizer: {
      adapter: { step: state.adapterStep, m: get(optimizer, 'adapter.exp_avg', OPTIMIZER_FILE), v: get(optimizer, 'adapter.exp_avg_sq', OPTIMIZER_FILE) },
      valueHead: { step: state.valueHeadStep, m: get(optimizer, 'value_head.exp_avg', OPTIMIZER_FILE), v: get(optimizer, 'value_head.exp_avg_sq', OPTIMIZER_FILE) },
    },
    progress: state.progress,
  };
}
