// A LoRA adapter's matrices on the GPU, looked up by (layer, projection) during the forward pass.
// They live in a ParameterSet, so the same adapter is what training updates in place.
import type { GpuContext } from '../gpu/device.ts';
import type { GpuMatrix } from '../gpu/matrix.ts';
import { ParameterSet } from '../train/parameters.ts';
import { loraScaling, type HostLoraAdapter, type LoraModule, type LoraSettings, type LoraTarget } from './adapter.ts';

export interface GpuLoraModule {
  /** [r, in] */
  A: GpuMatrix;
  /** [out, r] */
  B: GpuMatrix;
  /** Names of A and B in the parameter set. */
  names: { A: string; B: string };
}

function moduleName(layer: number, target: LoraTarget): string {
  return `${layer}.${target}`;
}

export class GpuLoraAdapter {
  readonly settings: LoraSettings;
  readonly scaling: number;
  readonly parameters: ParameterSet;
  private readonly modules = new Map<string, GpuLoraModule>();

  constructor(
    gpu: GpuContext,
    readonly host: HostLoraAdapter,
  ) {
    this.settings = host.settings;
    this.scaling = loraScaling(host.settings);
    const r = host.settings.r;
    this.parameters = new ParameterSet(
      gpu.device,
      host.modules.flatMap((m) => [
        { name: `${moduleName(m.layer, m.target)}.A`, rows: r, cols: m.inFeatures, data: m.A },
        { name: `${moduleName(m.layer, m.target)}.B`, rows: m.outFeatures, cols: r, data: m.B },
      ]),
    );
    for (const m of host.modules) {
      const name = moduleName(m.layer, m.target);
      const names = { A: `${name}.A`, B: `${name}.B` };
      this.modules.set(name, { A: this.parameters.view(names.A).matrix, B: this.parameters.view(names.B).matrix, names });
    }
  }

  get rank(): number {
    return this.settings.r;
  }

  module(layer: number, target: LoraTarget): GpuLoraModule | undefined {
    return this.modules.get(moduleName(layer, target));
  }

  /** The adapter as it is now on the GPU (after training steps), for saving or export. */
  async toHost(): Promise<HostLoraAdapter> {
    const values = await this.parameters.read();
    const modules: LoraModule[] = this.host.modules.map((m) => {
      const name = moduleName(m.layer, m.target);
      return { ...m, A: values.get(`${name}.A`)!, B: values.get(`${name}.B`)! };
    });
    return { ...this.host, modules };
  }

  dispose(): void {
    this.parameters.dispose();
    this.modules.clear();
  }
}
