// Models on the Hugging Face Hub, named `hf:OWNER/REPO[@REVISION]`: the ids, a curated list, and a
// ModelSource that downloads `<endpoint>/<owner>/<repo>/resolve/<revision>/<file>` into a cache.
// Browser-safe (fetch only): the browser caches in Cache Storage (CacheStorageHubCache below), Node in
// a folder (hub-node.ts).
//
// Caching policy: a file in the cache is used without asking the network, so a cached model loads
// offline; `@main` stays what it was when first downloaded until a source opened with `refresh`
// downloads it again. To keep the files of one cached revision from different commits (a branch
// may move between two downloads), the first response that names its commit (the Hub's
// X-Repo-Commit header) pins the revision: later files are fetched from `resolve/<commit>/`. When a
// refresh finds the branch at another commit, the files cached for the old one are dropped.
import { concatenate, contentLength, isPathInsideFolder, joinUrl } from './source.ts';
import { ModelLoadError } from './types.ts';
import type { ModelSource, RandomAccessFile } from './types.ts';

export const HUB_PREFIX = 'hf:';
export const DEFAULT_HUB_ENDPOINT = 'https://huggingface.co';

/** A model (or adapter) repository on the Hub, at a revision: a branch, a tag or a commit. */
export interface HubId {
  owner: string;
  repo: string;
  /** 'main' unless the id says otherwise. */
  revision: string;
}

export interface CuratedModel {
  /** The Hub id, without the `hf:` prefix. */
  id: string;
  parameters: number;
  licence: string;
  description: string;
}

/** Small instruction-tuned models the engine runs (Llama and Qwen2 architectures), smallest first. */
export const CURATED_MODELS: readonly CuratedModel[] = [
  {
    id: 'HuggingFaceTB/SmolLM2-135M-Instruct',
    parameters: 134_515_008,
    licence: 'Apache-2.0',
    description: 'SmolLM2 135M chat model (Llama architecture, tied embeddings): the quickest to train',
  },
  {
    id: 'HuggingFaceTB/SmolLM2-360M-Instruct',
    parameters: 361_821_120,
    licence: 'Apache-2.0',
    description: 'SmolLM2 360M chat model (Llama architecture, tied embeddings): better answers, about 3x slower',
  },
  {
    id: 'Qwen/Qwen2.5-0.5B-Instruct',
    parameters: 494_032_768,
    licence: 'Apache-2.0',
    description: 'Qwen2.5 0.5B chat model (Qwen2 architecture, 152k-token vocabulary): the strongest of the three',
  },
];

/** 134_515_008 -> '135M', 1_543_714_304 -> '1.5B'. */
export function formatParameterCount(parameters: number): string {
  if (parameters >= 1e9) return `${(parameters / 1e9).toFixed(1).replace(/\.0$/, '')}B`;
  return `${Math.round(parameters / 1e6)}M`;
}

/** The curated models as lines for --help: id, size, licence, description. */
export function curatedModelsHelp(): string {
  const width = Math.max(...CURATED_MODELS.map((m) => m.id.length)) + HUB_PREFIX.length;
  return CURATED_MODELS.map(
    (m) => `  ${(HUB_PREFIX + m.id).padEnd(width)}  ${formatParameterCount(m.parameters).padStart(4)}  ${m.licence}  ${m.description}`,
  ).join('\n');
}

export function isHubId(location: string): boolean {
  return location.startsWith(HUB_PREFIX);
}

