// The value head: a linear map from the final hidden state to one number per token,
// v = w . h + b, trained with the policy (A2C, PPO). Its two tensors live in a ParameterSet.
import type { GpuContext } from '../gpu/device.ts';
import { ParameterSet, type ParameterView } from './parameters.ts';

/** The value head's weights on the host, for values computed there from read-back hidden states. */
export interface ValueHeadWeights {
  weight: Float32Array;
  bias: number;
}

/** v = w · h + b for one hidden state. */
export function valueOf(head: ValueHeadWeights, hidden: Float32Array): number {
  let v = head.bias;
  for (let i = 0; i < hidden.length; i++) v += head.weight[i] * hidden[i];
  return v;
}

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

  /** The weights, read back from the GPU (the one read-back of the head: policies, checkpoints and DQN's target use it). */
  async read(): Promise<ValueHeadWeights> {
    const params = await this.parameters.read();
    return { weight: params.get('value.weight')!, bias: params.get('value.bias')![0] };
  }

  dispose(): void {
    this.parameters.dispose();
  }
}
