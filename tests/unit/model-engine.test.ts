import { existsSync } from 'node:fs';
import { describe, test } from 'vitest';
import { FileModelSource } from '../../src/engine/model/source-node.ts';
import { modelChecks } from '../shared/model-checks.ts';
import { nodeGpu } from '../support/node-gpu.ts';
import { STORIES260K_DIR } from '../support/model-folder.ts';

const fixture = existsSync(STORIES260K_DIR) ? new FileModelSource(STORIES260K_DIR) : null;
if (!fixture) console.warn(`stories260K fixture not found at ${STORIES260K_DIR}: its checks are skipped`);

describe('engine end to end (Node, Dawn)', () => {
  for (const check of modelChecks) {
    test.skipIf(check.needsFixture && !fixture)(check.name, async () => check.run(await nodeGpu(), fixture));
  }
});