// The Hub's rules: letters, digits, '-', '_' and '.', not starting or ending with '-' or '.', no
// '--' or '..' (both are reserved), at most 96 characters in all.
const NAME = /^[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?$/;
// A git branch, tag or commit (git check-ref-format, simplified): path segments of safe characters.
const REVISION = /^[A-Za-z0-9_][A-Za-z0-9_.\-+]*(?:\/[A-Za-z0-9_][A-Za-z0-9_.\-+]*)*$/;
const COMMIT = /^[0-9a-f]{40}$/;

/** `hf:OWNER/REPO[@REVISION]` (the prefix may be left out) as its parts; a clear error when malformed. */
export function parseHubId(text: string): HubId {
  const body = text.trim().replace(/^hf:/, '');
  const at = body.indexOf('@');
  const name = at < 0 ? body : body.slice(0, at);
  const revision = at < 0 ? 'main' : body.slice(at + 1);
  const [owner, repo, ...rest] = name.split('/');
  const fail = (why: string): never => {
    throw new ModelLoadError(
      `${JSON.stringify(text)} is not a Hub model id (${why}): write hf:OWNER/REPO or hf:OWNER/REPO@REVISION, ` +
        `e.g. hf:${CURATED_MODELS[0].id}`,
      text,
    );
  };
  if (repo === undefined || rest.length > 0) fail('it needs exactly one "/" between owner and repository');
  for (const part of [owner, repo]) {
    if (!NAME.test(part) || part.includes('--') || part.includes('..')) {
      fail(`${JSON.stringify(part)} may hold only letters, digits, "-", "_" and "." and may not start or end with "-" or "." or hold "--" or ".."`);
    }
  }
  if (name.length > 96) fail('owner and repository are longer than 96 characters');
  if (!REVISION.test(revision) || revision.includes('..') || revision.endsWith('.lock')) {
    fail(`${JSON.stringify(revision)} is not a branch, tag or commit`);
  }
  return { owner, repo, revision };
}

/** The id as written by parseHubId's users: `hf:OWNER/REPO`, with `@REVISION` unless it is main. */
export function formatHubId(id: HubId): string {
  return `${HUB_PREFIX}${id.owner}/${id.repo}${id.revision === 'main' ? '' : `@${id.revision}`}`;
}

/**
 * What PEFT's base_model_name_or_path wants for a model location: `OWNER/REPO` for a Hub id (any
 * revision), else the folder's name, the last segment of its URL or path — never a URL or a path
 * that names this machine, which means nothing to whoever loads the adapter.
 */
export function peftBaseModelName(location: string): string {
  if (isHubId(location)) {
    const { owner, repo } = parseHubId(location);
    return `${owner}/${repo}`;
  }
  // A scheme of two letters or more (a one-letter one is a Windows drive): http(s) URLs, `folder:NAME/`.
  const isUrl = /^[a-z][a-z0-9+.-]+:/i.test(location) && URL.canParse(location);
  const path = isUrl ? new URL(location).pathname : location;
  const name = path.split(/[\\/]/).filter(Boolean).pop();
  if (!name) return location;
  if (!isUrl) return name;
  try {
    return decodeURIComponent(name);
  } catch {
    return name;
  }
}

/** Why a Hub download failed, for callers that react to it (ask for a token, offer to retry). */
export type HubErrorKind = 'gated' | 'repo-not-found' | 'revision-not-found' | 'file-not-found' | 'offline' | 'interrupted' | 'http';

export class HubError extends ModelLoadError {
  constructor(
    message: string,
    file: string,
    readonly kind: HubErrorKind,
  ) {
    super(message, file);
    this.name = 'HubError';
  }
}

/** The bytes an interrupted download left, and what they belong to. */
export interface PartialDownload {
  /** How many of the file's first bytes were kept. */
  received: number;
  /** The whole file's size. */
  size: number;
  /** The ETag the server gave the file, when it gave one. */
  etag: string | null;
  /** The bytes kept. */
  read(): Promise<Uint8Array>;
}

/** One download being written into the cache. */
export interface HubCacheWriter {
  /** A chunk of the body, at its offset in the file (Node keeps it on disk at once, for a resume after a kill). */
  write(chunk: Uint8Array, offset: number): Promise<void>;
  /**
   * All bytes arrived and passed the checks: they become the cached file, atomically. `bytes` is
   * the file where the download was kept in memory, else null (a cache with openFile); a cache
   * that keeps what write() was given makes that the file instead.
   */
  finish(bytes: Uint8Array | null): Promise<void>;
  /** The download stopped after `received` (the first bytes of the file, or null as for finish): keep them for a resume. */
  interrupt(received: Uint8Array | null): Promise<void>;
  /** The download stopped and what arrived is worth nothing (size unknown): forget it. */
  discard(): Promise<void>;
}

/** Where downloaded Hub files are kept: Cache Storage in the browser, a folder in Node (hub-node.ts). */
export interface HubCache {
  /** Where, for messages. */
  readonly location: string;
  /** The commit the cached revision is pinned to, or null. */
  commit(id: HubId): Promise<string | null>;
  /** Pins the revision to `commit`; files cached for another commit of it are dropped. */
  pin(id: HubId, commit: string): Promise<void>;
  /** 'cached': a complete copy is here; 'missing': the repository has no such file; null: unknown. */
  lookup(id: HubId, file: string): Promise<'cached' | 'missing' | null>;
  /** The complete cached file, or null. */
  read(id: HubId, file: string): Promise<Uint8Array | null>;
  markMissing(id: HubId, file: string): Promise<void>;
  /** What an interrupted download of the file left, or null. */
  partial(id: HubId, file: string): Promise<PartialDownload | null>;
  /** Starts writing a download of a file of `size` bytes (null: unknown), continuing the partial one at `from` > 0. */
  startDownload(id: HubId, file: string, info: { size: number | null; etag: string | null; from: number }): Promise<HubCacheWriter>;
  /**
   * The complete cached file opened for reads by offset, or null if it is not cached. A cache
   * that has it (Node's folder) takes downloads that are never held whole in memory.
   */
  openFile?(id: HubId, file: string): Promise<RandomAccessFile | null>;
}

export interface HubSourceOptions {
  /** The Hub's address (default https://huggingface.co; Node reads HF_ENDPOINT). */
  endpoint?: string;
  /** An access token for gated and private repositories, sent as `Authorization: Bearer` (Node reads HF_TOKEN). */
  token?: string | null;
  /** Where files are kept (default: Cache Storage where the platform has it); null downloads every time. */
  cache?: HubCache | null;
  /** Ignore what the cache holds and download again, updating the cache. */
  refresh?: boolean;
  /** Connections one read may open when a download keeps getting cut; each resumes where the last stopped (default 3). */
  maxAttempts?: number;
  fetch?: typeof fetch;
}

export type ProgressCallback = (loadedBytes: number, totalBytes: number | null) => void;

/** The files of a Hub repository at one revision, downloaded on first use and then read from the cache. */
export class HubModelSource implements ModelSource {
  readonly location: string;
  readonly endpoint: string;
  private readonly token: string | null;
  private readonly cache: HubCache | null;
  private readonly refresh: boolean;
  private readonly maxAttempts: number;
  private readonly fetchImpl: typeof fetch;
  /** The commit requests go to: undefined until read from the cache, null while unknown. */
  private pinned: Promise<string | null> | undefined;
  /** Files this source downloaded or looked up itself (with `refresh`, the only cache entries it trusts). */
  private readonly fresh = new Set<string>();

  constructor(
    readonly id: HubId,
    options: HubSourceOptions = {},
  ) {
    this.location = formatHubId(id);
    this.endpoint = (options.endpoint || DEFAULT_HUB_ENDPOINT).replace(/\/+$/, '');
    this.token = options.token || null;
    this.cache = options.cache === undefined ? defaultBrowserCache() : options.cache;
    this.refresh = options.refresh ?? false;
    this.maxAttempts = Math.max(1, options.maxAttempts ?? 3);
    this.fetchImpl = options.fetch ?? ((input, init) => fetch(input, init));
    if (this.cache?.openFile) this.openFile = (file, onProgress) => this.openCached(file, onProgress);
    if (COMMIT.test(id.revision)) this.pinned = Promise.resolve(id.revision);
    else if (this.refresh || !this.cache) this.pinned = Promise.resolve(null);
  }

  /** The model's page on the Hub. */
  get pageUrl(): string {
    return `${this.endpoint}/${this.id.owner}/${this.id.repo}`;
  }

  async exists(file: string): Promise<boolean> {
    checkRepoPath(file);
    const cached = await this.lookup(file);
    if (cached) return cached === 'cached';
    // The first byte only: a HEAD would be refused by CDNs whose signed URLs allow GET alone.
    const response = await this.request(file, { Range: 'bytes=0-0' });
    await response.body?.cancel();
    // 416: an empty file has no byte 0.
    if (response.ok || response.status === 416) {
      await this.pinFrom(response);
      return true;
    }
    if (response.status === 404 && !isRepoLevelError(response)) {
      this.fresh.add(file);
      await this.cache?.markMissing(this.id, file);
      return false;
    }
    throw this.httpError(file, response);
  }

  async readText(file: string): Promise<string> {
    return new TextDecoder().decode(await this.readBytes(file));
  }

  async readBytes(file: string, onProgress?: ProgressCallback): Promise<Uint8Array> {
    checkRepoPath(file);
    const cached = await this.lookup(file);
    if (cached === 'missing') {
      throw new HubError(`${this.repoAtRevision()} has no file ${file} (recorded in the cache, ${this.cache!.location})`, file, 'file-not-found');
    }
    if (cached === 'cached') {
      const bytes = await this.cache!.read(this.id, file);
      if (bytes) {
        onProgress?.(bytes.length, bytes.length);
        return bytes;
      }
    }
    return (await this.download(file, onProgress))!; // kept in memory: never null
  }

  /**
   * Where the cache opens files by offset (Node's folder cache): the file downloaded into the
   * cache if it is not there yet, never whole into memory, then opened there.
   */
  readonly openFile?: (file: string, onProgress?: ProgressCallback) => Promise<RandomAccessFile>;

  private async openCached(file: string, onProgress?: ProgressCallback): Promise<RandomAccessFile> {
    checkRepoPath(file);
    const cache = this.cache!;
    const cached = await this.lookup(file);
    if (cached === 'missing') {
      throw new HubError(`${this.repoAtRevision()} has no file ${file} (recorded in the cache, ${cache.location})`, file, 'file-not-found');
    }
    if (cached !== 'cached') await this.download(file, onProgress, false);
    const opened = await cache.openFile!(this.id, file);
    if (!opened) throw new HubError(`${file} of ${this.repoAtRevision()} left the cache (${cache.location}) as soon as it was downloaded; another program removed it: try again`, file, 'interrupted');
    return opened;
  }

  private async lookup(file: string): Promise<'cached' | 'missing' | null> {
    if (!this.cache || (this.refresh && !this.fresh.has(file))) return null;
    return this.cache.lookup(this.id, file);
  }

  /**
   * Downloads a file into the cache and, unless `inMemory` is false (a cache that opens files,
   * for files too large for one array), into memory. A connection cut mid-body is resumed with a
   * Range request where the server allows it (206), else restarted; a download interrupted in an
   * earlier run is resumed from what the cache kept of it. Nothing reaches the cache before all
   * the bytes the server announced have arrived.
   */
  private async download(file: string, onProgress?: ProgressCallback, inMemory = true): Promise<Uint8Array | null> {
    let earlier = this.cache && !this.refresh ? await this.cache.partial(this.id, file) : null;
    let total = null as number | null; // the file's size, once this read knows it
    let bytes = null as Uint8Array | null; // the file, filled from the start, when kept in memory and its size is known
    let chunks: Uint8Array[] = []; // the body, when its size is unknown (a compressed response)
    let loaded = 0;
    let etag: string | null = earlier?.etag ?? null;
    let writer: HubCacheWriter | null = null;
    for (let attempt = 1; ; attempt++) {
      // Resume from what this read received, or else from what an earlier run left.
      const from = total !== null ? loaded : (earlier?.received ?? 0);
      const headers: Record<string, string> = {};
      if (from > 0) {
        headers.Range = `bytes=${from}-`;
        // Only a strong ETag proves the bytes are the same version (a commit-pinned URL is immutable anyway).
        if (etag && !etag.startsWith('W/')) headers['If-Range'] = etag;
      }
      let response: Response;
      try {
        response = await this.request(file, headers);
      } catch (error) {
        if (total === null) throw error;
        throw this.interrupted(file, loaded, total, (error as Error).message);
      }
      const size = total ?? earlier?.size ?? null;
      const resumes = from > 0 && size !== null && continuesAt(response, from, size);
      if (from > 0 && !resumes && (response.status === 416 || response.status === 206)) {
        // The bytes kept are not the start of this file (it changed), or the range came back wrong: start again.
        await response.body?.cancel();
        total = bytes = earlier = null;
        if (attempt < this.maxAttempts) continue;
        throw this.interrupted(file, 0, size, `the server answered a request for bytes ${from}- with ${response.status} ${response.headers.get('content-range') ?? ''}`.trim());
      }
      if (!response.ok) {
        await response.body?.cancel();
        throw this.httpError(file, response);
      }
      await this.pinFrom(response);
      if (resumes) {
        if (total === null) {
          // The first connection of this read continues an earlier run's partial download.
          total = size;
          if (inMemory) {
            bytes = new Uint8Array(size!);
            bytes.set(await earlier!.read());
          }
          loaded = from;
        }
        writer = this.cache ? await this.cache.startDownload(this.id, file, { size, etag, from }) : null;
      } else {
        // 200: the whole file (the server ignores ranges, or the file changed), from byte 0.
        total = contentLength(response);
        etag = response.headers.get('etag');
        bytes = inMemory && total !== null ? new Uint8Array(total) : null;
        chunks = [];
        loaded = 0;
        writer = this.cache ? await this.cache.startDownload(this.id, file, { size: total, etag, from: 0 }) : null;
      }
      onProgress?.(loaded, total);
      let failure: string | null = null;
      try {
        const reader = response.body!.getReader();
        for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
          if (total !== null && loaded + chunk.value.length > total) {
            await reader.cancel();
            throw new Error(`the server sent more than the ${total} bytes it announced`);
          }
          if (bytes) bytes.set(chunk.value, loaded);
          else if (inMemory) chunks.push(chunk.value);
          await writer?.write(chunk.value, loaded);
          loaded += chunk.value.length;
          onProgress?.(loaded, total);
        }
        if (total !== null && loaded < total) failure = 'the connection closed early';
      } catch (error) {
        failure = (error as Error).message;
      }
      if (failure === null) {
        const whole = inMemory ? (bytes ?? concatenate(chunks, loaded)) : null;
        this.fresh.add(file);
        await writer?.finish(whole);
        return whole;
      }
      // Without a size there is no resuming: what arrived is dropped and the next connection restarts.
      if (total !== null) await writer?.interrupt(bytes ? bytes.subarray(0, loaded) : null);
      else await writer?.discard();
      if (attempt >= this.maxAttempts) throw this.interrupted(file, loaded, total, failure);
    }
  }

  private async request(file: string, headers: Record<string, string>): Promise<Response> {
    const revision = (await this.pinnedCommit()) ?? this.id.revision;
    const url = joinUrl(`${this.pageUrl}/resolve/${encodeURIComponent(revision)}`, file);
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    try {
      // no-store: the cache is ours; the browser's HTTP cache would keep a second copy of every file.
      return await this.fetchImpl(url, { headers, cache: 'no-store' });
    } catch (error) {
      const cause = (error as Error & { cause?: Error }).cause?.message;
      const where = this.cache ? `it is not in the cache (${this.cache.location})` : 'there is no cache to read it from';
      throw new HubError(
        `could not reach ${this.endpoint} to download ${file} of ${this.repoAtRevision()} ` +
          `(${(error as Error).message}${cause ? `: ${cause}` : ''}) and ${where}; check the connection and the Hub ` +
          'address (HF_ENDPOINT for the command line), then try again',
        file,
        'offline',
      );
    }
  }

  private pinnedCommit(): Promise<string | null> {
    this.pinned ??= this.cache!.commit(this.id);
    return this.pinned;
  }

  /** Pins the revision to the commit a response names (the Hub's X-Repo-Commit), if not pinned yet. */
  private async pinFrom(response: Response): Promise<void> {
    const commit = response.headers.get('x-repo-commit');
    if (!commit || !COMMIT.test(commit) || COMMIT.test(this.id.revision)) return;
    const current = await this.pinnedCommit();
    if (current === commit) return;
    this.pinned = Promise.resolve(commit);
    await this.cache?.pin(this.id, commit);
  }

  private repoAtRevision(): string {
    return `${this.id.owner}/${this.id.repo}@${this.id.revision}`;
  }

  private interrupted(file: string, loaded: number, total: number | null, why: string): HubError {
    const kept = total !== null && this.cache && loaded > 0 ? `; the ${loaded} bytes received are kept in the cache and the next try resumes from there` : '';
    return new HubError(
      `download of ${file} of ${this.repoAtRevision()} from ${this.endpoint} stopped after ${loaded} of ${total ?? 'unknown'} ` +
        `bytes (${why})${kept}; try again`,
      file,
      'interrupted',
    );
  }

  private httpError(file: string, response: Response): HubError {
    const status = `HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ''}`;
    const code = response.headers.get('x-error-code');
    const model = `${this.id.owner}/${this.id.repo}`;
    if (code === 'GatedRepo' || ((response.status === 401 || response.status === 403) && code !== 'RepoNotFound')) {
      const why = this.token ? 'the access token given may not read it' : 'no access token was given';
      return new HubError(
        `${model} is gated or private and ${why} (${status}): accept its licence on ${this.pageUrl} while logged in, ` +
          `then give an access token of that account (${this.endpoint}/settings/tokens; HF_TOKEN for the command line)`,
        file,
        'gated',
      );
    }
    if (code === 'RepoNotFound') {
      const privateNote = this.token ? '' : ', or, if it is private, set HF_TOKEN to an access token that can read it';
      return new HubError(`model repository ${model} not found on ${this.endpoint} (${status}): check the name${privateNote}`, file, 'repo-not-found');
    }
    if (code === 'RevisionNotFound') {
      return new HubError(`${model} has no revision ${JSON.stringify(this.id.revision)} (${status}): check the branch, tag or commit after "@"`, file, 'revision-not-found');
    }
    if (response.status === 404) {
      // The Hub says EntryNotFound for a missing file; a server that does not say may mean the repo or revision.
      const unsure = code === 'EntryNotFound' ? '' : ' (or the repository or revision does not exist there)';
      return new HubError(`${this.repoAtRevision()} has no file ${file}${unsure} (${status} from ${this.endpoint})`, file, 'file-not-found');
    }
    if (response.status === 429) {
      const tokenHint = this.token ? '' : ', or set HF_TOKEN: signed-in downloads have higher limits';
      return new HubError(`${this.endpoint} is limiting downloads (${status}): wait a minute and try again${tokenHint}`, file, 'http');
    }
    return new HubError(`${file} of ${this.repoAtRevision()} could not be downloaded from ${this.endpoint} (${status}): try again later`, file, 'http');
  }
}

