// The CLI as a user runs it: `node bin/rlplay.js ...` in a child process, on the stories260K folder,
// on an http-served copy of it, and on a broken copy.
import { existsSync } from 'node:fs';
import { cp, mkdtemp, readFile, rm, truncate } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { rlplay } from '../support/cli.ts';
import { STORIES260K_DIR } from '../support/model-folder.ts';
import { serveFolder } from '../support/static-server.ts';



const fixturePresent = existsSync(STORIES260K_DIR);

describe.skipIf(!fixturePresent)('rlplay CLI on stories260K', () => {
  let server: { url: string; close(): Promise<void> };
  let brokenDir: string;
  const reference = (file: string) => readFile(join(STORIES260K_DIR, 'reference', file), 'utf8').then(JSON.parse);

  beforeAll(async () => {
    server = await serveFolder(STORIES260K_DIR);
    brokenDir = await mkdtemp(join(tmpdir(), 'rlplay-broken-'));
    await cp(STORIES260K_DIR, brokenDir, { recursive: true });
    await truncate(join(brokenDir, 'model.safetensors'), 500_000);
  });
  afterAll(async () => {
    await server?.close();
    await rm(brokenDir, { recursive: true, force: true });
  });

  test('logprobs --ids --logits --json matches the PyTorch reference', async () => {
    const ref = await reference('logits_once_upon.json');
    const { code, stdout } = await rlplay('logprobs', '--model', STORIES260K_DIR, '--ids', ref.ids.join(','), '--logits', '--json');
    expect(code).toBe(0);
    const out = JSON.parse(stdout);
    expect(out.ids).toEqual(ref.ids);
    expect(out.token_logprobs[0]).toBeNull();
    out.token_logprobs.slice(1).forEach((lp: number, i: number) => expect(Math.abs(lp - ref.token_logprobs[i + 1])).toBeLessThanOrEqual(1e-4));
    const worst = Math.max(...ref.logits.flatMap((row: number[], t: number) => row.map((v, j) => Math.abs(v - out.logits[t][j]))));
    expect(worst).toBeLessThanOrEqual(1e-4);
  });

  test('logprobs --text encodes with the tokenizer, BOS included, over http too', async () => {
    const ref = await reference('logits_once_upon.json');
    const { code, stdout, stderr } = await rlplay('logprobs', '--model', server.url, '--text', 'Once upon a time, there was a little girl', '--json');
    expect(stderr).toBe('');
    expect(code).toBe(0);
    const out = JSON.parse(stdout);
    expect(out.ids).toEqual(ref.ids);
    expect(out.logits).toBeUndefined();
  });

  test('generate --greedy reproduces the reference story, from a folder and over http', async () => {
    const ref = await reference('greedy_from_bos.json');
    for (const model of [STORIES260K_DIR, server.url]) {
      const { code, stdout } = await rlplay('generate', '--model', model, '--max-new-tokens', '60', '--greedy', '--quiet');
      expect(code).toBe(0);
      expect(ref.text.startsWith(stdout.trim().slice(0, 200))).toBe(true);
      expect(stdout.trim().length).toBeGreaterThan(150);
    }
  });

  test('generate --prompt prints the continuation with the space that joins it to the prompt', async () => {
    // SentencePiece strips the word boundary from the start of a text: the new tokens decoded alone read "a little girl".
    const { code, stdout } = await rlplay('generate', '--model', STORIES260K_DIR, '--prompt', 'Once upon a time, there was', '--max-new-tokens', '5', '--greedy', '--quiet');
    expect(code).toBe(0);
    expect(stdout).toBe('Once upon a time, there was a little girl\n');
  });

  test('generate with sampling is reproducible by seed', async () => {
    const args = ['generate', '--model', STORIES260K_DIR, '--prompt', 'Once upon a time', '--max-new-tokens', '30', '--temperature', '0.9', '--top-p', '0.9', '--top-k', '50', '--quiet'];
    const a = await rlplay(...args, '--seed', '3');
    const b = await rlplay(...args, '--seed', '3');
    const c = await rlplay(...args, '--seed', '4');
    expect(a.code).toBe(0);
    expect(a.stdout).toBe(b.stdout);
    expect(a.stdout).not.toBe(c.stdout);
    expect(a.stdout.startsWith('Once upon a time')).toBe(true);
  });

  test('--adapter applies a PEFT adapter to logprobs and generate', async () => {
    const ref = await reference('logits_once_upon_lora.json');
    const adapter = join(STORIES260K_DIR, 'lora-synthetic-r4');
    const { code, stdout } = await rlplay('logprobs', '--model', STORIES260K_DIR, '--adapter', adapter, '--ids', ref.ids.join(','), '--json');
    expect(code).toBe(0);
    JSON.parse(stdout).token_logprobs.slice(1).forEach((lp: number, i: number) => expect(Math.abs(lp - ref.token_logprobs[i + 1])).toBeLessThanOrEqual(1e-4));
    const base = await rlplay('generate', '--model', STORIES260K_DIR, '--max-new-tokens', '40', '--greedy', '--quiet');
    const adapted = await rlplay('generate', '--model', STORIES260K_DIR, '--adapter', adapter, '--max-new-tokens', '40', '--greedy', '--quiet');
    expect(adapted.code).toBe(0);
    expect(adapted.stdout).not.toBe(base.stdout);
    const missing = await rlplay('generate', '--model', STORIES260K_DIR, '--adapter', brokenDir, '--max-new-tokens', '2');
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toMatch(/no adapter_config\.json/);
  });

  test('eval reports success, return and length with confidence intervals on held-out instances', async () => {
    const { code, stdout } = await rlplay('eval', '--model', STORIES260K_DIR, '--env', 'reasoning', '--episodes', '3', '--json');
    expect(code).toBe(0);
    const report = JSON.parse(stdout);
    expect(report).toMatchObject({ env: 'reasoning', split: 'test', difficulty: 1, episodes: 3 });
    for (const key of ['successRate', 'meanReturn', 'meanLength']) {
      expect(report[key].low).toBeLessThanOrEqual(report[key].value);
      expect(report[key].high).toBeGreaterThanOrEqual(report[key].value);
    }
    expect(report.meanLength.value).toBeGreaterThan(0);
    const unknown = await rlplay('eval', '--model', STORIES260K_DIR, '--env', 'chess', '--episodes', '1');
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toMatch(/environment "chess": is neither a built-in environment nor a file path; the built-ins are .*tool-use/);
  });

  test('eval on an environment whose every episode fails exits non-zero, says how many failed and counts them as failures', async () => {
    const env = join(import.meta.dirname, '../fixtures/envs/always-throws.js');
    const { code, stdout, stderr } = await rlplay('eval', '--model', STORIES260K_DIR, '--env', env, '--episodes', '3');
    expect(code).toBe(1);
    expect(stderr).toMatch(/^3 of 3 episodes could not be played \(an environment or policy error\); the first: .*step\(\) threw at step 1: Error: the environment broke on "(yes|no)"/m);
    expect(stderr).toContain('no episode of always-throws could be played: all 3 failed');
    expect(stdout).toContain('3 episodes (3 failed, counted as failures)');
    expect(stdout).toMatch(/success rate {4}0\.000 \[0\.000, 0\.561\]/);
    expect(stdout).toMatch(/mean return {5}- /);
    const json = await rlplay('eval', '--model', STORIES260K_DIR, '--env', env, '--episodes', '3', '--json');
    expect(json.code).toBe(1);
    expect(JSON.parse(json.stdout)).toMatchObject({ episodes: 3, failedEpisodes: 3, successRate: { value: 0 } });
  });

  test('eval on an environment listing 10,000 valid actions fails at once with the limit and the ways out', async () => {
    const env = join(import.meta.dirname, '../fixtures/envs/many-actions.js');
    const { code, stderr } = await rlplay('eval', '--model', STORIES260K_DIR, '--env', env, '--episodes', '2');
    expect(code).toBe(1);
    expect(stderr).toContain('2 of 2 episodes could not be played');
    expect(stderr).toContain('environment many-actions offered 10000 valid actions at step 0, more than the 256 the choice mode scores (each is scored every step): list fewer from validActions(), raise the limit (--max-actions), or play it in text mode (--mode text)');
    const zero = await rlplay('eval', '--model', STORIES260K_DIR, '--env', env, '--episodes', '1', '--max-actions', '0');
    expect(zero.code).toBe(1);
    expect(zero.stderr).toContain('--max-actions must be at least 1');
  });

  test('a truncated model.safetensors fails with a clear message and a non-zero exit', async () => {
    const { code, stdout, stderr } = await rlplay('logprobs', '--model', brokenDir, '--text', 'Once', '--json');
    expect(code).not.toBe(0);
    expect(stdout).toBe('');
    expect(stderr).toMatch(/model\.safetensors/);
    expect(stderr).toMatch(/truncated|download/i);
  });

  test('usage errors name the problem', async () => {
    const missing = await rlplay('logprobs', '--model', join(tmpdir(), 'no-such-model-folder'), '--ids', '1,2');
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toMatch(/does not exist/);
    const both = await rlplay('logprobs', '--model', STORIES260K_DIR);
    expect(both.code).not.toBe(0);
    expect(both.stderr).toMatch(/exactly one of --ids or --text/);
    const badIds = await rlplay('logprobs', '--model', STORIES260K_DIR, '--ids', '1,x');
    expect(badIds.code).not.toBe(0);
    expect(badIds.stderr).toMatch(/comma-separated token ids/);
    const outside = await rlplay('logprobs', '--model', STORIES260K_DIR, '--ids', '1,9999');
    expect(outside.code).not.toBe(0);
    expect(outside.stderr).toMatch(/outside the vocabulary/);
  });
});

