// rlplay sft as a user runs it: teaching stories260K a new habit, and resuming a killed run; and
// how its data is tokenised (the stories260K cases need ../shared/fixtures and skip without it).
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { parseModelConfig } from '../../src/engine/model/config.ts';
import { MemoryModelSource } from '../../src/engine/model/memory-source.ts';
import { loadTokenizer } from '../../src/engine/model/tokenizer.ts';
import type { Tokenizer } from '../../src/engine/model/types.ts';
import { parseSftJsonl } from '../../src/engine/train/sft.ts';
import { CLI } from '../support/cli.ts';
import { DEFAULT_MODEL_DIR, loadFolderTokenizer, STORIES260K_DIR, syntheticTokenizer, tinyModelConfig } from '../support/model-folder.ts';

const run = promisify(execFile);
const HABIT = ' and a purple dragon came to play.';
const PROMPTS = ['Once upon a time', 'One day', 'The little cat', 'Tom and Sue', 'In the park', 'A big dog', 'The sun was', 'Lily wanted', 'There was a boy', 'Mom said'];

/** Runs `rlplay ...args`; rejects (with code and stderr) when it fails. */
async function rlplay(...args: string[]): Promise<{ stdout: string; stderr: string }> {
  return run(process.execPath, [CLI, ...args], { maxBuffer: 16 * 2 ** 20 });
}

