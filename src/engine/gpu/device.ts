// Acquiring a GPUDevice with the limits the engine needs, the same way in the browser and in Node.

/** A GPUDevice plus what the engine needs to know about it. */
export interface GpuContext {
  device: GPUDevice;
  /** Human-readable adapter description, e.g. "google swiftshader". */
  adapterName: string;
  /** Largest buffer the engine binds at once; bigger weights are split into row chunks. */
  maxBindingBytes: number;
  /** A software adapter running on the CPU (SwiftShader and the like): kernels avoid workgroup barriers there. */
  cpu: boolean;
}

export class WebGpuUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'WebGpuUnavailableError';
  }
}

export interface DeviceOptions {
  /** Cap on bytes per binding, below the device's own limit (tests use it to force weight splitting). */
  maxBindingBytes?: number;
  /** Called once if the device is lost (driver reset, tab in background too long, ...). */
  onLost?: (reason: string) => void;
}

/** Requests an adapter and a device from `gpu`, raising the buffer limits to what the adapter allows. */
export async function requestGpu(gpu: GPU | undefined, options: DeviceOptions = {}): Promise<GpuContext> {
  if (!gpu) {
    throw new WebGpuUnavailableError(
      'WebGPU is not available here. Use a recent desktop Chrome or Edge (113+), make sure ' +
        'hardware acceleration is on (chrome://settings/system), and check chrome://gpu for "WebGPU: Hardware accelerated".',
    );
  }
  const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (!adapter) {
    throw new WebGpuUnavailableError(
      'WebGPU is present but no GPU adapter was granted. Update the graphics driver, or on Linux start Chrome with ' +
        '--enable-unsafe-webgpu --enable-features=Vulkan; check chrome://gpu for the reason.',
    );
  }
  const limits = adapter.limits;
  const device = await adapter.requestDevice({
    requiredLimits: {
      maxStorageBufferBindingSize: limits.maxStorageBufferBindingSize,
      maxBufferSize: limits.maxBufferSize,
      maxStorageBuffersPerShaderStage: Math.min(limits.maxStorageBuffersPerShaderStage, 10),
      maxComputeWorkgroupStorageSize: limits.maxComputeWorkgroupStorageSize,
      maxComputeInvocationsPerWorkgroup: limits.maxComputeInvocationsPerWorkgroup,
    },
  });
  device.lost.then((info) => {
    if (info.reason !== 'destroyed') options.onLost?.(info.message || String(info.reason));
  });
  const deviceMax = Math.min(device.limits.maxStorageBufferBindingSize, device.limits.maxBufferSize);
  const info = adapter.info;
  const adapterName = [info.vendor, info.architecture, info.description].filter(Boolean).join(' ') || 'unknown adapter';
  return {
    device,
    adapterName,
    cpu: isCpuAdapter(info),
    maxBindingBytes: Math.min(deviceMax, options.maxBindingBytes ?? Infinity),
  };
}

/** Whether an adapter is a CPU implementation: the fallback adapter, or one of the known software rasterisers. */
export function isCpuAdapter(info: GPUAdapterInfo): boolean {
  if ((info as GPUAdapterInfo & { isFallbackAdapter?: boolean }).isFallbackAdapter === true) return true;
  return /swiftshader|llvmpipe|lavapipe|warp|software/i.test([info.vendor, info.architecture, info.device, info.description].join(' '));
}
