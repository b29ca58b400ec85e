// The Node side of bench:engine's browser part: serves the model folder from 127.0.0.1, starts the
// Vite dev server for the page and its modules, opens bench/browser/engine.html in headless
// Chromium (WebGPU on whatever adapter it finds; SwiftShader without a GPU) and returns what the
// page measured. Every request that is not for 127.0.0.1 is aborted and reported.
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from '@playwright/test';
import { createServer } from 'vite';
import { serveFolder } from '../../tests/support/static-server.ts';
import type { BrowserBenchOptions, BrowserBenchResult } from './engine-page.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The same flags as playwright.config.ts: WebGPU on, nothing phoning home. */
const CHROMIUM_ARGS = ['--enable-unsafe-webgpu', '--headless=new', '--no-sandbox', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'];

export interface BrowserBenchReport extends BrowserBenchResult {
  /** Requests for anywhere but 127.0.0.1, aborted; empty when the run stayed local. */
  offHost: string[];
}

export async function runBrowserBench(
  modelDir: string,
  chromiumPath: string,
  options: Pick<BrowserBenchOptions, 'onnx' | 'shape' | 'settings'>,
): Promise<BrowserBenchReport> {
  // The folder's parent is served so that transformers.js finds it as `${localModelPath}${modelId}/`.
  const models = await serveFolder(dirname(modelDir));
  const vite = await createServer({
    root: ROOT,
    configFile: join(ROOT, 'vite.config.ts'),
    logLevel: 'warn',
    server: { port: 0, hmr: false },
    // Scanned up front so the page's dependencies are prebundled before it loads (a dependency found
    // later makes Vite reload the page mid-run); in a cache of its own, apart from other dev servers.
    optimizeDeps: { entries: ['bench/browser/engine.html'] },
    cacheDir: join(ROOT, 'node_modules', '.vite-bench'),
  });
  const browser = await chromium.launch({ executablePath: chromiumPath, args: CHROMIUM_ARGS });
  try {
    await vite.listen();
    const pageUrl = new URL('bench/browser/engine.html', vite.resolvedUrls!.local[0]).href;
    const context = await browser.newContext();
    const offHost: string[] = [];
    // On the context, so that requests from workers are seen too.
    await context.route('**/*', (route) => {
      const url = new URL(route.request().url());
      if (url.hostname === '127.0.0.1') return route.continue();
      offHost.push(url.href);
      return route.abort();
    });
    const page = await context.newPage();
    page.on('pageerror', (error) => console.error(`[page error] ${error.message}`));
    page.on('console', (message) => {
      // The loaders probe optional files (chat_template.jinja, generation_config.json); those 404s are expected.
      if (message.text().startsWith('Failed to load resource') && message.text().includes('404')) return;
      if (message.type() === 'error' || message.type() === 'warning') console.error(`[page ${message.type()}] ${message.text()}`);
    });
    await page.goto(pageUrl);
    await page.waitForFunction(() => window.rlplayBenchEngine !== undefined, undefined, { timeout: 120_000 });
    const name = basename(modelDir);
    const pageOptions: BrowserBenchOptions = {
      ...options,
      modelUrl: `${models.url}/${encodeURIComponent(name)}/`,
      localModelPath: `${models.url}/`,
      modelId: name,
    };
    const result = await page.evaluate((o) => window.rlplayBenchEngine.run(o), pageOptions);
    return { ...result, offHost };
  } finally {
    await browser.close();
    await vite.close();
    await models.close();
  }
}