describe.skipIf(!existsSync(STORIES260K_DIR))('rlplay sft on stories260K', () => {
  let dir: string;
  let data: string;
  const sftArgs = (out: string) => ['sft', '--model', STORIES260K_DIR, '--data', data, '--out', out, '--epochs', '4', '--batch', '5', '--micro-batch', '3', '--lr', '5e-3', '--lora-r', '8', '--targets', 'q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj', '--save-every', '3', '--seed', '7'];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rlplay-sft-'));
    data = join(dir, 'habit.jsonl');
    await writeFile(data, PROMPTS.map((prompt) => JSON.stringify({ prompt, completion: HABIT })).join('\n'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  test('the completion loss falls and greedy generation takes up the habit, also after an unseen prompt', async () => {
    const out = join(dir, 'habit');
    await rlplay(...sftArgs(out));
    const metrics = (await readFile(join(out, 'metrics.jsonl'), 'utf8')).trim().split('\n').map((line) => JSON.parse(line));
    expect(metrics).toHaveLength(8);
    expect(metrics[7].loss).toBeLessThan(metrics[0].loss / 20);
    const before = await rlplay('generate', '--model', STORIES260K_DIR, '--prompt', 'The bird', '--max-new-tokens', '24', '--greedy', '--quiet');
    const after = await rlplay('generate', '--model', STORIES260K_DIR, '--adapter', out, '--prompt', 'The bird', '--max-new-tokens', '24', '--greedy', '--quiet');
    expect(before.stdout).not.toContain('purple dragon');
    expect(after.stdout).toContain('purple dragon');
  });

  test('a run killed mid-way and started again with the same --out reaches the same weights as an uninterrupted one', async () => {
    const whole = join(dir, 'whole');
    await rlplay(...sftArgs(whole));
    const resumed = join(dir, 'resumed');
    // Kill the run as soon as it reports step 5 (the checkpoint of step 3 is on disk by then).
    await new Promise<void>((resolve, reject) => {
      const child = spawn(process.execPath, [CLI, ...sftArgs(resumed)], { stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => {
        stderr += chunk.toString();
        if (stderr.includes('step 5/8')) child.kill('SIGKILL');
      });
      child.on('exit', (_code, signal) => (signal === 'SIGKILL' ? resolve() : reject(new Error(`the run was not killed mid-way:\n${stderr}`))));
    });
    const second = await rlplay(...sftArgs(resumed));
    expect(second.stderr).toContain('resuming from the checkpoint at step 3 of 8');
    const [a, b] = await Promise.all([readFile(join(whole, 'adapter_model.safetensors')), readFile(join(resumed, 'adapter_model.safetensors'))]);
    expect(b.equals(a)).toBe(true);
    const lines = (await readFile(join(resumed, 'metrics.jsonl'), 'utf8')).trim().split('\n').map((line) => JSON.parse(line).step);
    expect(lines).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
  });

  test('--full trains every weight and writes a model folder that generates with the habit', async () => {
    const out = join(dir, 'full');
    await rlplay('sft', '--model', STORIES260K_DIR, '--data', data, '--out', out, '--epochs', '3', '--batch', '5', '--lr', '2e-3', '--full', '--seed', '1');
    for (const file of ['config.json', 'tokenizer.json', 'model.safetensors']) expect(existsSync(join(out, file))).toBe(true);
    const after = await rlplay('generate', '--model', out, '--prompt', 'The bird', '--max-new-tokens', '24', '--greedy', '--quiet');
    expect(after.stdout).toContain('purple dragon');
  });

  test('bad data is reported with its line', async () => {
    const bad = join(dir, 'bad.jsonl');
    await writeFile(bad, '{"prompt": "a", "completion": "b"}\n{"prompt": "a"}\n');
    const error = await rlplay('sft', '--model', STORIES260K_DIR, '--data', bad, '--out', join(dir, 'bad')).catch((e: { stderr: string; code: number }) => e);
    expect((error as { code: number }).code).not.toBe(0);
    expect((error as { stderr: string }).stderr).toMatch(/bad\.jsonl:2: expected \{"prompt"/);
  });
});

/** One {"prompt", "completion"} line, parsed. */
function example(tokenizer: Tokenizer, prompt: string, completion: string) {
  return parseSftJsonl(JSON.stringify({ prompt, completion }), tokenizer)[0];
}

describe('sft data: a prompt and its completion are encoded as one text, and the prompt masked', () => {
  describe.skipIf(!existsSync(STORIES260K_DIR))('with the SentencePiece tokenizer of stories260K', () => {
    test('a completion that starts with a space gets one word boundary, not two', async () => {
      const tok = await loadFolderTokenizer(STORIES260K_DIR);
      const { prompt, completion } = example(tok, 'Lily.', ' It was sunny.');
      expect([...prompt, ...completion]).toEqual(tok.encode('Lily. It was sunny.'));
      expect(prompt).toEqual(tok.encode('Lily.'));
      // Encoded on its own, the completion starts with a lone word boundary before '▁I': two spaces.
      const alone = tok.encode(' It was sunny.', { addSpecialTokens: false });
      expect(alone.slice(1)).toEqual(completion);
      expect(tok.decode([...prompt, ...alone], { skipSpecialTokens: true })).toBe('Lily.  It was sunny.');
      expect(tok.decode([...prompt, ...completion], { skipSpecialTokens: true })).toBe('Lily. It was sunny.');
    });

    test('a token that spans the join belongs to the completion; the prompt keeps the joint tokens before it', async () => {
      const tok = await loadFolderTokenizer(STORIES260K_DIR);
      // "Lily. It w" + "as sunny.": '▁was' holds the prompt's " w" and the completion's "as".
      const spanning = example(tok, 'Lily. It w', 'as sunny.');
      expect(spanning.prompt).toEqual(tok.encode('Lily. It'));
      expect([...spanning.prompt, ...spanning.completion]).toEqual(tok.encode('Lily. It was sunny.'));
      expect(tok.decode(spanning.completion.slice(0, 1))).toBe('was');
      // A prompt that ends with the space: '▁I' holds it and the completion's "I".
      const trailingSpace = example(tok, 'Lily. ', 'It was sunny.');
      expect(trailingSpace.prompt).toEqual(tok.encode('Lily.'));
      expect(trailingSpace.completion).toEqual(example(tok, 'Lily.', ' It was sunny.').completion);
    });
  });

  describe('with the byte-level BPE tokenizer of the embedded default model', () => {
    test('a completion after a whole word keeps its own tokens; a token spanning the join goes to the completion', async () => {
      const tok = await loadFolderTokenizer(DEFAULT_MODEL_DIR);
      const clean = example(tok, 'Lily.', ' It was sunny.');
      expect(clean.prompt).toEqual(tok.encode('Lily.'));
      expect(clean.completion).toEqual(tok.encode(' It was sunny.', { addSpecialTokens: false }));
      // "Lily. It wa" + "s sunny.": 'as' holds the prompt's "a" and the completion's "s".
      const spanning = example(tok, 'Lily. It wa', 's sunny.');
      expect(spanning.prompt).toEqual(tok.encode('Lily. It w'));
      expect([...spanning.prompt, ...spanning.completion]).toEqual(tok.encode('Lily. It was sunny.'));
      expect(tok.decode(spanning.completion.slice(0, 1))).toBe('as');
    });
  });

  test('a prompt whose only token spans the join, with no BOS before it, is refused: nothing would predict the completion', async () => {
    // The synthetic character tokenizer with a merge of "a b" and no BOS added.
    const files = syntheticTokenizer(120);
    const json = files.json as { post_processor: unknown; model: { vocab: Record<string, number>; merges: string[] } };
    json.post_processor = null;
    json.model.vocab.ab = Object.keys(json.model.vocab).length;
    json.model.merges.push('a b');
    const bytes = (value: object) => new TextEncoder().encode(JSON.stringify(value));
    const source = new MemoryModelSource(new Map([['tokenizer.json', bytes(json)], ['tokenizer_config.json', bytes(files.config as object)]]));
    const tok = await loadTokenizer(source, parseModelConfig(tinyModelConfig({ vocabSize: 120 })));
    expect(() => example(tok, 'a', 'b')).toThrow(/data:1: "prompt" encodes to no token before the completion/);
    expect(example(tok, 'ca', 'b')).toEqual({ prompt: tok.encode('c'), completion: tok.encode('ab') });
  });
});
