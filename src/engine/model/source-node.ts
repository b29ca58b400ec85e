// Model folders on the local disk (Node only): reading one, writing one, and the choice between a
// folder, a URL and a Hub id.
import { statSync } from 'node:fs';
import { mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { isHubId } from './hub.ts';
import { openHubSource } from './hub-node.ts';
import { openLocalFile } from './local-file.ts';
import { HttpModelSource, isPathInsideFolder } from './source.ts';
import { ModelLoadError } from './types.ts';
import type { ModelSource, RandomAccessFile } from './types.ts';

export class FileModelSource implements ModelSource {
  readonly location: string;

  constructor(folder: string) {
    this.location = resolve(folder);
  }

  async exists(file: string): Promise<boolean> {
    try {
      return (await stat(this.pathOf(file))).isFile();
    } catch (error) {
      if (isMissing(error)) return false;
      throw this.readError(file, error);
    }
  }

  async readText(file: string): Promise<string> {
    try {
      return await readFile(this.pathOf(file), 'utf8');
    } catch (error) {
      throw this.readError(file, error);
    }
  }

  async readBytes(
    file: string,
    onProgress?: (loadedBytes: number, totalBytes: number | null) => void,
  ): Promise<Uint8Array> {
    const opened = await this.openFile(file);
    try {
      onProgress?.(0, opened.size);
      return await opened.read(0, opened.size, (loadedBytes) => onProgress?.(loadedBytes, opened.size));
    } finally {
      await opened.close();
    }
  }

  openFile(file: string): Promise<RandomAccessFile> {
    return openLocalFile(this.pathOf(file), file, (error) => this.readError(file, error));
  }

  /** The file's path; a name that would reach outside the folder is refused, as the Hub source refuses it. */
  private pathOf(file: string): string {
    if (!isPathInsideFolder(file)) throw new ModelLoadError(`${JSON.stringify(file)} is not a file path inside the folder ${this.location}`, file);
    return join(this.location, file);
  }

  private readError(file: string, error: unknown): ModelLoadError {
    const path = this.pathOf(file);
    if (isMissing(error)) return new ModelLoadError(`${path} not found: the folder must hold ${file}`, file);
    return new ModelLoadError(`${path} could not be read: ${(error as Error).message}`, file);
  }
}

/**
 * A model source for a location given by a user: a Hub id (`hf:OWNER/REPO[@REVISION]`, downloaded
 * into the cache folder, see hub-node.ts), an http(s) URL or a local folder that must exist.
 */
export function openModelSource(location: string): ModelSource {
  return openFolder(location, 'model folder', 'config.json, model.safetensors and tokenizer.json');
}

/** A PEFT adapter given by a user: a Hub id, an http(s) URL or a local folder that must exist. */
export function openAdapterSource(location: string): ModelSource {
  return openFolder(location, 'adapter folder', 'adapter_config.json and adapter_model.safetensors');
}

function openFolder(location: string, what: string, holds: string): ModelSource {
  if (isHubId(location)) return openHubSource(location);
  if (/^https?:\/\//i.test(location)) return new HttpModelSource(location);
  const folder = resolve(location);
  let isFolder: boolean;
  try {
    isFolder = statSync(folder).isDirectory();
  } catch (error) {
    if (!isMissing(error)) throw new ModelLoadError(`${folder} could not be read: ${(error as Error).message}`, folder);
    throw new ModelLoadError(`${what} ${folder} does not exist; give a folder holding ${holds}, an http(s) URL of one, or a Hub id hf:OWNER/REPO`, folder);
  }
  if (!isFolder) throw new ModelLoadError(`${folder} is a file, not a folder; give the folder that holds ${holds}`, folder);
  return new FileModelSource(folder);
}

function isMissing(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException).code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}

/** Writes `files` (names may hold '/' for subfolders) into `folder`, next to what it holds already. */
export async function writeFolderFiles(folder: string, files: Map<string, Uint8Array>): Promise<void> {
  for (const [name, bytes] of files) {
    const path = join(folder, ...name.split('/'));
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, bytes);
  }
}

/**
 * Makes `folder` hold exactly `files`, through a temporary sibling renamed into place: a process
 * killed meanwhile leaves the folder as it was before, never half of it.
 */
export async function replaceFolder(folder: string, files: Map<string, Uint8Array>): Promise<void> {
  const temporary = `${folder}.partial`;
  await rm(temporary, { recursive: true, force: true });
  await mkdir(temporary, { recursive: true });
  await writeFolderFiles(temporary, files);
  await rm(folder, { recursive: true, force: true });
  await rename(temporary, folder);
}
