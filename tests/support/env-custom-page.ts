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
  /** The scripted expert's action before each step. */
  experts: string[];
  success: unknown;
}

export interface EnvCustomPage {
  /** One word-guess episode from source text in a worker, and the same module imported in the page. */
  wordGuess(seed: number): Promise<{ id: string; inWorker: EpisodeReport; inPage: EpisodeReport }>;
  /** Plays the faulty environment with `fault` at step `at`; the error, then a fresh episode. */
  fault(fault: string, at: number, stepTimeoutMs: number): Promise<{ error: ErrorReport | null; ticks: number; next: string }>;
  /** Loading source that does not load. */
  loadError(source: string): Promise<ErrorReport | null>;
  /** What an environment's code gets when it reaches for rlplay's storage, the network and the page. */
  escape(): Promise<Record<string, string>>;
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
  const report: EpisodeReport = { observations: [(await env.reset({ seed })).observation], rewards: [], experts: [], success: undefined };
  for (let t = 0; t < module.maxEpisodeSteps; t++) {
    const actions = await env.validActions!();
    report.experts.push(await env.expertAction!());
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

  async escape() {
    // The page's own origin has rlplay's database: the sandbox must not see it.
    await new Promise((resolve, reject) => Object.assign(indexedDB.open('rlplay-escape-probe'), { onsuccess: resolve, onerror: reject }));
    const module = await loadEnvSource(ESCAPE_SOURCE, { label: 'escape.js', stepTimeoutMs: 10_000 });
    const env = await module.make();
    const { observation } = await env.reset({ seed: 0, options: { origin: location.origin } });
    await env.close?.();
    await module.dispose();
    return JSON.parse(observation) as Record<string, string>;
  },
};

/** Tries every way out; each probe reports 'blocked: …' or what it reached. */
const ESCAPE_SOURCE = `
const probe = async (run) => { try { return 'reached: ' + String(await run()); } catch (e) { return 'blocked: ' + (e && e.name); } };
export default {
  id: 'escape', description: 'probes the sandbox', maxEpisodeSteps: 1,
  make() {
    return {
      async reset({ options }) {
        const result = {
          indexedDB: await probe(() => new Promise((resolve, reject) => { const r = indexedDB.open('rlplay-escape-probe'); r.onsuccess = () => resolve('opened'); r.onerror = () => reject(r.error); })),
          fetch: await probe(() => fetch(options.origin + '/index.html').then((r) => r.status)),
          webSocket: await probe(() => new Promise((resolve, reject) => { const ws = new WebSocket(options.origin.replace('http', 'ws')); ws.onopen = () => resolve('open'); ws.onerror = () => reject(new Error('refused')); })),
          importFromUrl: await probe(() => import(options.origin + '/src/app/share.ts')),
          page: await probe(() => typeof document === 'undefined' ? Promise.reject(new ReferenceError('no document')) : document.title),
          origin: String(self.origin),
        };
        return { observation: JSON.stringify(result), info: {} };
      },
      step() { return { observation: '', reward: 0, terminated: true, truncated: false, info: {} }; },
    };
  },
};`;
document.title = 'env-custom ready';