/** A 404 about the repository or revision as a whole (the Hub's X-Error-Code), not about one file. */
function isRepoLevelError(response: Response): boolean {
  const code = response.headers.get('x-error-code');
  return code === 'RepoNotFound' || code === 'RevisionNotFound';
}

/** Repository paths only: a shard name from a downloaded index must not reach outside the cache. */
function checkRepoPath(file: string): void {
  if (!isPathInsideFolder(file)) {
    throw new ModelLoadError(`${JSON.stringify(file)} is not a file path inside a repository`, file);
  }
}

/**
 * Whether a response is the rest of a file of `size` bytes from byte `from`: a 206 whose
 * Content-Range says so. A browser hides Content-Range from a cross-origin page unless the server
 * exposes it; then the body's length must be the rest.
 */
function continuesAt(response: Response, from: number, size: number): boolean {
  if (response.status !== 206) return false;
  const range = response.headers.get('content-range');
  if (!range) return contentLength(response) === size - from;
  const match = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(range);
  return match !== null && Number(match[1]) === from && Number(match[2]) === size - 1 && (match[3] === '*' || Number(match[3]) === size);
}

function defaultBrowserCache(): HubCache | null {
  return typeof caches === 'undefined' ? null : new CacheStorageHubCache();
}

/**
 * Hub files in the browser's Cache Storage (one cache, `rlplay-models`), under made-up URLs that no
 * request ever goes to: `https://hub.rlplay.invalid/<owner>/<repo>/<revision>/<file>` for a
 * complete file; `?missing` for a file the repository lacks; `?partial` for the bytes of an
 * interrupted download; `<revision>?commit` for the pin. An entry is only put once its whole body
 * is in memory, so no entry is ever half a file.
 */
