// Training in the page, end to end in headless Chromium on SwiftShader: the run trains in the
// training Worker on the stories260K fixture, the dashboard fills update after update, pause and
// resume continue the same run, and a reload in the middle of a run offers to resume it from its
// last checkpoint in IndexedDB, with the charts' history restored.
import { existsSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { expect, test, type Page } from '@playwright/test';
import { gguf } from '@huggingface/gguf';
import { unzipSync } from 'fflate';
import onnxProto from 'onnx-proto';
import { exportOnnx } from '../../src/engine/export/onnx.ts';
import { readPeftAdapter } from '../../src/engine/lora/peft.ts';
import { loadModelFiles } from '../../src/engine/model/load.ts';
import { MemoryModelSource } from '../../src/engine/model/memory-source.ts';
import { parseSafetensors } from '../../src/engine/model/safetensors.ts';
import { openModelSource } from '../../src/engine/model/source-node.ts';

const FIXTURE_DIR = fileURLToPath(new URL('../../../shared/fixtures/stories260K', import.meta.url));
const SCREENSHOTS = fileURLToPath(new URL('../../test-results/screenshots/', import.meta.url));

test.beforeEach(({ page }) => {
  page.on('pageerror', (error) => console.log(`[page error] ${error.message}`));
});

const points = async (page: Page, chart: string) => Number(await page.getByTestId(chart).getAttribute('data-points'));

/** stories260K on tool-use with REINFORCE, `episodes` episodes, an update every 2: short runs with several checkpoints. */
async function setUpReinforceRun(page: Page, episodes: number) {
  await page.goto('/?model=/fixtures/stories260K/');
  await expect(page.getByTestId('adapter')).toBeVisible();
  await page.getByLabel('Environment', { exact: true }).selectOption('tool-use');
  await page.getByLabel('Algorithm').selectOption('reinforce');
  await page.getByLabel('Episodes', { exact: true }).fill(String(episodes));
  await page.getByText('REINFORCE settings').click();
  await page.getByLabel('episodesPerUpdate').fill('2');
}

test('trains in a Worker: the charts fill, pause and resume, and a reload resumes from the checkpoint', async ({ page }) => {
  test.skip(!existsSync(FIXTURE_DIR), `no stories260K fixture at ${FIXTURE_DIR}`);
  test.setTimeout(900_000);
  await page.goto('/?model=/fixtures/stories260K/');
  await expect(page.getByTestId('adapter')).toBeVisible();
  await expect(page.getByLabel('Model location')).toHaveValue('/fixtures/stories260K/');

  await page.getByLabel('Environment', { exact: true }).selectOption('tool-use');
  await page.getByLabel('Algorithm').selectOption('reinforce');
  await page.getByLabel('Episodes', { exact: true }).fill('16');
  await page.getByText('REINFORCE settings').click();
  await page.getByLabel('episodesPerUpdate').fill('2');
  await expect(page.getByText('Episodes played between two training updates.')).toBeVisible();
  await page.getByRole('button', { name: 'Train', exact: true }).click();

  // The first update: the reward chart has a point and the latest episode is shown.
  await expect(page.getByTestId('chart-reward')).toHaveAttribute('data-points', '1', { timeout: 300_000 });
  await expect(page.getByTestId('last-episode')).toContainText('Agent');
  await expect(page.getByTestId('chart-policy-loss')).toHaveAttribute('data-points', '1');
  await page.screenshot({ path: `${SCREENSHOTS}train-running.png`, fullPage: true });

  // Pause stops after the update in progress; Resume continues the same run.
  await page.getByRole('button', { name: 'Pause' }).click();
  await expect(page.getByTestId('train-status')).toHaveAttribute('data-status', 'paused', { timeout: 300_000 });
  const paused = await points(page, 'chart-reward');
  expect(paused).toBeGreaterThanOrEqual(1);
  await page.getByRole('button', { name: 'Resume' }).click();
  await expect(page.getByTestId('train-status')).toHaveAttribute('data-status', 'training');
  await expect.poll(() => points(page, 'chart-reward'), { timeout: 300_000 }).toBeGreaterThan(paused);

  // A reload in the middle of the run: the page offers to resume it, with its history.
  const beforeReload = await points(page, 'chart-reward');
  await page.reload();
  await expect(page.getByTestId('resume-offer')).toBeVisible();
  await page.getByRole('button', { name: 'Resume it' }).click();
  await expect(page.getByTestId('chart-reward')).toHaveAttribute('data-points', String(beforeReload));
  await expect(page.getByTestId('train-status')).toHaveAttribute('data-status', 'finished', { timeout: 600_000 });
  await expect(page.getByTestId('chart-reward')).toHaveAttribute('data-points', '8');
  // The rate of every update (annealed over the run), history from before the reload included.
  await expect(page.getByTestId('chart-learning-rate')).toHaveAttribute('data-points', '8');
  await expect(page.getByTestId('train-status')).toContainText('16 / 16 episodes');
  await page.screenshot({ path: `${SCREENSHOTS}train-finished.png`, fullPage: true });

  // The trajectory browser shows the run's episodes, each action token shaded by its probability.
  await page.getByRole('button', { name: 'Show episode 0' }).click();
  const tokens = page.getByTestId('action-tokens').first();
  await expect(tokens).toBeVisible();
  expect(await tokens.locator('span').count()).toBeGreaterThan(0);
  await expect(tokens.locator('span').first()).toHaveAttribute('title', /^p = [01]\.\d{3} \(log-prob -?\d+\.\d{2}\)$/);
  await page.getByTestId('episode-detail').screenshot({ path: `${SCREENSHOTS}trajectory-shading.png` });

  // Evaluate: before against after on the same test episodes, and a report that opens offline.
  await page.getByLabel('Test episodes').fill('4');
  await page.getByRole('button', { name: 'Evaluate before and after' }).click();
  await expect(page.getByTestId('evaluation')).toContainText('Success rate', { timeout: 300_000 });
  await expect(page.getByTestId('paired-change')).toContainText(/pp \[.*\] in success, .* in mean return \(paired over the same 4 episodes/);
  const reportDownload = page.waitForEvent('download');
  await page.getByRole('button', { name: 'Report (HTML)' }).click();
  const report = await reportDownload;
  expect(report.suggestedFilename()).toMatch(/-report\.html$/);
  const reportPath = `${SCREENSHOTS}../${report.suggestedFilename()}`;
  await report.saveAs(reportPath);
  const offline = await page.context().browser()!.newContext({ offline: true });
  const reader = await offline.newPage();
  const requests: string[] = [];
  reader.on('request', (r) => requests.push(r.url()));
  await reader.goto(pathToFileURL(reportPath).href);
  await expect(reader.getByRole('heading', { name: /rlplay report/ })).toBeVisible();
  await expect(reader.getByRole('img', { name: 'Reward per episode' })).toBeVisible();
  await expect(reader.getByText(/^Episode by episode: .* \(paired over the same 4 episodes/)).toBeVisible();
  await expect(reader.locator('details').first()).toContainText('seed 1000000');
  expect(requests.filter((url) => !url.startsWith('file:'))).toEqual([]);
  await reader.screenshot({ path: `${SCREENSHOTS}report.png`, fullPage: true });
  await offline.close();

  // Export: the PEFT zip has PEFT's names and shapes, and loads back on the same base model.
  const download = page.waitForEvent('download');
  await page.getByRole('button', { name: 'PEFT adapter (.zip)' }).click();
  const zip = await download;
  expect(zip.suggestedFilename()).toMatch(/-peft\.zip$/);
  const zipBytes = Buffer.concat(await (await zip.createReadStream()).toArray());
  const files = unzipSync(zipBytes);
  expect(Object.keys(files).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
  const config = JSON.parse(new TextDecoder().decode(files['adapter_config.json']));
  // PEFT's name for the base: the folder's name, not the dev server's URL.
  expect(config).toMatchObject({ peft_type: 'LORA', r: 8, lora_alpha: 16, base_model_name_or_path: 'stories260K' });
  const tensors = parseSafetensors(files['adapter_model.safetensors'], 'adapter_model.safetensors');
  // stories260K: hidden 64, 8 heads and 4 KV heads of 8, MLP 172, 5 layers; 7 projections x A and B.
  expect(tensors.size).toBe(5 * 7 * 2);
  expect(tensors.get('base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight')?.shape).toEqual([8, 64]);
  expect(tensors.get('base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight')?.shape).toEqual([32, 8]);
  expect(tensors.get('base_model.model.model.layers.4.mlp.down_proj.lora_A.weight')?.shape).toEqual([8, 172]);
  const base = await loadModelFiles(openModelSource(FIXTURE_DIR));
  const adapter = await readPeftAdapter(new MemoryModelSource(new Map(Object.entries(files)), 'exported zip: '), base.config);
  expect(adapter.settings.r).toBe(8);
  // GGUF: llama.cpp's metadata and tensor names, read by @huggingface/gguf.
  const ggufDownload = page.waitForEvent('download');
  await page.getByRole('button', { name: 'GGUF LoRA (llama.cpp)' }).click();
  const ggufFile = await ggufDownload;
  expect(ggufFile.suggestedFilename()).toMatch(/-lora\.gguf$/);
  const ggufPath = await ggufFile.path();
  const parsed = await gguf(ggufPath, { allowLocalFile: true });
  expect(parsed.metadata).toMatchObject({ 'general.architecture': 'llama', 'general.type': 'adapter', 'adapter.type': 'lora' });
  expect(parsed.tensorInfos.find((t) => t.name === 'blk.0.attn_q.weight.lora_a')?.shape).toEqual([64n, 8n]);
  // Merged ONNX: a transformers.js folder whose model is, metadata aside, what the exporter (checked
  // against transformers.js in export-onnx.test.ts and export-onnx.spec.ts) makes of this base model
  // and the adapter in the PEFT zip above.
  const onnxDownload = page.waitForEvent('download');
  await page.getByRole('button', { name: 'Merged ONNX (transformers.js, .zip)' }).click();
  const onnxZip = await onnxDownload;
  expect(onnxZip.suggestedFilename()).toMatch(/-onnx\.zip$/);
  const folder = unzipSync(Buffer.concat(await (await onnxZip.createReadStream()).toArray()));
  const expectedFolder = await exportOnnx(base, adapter);
  expect(Object.keys(folder).sort()).toEqual([...expectedFolder.keys()].sort());
  expect(Object.keys(folder)).toContain('onnx/model.onnx');
  for (const [path, bytes] of expectedFolder) if (path !== 'onnx/model.onnx') expect(Buffer.from(folder[path]).equals(bytes), path).toBe(true);
  expect(JSON.parse(new TextDecoder().decode(folder['config.json']))).toMatchObject({ model_type: 'llama', 'transformers.js_config': { dtype: 'fp32' } });
  const withoutMetadata = (bytes: Uint8Array) => {
    const model = onnxProto.onnx.ModelProto.decode(bytes);
    const metadata = Object.fromEntries(model.metadataProps.map((p) => [p.key, p.value]));
    model.metadataProps = [];
    return { metadata, bytes: Buffer.from(onnxProto.onnx.ModelProto.encode(model).finish()) };
  };
  const fromPage = withoutMetadata(folder['onnx/model.onnx']);
  expect(fromPage.metadata['rlplay.adapter']).toMatch(/^LoRA r=8 alpha=16 on q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj/);
  expect(fromPage.bytes.equals(withoutMetadata(expectedFolder.get('onnx/model.onnx')!).bytes)).toBe(true);
  await expect(page.getByTestId('export-error')).toHaveCount(0);
  await page.getByRole('heading', { name: 'Export' }).scrollIntoViewIfNeeded();
  await page.screenshot({ path: `${SCREENSHOTS}export.png` });
  // Import: a broken zip is refused with the reason; the exported zip comes back as a run that
  // starts from it and trains on.
  await page.getByLabel('Episodes', { exact: true }).fill('2');
  const adapterInput = page.getByTestId('adapter-input');
  await adapterInput.setInputFiles({ name: 'broken-peft.zip', mimeType: 'application/zip', buffer: Buffer.from('not a zip') });
  await expect(page.getByTestId('train-error')).toContainText('The adapter could not be imported: broken-peft.zip is not a readable zip archive');
  await adapterInput.setInputFiles({ name: zip.suggestedFilename(), mimeType: 'application/zip', buffer: zipBytes });
  const offer = page.getByTestId('resume-offer');
  await expect(offer).toContainText(`starts from the adapter imported from ${zip.suggestedFilename()}`);
  await offer.getByRole('button', { name: 'Train it' }).click();
  await expect(page.getByTestId('train-status')).toHaveAttribute('data-status', 'finished', { timeout: 120_000 });
  await expect(page.getByTestId('train-status')).toContainText('2 / 2 episodes');
  await expect(page.getByTestId('train-log')).toContainText('from its imported adapter (LoRA r=8)');
});

test('a lost GPU device mid-run is reported, and the run resumes from its last checkpoint', async ({ page, browser }) => {
  test.skip(!existsSync(FIXTURE_DIR), `no stories260K fixture at ${FIXTURE_DIR}`);
  test.setTimeout(600_000);
  await setUpReinforceRun(page, 8);
  await page.getByRole('button', { name: 'Train', exact: true }).click();
  await expect(page.getByTestId('chart-reward')).toHaveAttribute('data-points', '1', { timeout: 300_000 });
  // Chromium's GPU process dies, as on a driver reset: every device of the browser is lost.
  const cdp = await browser.newBrowserCDPSession();
  await cdp.send('Browser.crashGpuProcess');
  await expect(page.getByTestId('train-log')).toContainText('The GPU device was lost', { timeout: 120_000 });
  await expect(page.getByTestId('train-status')).toHaveAttribute('data-status', 'failed', { timeout: 120_000 });
  await expect(page.getByTestId('train-error')).toContainText(/the GPU device was lost \(.+\)\. The run's last checkpoint is kept/);
  // The page's own device (model loading, generation) is replaced as well.
  await expect(page.getByTestId('gpu-notice')).toContainText('and a new one is ready');
  await expect(page.getByTestId('adapter')).toBeVisible();
  const checkpointed = await points(page, 'chart-reward');
  await page.screenshot({ path: `${SCREENSHOTS}train-device-lost.png`, fullPage: true });
  await page.getByRole('button', { name: 'Resume from the last checkpoint' }).click();
  await expect(page.getByTestId('train-status')).toHaveAttribute('data-status', 'finished', { timeout: 300_000 });
  await expect(page.getByTestId('train-status')).toContainText('8 / 8 episodes');
  await expect(page.getByTestId('chart-reward')).toHaveAttribute('data-points', '4');
  expect(checkpointed).toBeGreaterThanOrEqual(1);
  await expect(page.getByTestId('train-log')).toContainText('Resumed from update');
});

test('Stop ends a run for good after its update, with the LoRA settings it was given, or at once when paused; a reload does not offer it again', async ({ page }) => {
  test.skip(!existsSync(FIXTURE_DIR), `no stories260K fixture at ${FIXTURE_DIR}`);
  await setUpReinforceRun(page, 16);
  await page.getByLabel('LoRA rank').fill('4');
  await page.getByLabel('LoRA alpha').fill('2');
  await page.getByText(/^LoRA targets/).click();
  for (const target of ['k_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj']) await page.getByLabel(target).uncheck();
  await expect(page.getByText('LoRA targets (2 of 7)')).toBeVisible();
  await page.getByRole('button', { name: 'Train', exact: true }).click();
  await expect(page.getByTestId('chart-reward')).toHaveAttribute('data-points', '1', { timeout: 300_000 });
  await page.getByRole('button', { name: 'Stop', exact: true }).click();
  await expect(page.getByTestId('train-status')).toHaveAttribute('data-status', 'stopped', { timeout: 120_000 });
  await expect(page.getByTestId('train-status')).toContainText('Stopped');
  await expect(page.getByTestId('train-log')).toContainText(/Stopped after \d+ of 16 episodes/);
  // The adapter trained only the chosen projections, at the chosen rank and alpha.
  const download = page.waitForEvent('download');
  await page.getByRole('button', { name: 'PEFT adapter (.zip)' }).click();
  const files = unzipSync(Buffer.concat(await (await (await download).createReadStream()).toArray()));
  const config = JSON.parse(new TextDecoder().decode(files['adapter_config.json']));
  expect(config).toMatchObject({ r: 4, lora_alpha: 2 });
  expect([...config.target_modules].sort()).toEqual(['q_proj', 'v_proj']);
  await page.reload();
  await expect(page.getByTestId('adapter')).toBeVisible();
  await expect(page.locator('#export-run')).toContainText('stopped');
  await expect(page.getByTestId('resume-offer')).toHaveCount(0);
  // Stop on a paused run ends it at once.
  await setUpReinforceRun(page, 8);
  await page.getByRole('button', { name: 'Train', exact: true }).click();
  await expect(page.getByTestId('chart-reward')).toHaveAttribute('data-points', '1', { timeout: 300_000 });
  await page.getByRole('button', { name: 'Pause' }).click();
  await expect(page.getByTestId('train-status')).toHaveAttribute('data-status', 'paused', { timeout: 300_000 });
  await page.getByRole('button', { name: 'Stop', exact: true }).click();
  await expect(page.getByTestId('train-status')).toHaveAttribute('data-status', 'stopped');
  await expect(page.getByTestId('train-log')).toContainText(/Stopped after [246] of 8 episodes/);
  await page.reload();
  await expect(page.getByTestId('adapter')).toBeVisible();
  await expect(page.getByTestId('resume-offer')).toHaveCount(0);
});

test('the trajectory browser lists stored episodes, filters them, shows a transcript, and round-trips JSONL', async ({ page }) => {
  test.skip(!existsSync(FIXTURE_DIR), `no stories260K fixture at ${FIXTURE_DIR}`);
  await page.goto('/');
  await expect(page.getByTestId('adapter')).toBeVisible();
  // A fresh browser context per test: the runs come from a JSONL file, as a user would import them.
  const jsonl = [
    { index: 0, envId: 'tool-use', seed: 5, split: 'train', totalReward: 1, success: true, length: 1, createdAt: 1, steps: [{ t: 0, observation: 'What is 2+2?', action: 'answer: 4', reward: 1, terminated: true, truncated: false, info: { success: true } }] },
    { index: 1, envId: 'tool-use', seed: 6, split: 'train', totalReward: 0, success: false, length: 1, createdAt: 2, steps: [{ t: 0, observation: 'What is 3+3?', action: 'answer: 7', reward: 0, terminated: true, truncated: false, info: { success: false } }] },
  ].map((e) => JSON.stringify(e)).join('\n');
  await page.getByText('Import JSONL').setInputFiles({ name: 'episodes.jsonl', mimeType: 'application/x-ndjson', buffer: Buffer.from(`${jsonl}\n`) });
  await expect(page.getByTestId('trajectories-notice')).toContainText('Imported 2 episodes');
  await expect(page.getByTestId('episode-table')).toHaveAttribute('data-total', '2');

  await page.getByLabel('Outcome').selectOption('success');
  await expect(page.getByTestId('episode-table')).toHaveAttribute('data-total', '1');
  await page.getByRole('button', { name: 'Show episode 0' }).click();
  await expect(page.getByTestId('episode-detail')).toContainText('answer: 4');
  await page.screenshot({ path: `${SCREENSHOTS}trajectories.png`, fullPage: true });

  const download = page.waitForEvent('download');
  await page.getByRole('button', { name: 'Export JSONL' }).click();
  const file = await download;
  expect(file.suggestedFilename()).toMatch(/\.jsonl$/);
  const lines = (await (await file.createReadStream()).toArray()).join('').trim().split('\n');
  expect(lines.map((l) => JSON.parse(l).steps[0].action)).toEqual(['answer: 4', 'answer: 7']);

  // A broken file: the line and the problem, and nothing stored.
  await page.getByText('Import JSONL').setInputFiles({ name: 'broken.jsonl', mimeType: 'application/x-ndjson', buffer: Buffer.from('{"index": 0}\nnot json\n') });
  await expect(page.getByTestId('trajectories-error')).toContainText('broken.jsonl');
  await expect(page.getByTestId('trajectories-error')).toContainText('line 1');
});

test('a share link restores the setup in a fresh browser; a cut-short link says so', async ({ page, browser }) => {
  await page.goto('/?model=/fixtures/stories260K/');
  await expect(page.getByTestId('adapter')).toBeVisible();
  await page.getByLabel('Environment', { exact: true }).selectOption('reasoning');
  await page.getByLabel('Algorithm').selectOption('grpo');
  await page.getByLabel('Episodes', { exact: true }).fill('40');
  await page.locator('#train-seed').fill('9');
  await page.getByText('GRPO settings').click();
  await page.getByLabel('groupSize').fill('6');
  await page.getByLabel('LoRA alpha').fill('32');
  await page.getByText(/^LoRA targets/).click();
  for (const target of ['gate_proj', 'up_proj', 'down_proj']) await page.getByLabel(target).uncheck();
  await page.getByRole('button', { name: 'Share setup' }).click();
  const link = await page.getByLabel('Share link').inputValue();
  expect(link).toContain('#s=');

  const fresh = await browser.newContext();
  const other = await fresh.newPage();
  await other.goto(link);
  await expect(other.getByTestId('share-restored')).toBeVisible();
  await expect(other.getByLabel('Environment', { exact: true })).toHaveValue('reasoning');
  await expect(other.getByLabel('Algorithm')).toHaveValue('grpo');
  await expect(other.getByLabel('Episodes', { exact: true })).toHaveValue('40');
  await expect(other.locator('#train-seed')).toHaveValue('9');
  await other.getByText('GRPO settings').click();
  await expect(other.getByLabel('groupSize')).toHaveValue('6');
  await expect(other.getByLabel('LoRA alpha')).toHaveValue('32');
  await other.getByText(/^LoRA targets/).click();
  for (const target of ['q_proj', 'k_proj', 'v_proj', 'o_proj']) await expect(other.getByLabel(target)).toBeChecked();
  for (const target of ['gate_proj', 'up_proj', 'down_proj']) await expect(other.getByLabel(target)).not.toBeChecked();
  await expect(other.getByLabel('Model location')).toHaveValue(/\/fixtures\/stories260K\/$/);
  await other.screenshot({ path: `${SCREENSHOTS}share-restored.png`, fullPage: true });

  await other.goto(link.slice(0, -10));
  await other.reload();
  await expect(other.getByTestId('share-error')).toContainText('damaged or cut short');
  await fresh.close();
});

test('"Open setup file" fills the form from a setup file; a bad file names the problem and changes nothing', async ({ page }) => {
  await page.goto('/?model=/fixtures/stories260K/');
  await expect(page.getByTestId('adapter')).toBeVisible();
  const environment = page.getByLabel('Environment', { exact: true });
  await expect(environment).toHaveValue('tool-use');
  const setupInput = page.getByTestId('setup-input');

  await setupInput.setInputFiles({ name: 'rlplay-experiment.json', mimeType: 'application/json', buffer: Buffer.from('{"v": 1, "model": "/fixtures/stories260K/"') });
  await expect(page.getByTestId('train-error')).toContainText('rlplay-experiment.json is not a setup file: it is not valid JSON');
  await expect(page.getByTestId('train-error')).toContainText('Your current setup is unchanged.');
  await expect(environment).toHaveValue('tool-use');

  // The file Share setup downloads for a setup too long for a link (share.ts setupJson).
  const setup = { v: 1, defaults: 2, model: '/fixtures/stories260K/', env: 'reasoning', mode: 'choice', algo: 'grpo', algorithm: { groupSize: 6 }, episodes: 40, seed: 9, loraR: 4, loraAlpha: 32 };
  await setupInput.setInputFiles({ name: 'rlplay-experiment.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(setup, null, 2)) });
  await expect(page.getByTestId('share-restored')).toContainText('the setup file rlplay-experiment.json');
  await expect(page.getByTestId('train-error')).toHaveCount(0);
  await expect(environment).toHaveValue('reasoning');
  await expect(page.getByLabel('Algorithm')).toHaveValue('grpo');
  await expect(page.getByLabel('Episodes', { exact: true })).toHaveValue('40');
  await expect(page.locator('#train-seed')).toHaveValue('9');
  await page.getByText('GRPO settings').click();
  await expect(page.getByLabel('groupSize')).toHaveValue('6');
  await expect(page.getByLabel('LoRA alpha')).toHaveValue('32');
});
