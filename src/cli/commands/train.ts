// rlplay train: reinforcement learning of a LoRA adapter on an environment. --out holds the run:
// trajectories.jsonl (every episode with its steps), metrics.jsonl, checkpoints/, the PEFT adapter
// of the latest update and, at the end, report.json. Running the same command again resumes it.
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import type { Command } from 'commander';
import { Option } from 'commander';
import { makePolicy } from '../../agent/policies.ts';
import { LORA_TARGETS, type LoraTarget } from '../../engine/lora/adapter.ts';
import type { GpuLoraAdapter } from '../../engine/lora/gpu-adapter.ts';
import { ADAPTER_CONFIG, ADAPTER_WEIGHTS, peftAdapterFiles } from '../../engine/lora/peft.ts';
import type { Model } from '../../engine/model.ts';
import { openAdapterSource } from '../../engine/model/source-node.ts';
import type { EnvModule } from '../../env/types.ts';
import { ALGORITHM_SETTINGS, ALGORITHMS, checkAlgorithmSettings, type AlgorithmName } from '../../rl/index.ts';
import { checkSomethingPlayed, describeChange, describeFailures, evaluatePolicy, pairedChange, type EvaluationReport } from '../../rl/evaluate.ts';
import { checkRequestedEpisodes, importAdapterRun, TRAIN_DEFAULTS, trainRun, type TrainConfig } from '../../rl/run.ts';
import { describeAllowed } from '../../common/settings.ts';
import { FileTrajectoryStore } from '../../store/files.ts';
import { actingSettings, addAgentOptions, checkAgentFlags, loadEnvironment, type AgentFlags } from '../agent-options.ts';
import { DEFAULT_MODEL_DIR, loadModelForCli, MODEL_HELP } from '../load.ts';
import { parseNumber, parseWholeNumber } from '../parse.ts';
import { episodeSpeed } from '../progress.ts';

interface TrainFlags extends AgentFlags {
  model: string;
  algo: AlgorithmName;
  episodes: number;
  seed: number;
  out: string;
  loraR: number;
  loraAlpha: number;
  targets: string;
  microBatch: number;
  initAdapter?: string;
  set: Record<string, unknown>;
  evalEpisodes: number;
}

/** --set key=value (repeatable): a JSON value, or the text as a string. */
function collectSetting(value: string, previous: Record<string, unknown>): Record<string, unknown> {
  const eq = value.indexOf('=');
  if (eq <= 0) throw new Error(`--set expects key=value, e.g. --set clipCoef=0.1, got "${value}"`);
  const raw = value.slice(eq + 1);
  let parsed: unknown = raw;
  try {
    parsed = JSON.parse(raw);
  } catch {
    // a bare word: keep it as a string (e.g. --set source=successes)
  }
  return { ...previous, [value.slice(0, eq)]: parsed };
}

/** Each algorithm's settings, one per line: name, default, allowed values and unit, doc. */
function settingsTable(): string {
  return Object.entries(ALGORITHM_SETTINGS)
    .map(([algo, schema]) => {
      const rows = Object.entries(schema).map(([name, setting]) => [name, JSON.stringify(setting.default), `${describeAllowed(setting)}${setting.unit ? `, ${setting.unit}` : ''}`, setting.doc]);
      const width = (column: number) => Math.max(...rows.map((row) => row[column].length));
      return `  ${algo}\n${rows.map(([name, value, allowed, doc]) => `    ${name.padEnd(width(0))}  ${value.padEnd(width(1))}  ${allowed.padEnd(width(2))}  ${doc}`).join('\n')}\n`;
    })
    .join('');
}

const pct = (x: number) => (Number.isFinite(x) ? `${(100 * x).toFixed(0)}%` : '-');
const decimal = (x: number | undefined) => (x !== undefined && Number.isFinite(x) ? x.toFixed(3) : '-');

