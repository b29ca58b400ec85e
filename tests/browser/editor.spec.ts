// The custom environment editor in the page: Validate plays the template with a random policy and
// the model in the sandbox and says whether the reward separates good from bad episodes; an
// environment that throws shows its error and the app goes on; a validated environment trains; a
// share link carrying code shows it and runs nothing until the user agrees.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { expect, test } from '@playwright/test';
import { ENV_TEMPLATE } from '../../src/app/env-template.ts';

const FIXTURE_DIR = fileURLToPath(new URL('../../../shared/fixtures/stories260K', import.meta.url));
const SCREENSHOTS = fileURLToPath(new URL('../../test-results/screenshots/', import.meta.url));

test.beforeEach(({ page }) => {
  page.on('pageerror', (error) => console.log(`[page error] ${error.message}`));
});

test('validate the template, see a throwing environment fail cleanly, train on the custom one, share it, evaluate it after a reload', async ({ page, browser }) => {
  test.skip(!existsSync(FIXTURE_DIR), `no stories260K fixture at ${FIXTURE_DIR}`);
  test.setTimeout(600_000);
  await page.goto('/?model=/fixtures/stories260K/');
  await expect(page.getByTestId('adapter')).toBeVisible();
  const editor = page.locator('.editor .cm-content');
  await expect(editor).toContainText("id: 'largest-number'");

  await page.getByRole('button', { name: 'Validate' }).click();
  const validation = page.getByTestId('validation');
  await expect(validation).toBeVisible({ timeout: 300_000 });
  await expect(validation).toContainText('largest-number');
  await expect(page.getByTestId('separation')).toContainText('The reward separates good from bad episodes');
  await page.getByRole('heading', { name: 'Custom environment' }).scrollIntoViewIfNeeded();
  await page.screenshot({ path: `${SCREENSHOTS}editor-validated.png` });

  // Train on it: the Train card now offers it.
  await page.getByLabel('Environment', { exact: true }).selectOption('largest-number');
  await page.getByLabel('Algorithm').selectOption('reinforce');
  await page.getByLabel('Episodes', { exact: true }).fill('4');
  await page.getByText('REINFORCE settings').click();
  await page.getByLabel('episodesPerUpdate').fill('2');
  await page.getByRole('button', { name: 'Train', exact: true }).click();
  await expect(page.getByTestId('train-status')).toHaveAttribute('data-status', 'finished', { timeout: 300_000 });
  await expect(page.getByTestId('chart-reward')).toHaveAttribute('data-points', '2');
  await expect(page.getByTestId('last-episode')).toContainText('Numbers:');

  // Share it: the link carries the code.
  await page.getByRole('button', { name: 'Share setup' }).click();
  const link = await page.getByLabel('Share link').inputValue();

  // After a reload nothing is validated in the editor, yet the run evaluates: its code is stored with it.
  await page.reload();
  await expect(page.getByTestId('adapter')).toBeVisible();
  await page.getByLabel('Test episodes').fill('2');
  await page.getByRole('button', { name: 'Evaluate before and after' }).click();
  await expect(page.getByTestId('evaluation')).toContainText('Success rate', { timeout: 300_000 });

  // A throwing environment: its error is shown, and the page still works.
  await editor.fill(ENV_TEMPLATE.replace('step(action) {', "step(action) {\n        throw new Error('the reward service is down');"));
  await page.getByRole('button', { name: 'Validate' }).click();
  await expect(page.getByTestId('validation-error').first()).toContainText('the reward service is down', { timeout: 300_000 });
  await expect(page.getByRole('button', { name: 'Validate' })).toBeEnabled();

  const fresh = await browser.newContext();
  const other = await fresh.newPage();
  await other.goto(link);
  await expect(other.getByTestId('consent')).toBeVisible();
  await expect(other.locator('.editor .cm-content')).toContainText("id: 'largest-number'");
  await expect(other.getByRole('button', { name: 'Validate' })).toBeDisabled();
  await other.screenshot({ path: `${SCREENSHOTS}share-consent.png` });
  await other.getByRole('button', { name: 'Run this code' }).click();
  await expect(other.getByTestId('consent')).toBeHidden();
  await expect(other.getByRole('button', { name: 'Validate' })).toBeEnabled();
  await fresh.close();
});
