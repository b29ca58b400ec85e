// npm run bench:learn -- [--model DIR|URL|hf:OWNER/REPO] [--envs ID|FILE,...] [--algos a,b] [--episodes N] [--eval-episodes M] [--difficulty D] [--seed S] [--set key=value]
//                         [--show] [--out DIR]
//
// Does RL learn? For each environment (the built-ins by default; a custom environment's file works
// too) and algorithm, in action-level (choice) mode: the
// test-split success of the greedy policy before training (the base model, measured once per
// environment) and after N training episodes, each with its 95% (Wilson) interval, the change in
// percentage points with its paired 95% interval (both evaluations play the same seeds), and the
// training speed in episodes per second. One table at the end; one line
// per cell as it finishes, and while a cell trains, a progress line every tenth of its episodes
// (training success over that tenth).
// --show also prints every test episode of each evaluation, one line each (success, the first line
// of its first observation, the actions taken): what the greedy policy learned, not only how often
// it succeeds.
// --out keeps the runs and the figures in DIR (a temporary folder otherwise), and the same command
// again resumes there: finished cells are not run again, a cell that was cut short goes on from its
// last checkpoint. Long benches (2,000 episodes take hours on a CPU) survive being stopped.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { makePolicy } from '../src/agent/policies.ts';
import type { PlayedEpisode } from '../src/agent/policy.ts';
import type { GpuLoraAdapter } from '../src/engine/lora/gpu-adapter.ts';
import { loadModelForCli } from '../src/cli/load.ts';
import { BUILTIN_ENVIRONMENTS } from '../src/env/builtin/index.ts';
import { resolveEnvironment } from '../src/env/resolve-node.ts';
import type { EnvModule } from '../src/env/types.ts';
import { evaluatePolicy, pairedChange, type Estimate, type EvaluationReport } from '../src/rl/evaluate.ts';
import { ALGORITHMS, type AlgorithmName } from '../src/rl/index.ts';
import { TRAIN_DEFAULTS, trainRun, type TrainConfig } from '../src/rl/run.ts';
import { FileTrajectoryStore } from '../src/store/files.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: '../shared/fixtures/stories260K' },
    envs: { type: 'string', default: [...BUILTIN_ENVIRONMENTS.keys()].join(',') },
    algos: { type: 'string', default: ALGORITHMS.join(',') },
    episodes: { type: 'string', default: '200' },
    'eval-episodes': { type: 'string', default: '50' },
    difficulty: { type: 'string', default: '1' },
    seed: { type: 'string', default: '0' },
    set: { type: 'string', multiple: true, default: [] },
    show: { type: 'boolean', default: false },
    out: { type: 'string' },
  },
});
const envSpecs = values.envs!.split(',');
const algos = values.algos!.split(',') as AlgorithmName[];
for (const a of algos) if (!ALGORITHMS.includes(a)) throw new Error(`unknown algorithm ${a}; choose from ${ALGORITHMS.join(', ')}`);
/** A count option's value, or a clear stop when it is not a positive whole number. */
function positiveCount(option: 'episodes' | 'eval-episodes', what: string): number {
  const value = Number(values[option]);
  if (!Number.isInteger(value) || value < 1) {
    console.error(`--${option} ${values[option]}: give a whole number of at least 1 (${what})`);
    process.exit(2);
  }
  return value;
}
const episodes = positiveCount('episodes', 'training episodes per cell');
const evalEpisodes = positiveCount('eval-episodes', 'test episodes played before and after training, which the bench compares');
const overrides = Object.fromEntries(values.set!.map((kv) => [kv.slice(0, kv.indexOf('=')), JSON.parse(kv.slice(kv.indexOf('=') + 1))]));

// Any model the CLI takes (a folder, a URL, a Hub id), e.g. a pretrained one: --model hf:HuggingFaceTB/SmolLM2-135M-Instruct.
const model = await loadModelForCli(values.model!);
const root = values.out === undefined ? mkdtempSync(join(tmpdir(), 'rlplay-bench-learn-')) : resolve(values.out);
mkdirSync(root, { recursive: true });
const store = new FileTrajectoryStore(root);

/** The figures measured so far, kept in --out so that a bench started again skips what is done. */
interface Figures {
  settings: Record<string, unknown>;
  before: Record<string, Evaluation | Estimate>;
  cells: Record<string, { after: Evaluation | Estimate; episodesPerSecond: number }>;
}
/** An evaluation as the figures keep it: its success rate and its episodes' outcomes, for the paired change. */
type Evaluation = Pick<EvaluationReport, 'successRate' | 'outcomes'>;
/** A kept evaluation; --out folders of earlier benches hold the success rate alone. */
const evaluation = (kept: Evaluation | Estimate): Evaluation => ('successRate' in kept ? kept : { successRate: kept });
const settings = { model: values.model, episodes, evalEpisodes, difficulty: values.difficulty, seed: values.seed, overrides };
const figuresPath = join(root, 'bench-learn.json');
const figures: Figures = existsSync(figuresPath) ? JSON.parse(readFileSync(figuresPath, 'utf8')) : { settings, before: {}, cells: {} };
if (JSON.stringify(figures.settings) !== JSON.stringify(settings)) {
  throw new Error(`${values.out} holds a bench with other settings (${JSON.stringify(figures.settings)}); give the same settings to resume it, or another --out`);
}
function saveFigures(): void {
  writeFileSync(`${figuresPath}.tmp`, JSON.stringify(figures, null, 2));
  renameSync(`${figuresPath}.tmp`, figuresPath);
}

