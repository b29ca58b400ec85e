// rlplay eval: success rate, mean return and episode length of a model (and adapter) on an
// environment's held-out instances, with 95% confidence intervals. The policy acts greedily: the
// most probable listed action (choice mode) or greedy decoding (text mode).
import type { Command } from 'commander';
import { checkSomethingPlayed, describeFailures, evaluatePolicy, type Estimate } from '../../rl/evaluate.ts';
import { addAgentOptions, agentPolicy, checkAgentFlags, loadEnvironment, type AgentFlags } from '../agent-options.ts';
import { DEFAULT_MODEL_DIR, loadModelAndAdapter, MODEL_HELP } from '../load.ts';
import { parseWholeNumber } from '../parse.ts';

interface EvalFlags extends AgentFlags {
  model: string;
  adapter?: string;
  split: string;
  episodes: number;
  seed: number;
  json?: boolean;
}

const format = (e: Estimate, digits: number) => (Number.isFinite(e.value) ? `${e.value.toFixed(digits)} [${e.low.toFixed(digits)}, ${e.high.toFixed(digits)}]` : '-');

export function registerEval(program: Command): void {
  const command = program
    .command('eval')
    .description('evaluate the greedy policy on held-out environment instances')
    .option('--model <dir|url|hf:id>', MODEL_HELP, DEFAULT_MODEL_DIR)
    .option('--adapter <dir|url|hf:id>', 'apply this PEFT LoRA adapter')
    .option('--split <split>', 'train or test instances', 'test')
    .option('--episodes <n>', 'episodes to play', parseWholeNumber, 50)
    .option('--seed <s>', 'first reset seed (episode i uses seed + i)', parseWholeNumber, 1_000_000)
    .option('--json', 'print one JSON object');
  addAgentOptions(command);
  command.action(async (flags: EvalFlags) => {
    checkAgentFlags(flags);
    if (flags.split !== 'train' && flags.split !== 'test') throw new Error(`--split must be train or test, got ${flags.split}`);
    if (flags.episodes < 1) throw new Error('--episodes must be at least 1');
    const env = await loadEnvironment(flags);
    const { model, adapter } = await loadModelAndAdapter(flags.model, flags.adapter, { quiet: flags.json });
    try {
      const policy = agentPolicy(model, flags, env, flags.split, adapter);
      const report = await evaluatePolicy(policy, {
        episodes: flags.episodes,
        firstSeed: flags.seed,
        onEpisode: (done) => {
          if (!flags.json && process.stderr.isTTY) process.stderr.write(`\r\x1b[2Kepisode ${done}/${flags.episodes}`);
        },
      });
      if (!flags.json && process.stderr.isTTY) process.stderr.write('\r\x1b[2K');
      const failures = describeFailures(report);
      if (failures) process.stderr.write(`${failures}\n`);
      if (flags.json) process.stdout.write(`${JSON.stringify(report)}\n`);
      else {
        process.stdout.write(
          `${report.env} (${report.split} split, difficulty ${report.difficulty}, ${flags.mode} mode), ${report.episodes} episodes${report.failedEpisodes ? ` (${report.failedEpisodes} failed, counted as failures)` : ''}, 95% confidence intervals:\n` +
            `  success rate    ${format(report.successRate, 3)}\n` +
            `  mean return     ${format(report.meanReturn, 3)}${report.failedEpisodes ? '  (over the episodes that did not fail)' : ''}\n` +
            `  episode length  ${format(report.meanLength, 2)}\n`,
        );
      }
      checkSomethingPlayed(report);
    } finally {
      adapter?.dispose();
      model.dispose();
      env.dispose();
    }
  });
}
