// A LoRA adapter's matrices on the GPU, looked up by (layer, projection) during the forward pass.
import type { GpuContext } from '../gpu/device.ts';
import { destroyMatrix, uploadMatrix, type GpuMatrix } from '../gpu/matrix.ts';
import { loraScaling, type HostLoraAdapter, type LoraSettings, type LoraTarget } from './adapter.ts';

export interface GpuLoraModule {
  /** [r, in] */
  A: GpuMatrix;
  /** [out, r] */
  B: GpuMatrix;
}

export class GpuLoraAdapter {
  readonly settings: LoraSettings;
  readonly scaling: number;
  private readonly modules = new Map<string, GpuLoraModule>();

  constructor(gpu: GpuContext, readonly host: HostLoraAdapter) {
    this.settings = host.settings;
    this.scaling = loraScaling(host.settings);
    const r = host.settings.r;
    for (const m of host.modules) {
      const label = `lora ${m.layer}.${m.target}`;
      this.modules.set(`${m.layer}.${m.target}`, {
        A: uploadMatrix(gpu.device, m.A, r, m.inFeatures, gpu.maxBindingBytes, `${label}.A`),
        B: uploadMatrix(gpu.device, m.B, m.outFeatures, r, gpu.maxBindingBytes, `${label}.B`),
      });
    }
  }

  get rank(): number {
    return this.settings.r;
  }

  module(layer: number, target: LoraTarget): GpuLoraModule | undefined {
    return this.modules.get(`${layer}.${target}`);
  }

  dispose(): void {
    for (const m of this.modules.values()) {
      destroyMatrix(m.A);
      destroyMatrix(m.B);
    }
    this.modules.clear();
  }
}
