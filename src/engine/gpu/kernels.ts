// Compiled compute pipelines, one per WGSL entry point, built on first use and kept.
import activationWgsl from '../../../shaders/activation.wgsl?raw';
import dropoutWgsl from '../../../shaders/dropout.wgsl?raw';
import attentionWgsl from '../../../shaders/attention.wgsl?raw';
import commonWgsl from '../../../shaders/common.wgsl?raw';
import gatherWgsl from '../../../shaders/gather.wgsl?raw';
import logprobsWgsl from '../../../shaders/logprobs.wgsl?raw';
import lossWgsl from '../../../shaders/loss.wgsl?raw';
import matmulWgsl from '../../../shaders/matmul.wgsl?raw';
import optimizerWgsl from '../../../shaders/optimizer.wgsl?raw';
import rmsnormWgsl from '../../../shaders/rmsnorm.wgsl?raw';
import ropeWgsl from '../../../shaders/rope.wgsl?raw';
import rowsWgsl from '../../../shaders/rows.wgsl?raw';
import samplingWgsl from '../../../shaders/sampling.wgsl?raw';

const ENTRY_POINTS = {
  matmul_tiled: matmulWgsl,
  matmul_rows: matmulWgsl,
  matmul_tiled4: matmulWgsl,
  rmsnorm: rmsnormWgsl,
  rmsnorm_backward: rmsnormWgsl,
  rmsnorm_weight_grad: rmsnormWgsl,
  rope_and_store_kv: ropeWgsl,
  rope_backward: ropeWgsl,
  attention: attentionWgsl,
  attention_backward_query: attentionWgsl,
  attention_backward_key: attentionWgsl,
  gather_rows: gatherWgsl,
  embedding_backward: gatherWgsl,
  silu_mul: activationWgsl,
  silu_mul_backward: activationWgsl,
  dropout: dropoutWgsl,
  token_logprobs: logprobsWgsl,
  logits_backward: logprobsWgsl,
  sample: samplingWgsl,
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

/** Modules whose kernels reduce over rows with rows.wgsl, which is prepended to them (after common.wgsl, which every module gets). */
const ROW_MODULES = new Set<string>([rmsnormWgsl, logprobsWgsl]);
/** The kernels among them that set LANES, the invocations per row (rmsnorm_weight_grad only shares WG). */
const ROW_KERNELS = new Set<KernelName>(['rmsnorm', 'token_logprobs', 'rmsnorm_backward', 'logits_backward']);
const WORKGROUP_SIZE = 64;

const HEAD_DIM_LINE = /const HEAD_DIM: u32 = \d+u;/;
/** A line the attention kernels write once per vec4 of a head, with `$` as its index (attention.wgsl). */
const EACH_VEC4_LINE = /^(.*?) *\/\/ each vec4$/gm;

export class Kernels {
  /** Keyed by entry point and override constants. */
  private readonly pipelines = new Map<string, GPUComputePipeline>();

  /**
   * `headDim` specialises the attention kernels, which hold a head in headDim / 4 vec4 variables.
   * `rowLanes` is how many invocations share a row in the row-reduction kernels (rows.wgsl): 64 on
   * GPUs; 1 on CPU adapters, where the reduction's workgroup barriers cost more than the work.
   */
  constructor(
    readonly device: GPUDevice,
    readonly headDim: number,
    readonly rowLanes: 1 | 64 = 64,
  ) {
    if (!Number.isInteger(headDim) || headDim <= 0 || headDim % 4 !== 0) {
      throw new RangeError(`head dimension ${headDim} is not supported: the attention kernels need a positive multiple of 4 (hidden_size / num_attention_heads, or head_dim in config.json)`);
    }
  }

  /** Rows per workgroup of the row-reduction kernels, for sizing their grids. */
  get rowsPerWorkgroup(): number {
    return WORKGROUP_SIZE / this.rowLanes;
  }

  /** The pipeline of entry point `name`, with `constants` for its override constants (besides LANES, which this sets). */
  pipeline(name: KernelName, constants: Record<string, number> = {}): GPUComputePipeline {
    const key = `${name} ${JSON.stringify(constants)}`;
    let pipeline = this.pipelines.get(key);
    if (!pipeline) {
      let code: string = ENTRY_POINTS[name];
      if (ROW_MODULES.has(code)) code = rowsWgsl + code;
      code = commonWgsl + code;
      code = code.replace(HEAD_DIM_LINE, `const HEAD_DIM: u32 = ${this.headDim}u;`).replace(EACH_VEC4_LINE, (_, line: string) =>
        Array.from({ length: this.headDim / 4 }, (_, i) => line.replaceAll('$', String(i))).join('\n'),
      );
      const module = this.device.createShaderModule({ code, label: name });
      const overrides = ROW_KERNELS.has(name) ? { ...constants, LANES: this.rowLanes } : constants;
      pipeline = this.device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: name, constants: overrides }, label: name });
      this.pipelines.set(key, pipeline);
    }
    return pipeline;
  }

  /**
   * A dispatch of `name`. Bindings are given in binding order (0, 1, 2, ...), or by number for an
   * entry point that uses only some of its module's bindings.
   */
  dispatch(name: KernelName, resources: Resource[] | Record<number, Resource>, workgroups: [number, number, number], constants?: Record<string, number>): Dispatch {
    const pipeline = this.pipeline(name, constants);
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
