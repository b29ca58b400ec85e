// The engine's public surface, shared by the browser app and the Node CLI.
export { requestGpu, WebGpuUnavailableError, type GpuContext, type DeviceOptions } from './gpu/device.ts';
export { HttpModelSource } from './model/source.ts';
export { ModelLoadError, type ModelConfig, type ModelSource, type Tokenizer, type LoadedModelFiles } from './model/types.ts';
export type { WeightsProgress } from './model/weights.ts';
export { Model, loadModel } from './model.ts';
export type { GenerateOptions, GenerateResult, GenerateStats } from './generate.ts';
export type { ScoreOptions, ScoreResult } from './score.ts';
export type { SamplingOptions } from './sampling-params.ts';
export { LORA_TARGETS, type LoraSettings, type LoraTarget, type HostLoraAdapter } from './lora/adapter.ts';
export type { GpuLoraAdapter } from './lora/gpu-adapter.ts';
export { peftAdapterFiles, readPeftAdapter } from './lora/peft.ts';
