// rlplay serve: one environment, built-in or custom, as an OpenEnv server (src/serve), so that
// distributed RL trainers train on the very environment and reward designed in rlplay
// (docs/scale-out.md). Runs until interrupted (Ctrl-C or SIGTERM), then closes every session.
import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { BUILTIN_ENVIRONMENTS } from '../../env/builtin/index.ts';
import { resolveEnvironment } from '../../env/resolve-node.ts';
import { SERVE_DEFAULTS, serveOpenEnv } from '../../serve/server.ts';
import { parseWholeNumber } from '../parse.ts';

interface ServeFlags {
  env: string;
  port: number;
  host: string;
  maxSessions: number;
  idleTimeout: number;
  stepTimeout: number;
  maxMessageBytes: number;
  allowOrigin: string[];
}

export function registerServe(program: Command): void {
  program
    .command('serve')
    .description('serve an environment over the OpenEnv protocol (WebSocket /ws, HTTP) for TRL, verifiers/prime-rl, SkyRL and other trainers')
    .requiredOption('--env <id|file>', `a built-in environment (${[...BUILTIN_ENVIRONMENTS.keys()].join(', ')}) or a custom environment's .js/.mjs/.ts file`)
    .option('--port <n>', 'TCP port (0 picks a free one)', parseWholeNumber, SERVE_DEFAULTS.port)
    .option('--host <address>', 'address to listen on (0.0.0.0 for every interface, e.g. in a container)', SERVE_DEFAULTS.host)
    .option('--max-sessions <n>', 'environment instances alive at once: WebSocket sessions and HTTP /reset and /step requests together (one more is refused: CAPACITY_REACHED, HTTP 503)', parseWholeNumber, SERVE_DEFAULTS.maxSessions)
    .option('--idle-timeout <s>', 'close a session after this many seconds without a message (0: never)', parseWholeNumber, SERVE_DEFAULTS.idleTimeoutMs / 1000)
    .option('--step-timeout <ms>', 'time limit of each environment call; past it the session gets EXECUTION_ERROR', parseWholeNumber, 5000)
    .option('--max-message-bytes <n>', 'largest message or request body accepted', parseWholeNumber, SERVE_DEFAULTS.maxMessageBytes)
    .option('--allow-origin <origin>', "a web page's origin (e.g. http://localhost:5173) whose requests are accepted, or '*' for any; repeat for more. Requests from other pages are refused (403); trainers and curl send no Origin and pass", (origin: string, previous: string[]) => [...previous, origin], [] as string[])
    .action(async (flags: ServeFlags) => {
      if (flags.port > 65535) throw new Error(`--port must be at most 65535, got ${flags.port}`);
      if (flags.maxSessions < 1) throw new Error('--max-sessions must be at least 1');
      if (flags.maxMessageBytes < 1024) throw new Error('--max-message-bytes must be at least 1024');
      const env = await resolveEnvironment(flags.env, { stepTimeoutMs: flags.stepTimeout });
      const { version } = JSON.parse(await readFile(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
      let server;
      try {
        server = await serveOpenEnv(env, {
          port: flags.port,
          host: flags.host,
          maxSessions: flags.maxSessions,
          idleTimeoutMs: flags.idleTimeout * 1000,
          maxMessageBytes: flags.maxMessageBytes,
          allowOrigins: flags.allowOrigin,
          version,
        });
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
