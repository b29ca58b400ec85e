// rlplay train / collect / export as a user runs them (`node bin/rlplay.js ...` in a child process),
// on stories260K with a custom environment from a file, some of whose episodes throw or loop forever.
import { spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { CLI, rlplay } from '../support/cli.ts';
import { STORIES260K_DIR } from '../support/model-folder.ts';

const FLAKY = join(import.meta.dirname, '../fixtures/envs/flaky-coin.js');
const WORD_GUESS = join(import.meta.dirname, '../fixtures/envs/word-guess.js');
const ALWAYS_THROWS = join(import.meta.dirname, '../fixtures/envs/always-throws.js');
const MANY_ACTIONS = join(import.meta.dirname, '../fixtures/envs/many-actions.js');


const trainArgs = (out: string, episodes: number) => [
  'train', '--model', STORIES260K_DIR, '--env', FLAKY, '--algo', 'reinforce', '--episodes', String(episodes),
  '--set', 'episodesPerUpdate=4', '--step-timeout', '500', '--seed', '1', '--out', out,
];

interface Line {
  index: number;
  seed: number;
  totalReward: number;
  error?: string;
  steps: { action: string }[];
}
const trajectories = async (dir: string): Promise<Line[]> =>
  (await readFile(join(dir, 'trajectories.jsonl'), 'utf8')).trim().split('\n').map((line) => JSON.parse(line) as Line).sort((a, b) => a.index - b.index);

describe.skipIf(!existsSync(STORIES260K_DIR))('rlplay train, collect and export', () => {
  let root: string;
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'rlplay-cli-train-'));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  test('train on a custom environment file: broken episodes end alone with their reason, the run goes on and writes everything', async () => {
    const out = join(root, 'straight');
    const { code, stderr } = await rlplay(...trainArgs(out, 12));
    expect(stderr).toMatch(/episode 0 \(seed 1000003\) ended early: .*step\(\) threw at step 1: Error: the coin rolled away/);
    expect(stderr).toMatch(/episode 4 \(seed 1000007\) ended early: .*step\(\) did not finish within 500 ms/);
    expect(code).toBe(0);
    for (const file of ['metrics.jsonl', 'trajectories.jsonl', 'report.json', 'adapter_config.json', 'adapter_model.safetensors']) expect(existsSync(join(out, file))).toBe(true);
    const episodes = await trajectories(out);
    expect(episodes.map((e) => e.index)).toEqual(Array.from({ length: 12 }, (_, i) => i));
    expect(episodes.filter((e) => e.error).map((e) => e.index)).toEqual([0, 4, 10]);
    expect(episodes.filter((e) => !e.error).every((e) => e.steps.length === 1 && ['heads', 'tails'].includes(e.steps[0].action))).toBe(true);
    const report = JSON.parse(await readFile(join(out, 'report.json'), 'utf8'));
    expect(report).toMatchObject({ status: 'finished', episodes: 12, updates: 3, config: { algo: 'reinforce', mode: 'choice' } });
    const metrics = (await readFile(join(out, 'metrics.jsonl'), 'utf8')).trim().split('\n').map((l) => JSON.parse(l));
    expect(metrics.filter((m) => m.name === 'charts/failed_episodes').map((m) => m.value)).toEqual([1, 1, 1]);
  });

  test('killed mid-run and started again with the same --out, it resumes and ends as an uninterrupted run would', async () => {
    const straight = join(root, 'straight-20');
    expect((await rlplay(...trainArgs(straight, 20))).code).toBe(0);

    const out = join(root, 'killed');
    const child = spawn(process.execPath, [CLI, ...trainArgs(out, 20)], { stdio: 'ignore' });
    // Kill it hard once two updates are checkpointed.
    await new Promise<void>((resolve, reject) => {
      const timer = setInterval(() => {
        const checkpoints = existsSync(join(out, 'checkpoints')) ? readdirSync(join(out, 'checkpoints')).filter((d) => /^\d+$/.test(d)) : [];
        if (checkpoints.length >= 2) {
          clearInterval(timer);
          child.kill('SIGKILL');
          resolve();
        }
      }, 50);
      child.on('exit', () => {
        clearInterval(timer);
        reject(new Error('the run finished before it could be killed'));
      });
    });
    const resumed = await rlplay(...trainArgs(out, 20));
    expect(resumed.code).toBe(0);
    expect(resumed.stderr).toMatch(/resuming killed after update [2-4]/);
    const [a, b] = [await trajectories(straight), await trajectories(out)];
    expect(b.map((e) => e.index)).toEqual(a.map((e) => e.index));
    expect(b.map((e) => [e.seed, e.totalReward, e.error ?? null, e.steps.map((s) => s.action)])).toEqual(a.map((e) => [e.seed, e.totalReward, e.error ?? null, e.steps.map((s) => s.action)]));
    expect(Buffer.compare(await readFile(join(out, 'adapter_model.safetensors')), await readFile(join(straight, 'adapter_model.safetensors')))).toBe(0);
  });

  test('export --format peft writes an adapter that generate loads', async () => {
    const exported = join(root, 'exported');
    const { code, stderr } = await rlplay('export', '--format', 'peft', '--run', join(root, 'straight'), '--out', exported);
    expect(stderr).toMatch(/PEFT adapter of straight \(update 3/);
    expect(code).toBe(0);
    const gen = await rlplay('generate', '--model', STORIES260K_DIR, '--adapter', exported, '--prompt', 'Once', '--max-new-tokens', '4', '--greedy');
    expect(gen.code).toBe(0);
    const missing = await rlplay('export', '--format', 'peft', '--run', join(root, 'nothing-here'), '--out', exported);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/not a run folder/);
  });

  test('train --init-adapter starts a new run from an exported adapter, evaluated before training; a corrupted adapter fails cleanly', async () => {
    const exported = join(root, 'exported');
    const out = join(root, 'from-adapter');
    const args = [...trainArgs(out, 4), '--init-adapter', exported, '--lora-r', '2'];
    const first = await rlplay(...args, '--eval-episodes', '3');
    expect(first.code).toBe(0);
    expect(first.stderr).toMatch(/starting from-adapter from its imported adapter \(LoRA r=8\)/);
    expect(first.stderr).toMatch(/test-split success \d+% before \(its initial adapter\), \d+% after/);
    const config = JSON.parse(await readFile(join(out, 'adapter_config.json'), 'utf8'));
    expect(config.r).toBe(8);
    // "Before" is where the run starts: the imported adapter, as `rlplay eval --adapter` measures it.
    const { evaluation } = JSON.parse(await readFile(join(out, 'report.json'), 'utf8'));
    expect(evaluation.startedFrom).toBe(exported);
    const starting = await rlplay('eval', '--model', STORIES260K_DIR, '--adapter', exported, '--env', FLAKY, '--episodes', '3', '--json');
    expect(starting.code, starting.stderr).toBe(0);
    const measured = JSON.parse(starting.stdout);
    expect([evaluation.before.successRate, evaluation.before.meanReturn]).toEqual([measured.successRate, measured.meanReturn]);
    // The change is measured episode by episode, on the seeds both evaluations played.
    expect(evaluation.change).toMatchObject({ pairs: 3 });
    expect(evaluation.change.gained - evaluation.change.lost).toBe(Math.round(3 * (evaluation.after.successRate.value - evaluation.before.successRate.value)));
    expect(first.stderr).toMatch(/change: .* pp \[.*\] in success/);
    // Started again, it is an ordinary resume.
    const again = await rlplay(...args);
    expect(again.code).toBe(0);
    expect(again.stderr).not.toMatch(/imported adapter/);

    const corrupt = join(root, 'corrupt-adapter');
    await rm(corrupt, { recursive: true, force: true });
    await mkdir(corrupt);
    await writeFile(join(corrupt, 'adapter_config.json'), await readFile(join(exported, 'adapter_config.json')));
    await writeFile(join(corrupt, 'adapter_model.safetensors'), 'not safetensors at all');
    const broken = await rlplay(...trainArgs(join(root, 'from-corrupt'), 4), '--init-adapter', corrupt);
    expect(broken.code).toBe(1);
    expect(broken.stderr).toMatch(/adapter_model\.safetensors/);
    expect(existsSync(join(root, 'from-corrupt', 'adapter_config.json'))).toBe(false);
  });

  test('collect --expert stores the scripted expert\'s demonstrations', async () => {
    const out = join(root, 'demos');
    const { code } = await rlplay('collect', '--model', STORIES260K_DIR, '--env', 'reasoning', '--expert', '--episodes', '3', '--out', out);
    expect(code).toBe(0);
    const episodes = await trajectories(out);
    expect(episodes).toHaveLength(3);
    expect(episodes.every((e) => (e as unknown as { success: boolean }).success)).toBe(true);
  });

  test("BC imitates a custom environment's scripted expert; without one it stops at once and says what to do", async () => {
    const out = join(root, 'bc-expert');
    const bcArgs = (env: string, dir: string) => ['train', '--model', STORIES260K_DIR, '--env', env, '--algo', 'bc', '--episodes', '8', '--set', 'episodesPerUpdate=4', '--out', dir];
    const imitated = await rlplay(...bcArgs(WORD_GUESS, out));
    expect(imitated.code, imitated.stderr).toBe(0);
    const episodes = await trajectories(out);
    expect(episodes).toHaveLength(8);
    expect(episodes.every((e) => !e.error && (e as unknown as { success: boolean }).success)).toBe(true);
    const metrics = (await readFile(join(out, 'metrics.jsonl'), 'utf8')).trim().split('\n').map((l) => JSON.parse(l));
    expect(metrics.filter((m) => m.name === 'bc/imitated_episodes').map((m) => m.value)).toEqual([4, 4]);
    expect(metrics.filter((m) => m.name === 'losses/policy_loss')).toHaveLength(2);

    const never = join(root, 'bc-no-expert');
    const missing = await rlplay(...bcArgs(FLAKY, never));
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('environment flaky-coin has no scripted expert (expertAction())');
    expect(missing.stderr).toContain('--set source=successes');
    expect(missing.stderr).not.toContain('ended early');
    const stored = existsSync(join(never, 'trajectories.jsonl')) ? (await readFile(join(never, 'trajectories.jsonl'), 'utf8')).trim() : '';
    expect(stored).toBe('');
  });

  test('quickstart runs collect, evaluate, PPO, evaluate and export, and says where everything went', async () => {
    const out = join(root, 'quickstart');
    const { code, stdout, stderr } = await rlplay('quickstart', '--model', STORIES260K_DIR, '--episodes', '8', '--eval-episodes', '2', '--out', out);
    expect(code, stderr).toBe(0);
    expect(stderr).toMatch(/1\/5 collect[\s\S]*2\/5 evaluate[\s\S]*3\/5 train: PPO, 8 episodes[\s\S]*4\/5 evaluate[\s\S]*5\/5 export/);
    expect(stdout).toMatch(/tool-use, test split, 2 episodes each/);
    expect(stdout).toMatch(/before\s+\d+% \[\d+%, \d+%\]/);
    expect(stdout).toMatch(/after PPO\s+\d+% \[\d+%, \d+%\]/);
    expect(stdout).toMatch(/change\s+.* pp \[.*\] in success, .* in mean return \(paired over the same 2 episodes: \d went from failure to success, \d the other way\)/);
    const report = JSON.parse(await readFile(join(out, 'report.json'), 'utf8'));
    expect(report.change).toMatchObject({ pairs: 2 });
    expect(report.change.successRate.value).toBe(report.after.successRate.value - report.before.successRate.value);
    expect(report).toMatchObject({ env: 'tool-use', episodes: 8, adapter: join(out, 'adapter'), onnx: join(out, 'onnx-model') });
    expect(report.before.episodes).toBe(2);
    for (const file of ['adapter/adapter_config.json', 'adapter/adapter_model.safetensors', 'onnx-model/onnx/model.onnx', 'onnx-model/config.json', 'onnx-model/tokenizer.json', 'collected.jsonl', 'run/trajectories.jsonl']) {
      expect(existsSync(join(out, file)), file).toBe(true);
    }
    expect(stdout).toContain(join(out, 'report.json'));
  }, 600_000);

  test('a finished run run again changes nothing; a smaller --episodes is refused with both numbers; a larger one continues it', async () => {
    const out = join(root, 'rerun');
    expect((await rlplay(...trainArgs(out, 8))).code).toBe(0);
    const files = ['report.json', 'run.json', 'metrics.jsonl', 'trajectories.jsonl', 'adapter_model.safetensors'];
    const contents = () => Promise.all(files.map((file) => readFile(join(out, file))));
    const finished = await contents();
    expect(JSON.parse(finished[0].toString()).lastUpdate['charts/updates']).toBe(2);

    const again = await rlplay(...trainArgs(out, 8), '--eval-episodes', '2');
    expect(again.stderr).toContain('run rerun is already finished (8 episodes, 2 updates); nothing to do — pass a larger --episodes to continue it or another --out');
    expect(again.code).toBe(0);
    expect(await contents()).toEqual(finished);
    expect(existsSync(join(out, 'evaluation_before.json'))).toBe(false);

    const smaller = await rlplay(...trainArgs(out, 4));
    expect(smaller.stderr).toContain('run rerun has played 8 episodes (it was started for 8), more than the 4 asked for now: ask for 8 or more (more continues it), or start a new run elsewhere');
    expect(smaller.code).toBe(1);
    expect(await contents()).toEqual(finished);

    const larger = await rlplay(...trainArgs(out, 12));
    expect(larger.code).toBe(0);
    expect(larger.stderr).toMatch(/resuming rerun after update 2 \(8 episodes\)/);
    const report = JSON.parse(await readFile(join(out, 'report.json'), 'utf8'));
    expect(report).toMatchObject({ status: 'finished', episodes: 12, updates: 3, config: { episodes: 12 } });
    expect(report.lastUpdate['charts/updates']).toBe(3);
    expect((await trajectories(out)).map((e) => e.index)).toEqual(Array.from({ length: 12 }, (_, i) => i));
  });

  test('a run in which every episode fails exits non-zero and says how many failed; one offered 10,000 actions says why', async () => {
    const thrown = await rlplay(...trainArgs(join(root, 'all-fail'), 8).map((a) => (a === FLAKY ? ALWAYS_THROWS : a)));
    expect(thrown.stderr).toMatch(/^training: 8 of 8 episodes could not be played \(an environment or policy error\); the first: .*step\(\) threw at step 1/m);
    expect(thrown.stderr).toContain('no episode of always-throws could be played: all 8 failed');
    expect(thrown.code).toBe(1);
    const flooded = await rlplay(...trainArgs(join(root, 'flooded'), 4).map((a) => (a === FLAKY ? MANY_ACTIONS : a)));
    expect(flooded.stderr).toContain('episode 0 (seed 1000003) ended early: environment many-actions offered 10000 valid actions at step 0, more than the 256 the choice mode scores');
    expect(flooded.stderr).toContain('no episode of many-actions could be played: all 4 failed');
    expect(flooded.code).toBe(1);
  });

  test('a custom environment that does not load fails cleanly with the reason', async () => {
    const broken = join(root, 'broken-env.js');
    await writeFile(broken, 'export default { id: "broken", make() { return {}; }\n');
    const { code, stderr } = await rlplay(...trainArgs(join(root, 'never'), 4).map((a) => (a === FLAKY ? broken : a)));
    expect(code).toBe(1);
    expect(stderr).toMatch(/broken-env\.js/);
    expect(stderr).toMatch(/SyntaxError|syntax/i);
    const unknown = await rlplay('train', '--model', STORIES260K_DIR, '--env', 'tool-uses', '--episodes', '4', '--out', join(root, 'never'));
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/tool-use/);
  });
});

