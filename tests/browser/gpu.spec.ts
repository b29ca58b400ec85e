// The engine's GPU checks (tests/browser/checks.ts) in headless Chromium, one test per check, on
// one page and one GPU device: the harness page runs a check, this file reports its result.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, test, type Page } from '@playwright/test';
import type {} from './harness.ts'; // window.rlplayChecks

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * The check names, read in Node so that Playwright can list one test per check before any browser
 * starts. The checks import WGSL with `?raw`, which only Vite and bin/register.js understand, so a
 * child Node process with that loader lists them; the result is kept in the environment, which
 * Playwright's worker processes inherit, so it runs once per `playwright test`.
 */
function checkNames(): string[] {
  process.env.RLPLAY_GPU_CHECK_NAMES ??= execFileSync(
    process.execPath,
    [
      '--import',
      './bin/register.js',
      '--input-type=module',
      '--eval',
      `const { browserChecks } = await import('./tests/browser/checks.ts');
       process.stdout.write('\\n' + JSON.stringify(browserChecks.map((check) => check.name)));`,
    ],
    { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] },
  )
    .trim()
    .split('\n')
    .at(-1);
  return JSON.parse(process.env.RLPLAY_GPU_CHECK_NAMES!) as string[];
}

// Not serial: a failed check must not skip the rest. Playwright then restarts the worker, and
// beforeAll opens a fresh page (and GPU device) for the checks after it.
test.describe('GPU checks in Chromium', () => {
  let page: Page;

  test.beforeAll(async ({ browser }) => {
    page = await browser.newPage();
    page.on('console', (message) => {
      // The loader probes optional files (shard index, chat template); their 404s are expected.
      if (message.text().startsWith('Failed to load resource') && message.text().includes('404')) return;
      if (message.type() === 'error' || message.type() === 'warning') console.log(`[page ${message.type()}] ${message.text()}`);
    });
    page.on('pageerror', (error) => console.log(`[page error] ${error.message}`));
    await page.goto('/tests/browser/harness.html');
    await page.waitForFunction(() => window.rlplayChecks !== undefined);
    // Fails every test below, loudly, when the browser has no WebGPU.
    const adapter = await page.evaluate(async () => {
      if (!navigator.gpu) return { error: 'navigator.gpu is undefined: this Chromium has no WebGPU (check --enable-unsafe-webgpu)' };
      try {
        return { name: await window.rlplayChecks.adapter() };
      } catch (error) {
        return { error: String(error) };
      }
    });
    if ('error' in adapter) throw new Error(`WebGPU is unavailable in Chromium: ${adapter.error}`);
    console.log(`WebGPU adapter in Chromium: ${adapter.name}`);
  });

  test.afterAll(async () => {
    await page?.close();
  });

  test('the page lists the same checks as the sources', async () => {
    expect(await page.evaluate(() => window.rlplayChecks.names())).toEqual(checkNames());
  });

  for (const name of checkNames()) {
    test(name, async () => {
      const result = await page.evaluate((check) => window.rlplayChecks.run(check), name);
      test.info().annotations.push({ type: 'duration', description: `${result.ms.toFixed(0)} ms in the page` });
      test.skip(result.skipped !== undefined, result.skipped);
      if (!result.ok) throw new Error(`${name} failed in Chromium:\n${result.error}`);
    });
  }
});
