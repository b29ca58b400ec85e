// A model folder (or adapter, or checkpoint) held in memory: files read from IndexedDB, made by a
// test, or a checkpoint's files before they are written anywhere.
import type { ModelSource } from './types.ts';

/** Files by name, read as a folder would be. */
export class MemoryModelSource implements ModelSource {
  constructor(
    private readonly files: Map<string, Uint8Array>,
    readonly location = 'memory:',
  ) {}

  async exists(file: string): Promise<boolean> {
    return this.files.has(file);
  }

  async readText(file: string): Promise<string> {
    return new TextDecoder().decode(await this.readBytes(file));
  }

  async readBytes(file: string): Promise<Uint8Array> {
    const bytes = this.files.get(file);
    if (!bytes) throw new Error(`${this.location}${file} does not exist`);
    return bytes;
  }
}