describe('rlplay train refuses a setting out of its range before it plays anything', () => {
  test.each([
    ['reinforce', 'episodesPerUpdate=0', 'reinforce setting episodesPerUpdate must be an integer ≥ 1 (got 0): set episodesPerUpdate=1 or more'],
    ['grpo', 'groupsPerUpdate=0', 'grpo setting groupsPerUpdate must be an integer ≥ 1 (got 0): set groupsPerUpdate=1 or more'],
    ['ppo', 'updateEpochs=0', 'ppo setting updateEpochs must be an integer ≥ 1 (got 0): set updateEpochs=1 or more'],
    ['reinforce', 'episodesPerUpdate=2.5', 'reinforce setting episodesPerUpdate must be an integer ≥ 1 (got 2.5): set a whole number, e.g. episodesPerUpdate=3'],
    ['ppo', 'episodesPerUpdat=4', 'ppo has no setting "episodesPerUpdat"; did you mean episodesPerUpdate?'],
  ])('%s --set %s', async (algo, setting, message) => {
    const folder = await mkdtemp(join(tmpdir(), 'rlplay-cli-settings-'));
    const { code, stderr } = await rlplay('train', '--env', 'tool-use', '--algo', algo, '--episodes', '8', '--set', setting, '--out', join(folder, 'run'));
    expect(stderr).toContain(message);
    expect(code).toBe(1);
    expect(readdirSync(folder)).toEqual([]);
    await rm(folder, { recursive: true });
  });
});
