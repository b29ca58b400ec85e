// ONNX export in headless Chromium: the page exports stories260K with its synthetic adapter (and the
// embedded default model with a random one, when it is built), then
// transformers.js (onnxruntime-web, wasm) runs the folder and matches our engine on WebGPU:
// logits over a prompt, on the KV cache and in a padded batch within 1e-4, greedy tokens exactly.
// No request may leave 127.0.0.1: transformers.js would otherwise fetch its wasm from a CDN.
import { expect, test } from '@playwright/test';
import type { ExportOnnxCase } from '../support/export-onnx-page.ts'; // and window.rlplayExportOnnx

const TOLERANCE = 1e-4;

for (const which of ['stories260K', 'default-model'] as ExportOnnxCase[]) test(`${which}: an exported model runs in transformers.js in the browser and matches the engine`, async ({ page }) => {
  const offHost: string[] = [];
  const ortFiles: string[] = [];
  // On the context, so that requests from workers are seen too.
  await page.context().route('**/*', (route) => {
    const url = new URL(route.request().url());
    if (url.hostname !== '127.0.0.1') {
      offHost.push(url.href);
      return route.abort();
    }
    if (url.pathname.startsWith('/node_modules/onnxruntime-web/dist/')) ortFiles.push(url.pathname.split('/').at(-1)!);
    return route.continue();
  });
  page.on('pageerror', (error) => console.log(`[page error] ${error.message}`));
  page.on('console', (message) => {
    // The loader and the export probe the optional chat_template.jinja; its 404s are expected.
    if (message.text().startsWith('Failed to load resource') && message.text().includes('404')) return;
    if (message.type() === 'error') console.log(`[page error] ${message.text()}`);
  });
  // Any page of the dev server will do: the harness page is small and starts nothing by itself.
  await page.goto('/tests/browser/harness.html');
  await page.addScriptTag({ type: 'module', url: '/tests/support/export-onnx-page.ts' });
  await page.waitForFunction(() => window.rlplayExportOnnx !== undefined);

  const result = await page.evaluate((name) => window.rlplayExportOnnx.run(name), which);
  test.skip('skipped' in result, 'skipped' in result ? result.skipped : '');
  if ('skipped' in result) return;
  console.log(`engine on ${result.adapterName}; model.onnx ${result.files['onnx/model.onnx']} bytes; prompt max |Δ| ${result.promptMaxDiff}, decode ${result.decodeMaxDiffs.join(', ')}, padded ${result.paddedMaxDiff}`);

  // The source folder's config and tokenizer files (special_tokens_map.json only where it has one) and the graph.
  expect(Object.keys(result.files)).toEqual(expect.arrayContaining(['config.json', 'generation_config.json', 'onnx/model.onnx', 'tokenizer.json', 'tokenizer_config.json']));
  expect(result.exportedFetches).toContain('onnx/model.onnx');
  expect(result.promptMaxDiff).toBeLessThanOrEqual(TOLERANCE);
  expect(result.decodeMaxDiffs).toHaveLength(4);
  for (const diff of result.decodeMaxDiffs) expect(diff).toBeLessThanOrEqual(TOLERANCE);
  expect(result.paddedMaxDiff).toBeLessThanOrEqual(TOLERANCE);
  if (which === 'stories260K') expect(result.engineTokens).toHaveLength(24);
  else expect(result.engineTokens.length).toBeGreaterThan(0);
  expect(result.transformersTokens).toEqual(result.engineTokens);
  // onnxruntime-web's wasm build came from the dev server, and nothing from anywhere else.
  expect(ortFiles).toContain('ort-wasm-simd-threaded.asyncify.wasm');
  expect(offHost).toEqual([]);
});
