// rlplay export: the trained adapter of a run, in a format other tools load. --format peft writes
// adapter_config.json and adapter_model.safetensors as PEFT does (transformers, vLLM, PEFT itself).
import { mkdir, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import type { Command } from 'commander';
import { Option } from 'commander';
import { peftAdapterFiles, readPeftAdapter } from '../../engine/lora/peft.ts';
import { MemoryModelSource } from '../../engine/model/memory-source.ts';
import { openModelSource } from '../../engine/model/source-node.ts';
import { parseModelConfig } from '../../engine/model/config.ts';
import { readJsonFile } from '../../engine/model/source.ts';
import { FileTrajectoryStore } from '../../store/files.ts';

interface ExportFlags {
  format: 'peft';
  run: string;
  out: string;
}

export function registerExport(program: Command): void {
  program
    .command('export')
    .description("write a run's trained adapter in another tool's format")
    .addOption(new Option('--format <format>', 'peft: a PEFT adapter folder').choices(['peft']).makeOptionMandatory())
    .requiredOption('--run <dir>', 'the --out folder of rlplay train')
    .requiredOption('--out <dir>', 'where to write the exported adapter')
    .action(async (flags: ExportFlags) => {
      const runDir = resolve(flags.run);
      const store = new FileTrajectoryStore(dirname(runDir));
      try {
        const run = await store.getRun(basename(runDir));
        if (!run) throw new Error(`${runDir} is not a run folder (no run.json): pass the --out folder of rlplay train`);
        const checkpoint = await store.latestCheckpoint(run.id);
        if (!checkpoint) throw new Error(`${runDir} has no checkpoint yet: train for at least one update first`);
        // Read through the PEFT reader against the base model's config, so a damaged checkpoint fails here, not in the consumer.
        const model = String(run.config.model);
        const config = parseModelConfig(await readJsonFile(openModelSource(model), 'config.json'));
        const adapter = await readPeftAdapter(new MemoryModelSource(checkpoint.files, `${runDir}/checkpoints/${checkpoint.step}/`), config);
        const out = resolve(flags.out);
        await mkdir(out, { recursive: true });
        for (const [name, bytes] of peftAdapterFiles(adapter)) await writeFile(join(out, name), bytes);
        process.stderr.write(`PEFT adapter of ${run.id} (update ${checkpoint.step}, LoRA r=${adapter.settings.r} on ${adapter.settings.targets.join(', ')}) written to ${out}\n`);
      } finally {
        await store.close();
      }
    });
}
