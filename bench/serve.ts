// npm run bench:serve -- [--envs a,b] [--sessions N] [--episodes-per-session E] [--difficulty D]
//
// `rlplay serve` under load on loopback: the server runs as its own process (as a trainer would
// reach it); N clients connect at once, each sending what OpenEnv's GenericEnvClient sends, and
// play E full episodes back to back with a seeded random agent over the valid actions. Every
// episode is then replayed in-process with the same seed and actions: "lost" counts episodes that
// never came back, "mixed" those that differ from their in-process twin. One row per environment.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { BUILTIN_ENVIRONMENTS } from '../src/env/builtin/index.ts';
import { guardEnvModule } from '../src/env/guard.ts';
import { percentile, playInProcess, runOpenEnvLoad } from '../tests/support/openenv-client.ts';

const { values } = parseArgs({
  options: {
    envs: { type: 'string', default: [...BUILTIN_ENVIRONMENTS.keys()].join(',') },
    sessions: { type: 'string', default: '256' },
    'episodes-per-session': { type: 'string', default: '4' },
    difficulty: { type: 'string', default: '2' },
  },
});
const sessions = Number(values.sessions);
const episodesPerSession = Number(values['episodes-per-session']);
const options = { split: 'test', difficulty: Number(values.difficulty) };
const CLI = join(import.meta.dirname, '../bin/rlplay.js');

/** Starts `rlplay serve` on a free port and returns its URL and a stop function. */
async function startServer(env: string): Promise<{ url: string; stop(): Promise<void> }> {
  const child = spawn(process.execPath, [CLI, 'serve', '--env', env, '--port', '0', '--max-sessions', String(sessions)], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const url = await new Promise<string>((resolve, reject) => {
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      const match = /on (http:\/\/\S+)/.exec(stderr);
      if (match) resolve(match[1]);
    });
    child.on('exit', (code) => reject(new Error(`rlplay serve exited with ${code}: ${stderr}`)));
  });
  return {
    url,
    stop: () =>
      new Promise((resolve) => {
        child.removeAllListeners('exit');
        child.on('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

const rows: string[][] = [];
for (const id of values.envs!.split(',')) {
  const module = BUILTIN_ENVIRONMENTS.get(id);
  if (!module) throw new Error(`unknown environment ${id}; built-ins: ${[...BUILTIN_ENVIRONMENTS.keys()].join(', ')}`);
  const server = await startServer(id);
  const load = await runOpenEnvLoad(server.url, { sessions, episodesPerSession, firstSeed: 0, options });
  await server.stop();
  const expected = sessions * episodesPerSession;
  const bySeed = new Map(load.records.map((r) => [r.seed, r]));
  let mixed = 0;
  const local = guardEnvModule(module);
  for (const [seed, record] of bySeed) if (JSON.stringify(record) !== JSON.stringify(await playInProcess(local, seed, options))) mixed++;
  const steps = load.stepMs.length;
  rows.push([
    id,
    String(load.sessions),
    String(load.records.length),
    (load.records.length / load.seconds).toFixed(0),
    (steps / load.seconds).toFixed(0),
    percentile(load.stepMs, 50).toFixed(1),
    percentile(load.stepMs, 99).toFixed(1),
    String(expected - bySeed.size),
    String(mixed),
  ]);
  process.stderr.write(`${id}: done\n`);
}

const header = ['environment', 'sessions', 'episodes', 'episodes/s', 'steps/s', 'p50 step ms', 'p99 step ms', 'lost', 'mixed'];
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
console.log(`rlplay serve on loopback (its own process), ${sessions} concurrent sessions x ${episodesPerSession} episodes each, ${options.split} split, difficulty ${options.difficulty}, seeded random agent over the valid actions`);
console.log(line(header));
for (const row of rows) console.log(line(row));
