// Loaded into a page of the Vite dev server by tests/browser/env-custom.spec.ts: runs custom
// environments from source text in module Web Workers (src/env/load-browser.ts) and reports what
// happened as plain JSON, through window.rlplayEnvCustom.
import { EnvError } from '../../src/env/guard.ts';
import { loadEnvSource } from '../../src/env/load-browser.ts';
import type { EnvModule, StepResult } from '../../src/env/types.ts';
import wordGuessSource from '../fixtures/envs/word-guess.js?raw';
import faultySource from '../fixtures/envs/faulty.js?raw';

export interface ErrorReport {
  name: string;
  message: string;
  kind?: string;
  step?: number;
  ms: number;
}

export interface EpisodeReport {
  observations: string[];
  rewards: number[];
  success: unknown;
}

export interface EnvCustomPage {
  /** One word-guess episode from source text in a worker, and the same module imported in the page. */
  wordGuess(seed: number): Promise<{ id: string; inWorker: EpisodeReport; inPage: EpisodeReport }>;
  /** Plays the faulty environment with `fault` at step `at`; the error, then a fresh episode. */
  fault(fault: string, at: number, stepTimeoutMs: number): Promise<{ error: ErrorReport | null; ticks: number; next: string }>;
  /** Loading source that does not load. */
  loadError(source: string): Promise<ErrorReport | null>;
}

declare global {
  interface Window {
    rlplayEnvCustom: EnvCustomPage;
  }
}

async function caught(run: () => Promise<unknown>): Promise<ErrorReport | null> {
  const started = performance.now();
  try {
    await run();
    return null;
  } catch (error) {
    const e = error as Error;
    return { name: e.name, message: e.message, ...(e instanceof EnvError ? { kind: e.kind, step: e.step } : {}), ms: performance.now() - started };
  }
}

async function play(module: EnvModule, seed: number): Promise<EpisodeReport> {
  const env = await module.make();
  const report: EpisodeReport = { observations: [(await env.reset({ seed })).observation], rewards: [], success: undefined };
  for (let t = 0; t < module.maxEpisodeSteps; t++) {
    const actions = await env.validActions!();
    const result: StepResult = await env.step(actions[t % actions.length]);
    report.observations.push(result.observation);
    report.rewards.push(result.reward);
    if (result.terminated || result.truncated) {
      report.success = result.info.success;
      break;
    }
  }
  await env.close?.();
  return report;
}

window.rlplayEnvCustom = {
  async wordGuess(seed) {
    const module = await loadEnvSource(wordGuessSource, { label: 'word-guess.js' });
    const inWorker = await play(module, seed);
    await module.dispose();
    const url = URL.createObjectURL(new Blob([wordGuessSource], { type: 'text/javascript' }));
    const inPage = await play((await import(/* @vite-ignore */ url)).default as EnvModule, seed);
    return { id: module.id, inWorker, inPage };
  },

  async fault(fault, at, stepTimeoutMs) {
    const module = await loadEnvSource(faultySource, { label: 'faulty.js', stepTimeoutMs });
    const env = await module.make({ fault, at });
    await env.reset({ seed: 1 });
    // The page's own timers keep running while the environment loops in its worker.
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 20);
    const error = await caught(async () => {
      for (let t = 0; t < at; t++) await env.step('up');
    });
    clearInterval(ticker);
    await env.reset({ seed: 2 });
    const next = (await env.step('up')).observation;
    await env.close?.();
    await module.dispose();
    return { error, ticks, next };
  },

  loadError: (source) => caught(() => loadEnvSource(source, { label: 'editor.js', loadTimeoutMs: 1000 })),
};
document.title = 'env-custom ready';
