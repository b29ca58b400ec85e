// Model locations in the browser, as the page and its Workers name them:
//   hf:OWNER/REPO[@REV]   the Hugging Face Hub (or a mirror), cached in Cache Storage (hub.ts);
//   folder:NAME           a folder the user picked from their disk, read from its File objects;
//   anything else         the URL of a folder in Hugging Face layout.
// The same strings are stored with runs and carried by share links; a picked folder's files live
// only in the page that picked it, so a run on one asks for the folder again after a reload.
import { HubModelSource, isHubId, parseHubId } from './hub.ts';
import { HttpModelSource } from './source.ts';
import { ModelLoadError } from './types.ts';
import type { ModelSource } from './types.ts';

export const FOLDER_PREFIX = 'folder:';

/** Where Hub ids are downloaded from, and the token for gated repositories. */
export interface HubSettings {
  /** The Hub or a mirror; the Hub when empty. */
  endpoint?: string;
  token?: string;
}

/** A folder picked from the disk: its files by path inside the folder (`config.json`, `onnx/model.onnx`). */
export interface PickedFolder {
  name: string;
  files: Map<string, Blob>;
}

export interface BrowserSourceOptions {
  hub?: HubSettings;
  /** The folders picked in this page, by name. */
  folders?: ReadonlyMap<string, PickedFolder>;
  /** The files of folder URLs known up front (the folders shipped with the app), by URL. */
  listings?: Readonly<Record<string, readonly string[]>>;
}

export function isFolderLocation(location: string): boolean {
  return location.startsWith(FOLDER_PREFIX);
}

/** The source for a location string (see the top of this file). */
export function openBrowserModelSource(location: string, options: BrowserSourceOptions = {}): ModelSource {
  if (isHubId(location)) return new HubModelSource(parseHubId(location), { endpoint: options.hub?.endpoint, token: options.hub?.token });
  if (isFolderLocation(location)) {
    const name = location.slice(FOLDER_PREFIX.length);
    const folder = options.folders?.get(name);
    if (!folder) {
      throw new ModelLoadError(`the folder "${name}" was picked in an earlier visit and the browser no longer holds its files: pick it again with "Open folder…"`, 'config.json');
    }
    return new BlobModelSource(folder);
  }
  return new HttpModelSource(location, { files: options.listings?.[folderKey(location)] });
}

/** A folder URL as `listings` keys it: without trailing slashes. */
export function folderKey(url: string): string {
  return url.replace(/\/+$/, '');
}

/**
 * The files of an `<input type="file" webkitdirectory>` as one picked folder: paths lose their
 * first segment (the folder's own name). Files in a nested folder (`onnx/`) keep their path.
 */
export function pickedFolder(files: Iterable<File>): PickedFolder {
  let name = '';
  const byPath = new Map<string, Blob>();
  for (const file of files) {
    const [top, ...rest] = (file.webkitRelativePath || file.name).split('/');
    if (rest.length === 0) continue;
    name ||= top;
    byPath.set(rest.join('/'), file);
  }
  if (byPath.size === 0) throw new ModelLoadError('the picked folder is empty: pick the folder that holds config.json, tokenizer.json and the .safetensors weights', 'config.json');
  return { name, files: byPath };
}

/** A picked folder read through Blob, so large weights are read in slices with progress. */
export class BlobModelSource implements ModelSource {
  readonly location: string;

  constructor(private readonly folder: PickedFolder) {
    this.location = `${FOLDER_PREFIX}${folder.name}/`;
  }

  async exists(file: string): Promise<boolean> {
    return this.folder.files.has(file);
  }

  async readText(file: string): Promise<string> {
    return this.blob(file).text();
  }

  async readBytes(file: string, onProgress?: (loadedBytes: number, totalBytes: number | null) => void): Promise<Uint8Array> {
    const blob = this.blob(file);
    const bytes = new Uint8Array(blob.size);
    const slice = 16 << 20;
    for (let offset = 0; offset < blob.size; offset += slice) {
      bytes.set(new Uint8Array(await blob.slice(offset, offset + slice).arrayBuffer()), offset);
      onProgress?.(Math.min(blob.size, offset + slice), blob.size);
    }
    if (blob.size === 0) onProgress?.(0, 0);
    return bytes;
  }

  private blob(file: string): Blob {
    const blob = this.folder.files.get(file);
    if (!blob) throw new ModelLoadError(`the picked folder "${this.folder.name}" has no ${file}`, file);
    return blob;
  }
}
