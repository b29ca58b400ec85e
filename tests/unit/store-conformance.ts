// The cases every TrajectoryStore passes, run against each implementation (store-files.test.ts,
// store-indexeddb.test.ts).
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { JsonlImportError, StoreQuotaError, type Episode, type StepInput, type TrajectoryStore } from '../../src/store/types.ts';

export interface StoreHarness {
  store: TrajectoryStore;
  /** Makes every write fail as a full storage would (QuotaExceededError, ENOSPC), or stops that. */
  setFull(full: boolean): void;
  /** A second store on the same storage, as after a reload. */
  reopen(): Promise<TrajectoryStore>;
  cleanup(): Promise<void>;
}

export function episode(runId: string, index: number, over: Partial<Episode> = {}): Episode {
  return { runId, index, envId: 'grid-world', seed: 100 + index, split: index % 3 === 0 ? 'test' : 'train', totalReward: index / 2, success: index % 2 === 0, length: 3, createdAt: 1_700_000_000_000 + index, ...over };
}

export function steps(n = 3): StepInput[] {
  return Array.from({ length: n }, (_, t) => ({
    t,
    observation: `obs ${t} ✓ "quoted"\nline`,
    action: `act ${t}`,
    reward: t === n - 1 ? 1 : -0.25,
    terminated: t === n - 1,
    truncated: false,
    info: t === n - 1 ? { success: true, nested: { a: [1, 2] } } : {},
    ...(t === 0 ? { tokens: { ids: [5, 6, 7], actionMask: [0, 1, 1], logprobs: [-0.5, -1.25] } } : {}),
  }));
}

