// rlplay serve: one environment, built-in or custom, as an OpenEnv server (src/serve), so that
// distributed RL trainers train on the very environment and reward designed in rlplay
// (docs/scale-out.md). Runs until interrupted (Ctrl-C or SIGTERM), then closes every session.
import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { BUILTIN_ENVIRONMENTS } from '../../env/builtin/index.ts';
import { resolveEnvironment } from '../../env/resolve-node.ts';
import { serveOpenEnv } from '../../serve/server.ts';
import { SERVE_SETTINGS, type ServeSettings } from '../../serve/settings.ts';
import { addSettingOptions } from '../setting-options.ts';

type ServeFlags = ServeSettings & { env: string };

export function registerServe(program: Command): void {
  const command = program
    .command('serve')
    .description('serve an environment over the OpenEnv protocol (WebSocket /ws, HTTP) for TRL, verifiers/prime-rl, SkyRL and other trainers')
    .requiredOption('--env <id|file>', `a built-in environment (${[...BUILTIN_ENVIRONMENTS.keys()].join(', ')}) or a custom environment's .js/.mjs/.ts file`);
  addSettingOptions(command, SERVE_SETTINGS);
  command.action(async (flags: ServeFlags) => {
    const env = await resolveEnvironment(flags.env, { stepTimeoutMs: flags.stepTimeout, maxMemoryMb: flags.maxMemoryMb });
    const { version } = JSON.parse(await readFile(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
    let server;
    try {
      const { env: _location, ...settings } = flags;
      server = await serveOpenEnv(env, { ...settings, version });
    } catch (error) {
      await env.dispose();
      throw error;
    }
    const ws = server.url.replace(/^http/, 'ws');
    process.stderr.write(
      `rlplay serve: ${env.id} (${env.builtin ? 'built-in' : flags.env}) on ${server.url}\n` +
        `  sessions: ${ws}/ws (up to ${flags.maxSessions}); HTTP: /health /metadata /schema /openapi.json /reset /step /state /mcp\n` +
        '  Ctrl-C stops it\n',
    );
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
    process.stderr.write('rlplay serve: closing sessions\n');
    await server.close();
    await env.dispose();
  });
}