export class CacheStorageHubCache implements HubCache {
  readonly location: string;

  constructor(
    private readonly name = 'rlplay-models',
    private readonly storage: CacheStorage = caches,
  ) {
    this.location = `Cache Storage "${name}"`;
  }

  async commit(id: HubId): Promise<string | null> {
    const response = await this.open().then((c) => c.match(this.key(id, null, 'commit')));
    return response ? (await response.text()) || null : null;
  }

  async pin(id: HubId, commit: string): Promise<void> {
    const cache = await this.open();
    const previous = await this.commit(id);
    if (previous && previous !== commit) {
      const prefix = this.key(id, null) + '/';
      for (const request of await cache.keys()) if (request.url.startsWith(prefix)) await cache.delete(request);
    }
    await cache.put(this.key(id, null, 'commit'), new Response(commit));
  }

  async lookup(id: HubId, file: string): Promise<'cached' | 'missing' | null> {
    const cache = await this.open();
    if (await cache.match(this.key(id, file))) return 'cached';
    return (await cache.match(this.key(id, file, 'missing'))) ? 'missing' : null;
  }

  async read(id: HubId, file: string): Promise<Uint8Array | null> {
    const response = await this.open().then((c) => c.match(this.key(id, file)));
    return response ? new Uint8Array(await response.arrayBuffer()) : null;
  }

