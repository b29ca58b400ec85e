// The limits every environment runs under, defined once: the agent commands' and rlplay serve's
// options, --help and docs read them; guard.ts and load-node.ts enforce them.
import { integerSetting } from '../common/settings.ts';
import { DEFAULT_STEP_TIMEOUT_MS } from './guard.ts';

export const DEFAULT_MAX_MEMORY_MB = 1024;

export const ENV_LIMIT_SETTINGS = {
  stepTimeout: integerSetting(DEFAULT_STEP_TIMEOUT_MS, 'Time limit of every environment call (reset, step); past it the episode ends with an error (0: no limit).', { min: 0, unit: 'ms' }),
  maxMemoryMb: integerSetting(
    DEFAULT_MAX_MEMORY_MB,
    "Memory limit of each custom environment's worker: its heap, ArrayBuffers and WebAssembly memory; past it the worker is stopped and its episode fails.",
    { min: 32, unit: 'MiB' },
  ),
};
