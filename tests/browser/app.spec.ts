// The app page end to end in headless Chromium: WebGPU adapter, loading the stories260K fixture
// from the dev server, from a folder picked on the disk and from a Hub id (a local server in Hub
// layout, then Cache Storage), greedy generation, and clear errors for models that do not load.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { expect, test, type Page } from '@playwright/test';
import { HUB_COMMIT, serveHub } from '../support/hub-server.ts';

const FIXTURE_DIR = fileURLToPath(new URL('../../../shared/fixtures/stories260K', import.meta.url));
const SCREENSHOTS = fileURLToPath(new URL('../../test-results/screenshots/', import.meta.url));

test.beforeEach(({ page }) => {
  page.on('pageerror', (error) => console.log(`[page error] ${error.message}`));
});

/** Waits for the GPU panel to settle, and fails at once, with the page's message, without WebGPU. */
async function expectWebGpu(page: Page): Promise<void> {
  const adapter = page.getByTestId('adapter');
  const gpuError = page.getByTestId('gpu-error');
  await expect(adapter.or(gpuError)).toBeVisible();
  if (await gpuError.isVisible()) throw new Error(`the app has no WebGPU: ${await gpuError.textContent()}`);
}

test('reports the WebGPU adapter', async ({ page }) => {
  await page.goto('/');
  await expect(page.getByRole('heading', { name: 'rlplay', level: 1 })).toBeVisible();
  await expectWebGpu(page);
  const adapter = page.getByTestId('adapter');
  await expect(adapter).toContainText(/swiftshader/i);
  console.log(`adapter shown by the app: ${await adapter.textContent()}`);
  await expect(page.getByTestId('max-binding')).toHaveText(/\d+(\.\d)? [KMG]iB/);
});

test('loads stories260K and generates its greedy story', async ({ page }) => {
  test.skip(!existsSync(FIXTURE_DIR), `no stories260K fixture at ${FIXTURE_DIR}`);
  await page.goto('/?model=/fixtures/stories260K/');
  await expectWebGpu(page);
  const url = page.getByLabel('Model location');
  await expect(url).toHaveValue('/fixtures/stories260K/');
  await page.getByRole('button', { name: 'Load' }).click();
  await expect(page.getByTestId('model-ready')).toBeVisible();

  await page.getByLabel('Prompt', { exact: true }).fill('Once upon a time');
  await page.getByLabel('Max new tokens').fill('24');
  await expect(page.getByLabel(/^Greedy/)).toBeChecked();
  await page.getByRole('button', { name: 'Generate' }).click();
  await expect(page.getByTestId('generate-summary')).toContainText('24 new tokens');
  // The reference continuation (PyTorch, greedy): ", there was a little girl named Lily. She loved to play outside in the park."
  await expect(page.getByTestId('completion')).toHaveText(/^, there was a little girl/);
  console.log(`completion: ${await page.getByTestId('completion').textContent()}`);
  await page.screenshot({ path: `${SCREENSHOTS}app.png`, fullPage: true });
});

test('shows a clear error when the model URL does not answer', async ({ page }) => {
  await page.goto('/?model=http://127.0.0.1:1/nope/');
  await expectWebGpu(page);
  await expect(page.getByLabel('Model location')).toHaveValue('http://127.0.0.1:1/nope/');
  await page.getByRole('button', { name: 'Load' }).click();
  const error = page.getByTestId('load-error');
  await expect(error).toBeVisible({ timeout: 30_000 });
  await expect(error).toContainText('could not reach http://127.0.0.1:1/nope/config.json');
  await expect(page.getByRole('button', { name: 'Load' })).toBeEnabled();
  await page.screenshot({ path: `${SCREENSHOTS}app-load-error.png`, fullPage: true });
});

test('loads a model folder picked from the disk', async ({ page }) => {
  test.skip(!existsSync(FIXTURE_DIR), `no stories260K fixture at ${FIXTURE_DIR}`);
  await page.goto('/');
  await expectWebGpu(page);
  await page.getByTestId('folder-input').setInputFiles(FIXTURE_DIR);
  await expect(page.getByLabel('Model location')).toHaveValue('folder:stories260K');
  await expect(page.getByTestId('model-ready')).toContainText('Loaded folder:stories260K');
  await page.getByLabel('Prompt', { exact: true }).fill('Once upon a time');
  await page.getByLabel('Max new tokens').fill('8');
  await page.getByRole('button', { name: 'Generate' }).click();
  await expect(page.getByTestId('completion')).toHaveText(/^, there was a little girl/);
});

test('loads a Hub id, from Cache Storage the second time, and names a missing file', async ({ page }) => {
  test.skip(!existsSync(FIXTURE_DIR), `no stories260K fixture at ${FIXTURE_DIR}`);
  const hub = await serveHub({ 'fixture-owner/stories260K': FIXTURE_DIR });
  try {
    const open = async (model: string) => {
      await page.goto(`/?hub=${encodeURIComponent(hub.url)}&model=${encodeURIComponent(model)}`);
      await expectWebGpu(page);
      await page.getByRole('button', { name: 'Load' }).click();
    };
    await open('hf:fixture-owner/stories260K');
    await expect(page.getByTestId('model-ready')).toContainText('Loaded hf:fixture-owner/stories260K');
    await expect(page.getByLabel(/^Hugging Face token/)).toBeVisible();
    const weightDownloads = () => hub.requests.filter((r) => r.file === 'model.safetensors' && r.method === 'GET' && r.status === 200).length;
    expect(weightDownloads()).toBe(1);

    await open('hf:fixture-owner/stories260K');
    await expect(page.getByTestId('model-ready')).toBeVisible();
    expect(weightDownloads()).toBe(1);

    hub.faults.missing.add('config.json');
    await open(`hf:fixture-owner/stories260K@${HUB_COMMIT}`);
    await expect(page.getByTestId('load-error')).toContainText(`fixture-owner/stories260K@${HUB_COMMIT} has no file config.json`);
  } finally {
    await hub.close();
  }
});