export function storeConformance(name: string, make: () => Promise<StoreHarness>): void {
  describe(`TrajectoryStore conformance: ${name}`, () => {
    let h: StoreHarness;
    let store: TrajectoryStore;
    beforeEach(async () => {
      h = await make();
      store = h.store;
    });
    afterEach(async () => {
      await h.cleanup();
    });

    test('run lifecycle', async () => {
      const a = await store.createRun({ id: 'run-a', config: { lr: 1e-4, env: 'grid' }, createdAt: 1000 });
      expect(a).toEqual({ id: 'run-a', createdAt: 1000, config: { lr: 1e-4, env: 'grid' }, status: 'running' });
      const b = await store.createRun({ config: {}, note: 'second', createdAt: 2000 });
      expect(b.id).toMatch(/^run-/);
      await expect(store.createRun({ id: 'run-a', config: {} })).rejects.toThrow(/already exists/);
      await expect(store.createRun({ id: '../evil', config: {} })).rejects.toThrow(/not valid/);
      expect((await store.listRuns()).map((r) => r.id)).toEqual([b.id, 'run-a']);
      const paused = await store.updateRun('run-a', { status: 'paused', note: 'lunch' });
      expect(paused).toMatchObject({ id: 'run-a', status: 'paused', note: 'lunch', createdAt: 1000 });
      await expect(store.updateRun('nope', { status: 'failed' })).rejects.toThrow(/does not exist/);
      await expect(store.updateRun('run-a', { status: 'bogus' as never })).rejects.toThrow(/status/);
      // survives a reload
      const again = await h.reopen();
      expect(await again.getRun('run-a')).toEqual(paused);
      await store.addEpisode(episode('run-a', 0), steps());
      await store.addMetrics([{ runId: 'run-a', step: 1, name: 'loss', value: 1, time: 1 }]);
      await store.saveCheckpoint({ runId: 'run-a', step: 1, files: new Map([['a.bin', Uint8Array.of(1)]]) });
      await store.deleteRun('run-a');
      expect(await store.getRun('run-a')).toBeUndefined();
      expect((await store.listEpisodes('run-a')).total).toBe(0);
      expect(await store.listMetrics('run-a')).toEqual([]);
      expect(await store.latestCheckpoint('run-a')).toBeUndefined();
      expect((await store.listRuns()).map((r) => r.id)).toEqual([b.id]);
      await store.deleteRun('run-a'); // nothing to do
    });

    test('episodes with steps round-trip, atomically', async () => {
      await store.createRun({ id: 'r', config: {} });
      await store.addEpisode(episode('r', 0), steps(3));
      await store.addEpisode(episode('r', 1, { success: false, error: 'env threw: TypeError: x is undefined', length: 1 }), steps(1));
      const got = await store.getEpisode('r', 0);
      expect(got).toEqual({ ...episode('r', 0), steps: steps(3).map((s) => ({ ...s, runId: 'r', episodeIndex: 0 })) });
      expect((await store.getEpisode('r', 1))?.error).toBe('env threw: TypeError: x is undefined');
      expect(await store.getEpisode('r', 7)).toBeUndefined();
      // a duplicate index, an unknown run, a bad step: nothing of them is stored
      await expect(store.addEpisode(episode('r', 0), steps(2))).rejects.toThrow(/already has episode 0/);
      await expect(store.addEpisode(episode('ghost', 0), steps(2))).rejects.toThrow(/does not exist/);
      await expect(store.addEpisode(episode('r', 2), [...steps(2), { ...steps(1)[0], t: 2, reward: Number.NaN }])).rejects.toThrow(/reward/);
      expect(await store.getEpisode('r', 2)).toBeUndefined();
      expect((await store.getEpisode('r', 0))?.steps).toHaveLength(3);
      const again = await h.reopen();
      expect(await again.getEpisode('r', 0)).toEqual(got);
    });

    test('filtering and paging', async () => {
      await store.createRun({ id: 'r', config: {} });
      for (let i = 9; i >= 0; i--) await store.addEpisode(episode('r', i), steps(2));
      const all = await store.listEpisodes('r');
      expect(all.total).toBe(10);
      expect(all.items.map((e) => e.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
      expect(all.items[0]).not.toHaveProperty('steps');
      expect((await store.listEpisodes('r', { split: 'test' })).items.map((e) => e.index)).toEqual([0, 3, 6, 9]);
      expect((await store.listEpisodes('r', { success: false })).items.map((e) => e.index)).toEqual([1, 3, 5, 7, 9]);
      expect((await store.listEpisodes('r', { minReward: 1, maxReward: 3 })).items.map((e) => e.index)).toEqual([2, 3, 4, 5, 6]);
      const page = await store.listEpisodes('r', { split: 'train' }, { offset: 2, limit: 2 });
      expect(page).toMatchObject({ total: 6 });
      expect(page.items.map((e) => e.index)).toEqual([4, 5]);
      expect((await store.listEpisodes('r', {}, { offset: 8, limit: 5 })).items.map((e) => e.index)).toEqual([8, 9]);
      expect((await store.listEpisodes('other')).total).toBe(0);
    });

    test('metrics', async () => {
      await store.createRun({ id: 'r', config: {} });
      await store.createRun({ id: 's', config: {} });
      await store.addMetrics([
        { runId: 'r', step: 2, name: 'loss', value: 0.5, time: 20 },
        { runId: 'r', step: 1, name: 'loss', value: 0.9, time: 10 },
        { runId: 'r', step: 1, name: 'reward', value: -1, time: 10 },
        { runId: 's', step: 1, name: 'loss', value: 7, time: 10 },
      ]);
      await store.addMetrics([{ runId: 'r', step: 3, name: 'loss', value: Number.NaN, time: 30 }, { runId: 'r', step: 3, name: 'kl', value: Number.POSITIVE_INFINITY, time: 30 }]);
      await expect(store.addMetrics([{ runId: 'ghost', step: 1, name: 'loss', value: 1, time: 1 }])).rejects.toThrow(/does not exist/);
      const loss = await store.listMetrics('r', 'loss');
      expect(loss.map((m) => [m.step, m.value])).toEqual([
        [1, 0.9],
        [2, 0.5],
        [3, Number.NaN],
      ]);
      expect((await store.listMetrics('r')).map((m) => `${m.step}:${m.name}`)).toEqual(['1:loss', '1:reward', '2:loss', '3:loss', '3:kl']);
      expect((await store.listMetrics('r', 'kl'))[0]).toEqual({ runId: 'r', step: 3, name: 'kl', value: Number.POSITIVE_INFINITY, time: 30 });
      expect(await (await h.reopen()).listMetrics('s')).toEqual([{ runId: 's', step: 1, name: 'loss', value: 7, time: 10 }]);
    });

    test('checkpoints: keep the last K, binary files byte for byte', async () => {
      await store.createRun({ id: 'r', config: {} });
      expect(await store.latestCheckpoint('r')).toBeUndefined();
      const files = (step: number) => {
        const big = new Uint8Array(70_000);
        for (let i = 0; i < big.length; i++) big[i] = (i * 31 + step) & 0xff;
        // a view on part of a larger buffer must be stored as just the view
        const backing = new Uint8Array(16).fill(0xee);
        backing.set([0, 255, 10, 13, 0], 4);
        return new Map<string, Uint8Array>([
          ['adapter_model.safetensors', big],
          ['trainer_state.json', new TextEncoder().encode(JSON.stringify({ step }))],
          ['onnx/model.bin', backing.subarray(4, 9)],
          ['empty.bin', new Uint8Array(0)],
        ]);
      };
      for (const step of [10, 20, 30, 40]) await store.saveCheckpoint({ runId: 'r', step, files: files(step) });
      expect(await store.listCheckpoints('r')).toEqual([20, 30, 40]);
      const latest = await store.latestCheckpoint('r');
      expect(latest?.step).toBe(40);
      const want = files(40);
      expect([...latest!.files.keys()].sort()).toEqual([...want.keys()].sort());
      for (const [name, bytes] of want) expect(Buffer.from(latest!.files.get(name)!).equals(Buffer.from(bytes)), name).toBe(true);
      // an older one kept, by its step; a pruned one, or one of no run, is not there
      const older = await store.getCheckpoint('r', 30);
      expect(older?.step).toBe(30);
      expect(Buffer.from(older!.files.get('adapter_model.safetensors')!).equals(Buffer.from(files(30).get('adapter_model.safetensors')!))).toBe(true);
      expect(await store.getCheckpoint('r', 10)).toBeUndefined();
      expect(await store.getCheckpoint('no-such-run', 30)).toBeUndefined();
      await store.saveCheckpoint({ runId: 'r', step: 50, files: files(50) }, { keep: 1 });
      expect(await store.listCheckpoints('r')).toEqual([50]);
      // the same step again replaces it
      await store.saveCheckpoint({ runId: 'r', step: 50, files: new Map([['only.bin', Uint8Array.of(9)]]) });
      expect([...(await (await h.reopen()).latestCheckpoint('r'))!.files]).toEqual([['only.bin', Uint8Array.of(9)]]);
      await expect(store.saveCheckpoint({ runId: 'r', step: 60, files: new Map([['../x', Uint8Array.of(1)]]) })).rejects.toThrow(/relative path/);
    });

    test('JSONL export → import into a new run round-trips', async () => {
      await store.createRun({ id: 'src', config: {} });
      await store.addEpisode(episode('src', 0), steps(3));
      await store.addEpisode(episode('src', 1, { error: 'boom' }), steps(1));
      await store.addEpisode(episode('src', 2), []);
      const text = await store.exportJsonl('src');
      const lines = text.split('\n');
      expect(lines).toHaveLength(4);
      expect(lines[3]).toBe('');
      expect(JSON.parse(lines[0])).not.toHaveProperty('runId');
      const result = await store.importJsonl(text);
      expect(result.episodes).toBe(3);
      expect(result.runId).not.toBe('src');
      expect(await store.getRun(result.runId)).toBeDefined();
      for (const i of [0, 1, 2]) {
        const a = await store.getEpisode('src', i);
        const b = await store.getEpisode(result.runId, i);
        expect(b).toEqual({ ...a, runId: result.runId, steps: a!.steps.map((s) => ({ ...s, runId: result.runId })) });
      }
      expect(await store.exportJsonl(result.runId)).toBe(text);
      // into a named run, created on the fly; again into it clashes
      expect(await store.importJsonl(`\n${text}\r\n`, 'named')).toEqual({ runId: 'named', episodes: 3 });
      await expect(store.importJsonl(text, 'named')).rejects.toThrow(/already has episode 0/);
    });

    test('a malformed JSONL line gives an error naming the line, and nothing is imported', async () => {
      await store.createRun({ id: 'src', config: {} });
      await store.addEpisode(episode('src', 0), steps(2));
      await store.addEpisode(episode('src', 1), steps(2));
      const [l1, l2] = (await store.exportJsonl('src')).split('\n');
      const cases: [string, number, RegExp][] = [
        [`${l1}\n{"index": 5, "envId": "x"`, 2, /not valid JSON/],
        [`${l1}\n${l2}\n${l2.replace('"split":"train"', '"split":"dev"')}`, 3, /split/],
        [`${l1}\n\n${l2.replace('"reward":1', '"reward":"1"')}`, 3, /step 1: reward/],
        [`[1,2]`, 1, /not a JSON object/],
        [`${l1}\n${l1}`, 2, /twice/],
      ];
      for (const [text, line, reason] of cases) {
        const error = await store.importJsonl(text, 'target').catch((e: unknown) => e);
        expect(error).toBeInstanceOf(JsonlImportError);
        expect((error as JsonlImportError).line).toBe(line);
        expect((error as Error).message).toMatch(new RegExp(`^line ${line}: `));
        expect((error as Error).message).toMatch(reason);
      }
      expect(await store.getRun('target')).toBeUndefined();
    });

    test('a full storage surfaces as StoreQuotaError and keeps nothing of the failed write', async () => {
      await store.createRun({ id: 'r', config: {} });
      await store.addEpisode(episode('r', 0), steps(2));
      await store.saveCheckpoint({ runId: 'r', step: 1, files: new Map([['a.bin', Uint8Array.of(1, 2, 3)]]) });
      h.setFull(true);
      const error = await store.addEpisode(episode('r', 1), steps(3)).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StoreQuotaError);
      expect((error as Error).message).toMatch(/^storage is full: [\d.]+ MB used; delete old runs or export them$/);
      await expect(store.saveCheckpoint({ runId: 'r', step: 2, files: new Map([['a.bin', Uint8Array.of(4)]]) }, { keep: 1 })).rejects.toBeInstanceOf(StoreQuotaError);
      await expect(store.addMetrics([{ runId: 'r', step: 1, name: 'loss', value: 1, time: 1 }])).rejects.toBeInstanceOf(StoreQuotaError);
      h.setFull(false);
      expect(await store.getEpisode('r', 1)).toBeUndefined();
      expect((await store.listEpisodes('r')).total).toBe(1);
      expect(await store.listMetrics('r')).toEqual([]);
      // the old checkpoint was not dropped for the failed one
      expect(await store.listCheckpoints('r')).toEqual([1]);
      expect((await store.latestCheckpoint('r'))?.files.get('a.bin')).toEqual(Uint8Array.of(1, 2, 3));
      // and the store works on once there is room
      await store.addEpisode(episode('r', 1), steps(3));
      expect((await store.getEpisode('r', 1))?.steps).toHaveLength(3);
    });
  });
}
