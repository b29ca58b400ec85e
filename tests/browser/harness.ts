// The engine's GPU checks, run inside the page: gpu.spec.ts drives them through window.rlplayChecks,
// so the same checks that Vitest runs on Dawn also run on Chromium's WebGPU.
import { requestGpu, type GpuContext } from '../../src/engine/gpu/device.ts';
import type { ModelSource } from '../../src/engine/model/types.ts';
import { HttpModelSource } from '../../src/engine/model/source.ts';
import { browserChecks } from './checks.ts';

export interface CheckResult {
  ok: boolean;
  error?: string;
  /** Why the check did not run (it needs the stories260K fixture and the server has none). */
  skipped?: string;
  ms: number;
}

export interface RlplayChecks {
  /** The adapter the checks run on, e.g. "google swiftshader ..."; throws if WebGPU is unavailable. */
  adapter(): Promise<string>;
  names(): string[];
  run(name: string): Promise<CheckResult>;
}

declare global {
  interface Window {
    rlplayChecks: RlplayChecks;
  }
}

const FIXTURE_URL = `${location.origin}/fixtures/stories260K/`;

interface Runner {
  needsFixture: boolean;
  run(gpu: GpuContext, fixture: ModelSource | null): Promise<void>;
}

const runners = new Map<string, Runner>();
for (const check of browserChecks) {
  if (runners.has(check.name)) throw new Error(`two checks are named ${JSON.stringify(check.name)}`);
  const needsFixture = 'needsFixture' in check && check.needsFixture === true;
  runners.set(check.name, { needsFixture, run: (gpu, fixture) => check.run(gpu, fixture) });
}

// One device for every check, as in the Node tests; requested on first use so a failure is reported.
let gpuPromise: Promise<GpuContext> | null = null;
function gpu(): Promise<GpuContext> {
  gpuPromise ??= requestGpu(navigator.gpu, { onLost: (reason) => console.error(`GPU device lost: ${reason}`) });
  return gpuPromise;
}

let fixturePromise: Promise<ModelSource | null> | null = null;
function fixture(): Promise<ModelSource | null> {
  fixturePromise ??= fetch(`${FIXTURE_URL}config.json`, { method: 'HEAD' }).then((response) =>
    response.ok ? new HttpModelSource(FIXTURE_URL) : null,
  );
  return fixturePromise;
}

/** The message and, where there is one, the stack (which in Chromium starts with the message). */
function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  return error.stack?.includes(error.message) ? error.stack : `${error.name}: ${error.message}\n${error.stack ?? ''}`;
}

window.rlplayChecks = {
  async adapter() {
    return (await gpu()).adapterName;
  },
  names() {
    return [...runners.keys()];
  },
  async run(name) {
    const runner = runners.get(name);
    if (!runner) return { ok: false, error: `no check named ${JSON.stringify(name)}`, ms: 0 };
    const stories260K = await fixture();
    if (runner.needsFixture && !stories260K) return { ok: true, skipped: `no stories260K fixture at ${FIXTURE_URL}`, ms: 0 };
    const start = performance.now();
    try {
      await runner.run(await gpu(), stories260K);
      return { ok: true, ms: performance.now() - start };
    } catch (error) {
      return { ok: false, error: describe(error), ms: performance.now() - start };
    }
  },
};

document.getElementById('status')!.textContent = 'ready';
