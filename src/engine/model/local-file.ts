// Local files opened for reads at any offset (Node only): a model folder's files, and the files of
// the Hub cache. A safetensors shard may be larger than one Node array (4 GiB), so it is read a
// tensor at a time, never whole.
import { open } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { ModelLoadError } from './types.ts';
import type { RandomAccessFile } from './types.ts';

/** Read size: large enough to be fast, small enough for a smooth progress bar. */
const READ_CHUNK_BYTES = 16 << 20;

/**
 * `path` (the file `file` of a model folder) opened for reads; `readError` turns a failure of the
 * open or of a read into the error thrown.
 */
export async function openLocalFile(path: string, file: string, readError: (error: unknown) => Error): Promise<RandomAccessFile> {
  let handle: FileHandle;
  try {
    handle = await open(path, 'r');
  } catch (error) {
    throw readError(error);
  }
  let size: number;
  try {
    size = (await handle.stat()).size;
  } catch (error) {
    await handle.close();
    throw readError(error);
  }
  return {
    size,
    read: async (offset, length, onProgress) => {
      const bytes = new Uint8Array(length);
      let loaded = 0;
      while (loaded < length) {
        let bytesRead: number;
        try {
          ({ bytesRead } = await handle.read(bytes, loaded, Math.min(READ_CHUNK_BYTES, length - loaded), offset + loaded));
        } catch (error) {
          throw readError(error);
        }
        if (bytesRead === 0) {
          throw new ModelLoadError(`${path} ended at byte ${offset + loaded} while it was read, though it was ${size} bytes when opened: another program changed it; try again`, file);
        }
        loaded += bytesRead;
        onProgress?.(loaded);
      }
      return bytes;
    },
    close: () => handle.close(),
  };
}
