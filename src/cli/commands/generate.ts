// rlplay generate: continue a prompt with the model, streaming the text to stdout.
import type { Command } from 'commander';
import { continuationText } from '../../engine/model/joined-text.ts';
import type { SamplingOptions } from '../../engine/sampling-params.ts';
import { DEFAULT_MODEL_DIR, loadModelAndAdapter, MODEL_HELP } from '../load.ts';
import { parseNumber, parseWholeNumber } from '../parse.ts';

interface GenerateFlags {
  model: string;
  adapter?: string;
  prompt?: string;
  maxNewTokens: number;
  greedy?: boolean;
  temperature?: number;
  topK?: number;
  topP?: number;
  seed?: number;
  quiet?: boolean;
}

export function registerGenerate(program: Command): void {
  program
    .command('generate')
    .description('generate text from a prompt on the WebGPU engine')
    .option('--model <dir|url|hf:id>', MODEL_HELP, DEFAULT_MODEL_DIR)
    .option('--adapter <dir|url|hf:id>', 'apply this PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors)')
    .option('--prompt <text>', 'text to continue (default: start from BOS)')
    .requiredOption('--max-new-tokens <n>', 'how many tokens to generate at most', parseWholeNumber)
    .option('--greedy', 'always take the most likely token')
    .option('--temperature <t>', 'sampling temperature (default 1)', parseNumber)
    .option('--top-k <k>', 'sample among the k most likely tokens (0 = all)', parseWholeNumber)
    .option('--top-p <p>', 'sample among the most likely tokens holding probability p (1 = all)', parseNumber)
    .option('--seed <s>', 'random seed; the same seed gives the same text (default 0)', parseWholeNumber)
    .option('--quiet', 'print only the text')
    .action(async (flags: GenerateFlags) => {
      if (flags.greedy && (flags.temperature !== undefined || flags.topK !== undefined || flags.topP !== undefined)) {
        throw new Error('--greedy takes no --temperature, --top-k or --top-p: choose greedy decoding or sampling');
      }
      const sampling: SamplingOptions = flags.greedy
        ? { greedy: true }
        : { temperature: flags.temperature, topK: flags.topK, topP: flags.topP, seed: flags.seed };
      const { model, adapter } = await loadModelAndAdapter(flags.model, flags.adapter, { quiet: flags.quiet });
      try {
        const prompt = flags.prompt ? model.tokenizer.encode(flags.prompt) : [model.tokenizer.bosTokenId ?? model.config.bosTokenId ?? 0];
        // Print the prompt, then each step's text as it arrives: the continuation decoded after the
        // prompt's tokens each time, which keeps multi-byte characters and the space at the join right.
        let printed = '';
        process.stdout.write(flags.prompt ?? '');
        const result = await model.generate([prompt], {
          maxNewTokens: flags.maxNewTokens,
          sampling,
          stopTokenIds: model.tokenizer.eosTokenIds,
          adapter,
          onStep: (tokens) => {
            const text = continuationText(model.tokenizer, prompt, tokens[0]);
            if (text.startsWith(printed)) process.stdout.write(text.slice(printed.length));
            printed = text;
          },
        });
        process.stdout.write('\n');
        if (!flags.quiet) {
          const { stats } = result;
          const decodeRate = stats.decodeSteps / (stats.decodeMs / 1000);
          process.stderr.write(
            `${result.tokens[0].length} tokens; prompt ${prompt.length} tokens in ${stats.prefillMs.toFixed(0)} ms; ` +
              `decode ${Number.isFinite(decodeRate) ? decodeRate.toFixed(1) : '-'} tokens/s\n`,
          );
        }
      } finally {
        adapter?.dispose();
        model.dispose();
      }
    });
}
