// Does RL learn on a real model? A short, seeded version of bench:learn: REINFORCE trains stories260K
// (a TinyStories model that knows nothing of tools) on the tool-use environment in action-level mode,
// and the greedy policy on held-out test instances must do better than before. Untrained, it answers
// at once with a guess (return 0); 48 episodes are enough for it to learn to look up the key the
// question names first, which the environment rewards (+0.1 per needed lookup). The full-length
// figures (test success over 2,000 episodes) come from `npm run bench:learn`.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { makePolicy } from '../../src/agent/policies.ts';
import type { PlayedEpisode } from '../../src/agent/policy.ts';
import type { GpuLoraAdapter } from '../../src/engine/lora/gpu-adapter.ts';
import { loadModel } from '../../src/engine/model.ts';
import { FileModelSource } from '../../src/engine/model/source-node.ts';
import toolUse from '../../src/env/builtin/tool-use.ts';
import { evaluatePolicy } from '../../src/rl/evaluate.ts';
import { TRAIN_DEFAULTS, trainRun } from '../../src/rl/run.ts';
import { FileTrajectoryStore } from '../../src/store/files.ts';
import { STORIES260K_DIR } from '../support/model-folder.ts';
import { nodeGpu } from '../support/node-gpu.ts';

const root = mkdtempSync(join(tmpdir(), 'rlplay-learn-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe.skipIf(!existsSync(STORIES260K_DIR))('RL on stories260K', () => {
  test('48 REINFORCE episodes on tool-use raise the greedy test policy\'s return: it learns to use the lookup tool', async () => {
    const model = await loadModel(await nodeGpu(), new FileModelSource(STORIES260K_DIR));
    const config = { ...TRAIN_DEFAULTS, model: STORIES260K_DIR, env: toolUse.id, algo: 'reinforce' as const, episodes: 48, seed: 0 };
    const evaluate = async (adapter: GpuLoraAdapter | null) => {
      const played: PlayedEpisode[] = [];
      const policy = makePolicy(model, { ...config, env: toolUse, reset: { split: 'test', difficulty: 1 }, adapter });
      const report = await evaluatePolicy(policy, { episodes: 16, firstSeed: 1_000_000, onPlayed: (e) => played.push(e) });
      return { report, lookupsFirst: played.filter((e) => e.steps[0].action.startsWith('lookup:')).length };
    };
    try {
      const before = await evaluate(null);
      const outcome = await trainRun(model, toolUse, new FileTrajectoryStore(root), 'tool-use-reinforce', config);
      const after = await evaluate(outcome.adapter);
      outcome.adapter.dispose();
      expect(outcome.episodes).toBe(48);
      expect(before.report.failedEpisodes + after.report.failedEpisodes).toBe(0);
      expect(after.lookupsFirst).toBeGreaterThanOrEqual(before.lookupsFirst + 8);
      expect(after.report.meanReturn.value).toBeGreaterThan(before.report.meanReturn.value + 0.05);
      expect(after.report.successRate.value).toBeGreaterThanOrEqual(before.report.successRate.value);
    } finally {
      model.dispose();
    }
  }, 900_000); // about 4 minutes on two CPU cores with SwiftShader
});
