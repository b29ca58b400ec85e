// WebGPU under Node through Dawn (the `webgpu` package). On a machine without a usable Vulkan GPU
// (no /dev/dri or NVIDIA device node) it uses SwiftShader, the CPU Vulkan driver that Debian's chromium package ships.
import { existsSync } from 'node:fs';
import { create, globals } from 'webgpu';
import { pollDawnPolitely } from './dawn-polling.ts';
import { requestGpu, type DeviceOptions, type GpuContext } from './device.ts';

/** Device nodes of GPU drivers (DRM render nodes, NVIDIA's proprietary driver). */
function hasGpuDeviceNode(): boolean {
  return existsSync('/dev/dri') || existsSync('/dev/nvidia0') || existsSync('/dev/nvidiactl');
}

const SWIFTSHADER_ICDS = ['/usr/lib/chromium/vk_swiftshader_icd.json', '/usr/lib/chromium-browser/vk_swiftshader_icd.json'];

let globalsInstalled = false;
/**
 * Dawn's instance must outlive every device made from it: if the GPU object were garbage-collected,
 * the instance would be torn down under live devices (seen as aborts inside the Vulkan driver).
 */
const liveInstances: GPU[] = [];

function installGlobals(): void {
  // Dawn's GPUBufferUsage, GPUMapMode, ... constants, as browsers provide them.
  if (!globalsInstalled) Object.assign(globalThis, globals);
  globalsInstalled = true;
  pollDawnPolitely();
}

/** A GPU context in Node: the system's Vulkan GPU if Dawn finds one, else SwiftShader. */
export async function requestNodeGpu(options: DeviceOptions = {}): Promise<GpuContext> {
  installGlobals();
  process.env.XDG_RUNTIME_DIR ??= '/tmp';
  if (!process.env.VK_ICD_FILENAMES && !hasGpuDeviceNode()) {
    // No GPU: go straight to SwiftShader. Probing first would load Mesa's lavapipe, which Dawn
    // rejects, and two CPU drivers in one process are best avoided.
    const icd = SWIFTSHADER_ICDS.find((path) => existsSync(path));
    if (icd) process.env.VK_ICD_FILENAMES = icd;
  }
  const gpu = create([]);
  liveInstances.push(gpu);
  try {
    return await requestGpu(gpu, options);
  } catch (error) {
    const hint =
      ' In Node rlplay uses Dawn through the `webgpu` package: it needs libvulkan1 and a Vulkan driver ' +
      '(apt-get install libvulkan1 chromium gives SwiftShader, a CPU driver), or VK_ICD_FILENAMES pointing at one.';
    throw new Error((error as Error).message + hint);
  }
}
