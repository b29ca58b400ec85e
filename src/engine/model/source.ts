// Model folders behind any http(s) base URL (the Hugging Face Hub's resolve/ URLs, a static site,
// the Vite dev server). Browser-safe: fetch only, no Node imports.
import { DOWNLOAD_AGAIN, ModelLoadError } from './types.ts';
import type { ModelSource } from './types.ts';

/** `base` + '/' + `file`, with each path segment of `file` URL-encoded. */
export function joinUrl(base: string, file: string): string {
  const path = file.split('/').filter(Boolean).map(encodeURIComponent).join('/');
  return `${base.replace(/\/+$/, '')}/${path}`;
}

/**
 * Whether `file` names a file inside a folder: relative, '/'-separated, with no empty, '.' or '..'
 * segment. Names from downloaded files (a sharded index's weight_map) must pass it before they
 * are read, so that none reaches outside the model folder or the cache.
 */
export function isPathInsideFolder(file: string): boolean {
  return !file.includes('\\') && file.split('/').every((segment) => segment !== '' && segment !== '.' && segment !== '..');
}

/** A JSON file of the model folder, parsed; a syntax error names the file and the line and column. */
export async function readJsonFile(source: ModelSource, file: string): Promise<unknown> {
  const text = await source.readText(file);
  try {
    return JSON.parse(text);
  } catch (error) {
    const message = (error as Error).message;
    const position = /position (\d+)/.exec(message);
    const where = position ? ` at ${lineAndColumn(text, Number(position[1]))}` : '';
    throw new ModelLoadError(
      `${file} is not valid JSON${where} (${message}); the file is damaged or incomplete`,
      file,
      null,
      DOWNLOAD_AGAIN,
    );
  }
}

function lineAndColumn(text: string, offset: number): string {
  const before = text.slice(0, offset).split('\n');
  return `line ${before.length}, column ${before[before.length - 1].length + 1}`;
}

// Without an explicit Accept, dev servers with an SPA fallback (Vite) answer a missing file with
// index.html and status 200. Both values are CORS-safelisted, so cross-origin requests stay simple.
const ACCEPT = { Accept: 'application/octet-stream, application/json' };

export interface HttpModelSourceOptions {
  fetch?: typeof fetch;
  /**
   * The folder's files, when known up front (a folder shipped with the app): exists() answers
   * from the list, so looking up an optional file the folder lacks sends no request, and a static
   * host logs no 404 for it.
   */
  files?: readonly string[];
}

export class HttpModelSource implements ModelSource {
  readonly location: string;
  private readonly fetchImpl: typeof fetch;
  private readonly files: ReadonlySet<string> | null;

  constructor(baseUrl: string, options: HttpModelSourceOptions = {}) {
    this.location = baseUrl.replace(/\/+$/, '');
    this.fetchImpl = options.fetch ?? ((input, init) => fetch(input, init));
    this.files = options.files ? new Set(options.files) : null;
  }

  async exists(file: string): Promise<boolean> {
    if (this.files) return this.files.has(file);
    const url = joinUrl(this.location, file);
    let response = await this.request(url, file, 'HEAD');
    if (response.status === 405 || response.status === 501) {
      // A server without HEAD: ask for the file and drop the body.
      response = await this.request(url, file, 'GET');
      await response.body?.cancel();
    }
    if (response.status === 404 || (response.ok && isHtml(response))) return false;
    if (!response.ok) throw httpError(url, file, response);
    return true;
  }

  async readText(file: string): Promise<string> {
    const url = joinUrl(this.location, file);
    const response = await this.fetchOk(url, file);
    try {
      return await response.text();
    } catch (error) {
      throw new ModelLoadError(`download of ${url} failed: ${(error as Error).message}; try again`, file);
    }
  }

  async readBytes(
    file: string,
    onProgress?: (loadedBytes: number, totalBytes: number | null) => void,
  ): Promise<Uint8Array> {
    const url = joinUrl(this.location, file);
    const response = await this.fetchOk(url, file);
    const totalBytes = contentLength(response);
    if (!response.body) return new Uint8Array(await response.arrayBuffer());

    // With a known size the body goes straight into one buffer: no second copy of a large file.
    const whole = totalBytes !== null ? new Uint8Array(totalBytes) : null;
    const chunks: Uint8Array[] = [];
    let loadedBytes = 0;
    const reader = response.body.getReader();
    onProgress?.(0, totalBytes);
    try {
      for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
        if (whole) {
          if (loadedBytes + chunk.value.length > whole.length) {
            throw new Error(`the server sent more than the ${whole.length} bytes its Content-Length announced`);
          }
          whole.set(chunk.value, loadedBytes);
        } else {
          chunks.push(chunk.value);
        }
        loadedBytes += chunk.value.length;
        onProgress?.(loadedBytes, totalBytes);
      }
    } catch (error) {
      throw new ModelLoadError(
        `download of ${url} failed after ${loadedBytes} of ${totalBytes ?? 'unknown'} bytes: ` +
          `${(error as Error).message}; try again`,
        file,
      );
    }
    if (whole && loadedBytes !== whole.length) {
      throw new ModelLoadError(
        `download of ${url} ended after ${loadedBytes} of ${whole.length} bytes (connection cut); try again`,
        file,
      );
    }
    return whole ?? concatenate(chunks, loadedBytes);
  }

  private async fetchOk(url: string, file: string): Promise<Response> {
    const response = await this.request(url, file, 'GET');
    if (!response.ok) throw httpError(url, file, response);
    if (isHtml(response)) {
      await response.body?.cancel();
      throw new ModelLoadError(
        `${url} answered with an HTML page instead of ${file}: the server replaces missing files with a page; ` +
          `the folder must hold ${file}`,
        file,
      );
    }
    return response;
  }

  private async request(url: string, file: string, method: 'GET' | 'HEAD'): Promise<Response> {
    try {
      return await this.fetchImpl(url, { method, headers: ACCEPT });
    } catch (error) {
      const cause = (error as Error & { cause?: Error }).cause?.message;
      throw new ModelLoadError(
        `could not reach ${url}: ${(error as Error).message}${cause ? ` (${cause})` : ''}; check the URL, ` +
          'that the server is up, and, from a web page on another origin, that it sends CORS headers',
        file,
      );
    }
  }
}

function httpError(url: string, file: string, response: Response): ModelLoadError {
  if (response.status === 404) {
    return new ModelLoadError(`${url} not found (HTTP 404): the folder must hold ${file}`, file);
  }
  const status = `HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ''}`;
  const hint =
    response.status === 401 || response.status === 403
      ? 'the model may be private or gated, or the URL wrong'
      : 'try again later or check the URL';
  return new ModelLoadError(`${url} could not be downloaded (${status}): ${hint}`, file);
}

function isHtml(response: Response): boolean {
  return response.headers.get('content-type')?.startsWith('text/html') ?? false;
}

/** The body size, or null when unknown or when the server compressed it (the header then counts encoded bytes). */
export function contentLength(response: Response): number | null {
  const encoding = response.headers.get('content-encoding');
  if (encoding && encoding !== 'identity') return null;
  const length = Number(response.headers.get('content-length') ?? NaN);
  return Number.isSafeInteger(length) && length >= 0 ? length : null;
}

/** The chunks of a download, in order, as one array of totalBytes. */
export function concatenate(chunks: Uint8Array[], totalBytes: number): Uint8Array {
  const bytes = new Uint8Array(totalBytes);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.length;
  }
  return bytes;
}
