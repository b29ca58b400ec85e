// rlplay quickstart: the whole loop on one environment with no download and no keys — collect a few
// episodes of the untrained policy, evaluate it on held-out instances, train a LoRA adapter with
// PPO, evaluate again, export the adapter (PEFT) and the merged model (ONNX for transformers.js),
// and print the before/after table with where everything went.
import { mkdir, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import type { Command } from 'commander';
import { makePolicy } from '../../agent/policies.ts';
import { exportOnnx } from '../../engine/export/onnx.ts';
import { peftAdapterFiles } from '../../engine/lora/peft.ts';
import { BUILTIN_ENVIRONMENTS } from '../../env/builtin/index.ts';
import { describeChange, evaluatePolicy, pairedChange, type EvaluationReport } from '../../rl/evaluate.ts';
import { FIRST_RUN_EPISODES, TRAIN_DEFAULTS, trainRun, type TrainConfig } from '../../rl/run.ts';
import { FileTrajectoryStore } from '../../store/files.ts';
import { promptFormat } from '../agent-options.ts';
import { DEFAULT_MODEL_DIR, loadModelForCli, MODEL_HELP } from '../load.ts';
import { parseWholeNumber } from '../parse.ts';
import { episodeSpeed } from '../progress.ts';

interface QuickstartFlags {
  model: string;
  env: string;
  episodes: number;
  evalEpisodes: number;
  seed: number;
  out: string;
}

const pct = (x: number) => `${(100 * x).toFixed(0)}%`;
const interval = (r: EvaluationReport) => `${pct(r.successRate.value)} [${pct(r.successRate.low)}, ${pct(r.successRate.high)}]`;

export function registerQuickstart(program: Command): void {
  program
    .command('quickstart')
    .description('collect, train (PPO), evaluate and export on a built-in environment with the embedded default model: no download, no keys')
    .option('--model <dir|url|hf:id>', MODEL_HELP, DEFAULT_MODEL_DIR)
    .option('--env <id>', `built-in environment: ${[...BUILTIN_ENVIRONMENTS.keys()].join(', ')}`, 'tool-use')
    .option('--episodes <n>', 'PPO training episodes', parseWholeNumber, FIRST_RUN_EPISODES)
    .option('--eval-episodes <n>', 'held-out episodes per evaluation', parseWholeNumber, 100)
    .option('--seed <s>', 'seed of everything', parseWholeNumber, 0)
    .option('--out <dir>', 'where the run, the exports and the report go', 'runs/quickstart')
    .action(async (flags: QuickstartFlags) => {
      const env = BUILTIN_ENVIRONMENTS.get(flags.env);
      if (!env) throw new Error(`unknown environment "${flags.env}"; built-ins: ${[...BUILTIN_ENVIRONMENTS.keys()].join(', ')}`);
      const out = resolve(flags.out);
      const runDir = join(out, 'run');
      const started = performance.now();
      const say = (line: string) => process.stderr.write(`${line}\n`);
      const model = await loadModelForCli(flags.model);
      const store = new FileTrajectoryStore(dirname(runDir));
      try {
        const config: TrainConfig = { ...TRAIN_DEFAULTS, model: flags.model, env: env.id, algo: 'ppo', episodes: flags.episodes, seed: flags.seed, format: promptFormat(model) };
        const evaluate = (adapter: Parameters<typeof makePolicy>[1]['adapter']) =>
          evaluatePolicy(makePolicy(model, { ...config, env, reset: { split: 'test', difficulty: config.difficulty }, adapter }), { episodes: flags.evalEpisodes, firstSeed: 1_000_000 });

        // 1. Collect: what the untrained policy does on training instances, stored for a look.
        say(`1/5 collect: 8 episodes of the untrained policy on ${env.id} (train split)`);
        const policy = makePolicy(model, { ...config, env, reset: { split: 'train', difficulty: config.difficulty }, adapter: null });
        const collected = await policy.play(Array.from({ length: 8 }, (_, i) => ({ seed: 2_000_000 + i })));
        await mkdir(out, { recursive: true });
        await writeFile(join(out, 'collected.jsonl'), collected.map((e) => JSON.stringify({ seed: e.seed, totalReward: e.totalReward, success: e.success, steps: e.steps.map((s) => ({ observation: s.observation, action: s.action, reward: s.reward })) })).join('\n') + '\n');
        say(`    ${collected.filter((e) => e.success).length}/8 successful; in ${join(out, 'collected.jsonl')}`);

        // 2. Evaluate before.
        say(`2/5 evaluate the base model: ${flags.evalEpisodes} test episodes`);
        const before = await evaluate(null);
        say(`    success ${interval(before)}`);

        // 3. Train with PPO (resumes if this folder holds an unfinished run).
        say(`3/5 train: PPO, ${flags.episodes} episodes`);
        const speed = episodeSpeed();
        const outcome = await trainRun(model, env, store, basename(runDir), config, {
          onLog: (m) => say(`    ${m}`),
          onEpisode: speed.count,
          onUpdate: ({ episodes, totalEpisodes, metrics }) =>
            say(
              `    ${episodes}/${totalEpisodes} episodes  return ${metrics['charts/episodic_return']?.toFixed(3)}  success ${pct(metrics['charts/success_rate'])}  ` +
                speed.describe(totalEpisodes - episodes),
            ),
        });
        try {
          // 4. Evaluate after.
          say(`4/5 evaluate the trained adapter: ${flags.evalEpisodes} test episodes`);
          const after = await evaluate(outcome.adapter);
          say(`    success ${interval(after)}`);

          // 5. Export: the PEFT adapter, and the merged model for transformers.js.
          say('5/5 export: PEFT adapter and ONNX model');
          const host = await outcome.adapter.toHost();
          const adapterDir = join(out, 'adapter');
          await mkdir(adapterDir, { recursive: true });
          for (const [name, bytes] of peftAdapterFiles(host)) await writeFile(join(adapterDir, name), bytes);
          const onnxDir = join(out, 'onnx-model');
          for (const [name, bytes] of await exportOnnx(model.files, host)) {
            await mkdir(dirname(join(onnxDir, name)), { recursive: true });
            await writeFile(join(onnxDir, name), bytes);
          }
          const minutes = (performance.now() - started) / 60_000;
          const change = pairedChange(before, after);
          const report = { env: env.id, model: flags.model, episodes: outcome.episodes, minutes, before, after, change, adapter: adapterDir, onnx: onnxDir, run: runDir };
          await writeFile(join(out, 'report.json'), `${JSON.stringify(report, null, 2)}\n`);
          process.stdout.write(
            `\n${env.id}, test split, ${flags.evalEpisodes} episodes each (95% intervals):\n` +
              `               success                 mean return\n` +
              `  before       ${interval(before).padEnd(22)}  ${before.meanReturn.value.toFixed(3)}\n` +
              `  after PPO    ${interval(after).padEnd(22)}  ${after.meanReturn.value.toFixed(3)}\n` +
              (change ? `  change       ${describeChange(change)}\n` : '') +
              `\n${[
                ['adapter (PEFT)', adapterDir],
                ['model (ONNX, merged)', onnxDir],
                ['run', `${runDir}  (trajectories.jsonl, metrics.jsonl, checkpoints)`],
                ['report', join(out, 'report.json')],
              ].map(([what, where]) => `${what.padEnd(22)}${where}`).join('\n')}\n` +
              `${minutes.toFixed(1)} minutes\n`,
          );
        } finally {
          outcome.adapter.dispose();
        }
      } finally {
        model.dispose();
        await store.close();
      }
    });
}