/** Training episodes per second over the whole run, from the speed stored with each update (so a resumed run counts every part). */
async function trainingSpeed(runId: string): Promise<number> {
  const perUpdate = (await store.listMetrics(runId, 'perf/episodes_per_second')).sort((a, b) => a.step - b.step);
  let seconds = 0;
  for (const [i, m] of perUpdate.entries()) seconds += (m.step - (i > 0 ? perUpdate[i - 1].step : 0)) / m.value;
  return (perUpdate.at(-1)?.step ?? 0) / seconds;
}
const format = model.tokenizer.hasChatTemplate ? ('chat' as const) : ('plain' as const);
console.log(`model ${values.model} (WebGPU: ${model.gpu.adapterName}); choice mode, difficulty ${values.difficulty}, ${episodes} training episodes, ${evalEpisodes} test episodes per evaluation`);

function baseConfig(env: string, algo: AlgorithmName): TrainConfig {
  // `env` as --env takes it (a built-in's id or a file), as the CLI records it.
  return { ...TRAIN_DEFAULTS, model: values.model!, env, algo, episodes, seed: Number(values.seed), difficulty: Number(values.difficulty), format, algorithm: overrides };
}

async function testSuccess(env: EnvModule, adapter: GpuLoraAdapter | null, label: string): Promise<Evaluation> {
  const policy = makePolicy(model, { ...TRAIN_DEFAULTS, format, env, reset: { split: 'test', difficulty: Number(values.difficulty) }, adapter });
  const played: PlayedEpisode[] = [];
  const report = await evaluatePolicy(policy, { episodes: evalEpisodes, firstSeed: 1_000_000, onPlayed: (e) => played.push(e) });
  if (values.show) {
    console.log(`  ${env.id}, test episodes ${label}:`);
    for (const e of played.sort((a, b) => a.seed - b.seed)) {
      const question = e.steps[0]?.observation.split('\n')[0] ?? '';
      console.log(`    ${e.success ? 'success' : 'failure'}  ${question}  →  ${e.error ?? e.steps.map((s) => s.action).join(' | ')}`);
    }
  }
  return { successRate: report.successRate, outcomes: report.outcomes };
}

const rows: string[][] = [];
const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const interval = (e: Estimate) => `${pct(e.value)} [${(100 * e.low).toFixed(0)}, ${(100 * e.high).toFixed(0)}]`;
try {
  for (const spec of envSpecs) {
    // As --env resolves it: a built-in by id, or a custom environment's file in workers.
    const env = await resolveEnvironment(spec);
    const envId = env.id;
    try {
      if (figures.before[envId] === undefined) {
        figures.before[envId] = await testSuccess(env, null, 'before training');
        saveFigures();
      }
      const before = evaluation(figures.before[envId]);
      for (const algo of algos) {
        const runId = `${envId}-${algo}`;
        if (figures.cells[runId] === undefined) {
          const started = performance.now();
          const tenth = Math.max(1, Math.round(episodes / 10));
          let reported: number | null = null;
          let played = 0; // in this invocation: a resumed run has played some before
          const successes: number[] = [];
          const outcome = await trainRun(model, env, store, runId, baseConfig(spec, algo), {
            onLog: (message) => console.log(`  ${message}`),
            onEpisode: () => played++,
            onUpdate: ({ episodes: done, metrics }) => {
              successes.push(metrics['charts/success_rate']);
              reported ??= done - played;
              if (done - reported < tenth && done < episodes) return;
              const elapsed = (performance.now() - started) / 1000;
              console.log(`  ${envId} ${algo}: ${done}/${episodes} episodes, training success ${pct(successes.reduce((a, b) => a + b, 0) / successes.length)} over the last ${done - reported}, ${(played / elapsed).toFixed(2)} episodes/s`);
              reported = done;
              successes.length = 0;
            },
          });
          try {
            const after = await testSuccess(env, outcome.adapter, `after ${algo}`);
            figures.cells[runId] = { after, episodesPerSecond: await trainingSpeed(runId) };
            saveFigures();
          } finally {
            outcome.adapter.dispose();
          }
        }
        const after = evaluation(figures.cells[runId].after);
        const change = pairedChange(before, after);
        const difference = `${((after.successRate.value - before.successRate.value) * 100).toFixed(1)}`;
        const row = [
          envId,
          algo,
          interval(before.successRate),
          interval(after.successRate),
          change ? `${difference} [${(100 * change.successRate.low).toFixed(0)}, ${(100 * change.successRate.high).toFixed(0)}]` : difference,
          figures.cells[runId].episodesPerSecond.toFixed(2),
        ];
        rows.push(row);
        console.log(row.join('  '));
      }
    } finally {
      await env.dispose();
    }
  }
} finally {
  if (values.out === undefined) rmSync(root, { recursive: true, force: true });
  model.dispose();
}

const header = ['environment', 'algorithm', 'success before [95% CI]', 'success after [95% CI]', 'change (pp) [paired 95% CI]', 'episodes/s'];
const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c].length)));
console.log();
for (const row of [header, ...rows]) console.log(row.map((cell, c) => (c < 2 ? cell.padEnd(widths[c]) : cell.padStart(widths[c]))).join('  '));
