// rlplay eval: success rate, mean return and episode length of a model (and adapter) on a built-in
// environment's held-out instances, with 95% confidence intervals. The policy is action-level: a
// softmax over the environment's valid actions, taken greedily.
import type { Command } from 'commander';
import { BUILTIN_ENVIRONMENTS } from '../../env/builtin/index.ts';
import { evaluateActionPolicy, type Estimate } from '../../rl/evaluate.ts';
import { loadModelAndAdapter } from '../load.ts';
import { parseWholeNumber } from '../parse.ts';

interface EvalFlags {
  model: string;
  adapter?: string;
  env: string;
  split: string;
  episodes: number;
  difficulty: number;
  seed: number;
  sum?: boolean;
  json?: boolean;
}

const format = (e: Estimate, digits: number) => `${e.value.toFixed(digits)} [${e.low.toFixed(digits)}, ${e.high.toFixed(digits)}]`;

export function registerEval(program: Command): void {
  program
    .command('eval')
    .description('evaluate the greedy action-level policy on held-out environment instances')
    .requiredOption('--model <dir|url>', 'model folder in Hugging Face layout, or an http(s) URL of one')
    .option('--adapter <dir|url>', 'apply this PEFT LoRA adapter')
    .requiredOption('--env <id>', `built-in environment: ${[...BUILTIN_ENVIRONMENTS.keys()].join(', ')}`)
    .option('--split <split>', 'train or test instances', 'test')
    .option('--episodes <n>', 'episodes to play', parseWholeNumber, 50)
    .option('--difficulty <d>', 'difficulty level 1-3', parseWholeNumber, 1)
    .option('--seed <s>', 'first reset seed (episode i uses seed + i)', parseWholeNumber, 1_000_000)
    .option('--sum', 'score actions by summed token log-probs (default: mean, which does not penalise long actions)')
    .option('--json', 'print one JSON object')
    .action(async (flags: EvalFlags) => {
      const env = BUILTIN_ENVIRONMENTS.get(flags.env);
      if (!env) throw new Error(`unknown environment "${flags.env}"; built-ins: ${[...BUILTIN_ENVIRONMENTS.keys()].join(', ')}`);
      if (flags.split !== 'train' && flags.split !== 'test') throw new Error(`--split must be train or test, got ${flags.split}`);
      if (flags.episodes < 1) throw new Error('--episodes must be at least 1');
      if (flags.difficulty < 1 || flags.difficulty > 3) throw new Error(`--difficulty must be 1, 2 or 3, got ${flags.difficulty}`);
      const { model, adapter } = await loadModelAndAdapter(flags.model, flags.adapter, { quiet: flags.json });
      try {
        const report = await evaluateActionPolicy(model, env, {
          episodes: flags.episodes,
          split: flags.split,
          difficulty: flags.difficulty,
          format: model.tokenizer.hasChatTemplate ? 'chat' : 'plain',
          lengthNormalize: !flags.sum,
          adapter,
          firstSeed: flags.seed,
          onEpisode: (done) => {
            if (!flags.json && process.stderr.isTTY) process.stderr.write(`\r\x1b[2Kepisode ${done}/${flags.episodes}`);
          },
        });
        if (!flags.json && process.stderr.isTTY) process.stderr.write('\r\x1b[2K');
        if (flags.json) {
          process.stdout.write(`${JSON.stringify(report)}\n`);
          return;
        }
        process.stdout.write(
          `${report.env} (${report.split} split, difficulty ${report.difficulty}), ${report.episodes} episodes, 95% confidence intervals:\n` +
            `  success rate    ${format(report.successRate, 3)}\n` +
            `  mean return     ${format(report.meanReturn, 3)}\n` +
            `  episode length  ${format(report.meanLength, 2)}\n`,
        );
      } finally {
        adapter?.dispose();
        model.dispose();
      }
    });
}
