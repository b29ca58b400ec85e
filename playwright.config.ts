import { defineConfig } from '@playwright/test';

// The browser tests run in the system's Chromium (Debian's `chromium`; never `playwright install`),
// whose WebGPU falls back to SwiftShader, a CPU Vulkan driver, on machines without a GPU. It is
// slow, hence the long timeouts and the single worker.
const PORT = 5199;

export default defineConfig({
  testDir: 'tests/browser',
  globalSetup: './tests/support/require-fixtures.ts',
  workers: 1,
  fullyParallel: false,
  reporter: 'list',
  timeout: 300_000,
  expect: { timeout: 60_000 },
  outputDir: 'test-results/playwright',
  use: {
    baseURL: `http://127.0.0.1:${PORT}`,
    browserName: 'chromium',
    // launch() (not a persistent context) starts every run on a fresh, temporary profile.
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
      args: [
        '--enable-unsafe-webgpu',
        '--headless=new',
        '--no-sandbox',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
      ],
    },
    viewport: { width: 1280, height: 900 },
    actionTimeout: 60_000,
    navigationTimeout: 120_000,
  },
  webServer: {
    command: `npx vite --port ${PORT} --strictPort`,
    env: { RLPLAY_TEST_SERVER: '1' },
    url: `http://127.0.0.1:${PORT}/`,
    reuseExistingServer: !process.env.CI,
    timeout: 120_000,
    stdout: 'ignore',
    stderr: 'pipe',
  },
});
