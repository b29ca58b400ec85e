// The probe environments of the benchmarks (bench/envs/), loaded as custom environment files: they
// must keep the contract the built-ins keep (tests/support/env-contract.ts), so that what the
// benchmarks measure is the skill they probe.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { loadEnvFile, type WorkerEnvModule } from '../../src/env/load-node.ts';

describe('bench/envs/copy-number.js', () => {
  let module: WorkerEnvModule;
  beforeAll(async () => {
    module = await loadEnvFile(join(import.meta.dirname, '../../bench/envs/copy-number.js'));
  });
  afterAll(async () => {
    await module?.dispose();
  });

  test('the expert always succeeds, a fixed pick about a third of the time; seeds replay; the splits do not overlap', async () => {
    const env = await module.make();
    const instances = { train: new Set<string>(), test: new Set<string>() };
    let expertWins = 0;
    let firstWins = 0;
    for (const split of ['train', 'test'] as const) {
      for (let seed = 0; seed < 200; seed++) {
        const reset = await env.reset({ seed, options: { split } });
        instances[split].add(JSON.stringify(reset.info.instance));
        const actions = await env.validActions!();
        expect(actions).toHaveLength(3);
        const expert = await env.expertAction!();
        expect(actions).toContain(expert);
        // The number to copy is in the observation; the expert's answer is it.
        expect(reset.observation).toContain(`→ ${expert.slice('answer: '.length)} `);
        expertWins += (await env.step(expert)).info.success ? 1 : 0;
        const again = await env.reset({ seed, options: { split } });
        expect(again).toEqual(reset);
        firstWins += (await env.step(actions[0])).info.success ? 1 : 0;
      }
    }
    expect(expertWins).toBe(400);
    expect(firstWins / 400).toBeGreaterThan(0.2);
    expect(firstWins / 400).toBeLessThan(0.5);
    expect([...instances.train].filter((i) => instances.test.has(i))).toEqual([]);
    await env.close?.();
  });
});
