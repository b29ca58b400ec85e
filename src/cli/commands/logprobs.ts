// rlplay logprobs: per-token log-probabilities (and optionally logits) of a given text or id list.
import type { Command } from 'commander';
import { DEFAULT_MODEL_DIR, loadModelAndAdapter, MODEL_HELP } from '../load.ts';
import { parseIdList } from '../parse.ts';

interface LogprobsFlags {
  model: string;
  adapter?: string;
  ids?: number[];
  text?: string;
  logits?: boolean;
  json?: boolean;
}

export function registerLogprobs(program: Command): void {
  program
    .command('logprobs')
    .description('score a token sequence: log p(ids[t] | ids[<t]) for every t')
    .option('--model <dir|url|hf:id>', MODEL_HELP, DEFAULT_MODEL_DIR)
    .option('--adapter <dir|url|hf:id>', 'apply this PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors)')
    .option('--ids <list>', 'comma-separated token ids, e.g. 1,403,407', parseIdList)
    .option('--text <text>', "text, encoded with the model's tokenizer (BOS added as its config says)")
    .option('--logits', 'also print the raw logits after every position')
    .option('--json', 'print one JSON object {"ids", "token_logprobs", "logits"}')
    .action(async (flags: LogprobsFlags) => {
      if ((flags.ids === undefined) === (flags.text === undefined)) throw new Error('give exactly one of --ids or --text');
      const { model, adapter } = await loadModelAndAdapter(flags.model, flags.adapter, { quiet: flags.json });
      try {
        const ids = flags.ids ?? model.tokenizer.encode(flags.text!);
        if (ids.length === 0) throw new Error('the text encodes to no tokens: nothing to score');
        const result = await model.score([ids], { logits: flags.logits, adapter });
        const tokenLogprobs = result.tokenLogprobs[0];
        if (flags.json) {
          const out: Record<string, unknown> = { ids, token_logprobs: tokenLogprobs };
          if (flags.logits) out.logits = result.logits![0].map((row) => Array.from(row));
          process.stdout.write(`${JSON.stringify(out)}\n`);
          return;
        }
        const lines = ids.map((id, t) => {
          const piece = JSON.stringify(model.tokenizer.decode([id]));
          const lp = tokenLogprobs[t];
          return `${String(t).padStart(5)}  ${String(id).padStart(7)}  ${(lp === null ? '-' : lp.toFixed(5)).padStart(10)}  ${piece}`;
        });
        const total = tokenLogprobs.reduce<number>((sum, lp) => sum + (lp ?? 0), 0);
        process.stdout.write(`    t       id     logprob  token\n${lines.join('\n')}\nsum of log-probs: ${total.toFixed(5)}\n`);
        if (flags.logits) process.stdout.write('(logits are printed with --json)\n');
      } finally {
        adapter?.dispose();
        model.dispose();
      }
    });
}
