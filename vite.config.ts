import { createReadStream, existsSync, readdirSync, statSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { extname, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { svelte } from '@sveltejs/vite-plugin-svelte';
import { defineConfig, type Connect, type Plugin } from 'vite';

/** Reference models that are not ours to redistribute live beside the clone, never inside it. */
const FIXTURES_DIR = fileURLToPath(new URL('../shared/fixtures', import.meta.url));
const FIXTURES_PREFIX = '/fixtures/';

/** The embedded default model, shipped in public/ (scripts/default-model/make.ts writes it). */
const EMBEDDED_MODEL_DIR = fileURLToPath(new URL('./public/models/rlplay-agent-mini', import.meta.url));

/**
 * The embedded model's files, '/'-separated, given to the app as __EMBEDDED_MODEL_FILES__: the
 * page then knows the folder is there, and which optional files it lacks, without a request for
 * each (a static host logs every 404 as a console error).
 */
function embeddedModelFiles(): string[] {
  if (!existsSync(EMBEDDED_MODEL_DIR)) return [];
  return readdirSync(EMBEDDED_MODEL_DIR, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(EMBEDDED_MODEL_DIR, resolve(entry.parentPath, entry.name)).split(sep).join('/'))
    .sort();
}

const CONTENT_TYPES: Record<string, string> = {
  '.json': 'application/json',
  '.md': 'text/markdown; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
};

/**
 * Serves ../shared/fixtures/ at /fixtures/ in the dev and preview servers: files with their exact
 * Content-Length (the loader's progress bar reads it), and a plain 404 for anything missing — never
 * the SPA's index.html, which a model loader would otherwise take for a file. Without that folder,
 * everything under /fixtures/ is a 404.
 */
function fixtures(): Plugin {
  const middleware: Connect.NextHandleFunction = (req: IncomingMessage, res: ServerResponse, next) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (!url.pathname.startsWith(FIXTURES_PREFIX)) return next();
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { Allow: 'GET, HEAD' }).end();
      return;
    }
    let relative: string;
    try {
      relative = decodeURIComponent(url.pathname.slice(FIXTURES_PREFIX.length));
    } catch {
      res.writeHead(400).end();
      return;
    }
    const file = resolve(FIXTURES_DIR, relative);
    const stats = file.startsWith(FIXTURES_DIR + sep) && existsSync(file) ? statSync(file) : null;
    if (!stats?.isFile()) {
      res.writeHead(404, { 'Content-Type': 'text/plain; charset=utf-8' }).end(`not found: ${url.pathname}\n`);
      return;
    }
    res.writeHead(200, {
      'Content-Type': CONTENT_TYPES[extname(file)] ?? 'application/octet-stream',
      'Content-Length': stats.size,
      'Cache-Control': 'no-cache',
    });
    if (req.method === 'HEAD') {
      res.end();
      return;
    }
    createReadStream(file).on('error', (error) => res.destroy(error)).pipe(res);
  };
  return {
    name: 'rlplay-fixtures',
    // Added directly (not in a returned hook) so it runs before Vite's own middlewares and SPA fallback.
    configureServer: (server) => void server.middlewares.use(middleware),
    configurePreviewServer: (server) => void server.middlewares.use(middleware),
  };
}

export default defineConfig({
  plugins: [svelte({ configFile: false }), fixtures()],
  define: { __EMBEDDED_MODEL_FILES__: JSON.stringify(embeddedModelFiles()) },
  server: {
    host: '127.0.0.1',
    // Playwright's server: a source edited during a test run must not reload the page under a test.
    hmr: process.env.RLPLAY_TEST_SERVER ? false : undefined,
  },
  preview: { host: '127.0.0.1' },
  build: { target: 'es2022' },
  optimizeDeps: {
    // The test harness is only reached through the dev server, and the scan does not follow
    // `new Worker(new URL(...))`: scan both too, so that their deps are prebundled up front. A dep
    // found only when a worker first loads (onnx-proto, in the training Worker) makes Vite
    // re-optimise mid-session, and pages opened meanwhile fail to load their modules.
    entries: ['index.html', 'tests/browser/harness.html', 'src/app/training/worker.ts'],
  },
});
