// rlplay export: a trained adapter in a format other tools load.
//   --format peft   the adapter of a run (--run): adapter_config.json and adapter_model.safetensors
//                   as PEFT writes them (transformers, vLLM, PEFT itself)
//   --format onnx   a base model (--model, or the run's) with an adapter merged in (--run or
//                   --adapter, or none): a float32 ONNX model folder that transformers.js loads
//   --format gguf   the adapter of a run (--run), or a PEFT folder (--adapter, with --model), as a
//                   GGUF LoRA file (--out FILE.gguf) for llama.cpp on a GGUF of the same base model
import { mkdir, writeFile } from 'node:fs/promises';
import { basename, dirname, resolve } from 'node:path';
import type { Command } from 'commander';
import { Option } from 'commander';
import { ggufLoraAdapter } from '../../engine/export/gguf.ts';
import { exportOnnx } from '../../engine/export/onnx.ts';
import type { HostLoraAdapter } from '../../engine/lora/adapter.ts';
import { peftAdapterFiles, readPeftAdapter } from '../../engine/lora/peft.ts';
import { parseModelConfig } from '../../engine/model/config.ts';
import { loadModelFiles } from '../../engine/model/load.ts';
import { MemoryModelSource } from '../../engine/model/memory-source.ts';
import { readJsonFile } from '../../engine/model/source.ts';
import { openAdapterSource, openModelSource, writeFolderFiles } from '../../engine/model/source-node.ts';
import type { ModelConfig, ModelSource } from '../../engine/model/types.ts';
import { FileTrajectoryStore } from '../../store/files.ts';
import { byteProgress } from '../progress.ts';

interface ExportFlags {
  format: 'peft' | 'onnx' | 'gguf';
  run?: string;
  model?: string;
  adapter?: string;
  out: string;
}

export function registerExport(program: Command): void {
  program
    .command('export')
    .description("write a run's trained adapter in another tool's format")
    .addOption(
      new Option('--format <format>', 'peft: a PEFT adapter folder; onnx: a transformers.js model folder with the adapter merged in; gguf: a llama.cpp LoRA file')
        .choices(['peft', 'onnx', 'gguf'])
        .makeOptionMandatory(),
    )
    .option('--run <dir>', 'the --out folder of rlplay train: its latest adapter (peft: required)')
    .option('--model <dir|url|hf:id>', 'onnx, gguf: the base model folder (default: the model the run trained)')
    .option('--adapter <dir|url|hf:id>', 'onnx, gguf: a PEFT adapter folder, instead of a run\'s')
    .requiredOption('--out <path>', 'where to write the exported folder (gguf: the .gguf file)')
    .action(async (flags: ExportFlags) => {
      if (flags.format === 'peft') return exportPeft(flags);
      if (flags.format === 'gguf') return exportGguf(flags);
      return exportOnnxFolder(flags);
    });
}

async function exportPeft(flags: ExportFlags): Promise<void> {
  if (!flags.run) throw new Error('--format peft needs --run: the --out folder of rlplay train');
  if (flags.model || flags.adapter) throw new Error('--model and --adapter are for --format onnx; --format peft exports the adapter of --run');
  const out = resolve(flags.out);
  await withRunAdapter(flags.run, async (run, readAdapter) => {
    const config = parseModelConfig(await readJsonFile(openModelSource(run.model), 'config.json'));
    const adapter = await readAdapter(config);
    await writeFolderFiles(out, peftAdapterFiles(adapter));
    process.stderr.write(`PEFT adapter of ${run.id} (update ${run.step}, ${describe(adapter)}) written to ${out}\n`);
  });
}