describe('rlplay CLI on the embedded default model', () => {
  test('every command that runs a model runs the default model when --model is left out', async () => {
    const evaluated = await rlplay('eval', '--env', 'reasoning', '--episodes', '2', '--json');
    expect(evaluated.code).toBe(0);
    expect(JSON.parse(evaluated.stdout)).toMatchObject({ env: 'reasoning', episodes: 2 });
    expect(evaluated.stdout).toBe((await rlplay('eval', '--model', 'public/models/rlplay-agent-mini', '--env', 'reasoning', '--episodes', '2', '--json')).stdout);
    const scored = await rlplay('logprobs', '--text', 'Observation:');
    expect(scored.code).toBe(0);
    expect(scored.stderr).toMatch(/public\/models\/rlplay-agent-mini: llama, 4 layers/);
    // An adapter of another base model, with the default model because --model was left out: say so.
    if (existsSync(STORIES260K_DIR)) {
      const mismatched = await rlplay('eval', '--adapter', join(STORIES260K_DIR, 'lora-synthetic-r4'), '--env', 'reasoning', '--episodes', '1');
      expect(mismatched.code).not.toBe(0);
      expect(mismatched.stderr).toMatch(/made for another base model \(stories260K\).*Without --model the embedded default model is used: pass the adapter's base model with --model/);
    }
    for (const command of ['collect', 'train', 'generate', 'sft']) {
      const help = await rlplay(command, '--help');
      expect(help.stdout, `${command} --help`).toMatch(/--model <dir\|url\|hf:id>[\s\S]*\(default:\s+"[^"]*rlplay-agent-mini"\)/);
    }
  });
});
