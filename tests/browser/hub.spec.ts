// Hub models in Chromium: stories260K from a local server in Hub layout (tests/support/hub-server.ts,
// on another origin than the page, so CORS is exercised too) loads through HubModelSource with the
// same logits as the plain folder, is kept in Cache Storage, and loads again from there with the
// browser offline. A missing file is a clear error.
import { existsSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { expect, test, type Page } from '@playwright/test';
import { STORIES260K_DIR } from '../support/model-folder.ts';
import { HUB_COMMIT, serveHub, type HubServer } from '../support/hub-server.ts';
import type {} from '../support/hub-page.ts'; // window.rlplayHub

const MODEL_ID = 'hf:fixture-owner/stories260K';

test.describe.configure({ mode: 'serial' });
test.skip(!existsSync(STORIES260K_DIR), `needs the stories260K fixture at ${STORIES260K_DIR}`);

let page: Page;
let server: HubServer;

test.beforeAll(async ({ browser }) => {
  server = await serveHub({ 'fixture-owner/stories260K': STORIES260K_DIR });
  // A fresh context: its Cache Storage starts empty.
  page = await (await browser.newContext()).newPage();
  page.on('pageerror', (error) => console.log(`[page error] ${error.message}`));
  await page.goto('/tests/browser/harness.html');
  await page.addScriptTag({ type: 'module', url: '/tests/support/hub-page.ts' });
  await page.waitForFunction(() => window.rlplayHub !== undefined);
});

test.afterAll(async () => {
  await page?.context().close();
  await server?.close();
});

test('loads from the Hub as from the folder, then from Cache Storage while offline', async () => {
  const folder = await page.evaluate(() => window.rlplayHub.loadFolder('/fixtures/stories260K/'));
  const first = await page.evaluate(([endpoint, id]) => window.rlplayHub.load(endpoint, id), [server.url, MODEL_ID]);
  expect(first.logits).toEqual(folder.logits);
  const size = (await stat(join(STORIES260K_DIR, 'model.safetensors'))).size;
  expect(first.progress.at(-1)).toEqual(['model.safetensors', size, size]);
  expect(first.progress.length).toBeGreaterThan(1);
  expect(server.requests.filter((r) => r.file === 'model.safetensors' && r.method === 'GET' && r.status === 200)).toHaveLength(1);
  const keys = await page.evaluate(() => window.rlplayHub.cacheKeys());
  expect(keys).toContain('https://hub.rlplay.invalid/fixture-owner/stories260K/main/model.safetensors');
  expect(keys).toContain('https://hub.rlplay.invalid/fixture-owner/stories260K/main/chat_template.jinja?missing');

  server.requests.length = 0;
  await page.context().setOffline(true);
  try {
    const second = await page.evaluate(([endpoint, id]) => window.rlplayHub.load(endpoint, id), [server.url, MODEL_ID]);
    expect(second.logits).toEqual(folder.logits);
    expect(second.progress).toEqual([['model.safetensors', size, size]]);
    expect(server.requests).toEqual([]);

    // Another revision is not in the cache: offline, that is said.
    const offline = await page.evaluate(([endpoint, id]) => window.rlplayHub.loadError(endpoint, id), [server.url, `${MODEL_ID}@${HUB_COMMIT}`]);
    expect(offline).toMatchObject({ name: 'HubError', kind: 'offline' });
    expect(offline!.message).toContain(`could not reach ${server.url} to download config.json of fixture-owner/stories260K@${HUB_COMMIT}`);
    expect(offline!.message).toContain('it is not in the cache (Cache Storage "rlplay-models")');
  } finally {
    await page.context().setOffline(false);
  }
});

test('names a missing file', async () => {
  server.faults.missing.add('config.json');
  try {
    const error = await page.evaluate(([endpoint, id]) => window.rlplayHub.loadError(endpoint, id), [server.url, `${MODEL_ID}@${HUB_COMMIT}`]);
    expect(error).toMatchObject({ name: 'HubError', kind: 'file-not-found' });
    expect(error!.message).toBe(`fixture-owner/stories260K@${HUB_COMMIT} has no file config.json (HTTP 404 Not Found from ${server.url})`);
  } finally {
    server.reset();
  }
});
