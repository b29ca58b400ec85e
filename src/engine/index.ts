// The engine's public surface, shared by the browser app and the Node CLI.
export { requestGpu, WebGpuUnavailableError, type GpuContext, type DeviceOptions } from './gpu/device.ts';
export { HttpModelSource } from './model/source.ts';
export { ModelLoadError, type ModelConfig, type ModelSource, type Tokenizer, type LoadedModelFiles } from './model/types.ts';
export type { WeightsProgress } from './model/weights.ts';
export { Model, loadModel } from './model.ts';
export type { GenerateOptions, GenerateResult, GenerateStats } from './generate.ts';
export type { ScoreOptions, ScoreResult } from './score.ts';
export type { SamplingOptions } from './sampling-params.ts';