export function registerTrain(program: Command): void {
  const command = program
    .command('train')
    .description('train a LoRA adapter with reinforcement learning on an environment; run again with the same --out to resume')
    .option('--model <dir|url|hf:id>', MODEL_HELP, DEFAULT_MODEL_DIR)
    .addOption(new Option('--algo <name>', 'the algorithm').choices(ALGORITHMS as unknown as string[]).default('ppo'))
    .requiredOption('--episodes <n>', 'episodes to play in total', parseWholeNumber)
    .requiredOption('--out <dir>', 'the run folder: trajectories.jsonl, metrics.jsonl, checkpoints, the adapter, report.json')
    .option('--seed <s>', 'seed of the adapter, the episodes and the sampling', parseWholeNumber, 0)
    .option('--lora-r <r>', 'LoRA rank', parseWholeNumber, TRAIN_DEFAULTS.lora.r)
    .option('--lora-alpha <a>', 'LoRA alpha', parseNumber, TRAIN_DEFAULTS.lora.alpha)
    .option('--targets <list>', 'comma-separated projections to adapt', TRAIN_DEFAULTS.lora.targets.join(','))
    .option('--init-adapter <dir>', "start from this PEFT adapter (folder with adapter_config.json and adapter_model.safetensors) instead of a fresh one; its LoRA settings replace --lora-r, --lora-alpha and --targets")
    .option('--micro-batch <n>', 'training sequences per forward/backward', parseWholeNumber, TRAIN_DEFAULTS.microBatch)
    .option('--set <key=value>', "override one of the algorithm's settings (repeatable); see --help for the defaults", collectSetting, {})
    .option('--eval-episodes <n>', 'also evaluate on the test split before training (where the run starts: the base model, or the --init-adapter adapter) and after, with this many episodes (0: skip)', parseWholeNumber, 0);
  addAgentOptions(command);
  command.addHelpText('after', () => `\nAlgorithm settings (--set name=value): default, allowed values, what it does\n${settingsTable()}`);
  command.action(async (flags: TrainFlags) => {
    checkAgentFlags(flags);
    if (flags.episodes < 1) throw new Error('--episodes must be at least 1');
    checkAlgorithmSettings(flags.algo, flags.set);
    const targets = flags.targets.split(',').map((t) => t.trim()) as LoraTarget[];
    const unknown = targets.filter((t) => !LORA_TARGETS.includes(t));
    if (unknown.length) throw new Error(`--targets: unknown projection(s) ${unknown.join(', ')}; choose from ${LORA_TARGETS.join(', ')}`);
    const out = resolve(flags.out);
    const store = new FileTrajectoryStore(dirname(out), { onWarning: (message) => process.stderr.write(`warning: ${message}\n`) });
    const env = await loadEnvironment(flags);
    const model = await loadModelForCli(flags.model);
    let config: TrainConfig = {
      ...TRAIN_DEFAULTS,
      model: flags.model,
      env: flags.env,
      ...actingSettings(model, flags),
      algo: flags.algo,
      episodes: flags.episodes,
      seed: flags.seed,
      difficulty: flags.difficulty,
      microBatch: flags.microBatch,
      lora: { ...TRAIN_DEFAULTS.lora, r: flags.loraR, alpha: flags.loraAlpha, targets },
      algorithm: flags.set,
    };
    // A new run from an adapter stores it as its update-0 checkpoint; running again resumes as usual.
    const runId = basename(out);
    if (flags.initAdapter && !(await store.getRun(runId))) {
      const files = new Map<string, Uint8Array>();
      for (const file of [ADAPTER_CONFIG, ADAPTER_WEIGHTS]) {
        const path = join(resolve(flags.initAdapter), file);
        if (existsSync(path)) files.set(file, await readFile(path));
      }
      config = await importAdapterRun(store, model.config, runId, config, files, resolve(flags.initAdapter));
    } else if (flags.initAdapter) {
      config = { ...config, lora: (await store.getRun(runId))!.config.lora as TrainConfig['lora'] };
    }
    let adapter: GpuLoraAdapter | null = null;
    try {
      // Before any evaluation: a finished run asked for no more episodes is left exactly as it is.
      const finished = await checkRequestedEpisodes(store, runId, flags.episodes);
      if (finished) {
        process.stderr.write(`run ${runId} is already finished (${finished.episodes} episodes, ${finished.updates} updates); nothing to do — pass a larger --episodes to continue it or another --out\n`);
        return;
      }
      const evaluate = (which: GpuLoraAdapter | null) => evaluateOnTest(model, env, config, which, flags.evalEpisodes);
      // The evaluation before training is of where the run starts (the base model, or the adapter of
      // --init-adapter), taken once before the first update and kept for resumed runs.
      const beforeFile = join(out, 'evaluation_before.json');
      let before = existsSync(beforeFile) ? (JSON.parse(await readFile(beforeFile, 'utf8')) as EvaluationReport) : undefined;
      if (flags.evalEpisodes > 0 && !before) {
        const starting = flags.initAdapter ? await model.loadAdapter(openAdapterSource(resolve(flags.initAdapter))) : null;
        try {
          before = await evaluate(starting);
        } finally {
          starting?.dispose();
        }
        await mkdir(out, { recursive: true });
        await writeFile(beforeFile, `${JSON.stringify(before, null, 2)}\n`);
      }
      const started = performance.now();
      const speed = episodeSpeed();
      const status = (line: string) => process.stderr.write(process.stderr.isTTY ? `\r\x1b[2K${line}` : `${line}\n`);
      const outcome = await trainRun(model, env, store, runId, config, {
        onLog: (message) => process.stderr.write(`${process.stderr.isTTY ? '\r\x1b[2K' : ''}${message}\n`),
        onEpisode: speed.count,
        onCheckpoint: async (checkpoint) => {
          for (const [name, bytes] of peftAdapterFiles(checkpoint.adapter!)) await writeFile(join(out, name), bytes);
        },
        onUpdate: ({ episodes, totalEpisodes, metrics }) => {
          const width = 24;
          const filled = Math.round((width * Math.min(episodes, totalEpisodes)) / totalEpisodes);
          status(
            `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${episodes}/${totalEpisodes} episodes  ` +
              `return ${decimal(metrics['charts/episodic_return'])}  success ${pct(metrics['charts/success_rate'])}  ` +
              (metrics['charts/failed_episodes'] ? `${metrics['charts/failed_episodes']} failed  ` : '') +
              speed.describe(totalEpisodes - episodes),
          );
        },
      });
      adapter = outcome.adapter;
      // Also after the loop: a run killed between its last checkpoint and the adapter files resumes with nothing left to train.
      for (const [name, bytes] of peftAdapterFiles(await adapter.toHost())) await writeFile(join(out, name), bytes);
      if (process.stderr.isTTY) process.stderr.write('\n');
      const after = flags.evalEpisodes > 0 ? await evaluate(adapter) : undefined;
      const report = {
        run: basename(out),
        status: outcome.status,
        config,
        updates: outcome.updates,
        episodes: outcome.episodes,
        resumedFromUpdate: outcome.resumedFrom,
        secondsThisSession: (performance.now() - started) / 1000,
        lastUpdate: outcome.lastMetrics,
        ...(after ? { evaluation: { before: before ?? null, after, change: before ? pairedChange(before, after) : null, startedFrom: flags.initAdapter ? resolve(flags.initAdapter) : 'base model' } } : {}),
      };
      await writeFile(join(out, 'report.json'), `${JSON.stringify(report, null, 2)}\n`);
      const summary = after
        ? `test-split success ${before ? `${pct(before.successRate.value)} before${flags.initAdapter ? ' (its initial adapter)' : ''}, ` : ''}${pct(after.successRate.value)} after (${after.episodes} episodes)`
        : `last update: success ${pct(outcome.lastMetrics['charts/success_rate'])}`;
      process.stderr.write(`${outcome.episodes} episodes, ${outcome.updates} updates; ${summary}; adapter, trajectories.jsonl, metrics.jsonl and report.json in ${out}\n`);
      const change = report.evaluation?.change;
      if (change) process.stderr.write(`change: ${describeChange(change)}\n`);
      for (const [what, figures] of [['training', outcome.played], ['test-split evaluation before', before], ['test-split evaluation after', after]] as const) {
        const failures = figures && describeFailures(figures);
        if (failures) process.stderr.write(`${what}: ${failures}\n`);
      }
      checkSomethingPlayed({ env: env.id, ...outcome.played });
    } finally {
      adapter?.dispose();
      model.dispose();
      env.dispose();
      await store.close();
    }
  });
}

async function evaluateOnTest(model: Model, env: EnvModule, config: TrainConfig, adapter: GpuLoraAdapter | null, episodes: number): Promise<EvaluationReport> {
  const policy = makePolicy(model, { ...config, env, reset: { split: 'test', difficulty: config.difficulty }, adapter });
  return evaluatePolicy(policy, { episodes, firstSeed: 1_000_000 });
}
