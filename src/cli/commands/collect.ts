// rlplay collect: play episodes with a model (and adapter), or with the environment's scripted
// expert, and store them in --out/trajectories.jsonl (the store's JSONL format: one episode with its
// steps and tokens per line) — demonstrations for BC, data to inspect, or a baseline. Running the
// same command again adds only the episodes still missing.
import { basename, dirname, resolve } from 'node:path';
import type { Command } from 'commander';
import { FileTrajectoryStore } from '../../store/files.ts';
import { addAgentOptions, agentPolicy, checkAgentFlags, loadEnvironment, type AgentFlags } from '../agent-options.ts';
import { DEFAULT_MODEL_DIR, loadModelAndAdapter, MODEL_HELP } from '../load.ts';
import { parseWholeNumber } from '../parse.ts';

interface CollectFlags extends AgentFlags {
  model: string;
  adapter?: string;
  expert?: boolean;
  greedy?: boolean;
  split: string;
  episodes: number;
  seed: number;
  out: string;
}

const PARALLEL = 16;

export function registerCollect(program: Command): void {
  const command = program
    .command('collect')
    .description('play episodes (the model, or the scripted expert) and store them as trajectories.jsonl in --out')
    .option('--model <dir|url|hf:id>', MODEL_HELP, DEFAULT_MODEL_DIR)
    .option('--adapter <dir|url|hf:id>', 'apply this PEFT LoRA adapter')
    .option('--expert', "let the environment's scripted expert act (demonstrations)")
    .option('--greedy', 'take the most probable action instead of sampling')
    .option('--split <split>', 'train or test instances', 'train')
    .requiredOption('--episodes <n>', 'episodes to play', parseWholeNumber)
    .option('--seed <s>', 'first reset seed (episode i uses seed + i)', parseWholeNumber, 0)
    .requiredOption('--out <dir>', 'the folder: trajectories.jsonl and run.json');
  addAgentOptions(command);
  command.action(async (flags: CollectFlags) => {
    checkAgentFlags(flags);
    if (flags.split !== 'train' && flags.split !== 'test') throw new Error(`--split must be train or test, got ${flags.split}`);
    const out = resolve(flags.out);
    const runId = basename(out);
    const store = new FileTrajectoryStore(dirname(out), { onWarning: (message) => process.stderr.write(`warning: ${message}\n`) });
    const env = await loadEnvironment(flags);
    const { model, adapter } = await loadModelAndAdapter(flags.model, flags.adapter);
    try {
      const config = { collect: true, model: flags.model, adapter: flags.adapter ?? null, env: flags.env, mode: flags.mode, expert: Boolean(flags.expert), split: flags.split, difficulty: flags.difficulty, seed: flags.seed };
      const existing = await store.getRun(runId);
      if (existing && JSON.stringify(existing.config) !== JSON.stringify(config)) throw new Error(`${out} holds episodes collected with other settings; use another --out`);
      if (!existing) await store.createRun({ id: runId, config });
      const policy = agentPolicy(model, flags, env, flags.split, adapter);
      let stored = 0;
      let successes = 0;
      for (let start = 0; start < flags.episodes; start += PARALLEL) {
        const indices = Array.from({ length: Math.min(PARALLEL, flags.episodes - start) }, (_, i) => start + i);
        const missing = [];
        for (const i of indices) if (!(await store.getEpisode(runId, i))) missing.push(i);
        if (missing.length === 0) continue;
        const episodes = await policy.play(missing.map((i) => ({ seed: flags.seed + i })), { expert: flags.expert, greedy: flags.greedy });
        for (const [k, episode] of episodes.entries()) {
          if (episode.error) process.stderr.write(`episode ${missing[k]} (seed ${episode.seed}) ended early: ${episode.error}\n`);
          await store.addEpisode(
            { runId, index: missing[k], envId: env.id, seed: episode.seed, split: flags.split, totalReward: episode.totalReward, success: episode.success, length: episode.steps.length, createdAt: Date.now(), ...(episode.error ? { error: episode.error } : {}) },
            episode.steps.map((s, t) => ({ t, observation: s.observation, action: s.action, reward: s.reward, terminated: s.terminated, truncated: s.truncated, info: s.info, tokens: s.tokens })),
          );
          stored++;
          if (episode.success) successes++;
        }
        const line = `${start + indices.length}/${flags.episodes} episodes`;
        process.stderr.write(process.stderr.isTTY ? `\r\x1b[2K${line}` : `${line}\n`);
      }
      if (process.stderr.isTTY) process.stderr.write('\n');
      process.stderr.write(`${stored} new episodes (${successes} successful) in ${out}/trajectories.jsonl\n`);
    } finally {
      adapter?.dispose();
      model.dispose();
      env.dispose();
      await store.close();
    }
  });
}
