// Models from the Hugging Face Hub (`hf:OWNER/REPO[@REVISION]`), against a local server in Hub layout
// (tests/support/hub-server.ts) serving the stories260K fixture: the same logits as from its folder,
// a second load from the cache folder with the server down, clear errors for a missing file, a
// missing repository and a gated one, and cut downloads resumed with Range (or restarted) byte for byte.
import { execFile, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { loadModel, type Model } from '../../src/engine/model.ts';
import {
  CURATED_MODELS,
  HubError,
  HubModelSource,
  curatedModelsHelp,
  formatHubId,
  formatParameterCount,
  parseHubId,
  peftBaseModelName,
} from '../../src/engine/model/hub.ts';
import { FolderHubCache, hubCacheDir, openHubSource } from '../../src/engine/model/hub-node.ts';
import { loadModelFiles } from '../../src/engine/model/load.ts';
import type { WeightsProgress } from '../../src/engine/model/weights.ts';
import { openAdapterSource, openModelSource } from '../../src/engine/model/source-node.ts';
import { ModelLoadError, type HostWeights, type ModelSource } from '../../src/engine/model/types.ts';
import { STORIES260K_DIR, writePaddedSafetensors } from '../support/model-folder.ts';
import { HUB_COMMIT, serveHub, type HubServer } from '../support/hub-server.ts';
import { nodeGpu } from '../support/node-gpu.ts';

const MODEL_ID = 'hf:fixture-owner/stories260K';
const ADAPTER_ID = 'hf:fixture-owner/stories260K-lora';
const REPOS = { 'fixture-owner/stories260K': STORIES260K_DIR, 'fixture-owner/stories260K-lora': join(STORIES260K_DIR, 'lora-synthetic-r4') };

/** Byte-for-byte equality (toEqual walks a megabyte element by element, slowly). */
function expectSameBytes(actual: Uint8Array, expected: Uint8Array): void {
  expect(actual.length).toBe(expected.length);
  expect(Buffer.compare(actual, expected)).toBe(0);
}

/** Every tensor of two loads holds the same values. */
function expectSameWeights(actual: HostWeights, expected: HostWeights): void {
  const tensors = (w: HostWeights) => [w.embedding, w.lmHead, w.finalNorm, ...w.layers.flatMap((l) => [l.inputNorm, l.postAttentionNorm, ...[l.q, l.k, l.v, l.o, l.gate, l.up, l.down].map((x) => x.weight)])];
  const [a, b] = [tensors(actual), tensors(expected)];
  expect(a.map((t) => t.name)).toEqual(b.map((t) => t.name));
  a.forEach((t, i) => expectSameBytes(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), new Uint8Array(b[i].data.buffer, b[i].data.byteOffset, b[i].data.byteLength)));
}

/** Records every read of the files `source` opens by offset. */
function spyOnFileReads(source: ModelSource): { file: string; offset: number; length: number }[] {
  const reads: { file: string; offset: number; length: number }[] = [];
  const openFile = source.openFile!.bind(source);
  vi.spyOn(source, 'openFile').mockImplementation(async (file, onProgress) => {
    const opened = await openFile(file, onProgress);
    return { size: opened.size, close: () => opened.close(), read: (offset, length, onRead) => (reads.push({ file, offset, length }), opened.read(offset, length, onRead)) };
  });
  return reads;
}

