import { describe, test } from 'vitest';
import { backwardChecks, backwardReferenceChecks } from '../shared/backward-checks.ts';
import { nodeGpu } from '../support/node-gpu.ts';

describe('float64 backward references against finite differences', () => {
  for (const check of backwardReferenceChecks) test(check.name, () => check.run());
});

describe('WGSL backward kernels against float64 references (Node, Dawn)', () => {
  for (const check of backwardChecks) test(check.name, async () => check.run(await nodeGpu()));
});
