// A stand-in for the Hugging Face Hub on 127.0.0.1 (a free port): serves model folders at
// /<owner>/<repo>/resolve/<revision>/<file> the way the Hub does (X-Repo-Commit, a strong ETag,
// Accept-Ranges and 206 answers to Range, X-Error-Code on errors, CORS for pages on other origins),
// with switches for what goes wrong with real downloads, and a log of the requests it answered.
import { createHash } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, resolve, sep } from 'node:path';

/** The commit every repository of the server is at; `main` and this hash both resolve to it. */
export const HUB_COMMIT = '0123456789abcdef0123456789abcdef01234567';

export interface HubFaults {
  /** Files answered 404 EntryNotFound, as if the repository lacked them. */
  missing: Set<string>;
  /** Gated repositories: 401 GatedRepo without a token, 403 with another token than this one. */
  gatedToken: string | null;
  /** Cut the connection after `afterBytes` bytes of this file's body, for its next `times` downloads. */
  cut: Map<string, { afterBytes: number; times: number }>;
  /** A server without ranges: no Accept-Ranges, and a Range header ignored (200 with the whole file). */
  noRanges: boolean;
}

export interface HubRequest {
  method: string;
  /** The path, as requested. */
  path: string;
  /** The file within the repository, when the path is a resolve/ URL. */
  file: string | null;
  revision: string | null;
  range: string | null;
  authorization: string | null;
  status: number;
}

export interface HubServer {
  /** Base URL without a trailing slash, e.g. http://127.0.0.1:43125: the HF_ENDPOINT to use. */
  url: string;
  faults: HubFaults;
  requests: HubRequest[];
  /** Puts the faults back to none and empties the request log. */
  reset(): void;
  close(): Promise<void>;
}

const EXPOSED_HEADERS = 'X-Repo-Commit, X-Error-Code, X-Error-Message, ETag, Accept-Ranges, Content-Range, Content-Length';

/** Serves each repository ('owner/repo') from its folder. */
export async function serveHub(repos: Record<string, string>): Promise<HubServer> {
  const roots = new Map(Object.entries(repos).map(([id, folder]) => [id, resolve(folder)]));
  const faults: HubFaults = { missing: new Set(), gatedToken: null, cut: new Map(), noRanges: false };
  const requests: HubRequest[] = [];

  const server = createServer((request, response) => {
    handle(request, response).catch((error) => {
      if (!response.headersSent) response.writeHead(500).end(String(error));
      else response.destroy();
    });
  });

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const path = new URL(request.url ?? '/', 'http://x').pathname;
    const entry: HubRequest = {
      method: request.method ?? '',
      path,
      file: null,
      revision: null,
      range: request.headers.range ?? null,
      authorization: request.headers.authorization ?? null,
      status: 0,
    };
    const answer = (status: number, headers: Record<string, string | number> = {}) => {
      entry.status = status;
      requests.push(entry);
      response.writeHead(status, { 'Access-Control-Allow-Origin': '*', 'Access-Control-Expose-Headers': EXPOSED_HEADERS, ...headers });
    };
    const fail = (status: number, code: string, message: string) => {
      answer(status, { 'Content-Type': 'text/plain', 'X-Error-Code': code, 'X-Error-Message': message });
      response.end(request.method === 'HEAD' ? undefined : message);
    };

    if (request.method === 'OPTIONS') {
      answer(204, { 'Access-Control-Allow-Methods': 'GET, HEAD', 'Access-Control-Allow-Headers': 'Authorization, Range, If-Range' });
      response.end();
      return;
    }
    const match = /^\/([^/]+)\/([^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(path);
    if (!match || (request.method !== 'GET' && request.method !== 'HEAD')) return fail(404, 'NotFound', 'not a resolve URL');
    const [owner, repo, revision, file] = [match[1], match[2], decodeURIComponent(match[3]), decodeURIComponent(match[4])];
    Object.assign(entry, { file, revision });
    const root = roots.get(`${owner}/${repo}`);
    // The Hub answers a missing repository with 401 to anyone not signed in (it may be private).
    if (!root) return fail(entry.authorization ? 404 : 401, 'RepoNotFound', 'Repository not found');
    if (faults.gatedToken !== null && entry.authorization !== `Bearer ${faults.gatedToken}`) {
      return entry.authorization
        ? fail(403, 'GatedRepo', `Access to model ${owner}/${repo} is restricted and you are not in the authorized list.`)
        : fail(401, 'GatedRepo', `Access to model ${owner}/${repo} is restricted. You must be authenticated to access it.`);
    }
    if (revision !== 'main' && revision !== HUB_COMMIT) return fail(404, 'RevisionNotFound', `Invalid rev id: ${revision}`);
    const target = resolve(join(root, file));
    const isFile = target.startsWith(root + sep) && (await stat(target).catch(() => null))?.isFile();
    if (!isFile || faults.missing.has(file)) return fail(404, 'EntryNotFound', `${file} does not exist on "${revision}"`);

    const bytes = await readFile(target);
    const headers: Record<string, string | number> = {
      'Content-Type': file.endsWith('.json') ? 'application/json' : 'application/octet-stream',
      ETag: `"${createHash('sha256').update(bytes).digest('hex')}"`,
      'X-Repo-Commit': HUB_COMMIT,
    };
    if (!faults.noRanges) headers['Accept-Ranges'] = 'bytes';
    let start = 0;
    let end = bytes.length; // exclusive
    let status = 200;
    const range = faults.noRanges ? null : /^bytes=(\d+)-(\d*)$/.exec(entry.range ?? '');
    const ifRange = request.headers['if-range'];
    if (range && (!ifRange || ifRange === headers.ETag)) {
      start = Number(range[1]);
      end = range[2] ? Math.min(bytes.length, Number(range[2]) + 1) : bytes.length;
      if (start >= bytes.length) {
        answer(416, { 'Content-Range': `bytes */${bytes.length}` });
        response.end();
        return;
      }
      status = 206;
      headers['Content-Range'] = `bytes ${start}-${end - 1}/${bytes.length}`;
    }
    headers['Content-Length'] = end - start;
    answer(status, headers);
    if (request.method === 'HEAD') {
      response.end();
      return;
    }
    const cut = faults.cut.get(file);
    if (cut && cut.times > 0 && end - start > cut.afterBytes) {
      cut.times--;
      // The promised length never arrives: the client sees the connection close mid-body. end(), not
      // destroy(): a reset could drop bytes still in flight, and the client would stop short of afterBytes.
      response.write(bytes.subarray(start, start + cut.afterBytes), () => response.socket?.end());
      return;
    }
    response.end(bytes.subarray(start, end));
  }

  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    faults,
    requests,
    reset() {
      faults.missing.clear();
      faults.gatedToken = null;
      faults.cut.clear();
      faults.noRanges = false;
      requests.length = 0;
    },
    close: () =>
      new Promise<void>((done, fail) => {
        server.close((error) => (error ? fail(error) : done()));
        server.closeAllConnections();
      }),
  };
}