async function caught(run: () => Promise<unknown>): Promise<Error> {
  try {
    await run();
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected an error');
}

describe('Hub ids', () => {
  it('parses OWNER/REPO[@REVISION], with or without hf:, main by default', () => {
    expect(parseHubId('hf:HuggingFaceTB/SmolLM2-135M-Instruct')).toEqual({ owner: 'HuggingFaceTB', repo: 'SmolLM2-135M-Instruct', revision: 'main' });
    expect(parseHubId('Qwen/Qwen2.5-0.5B-Instruct@v1.0')).toEqual({ owner: 'Qwen', repo: 'Qwen2.5-0.5B-Instruct', revision: 'v1.0' });
    expect(parseHubId('hf:a/b@refs/pr/1').revision).toBe('refs/pr/1');
    expect(parseHubId(`hf:a/b@${HUB_COMMIT}`).revision).toBe(HUB_COMMIT);
    expect(formatHubId(parseHubId('hf:a/b'))).toBe('hf:a/b');
    expect(formatHubId(parseHubId('hf:a/b@dev'))).toBe('hf:a/b@dev');
    expect(peftBaseModelName('hf:a/b@dev')).toBe('a/b');
    // Anything else by its folder's name, as PEFT reads a local model: never this machine's URL or path.
    expect(peftBaseModelName('hf:a/b')).toBe('a/b');
    expect(peftBaseModelName('http://127.0.0.1:5173/models/rlplay-agent-mini/')).toBe('rlplay-agent-mini');
    expect(peftBaseModelName('https://example.org/my%20model')).toBe('my model');
    expect(peftBaseModelName('folder:stories260K/')).toBe('stories260K');
    expect(peftBaseModelName('/home/me/models/x')).toBe('x');
    expect(peftBaseModelName('C:\\models\\x\\')).toBe('x');
  });

  it('rejects malformed ids with the expected form', () => {
    for (const [id, why] of [
      ['hf:SmolLM2', 'exactly one "/"'],
      ['hf:a/b/c', 'exactly one "/"'],
      ['hf:a/b c', '"b c" may hold only'],
      ['hf:a/-b', '"-b" may hold only'],
      ['hf:a/b--c', '"b--c" may hold only'],
      ['hf:a/b@', '"" is not a branch'],
      ['hf:a/b@x..y', '"x..y" is not a branch'],
    ]) {
      expect(() => parseHubId(id), id).toThrow(ModelLoadError);
      expect(() => parseHubId(id), id).toThrow(why);
      expect(() => parseHubId(id), id).toThrow('write hf:OWNER/REPO or hf:OWNER/REPO@REVISION');
    }
  });

  it('lists the curated models with size, licence and description', () => {
    expect(CURATED_MODELS.map((m) => m.id)).toEqual(['HuggingFaceTB/SmolLM2-135M-Instruct', 'HuggingFaceTB/SmolLM2-360M-Instruct', 'Qwen/Qwen2.5-0.5B-Instruct']);
    expect(CURATED_MODELS.map((m) => formatParameterCount(m.parameters))).toEqual(['135M', '362M', '494M']);
    for (const m of CURATED_MODELS) {
      expect(parseHubId(m.id).revision).toBe('main');
      expect(m.licence).toBe('Apache-2.0');
      expect(curatedModelsHelp()).toContain(`hf:${m.id}`);
    }
    expect(formatParameterCount(1_543_714_304)).toBe('1.5B');
  });

  it('keeps downloads in $RLPLAY_CACHE/hub, else under XDG_CACHE_HOME or ~/.cache', () => {
    expect(hubCacheDir({ RLPLAY_CACHE: '/tmp/rl' })).toBe('/tmp/rl/hub');
    expect(hubCacheDir({ XDG_CACHE_HOME: '/tmp/xdg' })).toBe('/tmp/xdg/rlplay/hub');
    expect(hubCacheDir({})).toMatch(/\/\.cache\/rlplay\/hub$/);
  });

  it('downloads a file larger than one Node array into the cache folder, never whole into memory', async () => {
    // The server announces 5 GB and cuts the connection after 1000 bytes: what arrived is on disk
    // for the next try, and nothing tried to allocate the whole file (Node 20 cannot: 4 GiB at most).
    const root = await mkdtemp(join(tmpdir(), 'rlplay-hub-'));
    try {
      const size = 5_000_000_000;
      const fetch = async () => new Response(new Uint8Array(1000).fill(7), { headers: { 'content-length': String(size), 'x-repo-commit': HUB_COMMIT } });
      const source = new HubModelSource(parseHubId(MODEL_ID), { endpoint: 'http://127.0.0.1:9', cache: new FolderHubCache(root), fetch, maxAttempts: 1 });
      const error = await caught(() => source.openFile!('model-00001-of-00002.safetensors'));
      expect(error).toMatchObject({ kind: 'interrupted' });
      expect(error.message).toContain(`stopped after 1000 of ${size} bytes (the connection closed early); the 1000 bytes received are kept in the cache`);
      const partial = join(root, 'fixture-owner--stories260K', '.state', 'main', 'partial', 'model-00001-of-00002.safetensors');
      expect(await readFile(partial)).toEqual(Buffer.alloc(1000, 7));
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it('lets one download at a time write a file into the cache folder: another one meanwhile is refused, naming it', async () => {
    const root = await mkdtemp(join(tmpdir(), 'rlplay-hub-'));
    try {
      const file = 'model.safetensors';
      const bytes = Uint8Array.from({ length: 2000 }, (_, i) => i % 251);
      const headers = { 'content-length': '2000', 'x-repo-commit': HUB_COMMIT };
      let sendTheRest!: () => void;
      const rest = new Promise<void>((done) => (sendTheRest = done));
      const slowly = async () =>
        new Response(new ReadableStream({ async start(body) { body.enqueue(bytes.slice(0, 1000)); await rest; body.enqueue(bytes.slice(1000)); body.close(); } }), { headers });
      const atOnce = async () => new Response(bytes.slice(), { headers });
      const source = (fetch: typeof globalThis.fetch) => new HubModelSource(parseHubId(MODEL_ID), { endpoint: 'http://127.0.0.1:9', cache: new FolderHubCache(root), fetch });
      let halfway!: () => void;
      const firstHalf = new Promise<void>((done) => (halfway = done));
      const first = source(slowly).openFile!(file, (loaded) => loaded === 1000 && halfway());
      await firstHalf;

      const second = await caught(() => source(atOnce).openFile!(file));
      const claim = join(root, 'fixture-owner--stories260K', '.state', 'main', 'downloading', file);
      expect(second).toMatchObject({ kind: 'interrupted', file });
      expect(second.message).toBe(
        `${file} of fixture-owner/stories260K@main is being downloaded into ${root} by another download (process ${process.pid}): ` +
          `wait for it to finish, then try again; if no such process runs, delete ${claim}`,
      );
      sendTheRest();
      const opened = await first;
      try {
        expectSameBytes(await opened.read(0, opened.size), bytes);
      } finally {
        await opened.close();
      }
      expect(existsSync(claim)).toBe(false);

      // A claim left by a process that was killed is taken over.
      const other = 'model-00002-of-00002.safetensors';
      await writeFile(join(dirname(claim), other), String(spawnSync(process.execPath, ['-e', '']).pid));
      const taken = await source(atOnce).openFile!(other);
      expect(taken.size).toBe(2000);
      await taken.close();
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it('does not let a file name leave the repository', async () => {
    const source = new HubModelSource(parseHubId(MODEL_ID), { endpoint: 'http://127.0.0.1:9', cache: null });
    await expect(source.readBytes('../../etc/passwd')).rejects.toThrow('is not a file path inside a repository');
    await expect(source.exists('/abs.json')).rejects.toThrow('is not a file path inside a repository');
  });
});

describe.skipIf(!existsSync(STORIES260K_DIR))(`Hub downloads of stories260K (${STORIES260K_DIR}; skipped when absent)`, () => {
  let server: HubServer;
  let cacheRoot: string;
  const saved = { HF_ENDPOINT: process.env.HF_ENDPOINT, HF_TOKEN: process.env.HF_TOKEN, RLPLAY_CACHE: process.env.RLPLAY_CACHE };
  const fixtureBytes = (file: string) => readFile(join(STORIES260K_DIR, file));
  const cachedPath = (file: string) => join(cacheRoot, 'hub', 'fixture-owner--stories260K', 'main', file);
  const stateDir = join('hub', 'fixture-owner--stories260K', '.state', 'main');

  beforeAll(async () => {
    server = await serveHub(REPOS);
  });
  afterAll(async () => {
    await server?.close();
    for (const [name, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  });
  beforeEach(async () => {
    server.reset();
    cacheRoot = await mkdtemp(join(tmpdir(), 'rlplay-hub-'));
    process.env.HF_ENDPOINT = server.url;
    process.env.RLPLAY_CACHE = cacheRoot;
    delete process.env.HF_TOKEN;
  });
  afterEach(async () => {
    vi.restoreAllMocks();
    await rm(cacheRoot, { recursive: true, force: true });
  });

  /** Logits after every position of a few prompts. */
  async function logits(model: Model): Promise<Float32Array[][]> {
    const prompts = ['Once upon a time', 'Lily and Ben'].map((text) => model.tokenizer.encode(text));
    return (await model.score(prompts, { logits: true })).logits!;
  }

  async function load(source: ModelSource, onProgress?: Parameters<typeof loadModel>[2]): Promise<Float32Array[][]> {
    const model = await loadModel(await nodeGpu(), source, onProgress);
    try {
      return await logits(model);
    } finally {
      model.dispose();
    }
  }

  it('loads hf:OWNER/REPO as from its folder, then from the cache without asking the server, and with the server down', async () => {
    const fromFolder = await load(openModelSource(STORIES260K_DIR));

    const source = openModelSource(MODEL_ID);
    expect(source).toBeInstanceOf(HubModelSource);
    expect(source.location).toBe(MODEL_ID);
    const progress: { file: string; loadedBytes: number; totalBytes: number | null }[] = [];
    expect(await load(source, (p) => progress.push(p))).toEqual(fromFolder);
    const size = (await stat(join(STORIES260K_DIR, 'model.safetensors'))).size;
    expect(progress[0]).toEqual({ file: 'model.safetensors', loadedBytes: 0, totalBytes: size });
    expect(progress.at(-1)).toEqual({ file: 'model.safetensors', loadedBytes: size, totalBytes: size });
    // The first answer named its commit; every request after it went to that commit.
    expect(server.requests[0].revision).toBe('main');
    expect(server.requests.slice(-1)[0].revision).toBe(HUB_COMMIT);
    expect(await readFile(join(cacheRoot, stateDir, 'commit'), 'utf8')).toBe(HUB_COMMIT);
    // The cache holds the files as they are, and remembers what the repository lacks.
    expectSameBytes(await readFile(cachedPath('model.safetensors')), await fixtureBytes('model.safetensors'));
    expect(existsSync(join(cacheRoot, stateDir, 'missing', 'chat_template.jinja'))).toBe(true);

    server.requests.length = 0;
    const again: typeof progress = [];
    expect(await load(openModelSource(MODEL_ID), (p) => again.push(p))).toEqual(fromFolder);
    expect(server.requests).toEqual([]);
    // Read from the cache a tensor at a time, as from a folder.
    expect(again.at(-1)).toEqual({ file: 'model.safetensors', loadedBytes: size, totalBytes: size });
    expect(again.every((p, i) => p.totalBytes === size && (i === 0 || p.loadedBytes >= again[i - 1].loadedBytes))).toBe(true);

    // Offline: a server of its own, stopped; everything the loader asks for is in the cache.
    const gone = await serveHub(REPOS);
    process.env.HF_ENDPOINT = gone.url;
    await gone.close();
    const offline = openModelSource(MODEL_ID);
    expect(await load(offline)).toEqual(fromFolder);
    expect(await offline.exists('chat_template.jinja')).toBe(false);
    const error = await caught(() => offline.readText('README.md'));
    expect(error).toBeInstanceOf(HubError);
    expect(error.message).toContain(`could not reach ${gone.url} to download README.md of fixture-owner/stories260K@main`);
    expect(error.message).toContain(`it is not in the cache (${join(cacheRoot, 'hub')})`);
  });

  it('loads a PEFT adapter from the Hub', async () => {
    const model = await loadModel(await nodeGpu(), openModelSource(STORIES260K_DIR));
    try {
      const prompt = [model.tokenizer.encode('Once upon a time')];
      const fromFolder = await model.loadAdapter(openAdapterSource(join(STORIES260K_DIR, 'lora-synthetic-r4')));
      const fromHub = await model.loadAdapter(openAdapterSource(ADAPTER_ID));
      const a = await model.score(prompt, { logits: true, adapter: fromFolder });
      const b = await model.score(prompt, { logits: true, adapter: fromHub });
      expect(b.logits).toEqual(a.logits);
      fromFolder.dispose();
      fromHub.dispose();
    } finally {
      model.dispose();
    }
  });

  it('names the missing file, the missing repository and the missing revision', async () => {
    server.faults.missing.add('config.json');
    const missing = await caught(() => loadModelFiles(openModelSource(MODEL_ID)));
    expect(missing).toBeInstanceOf(HubError);
    expect(missing).toMatchObject({ kind: 'file-not-found', file: 'config.json' });
    expect(missing.message).toBe(`fixture-owner/stories260K@main has no file config.json (HTTP 404 Not Found from ${server.url})`);

    server.faults.missing.clear();
    server.faults.missing.add('tokenizer.json');
    const noTokenizer = await caught(() => loadModelFiles(openModelSource(MODEL_ID)));
    expect(noTokenizer.message).toContain(`${MODEL_ID} has no tokenizer.json`);

    const noRepo = await caught(() => loadModelFiles(openModelSource('hf:fixture-owner/nothing-here')));
    expect(noRepo).toMatchObject({ kind: 'repo-not-found' });
    expect(noRepo.message).toContain(`model repository fixture-owner/nothing-here not found on ${server.url} (HTTP 401 Unauthorized)`);
    expect(noRepo.message).toContain('if it is private, set HF_TOKEN');

    const noRevision = await caught(() => loadModelFiles(openModelSource(`${MODEL_ID}@v9`)));
    expect(noRevision).toMatchObject({ kind: 'revision-not-found' });
    expect(noRevision.message).toContain('fixture-owner/stories260K has no revision "v9"');
  });

  it('explains a gated repository, and loads it with HF_TOKEN', async () => {
    server.faults.gatedToken = 'hf_granted';
    const anonymous = await caught(() => loadModelFiles(openModelSource(MODEL_ID)));
    expect(anonymous).toMatchObject({ kind: 'gated' });
    expect(anonymous.message).toContain('fixture-owner/stories260K is gated or private and no access token was given (HTTP 401 Unauthorized)');
    expect(anonymous.message).toContain(`accept its licence on ${server.url}/fixture-owner/stories260K while logged in, then give an access token`);
    expect(anonymous.message).toContain('HF_TOKEN for the command line');

    process.env.HF_TOKEN = 'hf_other';
    const refused = await caught(() => loadModelFiles(openModelSource(MODEL_ID)));
    expect(refused.message).toContain('is gated or private and the access token given may not read it (HTTP 403 Forbidden)');

    process.env.HF_TOKEN = 'hf_granted';
    const files = await loadModelFiles(openModelSource(MODEL_ID));
    expect(files.config.numLayers).toBe(5);
    expect(server.requests.at(-1)!.authorization).toBe('Bearer hf_granted');
  });

  // The client may see the cut a little before the server's last bytes: a stream that errors drops
  // the chunks still queued in it. Hence "up to" afterBytes below, and the resume from what arrived.
  it('resumes a download cut mid-body with a Range request, byte for byte', async () => {
    server.faults.cut.set('model.safetensors', { afterBytes: 300_000, times: 1 });
    const progress: number[] = [];
    const bytes = await openModelSource(MODEL_ID).readBytes('model.safetensors', (loaded) => progress.push(loaded));
    expectSameBytes(bytes, await fixtureBytes('model.safetensors'));
    const [first, second, ...more] = server.requests.filter((r) => r.file === 'model.safetensors');
    expect([first.range, first.status, more.length]).toEqual([null, 200, 0]);
    const resumedAt = Number(/^bytes=(\d+)-$/.exec(second.range ?? '')?.[1]);
    expect(resumedAt).toBeGreaterThan(0);
    expect(resumedAt).toBeLessThanOrEqual(300_000);
    expect(second.status).toBe(206);
    expect(progress).toContain(resumedAt);
    expectSameBytes(await readFile(cachedPath('model.safetensors')), bytes);
  });

  it('keeps what a cut download received and resumes it in the next run', async () => {
    server.faults.cut.set('model.safetensors', { afterBytes: 400_000, times: 1 });
    const error = await caught(() => openHubSource(MODEL_ID, { maxAttempts: 1 }).readBytes('model.safetensors'));
    expect(error).toMatchObject({ kind: 'interrupted', file: 'model.safetensors' });
    const received = Number(/stopped after (\d+) of 1044992 bytes/.exec(error.message)?.[1]);
    expect(received).toBeGreaterThan(0);
    expect(received).toBeLessThanOrEqual(400_000);
    expect(error.message).toContain('kept in the cache and the next try resumes from there');
    expect(existsSync(cachedPath('model.safetensors'))).toBe(false);
    expect((await stat(join(cacheRoot, stateDir, 'partial', 'model.safetensors'))).size).toBe(received);

    const progress: number[] = [];
    const bytes = await openModelSource(MODEL_ID).readBytes('model.safetensors', (loaded) => progress.push(loaded));
    expectSameBytes(bytes, await fixtureBytes('model.safetensors'));
    expect(server.requests.filter((r) => r.file === 'model.safetensors').map((r) => [r.range, r.status])).toEqual([
      [null, 200],
      [`bytes=${received}-`, 206],
    ]);
    expect(progress[0]).toBe(received);
    expect(existsSync(join(cacheRoot, stateDir, 'partial', 'model.safetensors'))).toBe(false);
  });

  it('loads a shard a tensor at a time from the cache folder it is downloaded to, never reading it whole; a cut download resumes in the next run', async () => {
    server.faults.cut.set('model.safetensors', { afterBytes: 400_000, times: 1 });
    const error = await caught(() => loadModelFiles(openHubSource(MODEL_ID, { maxAttempts: 1 })));
    expect(error).toMatchObject({ kind: 'interrupted', file: 'model.safetensors' });
    const received = Number(/stopped after (\d+) of 1044992 bytes/.exec(error.message)?.[1]);
    expect(received).toBeGreaterThan(0);

    const source = openHubSource(MODEL_ID);
    const readBytes = vi.spyOn(source, 'readBytes');
    const cacheRead = vi.spyOn(FolderHubCache.prototype, 'read');
    const reads = spyOnFileReads(source);
    const progress: WeightsProgress[] = [];
    const files = await loadModelFiles(source, (p) => progress.push(p));
    expectSameWeights(files.weights, (await loadModelFiles(openModelSource(STORIES260K_DIR))).weights);

    const size = (await fixtureBytes('model.safetensors')).length;
    expect(readBytes.mock.calls.map(([file]) => file)).not.toContain('model.safetensors');
    expect(cacheRead.mock.calls.map(([, file]) => file)).not.toContain('model.safetensors');
    // The preamble, the header, then one read per tensor: none of them the whole file.
    const shardReads = reads.filter((r) => r.file === 'model.safetensors');
    expect(shardReads.length).toBe(2 + 47); // the embedding, 9 tensors in each of 5 layers, the final norm
    expect(Math.max(...shardReads.map((r) => r.length))).toBeLessThan(size / 2);
    // Downloaded from where the first run stopped, then read from the cache.
    expect(progress[0]).toEqual({ file: 'model.safetensors', loadedBytes: received, totalBytes: size });
    expect(progress.at(-1)).toEqual({ file: 'model.safetensors', loadedBytes: size, totalBytes: size });
    const downloads = server.requests.filter((r) => r.file === 'model.safetensors' && r.range !== 'bytes=0-0'); // not the loader's exists()
    expect(downloads.map((r) => [r.range, r.status])).toEqual([
      [null, 200],
      [`bytes=${received}-`, 206],
    ]);
    expectSameBytes(await readFile(cachedPath('model.safetensors')), await fixtureBytes('model.safetensors'));
    expect(existsSync(join(cacheRoot, stateDir, 'partial', 'model.safetensors'))).toBe(false);
    expect(existsSync(join(cacheRoot, stateDir, 'partial-info', 'model.safetensors.json'))).toBe(false);
  });

  it('loads a cached shard larger than one Node array (5 GB) by offsets, with the server down', async () => {
    const fromFolder = await loadModelFiles(openModelSource(STORIES260K_DIR));
    await loadModelFiles(openModelSource(MODEL_ID));
    // The cached shard as a Hub shard of 5 GB: a sparse tensor first, the model's own after it.
    const size = await writePaddedSafetensors(cachedPath('model.safetensors'), await fixtureBytes('model.safetensors'), 5_000_000_000);
    expect(size).toBeGreaterThan(2 ** 32);
    const gone = await serveHub(REPOS);
    process.env.HF_ENDPOINT = gone.url;
    await gone.close();

    const progress: WeightsProgress[] = [];
    const files = await loadModelFiles(openModelSource(MODEL_ID), (p) => progress.push(p));
    expectSameWeights(files.weights, fromFolder.weights);
    expect(progress.at(-1)).toEqual({ file: 'model.safetensors', loadedBytes: size, totalBytes: size });
  });

  it('refuses a download that keeps stopping short of its size, naming the file and what arrived, and caches none of it', async () => {
    server.faults.cut.set('model.safetensors', { afterBytes: 100_000, times: 10 });
    const error = await caught(() => loadModelFiles(openModelSource(MODEL_ID)));
    expect(error).toBeInstanceOf(HubError);
    expect(error).toMatchObject({ kind: 'interrupted', file: 'model.safetensors' });
    expect(error.message).toMatch(
      new RegExp(`^download of model\\.safetensors of fixture-owner/stories260K@main from ${server.url} stopped after \\d+ of 1044992 bytes \\(.+\\); the \\d+ bytes received are kept in the cache`),
    );
    expect(server.requests.filter((r) => r.file === 'model.safetensors' && r.range !== 'bytes=0-0')).toHaveLength(3);
    expect(existsSync(cachedPath('model.safetensors'))).toBe(false);
  });

  it('downloads a shard whole again when it changed on the Hub since a cut download, never joining two versions', async () => {
    const repo = await mkdtemp(join(tmpdir(), 'rlplay-hub-repo-'));
    const changing = await serveHub({ 'fixture-owner/stories260K': repo });
    try {
      await writeFile(join(repo, 'model.safetensors'), await fixtureBytes('model.safetensors'));
      process.env.HF_ENDPOINT = changing.url;
      changing.faults.cut.set('model.safetensors', { afterBytes: 400_000, times: 1 });
      const error = await caught(() => openHubSource(MODEL_ID, { maxAttempts: 1 }).openFile!('model.safetensors'));
      expect(error).toMatchObject({ kind: 'interrupted', file: 'model.safetensors' });
      const received = Number(/stopped after (\d+) of/.exec(error.message)?.[1]);

      // A new commit of the file: the same size, other bytes at its end.
      const changed = await fixtureBytes('model.safetensors');
      for (let i = changed.length - 256; i < changed.length; i++) changed[i] ^= 1;
      await writeFile(join(repo, 'model.safetensors'), changed);

      const opened = await openHubSource(MODEL_ID).openFile!('model.safetensors');
      try {
        expectSameBytes(await opened.read(0, opened.size), changed);
      } finally {
        await opened.close();
      }
      // The resume asked for the rest of the version it had (If-Range), and got the whole new one.
      expect(changing.requests.filter((r) => r.file === 'model.safetensors').map((r) => [r.range, r.status])).toEqual([
        [null, 200],
        [`bytes=${received}-`, 200],
      ]);
      expectSameBytes(await readFile(cachedPath('model.safetensors')), changed);
    } finally {
      await changing.close();
      await rm(repo, { recursive: true, force: true });
    }
  });

  it('restarts a cut download from the start when the server has no ranges', async () => {
    server.faults.noRanges = true;
    server.faults.cut.set('model.safetensors', { afterBytes: 300_000, times: 1 });
    const bytes = await openModelSource(MODEL_ID).readBytes('model.safetensors');
    expectSameBytes(bytes, await fixtureBytes('model.safetensors'));
    const downloads = server.requests.filter((r) => r.file === 'model.safetensors');
    expect(downloads.map((r) => r.status)).toEqual([200, 200]);
    expect(downloads[1].range).toMatch(/^bytes=\d+-$/); // asked for the rest, got the whole file
    expectSameBytes(await readFile(cachedPath('model.safetensors')), bytes);
  });

  it('gives up on a download that keeps getting cut, and never caches a partial file', async () => {
    server.faults.cut.set('model.safetensors', { afterBytes: 100_000, times: 10 });
    const error = await caught(() => openModelSource(MODEL_ID).readBytes('model.safetensors'));
    expect(error).toMatchObject({ kind: 'interrupted' });
    expect(error.message).toMatch(/stopped after \d+ of 1044992 bytes/);
    expect(server.requests.filter((r) => r.file === 'model.safetensors')).toHaveLength(3);
    expect(existsSync(cachedPath('model.safetensors'))).toBe(false);
    expect(await new FolderHubCache(join(cacheRoot, 'hub')).lookup(parseHubId(MODEL_ID), 'model.safetensors')).toBe(null);
  });

  it('downloads again with refresh, and drops the files of a revision when it moves to another commit', async () => {
    const id = parseHubId(MODEL_ID);
    expect((await openModelSource(MODEL_ID).readText('config.json')).length).toBeGreaterThan(0);
    server.requests.length = 0;
    const refreshed = openHubSource(MODEL_ID, { refresh: true });
    expect(await refreshed.readText('config.json')).toBe(await readFile(join(STORIES260K_DIR, 'config.json'), 'utf8'));
    expect(server.requests.map((r) => [r.file, r.revision])).toEqual([['config.json', 'main']]);
    await refreshed.readText('config.json'); // fetched by this source already: from the cache
    expect(server.requests).toHaveLength(1);

    const cache = new FolderHubCache(join(cacheRoot, 'hub'));
    expect(await cache.lookup(id, 'config.json')).toBe('cached');
    await cache.pin(id, 'f'.repeat(40));
    expect(await cache.lookup(id, 'config.json')).toBe(null);
    expect(await cache.commit(id)).toBe('f'.repeat(40));
  });

  it('runs `rlplay generate --model hf:...` as on the folder', async () => {
    const run = promisify(execFile);
    const cli = join(import.meta.dirname, '../../bin/rlplay.js');
    const args = ['generate', '--max-new-tokens', '8', '--greedy'];
    const folder = await run(process.execPath, [cli, ...args, '--model', STORIES260K_DIR]);
    const hub = await run(process.execPath, [cli, ...args, '--model', MODEL_ID], { env: { ...process.env, HF_ENDPOINT: server.url, RLPLAY_CACHE: cacheRoot } });
    expect(hub.stdout).toBe(folder.stdout);
    expect(hub.stdout.trim().length).toBeGreaterThan(0);
    expect(hub.stderr).toContain(`${MODEL_ID}: llama, 5 layers`);
    expect(existsSync(cachedPath('model.safetensors'))).toBe(true);
  });
});