  async markMissing(id: HubId, file: string): Promise<void> {
    await this.open().then((c) => c.put(this.key(id, file, 'missing'), new Response('')));
  }

  async partial(id: HubId, file: string): Promise<PartialDownload | null> {
    const response = await this.open().then((c) => c.match(this.key(id, file, 'partial')));
    if (!response) return null;
    const size = Number(response.headers.get('x-rlplay-size'));
    const bytes = new Uint8Array(await response.arrayBuffer());
    return Number.isSafeInteger(size) && bytes.length < size ? { received: bytes.length, size, etag: response.headers.get('x-rlplay-etag'), read: async () => bytes } : null;
  }

  async startDownload(id: HubId, file: string, info: { size: number | null; etag: string | null }): Promise<HubCacheWriter> {
    const cache = await this.open();
    const partialKey = this.key(id, file, 'partial');
    // Downloads into this cache are always kept in memory (it has no openFile), so finish and
    // interrupt are given the bytes.
    return {
      write: async () => {}, // the bytes are in memory until the body is complete
      finish: async (bytes) => {
        await cache.put(this.key(id, file), new Response(bytes! as Uint8Array<ArrayBuffer>, { headers: { 'content-type': 'application/octet-stream' } }));
        await cache.delete(partialKey);
      },
      interrupt: async (received) => {
        const headers: Record<string, string> = { 'x-rlplay-size': String(info.size) };
        if (info.etag) headers['x-rlplay-etag'] = info.etag;
        await cache.put(partialKey, new Response(received!.slice(), { headers }));
      },
      discard: async () => void (await cache.delete(partialKey)),
    };
  }

  private open(): Promise<Cache> {
    return this.storage.open(this.name);
  }

  private key(id: HubId, file: string | null, kind?: 'missing' | 'partial' | 'commit'): string {
    const base = `https://hub.rlplay.invalid/${id.owner}/${id.repo}/${encodeURIComponent(id.revision)}`;
    const url = file === null ? base : joinUrl(base, file);
    return kind ? `${url}?${kind}` : url;
  }
}
