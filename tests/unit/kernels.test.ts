import { describe, test } from 'vitest';
import { kernelChecks } from '../shared/kernel-checks.ts';
import { nodeGpu } from '../support/node-gpu.ts';

describe('WGSL kernels against float64 references (Node, Dawn)', () => {
  for (const check of kernelChecks) test(check.name, async () => check.run(await nodeGpu()));
});
