// The GPU checks that run in Chromium, in order. harness.ts runs them in the page; gpu.spec.ts lists
// them in Node (through a child process that understands `?raw` imports). Add a check array here
// and it runs in the browser too, one Playwright test per check.
import { backwardChecks } from '../shared/backward-checks.ts';
import { kernelChecks, type GpuCheck } from '../shared/kernel-checks.ts';
import { modelChecks, type ModelCheck } from '../shared/model-checks.ts';
import { optimizerChecks } from '../shared/optimizer-checks.ts';
import { trainChecks } from '../shared/train-checks.ts';

export type BrowserCheck = GpuCheck | ModelCheck;

export const browserChecks: BrowserCheck[] = [
  ...kernelChecks,
  ...modelChecks,
  ...backwardChecks,
  ...optimizerChecks,
  ...trainChecks,
];
