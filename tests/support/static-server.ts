// A minimal static file server on 127.0.0.1 (a free port) for tests that load over http(s):
// GET and HEAD, Content-Length, a folder's index.html for the folder, 404 for anything else that is
// not a file (no SPA fallback, as on a plain static host), CORS open to every origin.
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { extname, join, resolve, sep } from 'node:path';

export interface StaticServer {
  /** Base URL without a trailing slash, e.g. http://127.0.0.1:43125 */
  url: string;
  close(): Promise<void>;
}

const CONTENT_TYPES: Record<string, string> = {
  '.json': 'application/json',
  '.html': 'text/html; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.js': 'text/javascript',
  '.mjs': 'text/javascript',
  '.wasm': 'application/wasm',
  '.txt': 'text/plain; charset=utf-8',
  '.jinja': 'text/plain; charset=utf-8',
};

export async function serveFolder(folder: string): Promise<StaticServer> {
  const root = resolve(folder);
  const server = createServer(async (request, response) => {
    response.setHeader('Access-Control-Allow-Origin', '*');
    const pathname = safeDecode(new URL(request.url ?? '/', 'http://x').pathname);
    const path = resolve(join(root, pathname.endsWith('/') ? `${pathname}index.html` : pathname));
    const isFile = path.startsWith(root + sep) && (await stat(path).catch(() => null))?.isFile();
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      response.writeHead(405).end();
    } else if (!isFile) {
      response.writeHead(404, { 'Content-Type': 'text/plain' }).end(request.method === 'GET' ? 'not found' : undefined);
    } else {
      response.writeHead(200, {
        'Content-Type': CONTENT_TYPES[extname(path)] ?? 'application/octet-stream',
        'Content-Length': (await stat(path)).size,
      });
      if (request.method === 'HEAD') response.end();
      else createReadStream(path).pipe(response);
    }
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((done, fail) => {
        server.close((error) => (error ? fail(error) : done()));
        server.closeAllConnections();
      }),
  };
}

function safeDecode(pathname: string): string {
  try {
    return decodeURIComponent(pathname);
  } catch {
    return pathname;
  }
}
