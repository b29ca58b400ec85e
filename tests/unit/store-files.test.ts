// The files store (Node): the shared conformance cases in a temp folder, and what only files have:
// torn lines left by a killed write.
import { mkdtemp, readFile, rm, appendFile, readdir, mkdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, test } from 'vitest';
import { FileTrajectoryStore } from '../../src/store/files.ts';
import { episode, steps, storeConformance } from './store-conformance.ts';

storeConformance('files', async () => {
  const root = await mkdtemp(join(tmpdir(), 'rlplay-store-'));
  let full = false;
  const options = {
    onWarning: () => {},
    beforeWrite: () => {
      if (full) throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', errno: -28 });
    },
  };
  return {
    store: new FileTrajectoryStore(root, options),
    setFull: (f: boolean) => {
      full = f;
    },
    reopen: async () => new FileTrajectoryStore(root, options),
    cleanup: () => rm(root, { recursive: true, force: true }),
  };
});

let root: string;
let warnings: string[];
let store: FileTrajectoryStore;
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'rlplay-store-'));
  warnings = [];
  store = new FileTrajectoryStore(root, { onWarning: (m) => warnings.push(m) });
});
afterEach(() => rm(root, { recursive: true, force: true }));

test('a torn trailing line is ignored and reported; earlier episodes survive, and the next append cuts it off', async () => {
  await store.createRun({ id: 'r', config: {} });
  await store.addEpisode(episode('r', 0), steps(3));
  await store.addEpisode(episode('r', 1), steps(2));
  await store.addMetrics([{ runId: 'r', step: 1, name: 'loss', value: 1, time: 1 }]);
  const path = join(root, 'r', 'trajectories.jsonl');
  const before = await readFile(path, 'utf8');
  // killed halfway through writing episode 2
  const whole = (await store.exportJsonl('r')).split('\n')[0].replace('"index":0', '"index":2');
  await appendFile(path, whole.slice(0, 57));
  await appendFile(join(root, 'r', 'metrics.jsonl'), '{"runId":"r","step":2,"na');
  const fresh = new FileTrajectoryStore(root, { onWarning: (m) => warnings.push(m) });
  expect((await fresh.listEpisodes('r')).items.map((e) => e.index)).toEqual([0, 1]);
  expect((await fresh.getEpisode('r', 1))?.steps).toHaveLength(2);
  expect(await fresh.getEpisode('r', 2)).toBeUndefined();
  expect((await fresh.listMetrics('r')).map((m) => m.step)).toEqual([1]);
  expect(warnings.some((w) => w.includes('trajectories.jsonl') && /torn last line \(line 3/.test(w))).toBe(true);
  expect(warnings.some((w) => w.includes('metrics.jsonl') && /torn/.test(w))).toBe(true);
  expect(await fresh.exportJsonl('r')).toBe(before);
  // the next episode does not glue onto the torn bytes
  await fresh.addEpisode(episode('r', 2), steps(1));
  expect(await readFile(path, 'utf8')).toBe(`${before}${(await fresh.exportJsonl('r')).split('\n')[2]}\n`);
  expect((await new FileTrajectoryStore(root, { onWarning: () => {} }).listEpisodes('r')).total).toBe(3);
  expect(warnings.some((w) => /cut off a torn last line/.test(w))).toBe(true);
});

test('layout: a folder per run, checkpoints/<step>/<file>, no temp leftovers', async () => {
  await store.createRun({ id: 'r', config: { a: 1 } });
  await store.addEpisode(episode('r', 0), steps(1));
  // leftovers of a checkpoint write that was killed
  await mkdir(join(root, 'r', 'checkpoints', '.tmp-99-x'), { recursive: true });
  await writeFile(join(root, 'r', 'checkpoints', '.tmp-99-x', 'half.bin'), 'x');
  await store.saveCheckpoint({ runId: 'r', step: 5, files: new Map([['sub/w.bin', Uint8Array.of(1)]]) });
  expect((await readdir(join(root, 'r'))).sort()).toEqual(['checkpoints', 'run.json', 'trajectories.jsonl']);
  expect(await readdir(join(root, 'r', 'checkpoints'))).toEqual(['5']);
  expect(await readFile(join(root, 'r', 'checkpoints', '5', 'sub', 'w.bin'))).toEqual(Buffer.of(1));
  expect(JSON.parse(await readFile(join(root, 'r', 'run.json'), 'utf8'))).toMatchObject({ id: 'r', config: { a: 1 } });
  expect(await store.listCheckpoints('r')).toEqual([5]);
});

test('a damaged run.json names the file and says what to do, instead of a bare JSON error', async () => {
  await store.createRun({ id: 'r', config: {} });
  for (const [text, problem] of [
    ['{"id": "r", "config": {', 'is not valid JSON ('],
    ['\u0000\u0000\u0000', 'is not valid JSON ('],
    ['null', 'holds null, not a run record'],
  ]) {
    await writeFile(join(root, 'r', 'run.json'), text);
    const error = await store.getRun('r').catch((e: unknown) => e as Error);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toContain(`${join(root, 'r', 'run.json')} ${problem}`);
    expect((error as Error).message).toMatch(/: the run folder .* is damaged; move it away \(or delete it\) to start the run again, or pass another --out$/);
  }
});
