// Custom environments from source text in Chromium: the module runs in a Web Worker inside an
// opaque-origin sandbox iframe (src/env/load-browser.ts) that reaches neither rlplay's IndexedDB
// nor the network; a good one plays like the same module imported
// in the page (its scripted expert too), a throwing one ends its episode with an EnvError, and a synchronous infinite loop is
// stopped at the time limit while the page stays responsive, the next episode on a fresh worker.
import { expect, test, type Page } from '@playwright/test';
import type {} from '../support/env-custom-page.ts'; // window.rlplayEnvCustom

test.describe.configure({ mode: 'serial' });

let page: Page;

test.beforeAll(async ({ browser }) => {
  page = await browser.newPage();
  page.on('pageerror', (error) => console.log(`[page error] ${error.message}`));
  // Any page of the dev server will do: the harness page is small and starts nothing by itself.
  await page.goto('/tests/browser/harness.html');
  await page.addScriptTag({ type: 'module', url: '/tests/support/env-custom-page.ts' });
  await page.waitForFunction(() => window.rlplayEnvCustom !== undefined);
});

test.afterAll(async () => {
  await page?.close();
});

test('a good environment runs in a worker exactly as in the page', async () => {
  for (const seed of [1, 2]) {
    const { id, inWorker, inPage } = await page.evaluate((s) => window.rlplayEnvCustom.wordGuess(s), seed);
    expect(id).toBe('word-guess');
    expect(inWorker.observations.length).toBeGreaterThan(1);
    expect(typeof inWorker.success).toBe('boolean');
    expect(inWorker.experts.every((action) => action.startsWith('guess: '))).toBe(true);
    expect(inWorker).toEqual(inPage);
  }
});

test('a throw in step() ends the episode with an EnvError; the next episode runs', async () => {
  const { error, next } = await page.evaluate(() => window.rlplayEnvCustom.fault('throw', 2, 2000));
  expect(error).toMatchObject({ name: 'EnvError', kind: 'threw', step: 2 });
  expect(error!.message).toMatch(/^environment "faulty" \(faulty\.js\): step\(\) threw at step 2: Error: the counter overflowed on "up"/);
  expect(next).toBe('step 1');
});

test('while (true) {} in step() is stopped at the limit; the page stays responsive', async () => {
  const { error, ticks, next } = await page.evaluate(() => window.rlplayEnvCustom.fault('loop', 2, 500));
  expect(error).toMatchObject({ name: 'EnvError', kind: 'timeout', step: 2 });
  expect(error!.message).toContain('step() did not finish within 500 ms at step 2; its worker was stopped');
  expect(error!.ms).toBeGreaterThanOrEqual(490);
  expect(error!.ms).toBeLessThan(5000);
  // 20 ms ticks during the ~500 ms wait: the loop never blocked the page.
  expect(ticks).toBeGreaterThanOrEqual(10);
  expect(next).toBe('step 1');
});

test('a NaN reward and source that does not load are clear EnvErrors', async () => {
  const nan = await page.evaluate(() => window.rlplayEnvCustom.fault('nan', 2, 2000));
  expect(nan.error!.message).toContain('step() returned reward NaN at step 2; rewards must be finite numbers');

  const syntax = await page.evaluate(() => window.rlplayEnvCustom.loadError('export default {\n  id: "x",,\n};\n'));
  expect(syntax).toMatchObject({ name: 'EnvError', kind: 'load' });
  expect(syntax!.message).toMatch(/^environment editor\.js: has a syntax error: /);

  const noDefault = await page.evaluate(() => window.rlplayEnvCustom.loadError('export const env = { make() {} };'));
  expect(noDefault!.message).toContain('has no default export (it exports `env`). Fix: make it the default export: `export default env;`');

  const looping = await page.evaluate(() => window.rlplayEnvCustom.loadError('for (;;) {}\nexport default {};'));
  expect(looping).toMatchObject({ kind: 'timeout' });
  expect(looping!.message).toContain('did not finish loading within 1000 ms');
});

test("the sandbox keeps the environment away from rlplay's storage, the network and the page", async () => {
  const probes = await page.evaluate(() => window.rlplayEnvCustom.escape());
  console.log(`sandbox probes: ${JSON.stringify(probes)}`);
  expect(probes.origin).toBe('null');
  for (const key of ['indexedDB', 'fetch', 'webSocket', 'importFromUrl', 'page']) expect(probes[key], key).toMatch(/^blocked/);
});
