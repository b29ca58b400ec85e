// Hub files cached in a folder (Node only), and Hub sources configured from the environment:
// HF_ENDPOINT (the Hub's address), HF_TOKEN (gated and private repositories), RLPLAY_CACHE.
//
// Layout, under $RLPLAY_CACHE/hub (RLPLAY_CACHE defaults to $XDG_CACHE_HOME/rlplay, else ~/.cache/rlplay):
//   <owner>--<repo>/<revision>/<file>                       complete files only: a model folder as is
//   <owner>--<repo>/.state/<revision>/commit                 the commit the revision is pinned to (see hub.ts)
//   <owner>--<repo>/.state/<revision>/missing/<file>         empty: the repository has no such file
//   <owner>--<repo>/.state/<revision>/partial/<file>         an interrupted download, written as it arrives
//   <owner>--<repo>/.state/<revision>/partial-info/<file>.json   its size and ETag
//   <owner>--<repo>/.state/<revision>/downloading/<file>     the id of the process writing that partial download
//   <owner>--<repo>/.tmp/                                    files being written, renamed into place once whole
// A revision holding "/" (refs/pr/1) is one folder, URL-encoded (refs%2Fpr%2F1). Git refs never start
// with ".", so .state and .tmp cannot clash with a revision.
import { randomUUID } from 'node:crypto';
import { mkdir, open, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { HubError, HubModelSource, parseHubId } from './hub.ts';
import type { HubCache, HubCacheWriter, HubId, HubSourceOptions, PartialDownload } from './hub.ts';
import { openLocalFile } from './local-file.ts';
import { ModelLoadError } from './types.ts';
import type { RandomAccessFile } from './types.ts';

/** The folder Hub downloads go to in Node. */
export function hubCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  const root = env.RLPLAY_CACHE || join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'rlplay');
  return join(resolve(root), 'hub');
}

/** A source for `hf:OWNER/REPO[@REVISION]`, with the endpoint, token and cache folder from the environment. */
export function openHubSource(location: string, options: HubSourceOptions = {}): HubModelSource {
  return new HubModelSource(parseHubId(location), {
    endpoint: process.env.HF_ENDPOINT,
    token: process.env.HF_TOKEN,
    cache: new FolderHubCache(hubCacheDir()),
    ...options,
  });
}

export class FolderHubCache implements HubCache {
  readonly location: string;

  constructor(root: string) {
    this.location = resolve(root);
  }

  /** The folder holding the complete files of a repository at a revision. */
  folder(id: HubId): string {
    return join(this.repoDir(id), encodeURIComponent(id.revision));
  }

  async commit(id: HubId): Promise<string | null> {
    return (await readOrNull(join(this.stateDir(id), 'commit')))?.toString('utf8').trim() || null;
  }

  async pin(id: HubId, commit: string): Promise<void> {
    const previous = await this.commit(id);
    if (previous === commit) return;
    if (previous) {
      await rm(this.folder(id), { recursive: true, force: true });
      await rm(this.stateDir(id), { recursive: true, force: true });
    }
    await this.writeAtomic(id, join(this.stateDir(id), 'commit'), new TextEncoder().encode(commit));
  }

  async lookup(id: HubId, file: string): Promise<'cached' | 'missing' | null> {
    if (await isFile(join(this.folder(id), file))) return 'cached';
    return (await isFile(join(this.stateDir(id), 'missing', file))) ? 'missing' : null;
  }

