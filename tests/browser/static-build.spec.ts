// The production build on a plain static host (no dev server, no /fixtures, no SPA fallback): a
// visit that opens the page, loads the embedded default model and generates asks for no file that
// is not there, so the console shows no 404. Optional model files the embedded folder lacks
// (chat_template.jinja, special_tokens_map.json) are known from the build's file list.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { expect, test } from '@playwright/test';
import { serveFolder, type StaticServer } from '../support/static-server.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const BUILD_DIR = fileURLToPath(new URL('../../test-results/static-build', import.meta.url));
const DEFAULT_MODEL_CONFIG = fileURLToPath(new URL('../../public/models/rlplay-agent-mini/config.json', import.meta.url));

let host: StaticServer;

test.beforeAll(async () => {
  test.setTimeout(300_000);
  execFileSync('npx', ['vite', 'build', '--outDir', BUILD_DIR, '--emptyOutDir', '--logLevel', 'error'], { cwd: ROOT, stdio: 'inherit' });
  host = await serveFolder(BUILD_DIR);
});

test.afterAll(async () => {
  await host?.close();
});

test('the built app loads and runs the embedded model without asking for a missing file', async ({ page }) => {
  test.skip(!existsSync(DEFAULT_MODEL_CONFIG), 'the embedded default model is not built (npm run model:default)');
  const failed: string[] = [];
  const consoleErrors: string[] = [];
  page.on('response', (response) => {
    if (response.status() >= 400) failed.push(`${response.status()} ${response.request().method()} ${response.url()}`);
  });
  page.on('requestfailed', (request) => failed.push(`failed ${request.method()} ${request.url()}: ${request.failure()?.errorText}`));
  page.on('console', (message) => {
    if (message.type() === 'error') consoleErrors.push(`${message.text()} (${message.location().url})`);
  });
  page.on('pageerror', (error) => consoleErrors.push(`[page error] ${error.message}`));

  await page.goto(`${host.url}/`);
  await expect(page.getByTestId('adapter')).toBeVisible();
  await expect(page.getByLabel('Model location')).toHaveValue('/models/rlplay-agent-mini/');
  await expect(page.getByLabel('Model location').locator('xpath=..')).not.toContainText('stories260K');
  await page.getByRole('button', { name: 'Load' }).click();
  await expect(page.getByTestId('model-ready')).toBeVisible();
  await page.getByLabel('Prompt', { exact: true }).fill('Look up the price');
  await page.getByLabel('Max new tokens').fill('4');
  await page.getByRole('button', { name: 'Generate' }).click();
  await expect(page.getByTestId('generate-summary')).toContainText('4 new tokens');

  expect(failed, 'requests the built app made that failed').toEqual([]);
  expect(consoleErrors, 'console errors').toEqual([]);
});
