// GGUF LoRA export for llama.cpp, read back by @huggingface/gguf (an independent reader): the
// metadata llama.cpp needs, tensor names, GGUF's dimension order, float32 data at the offsets, the
// rotary row order of a Llama's q/k lora_B (and Hugging Face's order for Qwen2), rsLoRA's scale,
// and `rlplay export --format gguf` from a PEFT folder.
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { gguf } from '@huggingface/gguf';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { mulberry32 } from '../../src/common/random.ts';
import { ggufLoraAdapter, interleaveRotaryRows } from '../../src/engine/export/gguf.ts';
import { initLoraAdapter, LORA_TARGETS, type HostLoraAdapter } from '../../src/engine/lora/adapter.ts';
import { peftAdapterFiles } from '../../src/engine/lora/peft.ts';
import { parseModelConfig } from '../../src/engine/model/config.ts';
import { makeTinyModelFolder, tinyModelConfig, type TinyModelFolder } from '../support/model-folder.ts';

const run = promisify(execFile);
const CLI = join(import.meta.dirname, '../../bin/rlplay.js');
const GGUF_NAMES = { q_proj: 'attn_q', k_proj: 'attn_k', v_proj: 'attn_v', o_proj: 'attn_output', gate_proj: 'ffn_gate', up_proj: 'ffn_up', down_proj: 'ffn_down' } as const;

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rlplay-gguf-'));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

/** A trained-looking adapter: PEFT's init, then B drawn at random too. */
function adapterFor(architecture: 'llama' | 'qwen2', rslora = false): { adapter: HostLoraAdapter; config: ReturnType<typeof parseModelConfig> } {
  const config = parseModelConfig(tinyModelConfig({ architecture, hiddenSize: 32, numHeads: 4, numKvHeads: 2, intermediateSize: 48, numLayers: 2 }));
  const adapter = initLoraAdapter(config, { r: 4, alpha: 8, targets: [...LORA_TARGETS], rslora, dropout: 0, layers: null }, 3, 'tiny');
  const random = mulberry32(11);
  for (const m of adapter.modules) m.B = Float32Array.from(m.B, () => random() - 0.5);
  return { adapter, config };
}

async function readBack(bytes: Uint8Array, name: string) {
  const path = join(dir, name);
  await writeFile(path, bytes);
  const parsed = await gguf(path, { allowLocalFile: true });
  const tensor = (tensorName: string) => {
    const info = parsed.tensorInfos.find((t) => t.name === tensorName)!;
    const start = Number(parsed.tensorDataOffset + info.offset);
    const count = info.shape.reduce((n, d) => n * Number(d), 1);
    return { info, data: new Float32Array(bytes.slice(start, start + 4 * count).buffer) };
  };
  return { parsed, tensor };
}

describe('GGUF LoRA adapters', () => {
  test('llama: metadata, names, dimensions, data, and the interleaved rotary rows of q/k lora_B', async () => {
    const { adapter, config } = adapterFor('llama');
    const { parsed, tensor } = await readBack(ggufLoraAdapter(adapter, config, 'test adapter'), 'llama.gguf');
    expect(parsed.metadata).toMatchObject({
      'general.architecture': 'llama',
      'general.type': 'adapter',
      'general.name': 'test adapter',
      'adapter.type': 'lora',
      'adapter.lora.alpha': 8,
    });
    expect(parsed.tensorInfos).toHaveLength(2 * 7 * 2);
    for (const m of adapter.modules) {
      const base = `blk.${m.layer}.${GGUF_NAMES[m.target]}.weight`;
      const a = tensor(`${base}.lora_a`);
      const b = tensor(`${base}.lora_b`);
      expect([a.info.shape, a.info.dtype]).toEqual([[BigInt(m.inFeatures), 4n], 0]);
      expect([b.info.shape, b.info.dtype]).toEqual([[4n, BigInt(m.outFeatures)], 0]);
      expect(Number(a.info.offset) % 32).toBe(0);
      expect(a.data).toEqual(m.A);
      if (m.target === 'q_proj' || m.target === 'k_proj') {
        // Row (head h, half p, j) of Hugging Face's layout is row (h, 2j + p) in llama.cpp's.
        const heads = m.target === 'q_proj' ? 4 : 2;
        const D = m.outFeatures / heads;
        for (let h = 0; h < heads; h++)
          for (let p = 0; p < 2; p++)
            for (let j = 0; j < D / 2; j++)
              expect(b.data.subarray((h * D + 2 * j + p) * 4, (h * D + 2 * j + p + 1) * 4)).toEqual(m.B.subarray((h * D + p * (D / 2) + j) * 4, (h * D + p * (D / 2) + j + 1) * 4));
        expect(b.data).not.toEqual(m.B);
      } else {
        expect(b.data).toEqual(m.B);
      }
    }
  });

  test('qwen2 keeps the rows as they are; rsLoRA becomes the equivalent alpha', async () => {
    const { adapter, config } = adapterFor('qwen2', true);
    const { parsed, tensor } = await readBack(ggufLoraAdapter(adapter, config), 'qwen2.gguf');
    expect(parsed.metadata['general.architecture']).toBe('qwen2');
    // llama.cpp scales by alpha / r: alpha' = (8 / sqrt(4)) * 4 = 16.
    expect((parsed.metadata as Record<string, unknown>)['adapter.lora.alpha']).toBeCloseTo(16, 5);
    const q = adapter.modules.find((m) => m.target === 'q_proj' && m.layer === 1)!;
    expect(tensor('blk.1.attn_q.weight.lora_b').data).toEqual(q.B);
  });

  test('interleaving is a permutation that its inverse undoes', () => {
    const rows = Float32Array.from({ length: 8 * 3 }, (_, i) => i);
    const once = interleaveRotaryRows(rows, 2, 3);
    expect([...once].sort((a, b) => a - b)).toEqual([...rows]);
    expect([...once.subarray(0, 12)]).toEqual([0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11]);
  });
});

describe('rlplay export --format gguf', () => {
  let model: TinyModelFolder;
  beforeAll(async () => {
    model = await makeTinyModelFolder({ hiddenSize: 32, numHeads: 4, numKvHeads: 2, intermediateSize: 48, numLayers: 2 });
  });
  afterAll(() => rm(model.dir, { recursive: true, force: true }));

  test('from a PEFT folder and its base model, and a clear error without the model', async () => {
    const { adapter } = adapterFor('llama');
    const peft = join(dir, 'peft');
    await mkdir(peft, { recursive: true });
    for (const [name, bytes] of peftAdapterFiles(adapter)) await writeFile(join(peft, name), bytes);
    const { stderr } = await run(process.execPath, [CLI, 'export', '--format', 'gguf', '--adapter', peft, '--model', model.dir, '--out', join(dir, 'out')]);
    expect(stderr).toContain('GGUF LoRA');
    const bytes = new Uint8Array(await readFile(join(dir, 'out.gguf')));
    const { parsed } = await readBack(bytes, 'cli.gguf');
    expect(parsed.tensorInfos.map((t) => t.name)).toContain('blk.1.ffn_down.weight.lora_b');
    const failure = await run(process.execPath, [CLI, 'export', '--format', 'gguf', '--adapter', peft, '--out', join(dir, 'x.gguf')]).catch((e: { stderr: string; code: number }) => e);
    expect(failure).toMatchObject({ code: 1 });
    expect((failure as { stderr: string }).stderr).toContain('--adapter with --model');
  });
});
