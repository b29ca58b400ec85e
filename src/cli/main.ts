// The rlplay command line. Each command lives in commands/; all run on the same engine as the app.
import { Command, CommanderError } from 'commander';
import { curatedModelsHelp } from '../engine/model/hub.ts';
import { registerCollect } from './commands/collect.ts';
import { registerEval } from './commands/eval.ts';
import { registerExport } from './commands/export.ts';
import { registerGenerate } from './commands/generate.ts';
import { registerLogprobs } from './commands/logprobs.ts';
import { registerQuickstart } from './commands/quickstart.ts';
import { registerServe } from './commands/serve.ts';
import { registerSft } from './commands/sft.ts';
import { registerTrain } from './commands/train.ts';

export async function main(argv: string[]): Promise<number> {
  const program = new Command('rlplay')
    .description('rlplay: reinforcement learning for LLM agents on WebGPU, in the browser and in Node')
    .exitOverride()
    .showHelpAfterError('(run with --help for usage)')
    .addHelpText('after', `\nSmall models on the Hugging Face Hub that work well (any other Hub id works too):\n${curatedModelsHelp()}\n`);
  registerQuickstart(program);
  registerGenerate(program);
  registerLogprobs(program);
  registerSft(program);
  registerCollect(program);
  registerTrain(program);
  registerEval(program);
  registerExport(program);
  registerServe(program);
  try {
    await program.parseAsync(argv, { from: 'user' });
    return 0;
  } catch (error) {
    if (error instanceof CommanderError) return error.exitCode; // commander printed the message already
    process.stderr.write(`rlplay: ${(error as Error).message}\n`);
    return 1;
  }
}
