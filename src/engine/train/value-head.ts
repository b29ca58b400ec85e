// The value head: a linear map from the final hidden state to one number per token,
// v = w . h + b, trained with the policy (A2C, PPO). Its two tensors live in a ParameterSet.
import type { GpuContext } from '../gpu/device.ts';
import { ParameterSet, type ParameterView } from './parameters.ts';

export class ValueHead {
  readonly parameters: ParameterSet;
  readonly weight: ParameterView;
  readonly bias: ParameterView;

  /** Starts at zero, so the first values are 0 and the first gradients come from the returns alone. */
  constructor(gpu: GpuContext, hiddenSize: number, init?: { weight: Float32Array; bias: number }) {
    this.parameters = new ParameterSet(gpu.device, [
      { name: 'value.weight', rows: 1, cols: hiddenSize, data: init?.weight ?? new Float32Array(hiddenSize) },
      { name: 'value.bias', rows: 1, cols: 1, data: Float32Array.of(init?.bias ?? 0) },
    ]);
    this.weight = this.parameters.view('value.weight');
    this.bias = this.parameters.view('value.bias');
  }

  dispose(): void {
    this.parameters.dispose();
  }
}
