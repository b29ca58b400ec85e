// Compiled compute pipelines, one per WGSL entry point, built on first use and kept.
import activationWgsl from '../../../shaders/activation.wgsl?raw';
import backwardWgsl from '../../../shaders/backward.wgsl?raw';
import dropoutWgsl from '../../../shaders/dropout.wgsl?raw';
import attentionWgsl from '../../../shaders/attention.wgsl?raw';
import gatherWgsl from '../../../shaders/gather.wgsl?raw';
import logprobsWgsl from '../../../shaders/logprobs.wgsl?raw';
import lossWgsl from '../../../shaders/loss.wgsl?raw';
import matmulWgsl from '../../../shaders/matmul.wgsl?raw';
import optimizerWgsl from '../../../shaders/optimizer.wgsl?raw';
import rmsnormWgsl from '../../../shaders/rmsnorm.wgsl?raw';
import ropeWgsl from '../../../shaders/rope.wgsl?raw';
import samplingWgsl from '../../../shaders/sampling.wgsl?raw';

const ENTRY_POINTS = {
  matmul_tiled: matmulWgsl,
  matmul_rows: matmulWgsl,
  rmsnorm: rmsnormWgsl,
  rope_and_store_kv: ropeWgsl,
  attention: attentionWgsl,
  gather_rows: gatherWgsl,
  silu_mul: activationWgsl,
  dropout: dropoutWgsl,
  token_logprobs: logprobsWgsl,
  sample: samplingWgsl,
  rmsnorm_backward: backwardWgsl,
  rmsnorm_weight_grad: backwardWgsl,
  silu_mul_backward: backwardWgsl,
  rope_backward: backwardWgsl,
  attention_backward_query: backwardWgsl,
  attention_backward_key: backwardWgsl,
  logits_backward: backwardWgsl,
  embedding_backward: backwardWgsl,
  token_loss: lossWgsl,
  sum_metrics: lossWgsl,
  grad_sum_squares: optimizerWgsl,
  adamw_step: optimizerWgsl,
} as const;

export type KernelName = keyof typeof ENTRY_POINTS;

type Resource = GPUBuffer | GPUBufferBinding;

/** One dispatch of a kernel, ready to be encoded any number of times. */
export interface Dispatch {
  kernel: KernelName;
  pipeline: GPUComputePipeline;
  bindGroup: GPUBindGroup;
  workgroups: [number, number, number];
}

const HEAD_DIM_LINE = /const HEAD_DIM: u32 = \d+u;/;

export class Kernels {
  private readonly pipelines = new Map<KernelName, GPUComputePipeline>();

  /** `headDim` specialises the attention kernel, whose per-invocation arrays need a constant size. */
  constructor(
    readonly device: GPUDevice,
    readonly headDim: number,
  ) {}

  pipeline(name: KernelName): GPUComputePipeline {
    let pipeline = this.pipelines.get(name);
    if (!pipeline) {
      let code: string = ENTRY_POINTS[name];
      code = code.replace(HEAD_DIM_LINE, `const HEAD_DIM: u32 = ${this.headDim}u;`);
      const module = this.device.createShaderModule({ code, label: name });
      pipeline = this.device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: name }, label: name });
      this.pipelines.set(name, pipeline);
    }
    return pipeline;
  }

  /**
   * A dispatch of `name`. Bindings are given in binding order (0, 1, 2, ...), or by number for an
   * entry point that uses only some of its module's bindings.
   */
  dispatch(name: KernelName, resources: Resource[] | Record<number, Resource>, workgroups: [number, number, number]): Dispatch {
    const pipeline = this.pipeline(name);
    const entries = Object.entries(resources).map(([binding, resource]: [string, Resource]) => ({
      binding: Number(binding),
      resource: 'buffer' in resource ? resource : { buffer: resource },
    }));
    const bindGroup = this.device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries, label: name });
    return { kernel: name, pipeline, bindGroup, workgroups };
  }
}

/** Records the dispatches in one compute pass. */
export function encodeDispatches(encoder: GPUCommandEncoder, dispatches: Dispatch[]): void {
  const pass = encoder.beginComputePass();
  for (const d of dispatches) {
    pass.setPipeline(d.pipeline);
    pass.setBindGroup(0, d.bindGroup);
    pass.dispatchWorkgroups(...d.workgroups);
  }
  pass.end();
}
