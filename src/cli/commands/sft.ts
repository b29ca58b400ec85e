// rlplay sft: supervised fine-tuning of a LoRA adapter on {"prompt", "completion"} or {"text"} JSONL.
// Writes the PEFT adapter and metrics.jsonl into --out, keeps a checkpoint there, and resumes from
// it when run again with the same --out.
import type { Command } from 'commander';
import { mkdir, readFile, writeFile, appendFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { LORA_TARGETS, type HostLoraAdapter, type LoraSettings, type LoraTarget } from '../../engine/lora/adapter.ts';
import type { GpuLoraAdapter } from '../../engine/lora/gpu-adapter.ts';
import { modelFolderFiles } from '../../engine/model/folder.ts';
import type { TrainerState } from '../../engine/train/trainer.ts';
import { peftAdapterFiles } from '../../engine/lora/peft.ts';
import { FileModelSource, replaceFolder } from '../../engine/model/source-node.ts';
import { checkpointFiles, hasCheckpoint, readCheckpoint } from '../../engine/train/checkpoint.ts';
import type { LrSchedule } from '../../engine/train/schedule.ts';
import { parseSftJsonl, sftBatch, sftSchedule } from '../../engine/train/sft.ts';
import { Trainer } from '../../engine/train/trainer.ts';
import { ValueHead } from '../../engine/train/value-head.ts';
import { DEFAULT_MODEL_DIR, loadModelForCli, MODEL_HELP } from '../load.ts';
import { parseNumber, parseWholeNumber } from '../parse.ts';

interface SftFlags {
  model: string;
  data: string;
  out: string;
  loraR: number;
  loraAlpha: number;
  targets: string;
  loraDropout: number;
  rslora?: boolean;
  full?: boolean;
  lr: number;
  schedule: 'constant' | 'cosine';
  warmup: number;
  epochs: number;
  batch: number;
  microBatch?: number;
  maxGradNorm: number;
  weightDecay: number;
  seed: number;
  saveEvery: number;
}

/** What a resumed run must share with the run that wrote the checkpoint. */
interface SftProgress {
  step: number;
  data: string;
  settings: Omit<SftFlags, 'out' | 'saveEvery' | 'data'>;
}

export function registerSft(program: Command): void {
  program
    .command('sft')
    .description('supervised fine-tuning of a LoRA adapter on JSONL data (loss on completion tokens only)')
    .option('--model <dir|url|hf:id>', `the base model: ${MODEL_HELP}`, DEFAULT_MODEL_DIR)
    .requiredOption('--data <file.jsonl>', 'one {"prompt": ..., "completion": ...} or {"text": ...} object per line')
    .requiredOption('--out <dir>', 'where the adapter, metrics.jsonl and the checkpoint go; run again to resume')
    .option('--lora-r <r>', 'LoRA rank', parseWholeNumber, 8)
    .option('--lora-alpha <alpha>', 'LoRA alpha (scaling alpha / r)', parseNumber, 16)
    .option('--targets <list>', `projections to adapt, from ${LORA_TARGETS.join(',')}`, 'q_proj,v_proj')
    .option('--lora-dropout <p>', 'dropout on the adapter input while training', parseNumber, 0)
    .option('--rslora', 'scale by alpha / sqrt(r) (rank-stabilised LoRA)')
    .option('--full', 'train every weight instead of a LoRA adapter (tiny models only); writes a whole model folder')
    .option('--lr <x>', 'peak learning rate', parseNumber, 1e-3)
    .option('--schedule <kind>', 'learning-rate schedule: constant or cosine (decays to 10%)', 'constant')
    .option('--warmup <steps>', 'linear warm-up steps', parseWholeNumber, 0)
    .option('--epochs <n>', 'passes over the data', parseWholeNumber, 3)
    .option('--batch <b>', 'examples per optimiser step', parseWholeNumber, 8)
    .option('--micro-batch <m>', 'examples per forward/backward (gradients accumulate; default: the whole batch)', parseWholeNumber)
    .option('--max-grad-norm <x>', 'clip the global gradient norm (0: off)', parseNumber, 1)
    .option('--weight-decay <x>', 'AdamW decoupled weight decay', parseNumber, 0)
    .option('--seed <s>', 'seed of the adapter initialisation and the data order', parseWholeNumber, 0)
    .option('--save-every <steps>', 'checkpoint every this many steps', parseWholeNumber, 20)
    .action(async (flags: SftFlags) => {
      const targets = flags.targets.split(',').map((t) => t.trim()) as LoraTarget[];
      const unknown = targets.filter((t) => !LORA_TARGETS.includes(t));
      if (unknown.length) throw new Error(`--targets: unknown projection(s) ${unknown.join(', ')}; choose from ${LORA_TARGETS.join(', ')}`);
      if (flags.schedule !== 'constant' && flags.schedule !== 'cosine') throw new Error(`--schedule must be constant or cosine, got ${flags.schedule}`);
      const out = resolve(flags.out);
      const checkpointDir = join(out, 'checkpoint');
      const dataText = await readFile(flags.data, 'utf8').catch((error: Error) => {
        throw new Error(`cannot read --data ${flags.data}: ${error.message}`);
      });

      let model = await loadModelForCli(flags.model, { trainable: Boolean(flags.full) });
      const examples = parseSftJsonl(dataText, model.tokenizer, flags.data);
      const schedule = sftSchedule(examples.length, flags.batch, flags.epochs, flags.seed);
      const settings: SftProgress['settings'] = { ...flags, model: flags.model };
      delete (settings as Partial<SftFlags>).out;
      delete (settings as Partial<SftFlags>).saveEvery;
      delete (settings as Partial<SftFlags>).data; // compared by content instead
      const lrSchedule: LrSchedule =
        flags.schedule === 'cosine'
          ? { kind: 'warmup-cosine', lr: flags.lr, warmupSteps: flags.warmup, totalSteps: schedule.length, minLrRatio: 0.1 }
          : flags.warmup > 0 ? { kind: 'warmup-constant', lr: flags.lr, warmupSteps: flags.warmup } : { kind: 'constant', lr: flags.lr };

      let startStep = 0;
      let adapter: GpuLoraAdapter | null = null;
      let valueHead: ValueHead;
      let optimizerState: TrainerState | undefined;
      const checkpointSource = new FileModelSource(checkpointDir);
      if (existsSync(checkpointDir) && (await hasCheckpoint(checkpointSource))) {
        const checkpoint = await readCheckpoint<SftProgress>(checkpointSource, model.config);
        if (checkpoint.progress.data !== dataText || JSON.stringify(checkpoint.progress.settings) !== JSON.stringify(settings)) {
          throw new Error(`${out} holds a checkpoint of a run with other data or settings; use another --out, or delete ${checkpointDir} to start over`);
        }
        startStep = checkpoint.progress.step;
        if (flags.full) {
          // The checkpoint is a whole model folder: continue from its weights.
          model.dispose();
          model = await loadModelForCli(checkpointDir, { trainable: true });
        } else {
          adapter = model.uploadAdapter(checkpoint.adapter!);
        }
        valueHead = new ValueHead(model.gpu, model.config.hiddenSize, checkpoint.valueHead);
        optimizerState = checkpoint.optimizer;
        process.stderr.write(`resuming from the checkpoint at step ${startStep} of ${schedule.length}\n`);
        // Steps logged after the checkpoint will run again: drop their lines.
        const metricsFile = join(out, 'metrics.jsonl');
        const kept = (existsSync(metricsFile) ? await readFile(metricsFile, 'utf8') : '')
          .split('\n')
          .filter((line) => line.trim() !== '' && (JSON.parse(line) as { step: number }).step <= startStep);
        await writeFile(metricsFile, kept.map((line) => `${line}\n`).join(''));
      } else {
        if (!flags.full) {
          const lora: LoraSettings = { r: flags.loraR, alpha: flags.loraAlpha, targets, rslora: Boolean(flags.rslora), dropout: flags.loraDropout, layers: null };
          adapter = model.uploadAdapter(model.createAdapter(lora, flags.seed));
        }
        valueHead = new ValueHead(model.gpu, model.config.hiddenSize);
        await mkdir(out, { recursive: true });
        await writeFile(join(out, 'metrics.jsonl'), '');
      }
      const trainer = new Trainer(model.gpuModel, {
        train: adapter ?? 'full',
        valueHead,
        optimizer: { schedule: lrSchedule, maxGradNorm: flags.maxGradNorm, weightDecay: flags.weightDecay },
        seed: flags.seed,
      });
      if (optimizerState) trainer.loadOptimizerState(optimizerState);
      const trained = adapter ? `LoRA r=${adapter.settings.r} on ${adapter.settings.targets.join(',')}` : `every weight (${trainer.parameters.size} floats)`;

      const microBatch = flags.microBatch ?? flags.batch;
      const longest = examples.reduce((most, e) => Math.max(most, e.prompt.length + e.completion.length), 0); // a spread would overflow the stack on a large data set
      const mib = trainer.bytesPerMicroBatch(Math.min(microBatch, examples.length), longest) / 2 ** 20;
      process.stderr.write(
        `${examples.length} examples, ${schedule.length} steps of ${flags.batch} (micro-batches of ${microBatch}); ` +
          `training ${trained}; ` +
          `each micro-batch needs up to ${mib.toFixed(1)} MiB of GPU memory for activations and gradients\n`,
      );

      /** The trained result as files: a PEFT adapter, or in full mode a complete model folder. */
      const resultFiles = async (): Promise<{ adapter?: HostLoraAdapter; modelFiles?: Map<string, Uint8Array> }> => {
        if (adapter) return { adapter: await adapter.toHost() };
        const modelFiles = await modelFolderFiles(model, await model.gpuModel.readWeights());
        return { modelFiles };
      };
      const save = async (step: number) => {
        const result = await resultFiles();
        const files = checkpointFiles<SftProgress>({
          ...result,
          valueHead: await valueHead.read(),
          optimizer: await trainer.optimizerState(),
          progress: { step, data: dataText, settings },
        });
        await replaceFolder(checkpointDir, files);
        for (const [name, bytes] of result.adapter ? peftAdapterFiles(result.adapter) : result.modelFiles!) await writeFile(join(out, name), bytes);
      };

      const started = performance.now();
      let tokens = 0;
      try {
        for (let step = startStep; step < schedule.length; step++) {
          const indices = schedule[step];
          const micro = [];
          for (let i = 0; i < indices.length; i += microBatch) micro.push(sftBatch(indices.slice(i, i + microBatch).map((k) => examples[k])));
          const metrics = await trainer.step(micro, { nll: 1 });
          tokens += metrics.tokens;
          const record = {
            step: step + 1,
            epoch: Math.floor((step * flags.batch) / examples.length) + 1,
            loss: metrics['losses/total'],
            grad_norm: metrics['losses/grad_norm'],
            lr: metrics['charts/learning_rate'],
            tokens: metrics.tokens,
            skipped: metrics.skipped,
          };
          await appendFile(join(out, 'metrics.jsonl'), `${JSON.stringify(record)}\n`);
          const rate = tokens / ((performance.now() - started) / 1000);
          const line = `step ${step + 1}/${schedule.length}  epoch ${record.epoch}/${flags.epochs}  loss ${record.loss.toFixed(4)}  grad norm ${record.grad_norm.toFixed(3)}  ${rate.toFixed(0)} tok/s`;
          process.stderr.write(process.stderr.isTTY ? `\r\x1b[2K${line}` : `${line}\n`);
          if ((step + 1) % flags.saveEvery === 0 || step + 1 === schedule.length) await save(step + 1);
        }
        if (startStep === schedule.length) await save(schedule.length);
        const written = adapter ? 'adapter written to' : 'model (config, tokenizer, model.safetensors) written to';
        process.stderr.write(`${process.stderr.isTTY ? '\n' : ''}${written} ${out}; metrics in ${join(out, 'metrics.jsonl')}\n`);
      } finally {
        trainer.dispose();
        adapter?.dispose();
        valueHead.dispose();
        model.dispose();
      }
    });
}
