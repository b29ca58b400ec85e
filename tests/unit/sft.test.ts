// rlplay sft as a user runs it: teaching stories260K a new habit, and resuming a killed run.
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { CLI } from '../support/cli.ts';
import { STORIES260K_DIR } from '../support/model-folder.ts';

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