async function exportGguf(flags: ExportFlags): Promise<void> {
  if (flags.run && flags.adapter) throw new Error('give either --run (the adapter a run trained) or --adapter (a PEFT adapter folder), not both');
  if (!flags.run && !(flags.adapter && flags.model)) throw new Error('--format gguf needs --run, or --adapter with --model (the base model, for its architecture and heads)');
  const out = resolve(flags.out.endsWith('.gguf') ? flags.out : `${flags.out}.gguf`);
  const write = async (model: string, readAdapter: (config: ModelConfig) => Promise<HostLoraAdapter>, origin: string) => {
    const config = parseModelConfig(await readJsonFile(openModelSource(model), 'config.json'));
    const adapter = await readAdapter(config);
    await mkdir(dirname(out), { recursive: true });
    await writeFile(out, ggufLoraAdapter(adapter, config, origin));
    process.stderr.write(`GGUF LoRA of ${origin} (${describe(adapter)}) written to ${out}: use it with llama.cpp's --lora on a GGUF of ${model}\n`);
  };
  if (flags.run) {
    await withRunAdapter(flags.run, (run, readAdapter) => write(flags.model ?? run.model, readAdapter, `${run.id} update ${run.step}`));
  } else {
    const source = openAdapterSource(flags.adapter!);
    await write(flags.model!, (config) => readPeftAdapter(source, config), flags.adapter!);
  }
}

async function exportOnnxFolder(flags: ExportFlags): Promise<void> {
  if (flags.run && flags.adapter) throw new Error('give either --run (the adapter a run trained) or --adapter (a PEFT adapter folder), not both');
  if (!flags.run && !flags.model) throw new Error('--format onnx needs --model (the base model folder or URL), or --run to export the model a run trained');
  const out = resolve(flags.out);
  const exportWith = async (model: string, readAdapter: ((config: ModelConfig) => Promise<HostLoraAdapter>) | null, origin: string) => {
    const progress = byteProgress();
    const files = await loadModelFiles(openModelSource(model), (p) => progress.update(`loading ${p.file}`, p.loadedBytes, p.totalBytes));
    progress.done();
    const adapter = readAdapter ? await readAdapter(files.config) : undefined;
    const folder = await exportOnnx(files, adapter);
    await writeFolderFiles(out, folder);
    const bytes = [...folder.values()].reduce((n, b) => n + b.length, 0);
    const merged = adapter ? `with ${origin} merged in (${describe(adapter)})` : 'without an adapter';
    process.stderr.write(
      `ONNX model of ${files.source.location} ${merged} written to ${out} (${(bytes / 2 ** 20).toFixed(1)} MiB, float32): ` +
        'load it with transformers.js AutoModelForCausalLM.from_pretrained or pipeline("text-generation")\n',
    );
  };
  if (flags.run) {
    await withRunAdapter(flags.run, (run, readAdapter) => exportWith(flags.model ?? run.model, readAdapter, `the adapter of ${run.id} (update ${run.step})`));
  } else {
    const adapterSource = flags.adapter ? openAdapterSource(flags.adapter) : null;
    await exportWith(flags.model!, adapterSource && ((config) => readPeftAdapter(adapterSource, config)), `adapter ${flags.adapter}`);
  }
}

interface RunInfo {
  id: string;
  /** The base model the run trained (a folder or URL). */
  model: string;
  /** The update of the latest checkpoint. */
  step: number;
}

/**
 * The latest checkpoint of a run folder, read through the PEFT reader against the base model's
 * config, so a damaged checkpoint fails here, not in the tool that loads the export.
 */
async function withRunAdapter(runDir: string, use: (run: RunInfo, readAdapter: (config: ModelConfig) => Promise<HostLoraAdapter>) => Promise<void>): Promise<void> {
  const dir = resolve(runDir);
  const store = new FileTrajectoryStore(dirname(dir));
  try {
    const run = await store.getRun(basename(dir));
    if (!run) throw new Error(`${dir} is not a run folder (no run.json): pass the --out folder of rlplay train`);
    const checkpoint = await store.latestCheckpoint(run.id);
    if (!checkpoint) throw new Error(`${dir} has no checkpoint yet: train for at least one update first`);
    const source: ModelSource = new MemoryModelSource(checkpoint.files, `${dir}/checkpoints/${checkpoint.step}/`);
    await use({ id: run.id, model: String(run.config.model), step: checkpoint.step }, (config) => readPeftAdapter(source, config));
  } finally {
    await store.close();
  }
}

function describe(adapter: HostLoraAdapter): string {
  return `LoRA r=${adapter.settings.r} on ${adapter.settings.targets.join(', ')}`;
}
