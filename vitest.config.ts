import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['tests/unit/**/*.test.ts'],
    globalSetup: ['tests/support/require-fixtures.ts'],
    // WebGPU on SwiftShader runs on the CPU: model tests take seconds, not milliseconds.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Dawn is a native module that does not survive worker threads; forks isolate it per file.
    pool: 'forks',
    fileParallelism: false,
  },
});