  async read(id: HubId, file: string): Promise<Uint8Array | null> {
    const bytes = await readOrNull(join(this.folder(id), file));
    return bytes && new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  async markMissing(id: HubId, file: string): Promise<void> {
    await this.writeAtomic(id, join(this.stateDir(id), 'missing', file), new Uint8Array(0));
  }

  async partial(id: HubId, file: string): Promise<PartialDownload | null> {
    const info = await readOrNull(this.partialInfoPath(id, file));
    const path = this.partialPath(id, file);
    const received = info && (await sizeOrNull(path));
    if (!info || !received) return null;
    let parsed: { size?: unknown; etag?: unknown };
    try {
      parsed = JSON.parse(info.toString('utf8'));
    } catch {
      return null;
    }
    const { size, etag } = parsed;
    // All the bytes but no rename: killed between the two; start again rather than trust it.
    if (typeof size !== 'number' || received >= size) return null;
    const read = async () => {
      const bytes = await readFile(path);
      return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    };
    return { received, size, etag: typeof etag === 'string' ? etag : null, read };
  }

  async openFile(id: HubId, file: string): Promise<RandomAccessFile | null> {
    const path = join(this.folder(id), file);
    const readError = (error: unknown) =>
      isMissing(error) ? (error as Error) : new ModelLoadError(`${path}, the cached copy of ${file}, could not be read: ${(error as Error).message}`, file);
    try {
      return await openLocalFile(path, file, readError);
    } catch (error) {
      if (isMissing(error)) return null;
      throw error;
    }
  }

  async startDownload(id: HubId, file: string, info: { size: number | null; etag: string | null; from: number }): Promise<HubCacheWriter> {
    const partial = this.partialPath(id, file);
    const partialInfo = this.partialInfoPath(id, file);
    const release = await this.claimDownload(id, file);
    let handle: FileHandle | null = null;
    try {
      await mkdir(dirname(partial), { recursive: true });
      if (info.from > 0 && ((await sizeOrNull(partial)) ?? 0) < info.from) {
        throw new HubError(`the partial download of ${file} in ${this.location} is shorter than when this download began: another program changed it meanwhile; try again`, file, 'interrupted');
      }
      if (info.from === 0) await this.writeAtomic(id, partialInfo, new TextEncoder().encode(JSON.stringify({ size: info.size, etag: info.etag })));
      handle = await open(partial, info.from === 0 ? 'w' : 'r+');
    } catch (error) {
      await release();
      throw error;
    }
    const close = async () => {
      await handle?.close();
      handle = null;
      await release();
    };
    const forget = () => Promise.all([rm(partial, { force: true }), rm(partialInfo, { force: true })]);
    return {
      write: async (chunk, offset) => void (await handle!.write(chunk, 0, chunk.length, offset)),
      // The partial file, which only this download wrote, holds every byte that arrived: it becomes the file.
      finish: async () => {
        const path = join(this.folder(id), file);
        try {
          await handle!.close();
          handle = null;
          await mkdir(dirname(path), { recursive: true });
          await rename(partial, path);
          const size = await sizeOrNull(path);
          if (info.size !== null && size !== info.size) {
            await rm(path, { force: true });
            throw new HubError(`${path} was ${size} bytes once downloaded instead of the ${info.size} the server announced: another program changed it meanwhile; try again`, file, 'interrupted');
          }
          await Promise.all([forget(), rm(join(this.stateDir(id), 'missing', file), { force: true })]);
        } finally {
          await close();
        }
      },
      interrupt: close, // the bytes received are on disk already
      discard: async () => {
        await close();
        await forget();
      },
    };
  }

  /**
   * Makes this download the only writer of the file's partial download until the returned
   * function is called, so that two processes downloading one file never write into one partial
   * file (a second one would truncate what the first one wrote). A claim left by a process that
   * was killed is taken over.
   */
  private async claimDownload(id: HubId, file: string): Promise<() => Promise<void>> {
    const claim = join(this.stateDir(id), 'downloading', file);
    await mkdir(dirname(claim), { recursive: true });
    for (let attempt = 1; ; attempt++) {
      try {
        await writeFile(claim, String(process.pid), { flag: 'wx' });
        return () => rm(claim, { force: true });
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
      const holder = Number((await readOrNull(claim))?.toString('utf8'));
      if (attempt > 1 || isRunning(holder)) {
        throw new HubError(
          `${file} of ${id.owner}/${id.repo}@${id.revision} is being downloaded into ${this.location} by another download ` +
            `(process ${holder}): wait for it to finish, then try again; if no such process runs, delete ${claim}`,
          file,
          'interrupted',
        );
      }
      await rm(claim, { force: true });
    }
  }

  private repoDir(id: HubId): string {
    return join(this.location, `${id.owner}--${id.repo}`);
  }

  private stateDir(id: HubId): string {
    return join(this.repoDir(id), '.state', encodeURIComponent(id.revision));
  }

  private partialPath(id: HubId, file: string): string {
    return join(this.stateDir(id), 'partial', file);
  }

  private partialInfoPath(id: HubId, file: string): string {
    return join(this.stateDir(id), 'partial-info', `${file}.json`);
  }

  /** Writes to a temporary file beside the repository's folders, then renames it into place. */
  private async writeAtomic(id: HubId, path: string, bytes: Uint8Array): Promise<void> {
    const tmpDir = join(this.repoDir(id), '.tmp');
    const tmp = join(tmpDir, randomUUID());
    await mkdir(tmpDir, { recursive: true });
    await mkdir(dirname(path), { recursive: true });
    try {
      await writeFile(tmp, bytes);
      await rename(tmp, path);
    } catch (error) {
      await rm(tmp, { force: true });
      throw error;
    }
  }
}

async function readOrNull(path: string): Promise<Buffer | null> {
  try {
    return await readFile(path);
  } catch (error) {
    if (isMissing(error)) return null;
    throw error;
  }
}

async function sizeOrNull(path: string): Promise<number | null> {
  try {
    return (await stat(path)).size;
  } catch (error) {
    if (isMissing(error)) return null;
    throw error;
  }
}

async function isFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch (error) {
    if (isMissing(error)) return false;
    throw error;
  }
}

/** Whether a process of this id runs (a process of another user counts). */
function isRunning(pid: number): boolean {
  if (!Number.isSafeInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function isMissing(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException).code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}
