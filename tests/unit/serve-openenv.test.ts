// `rlplay serve`: rlplay environments over the OpenEnv protocol. A client that sends exactly what
// OpenEnv's GenericEnvClient sends (tests/support/openenv-client.ts) plays every built-in and a
// custom environment over the wire, and each episode must equal the same seed and actions played
// in-process; then every error code, the HTTP side, a misbehaving custom environment next to a
// healthy session, a load of 256 concurrent sessions, and the command itself.
import { spawn } from 'node:child_process';
import { join, relative } from 'node:path';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { BUILTIN_ENVIRONMENTS } from '../../src/env/builtin/index.ts';
import { resolveEnvironment, type ResolvedEnvironment } from '../../src/env/resolve-node.ts';
import { serveOpenEnv, type OpenEnvServer, type ServeOptions } from '../../src/serve/server.ts';
import { GenericEnvClient, playInProcess, playOverWire, runOpenEnvLoad, ServerError } from '../support/openenv-client.ts';

const FIXTURES = join(import.meta.dirname, '../fixtures/envs');
const fixture = (name: string) => relative(process.cwd(), join(FIXTURES, name));
const CLI = join(import.meta.dirname, '../../bin/rlplay.js');
const VERSION = 'test';

async function serve(spec: string, options: Partial<ServeOptions> = {}, stepTimeoutMs?: number): Promise<{ env: ResolvedEnvironment; server: OpenEnvServer; stop(): Promise<void> }> {
  const env = await resolveEnvironment(spec, { stepTimeoutMs });
  const server = await serveOpenEnv(env, { port: 0, version: VERSION, ...options });
  return {
    env,
    server,
    async stop() {
      await server.close();
      await env.dispose();
    },
  };
}

/** The ServerError a promise rejects with. */
async function serverError(call: Promise<unknown>): Promise<ServerError> {
  try {
    await call;
  } catch (error) {
    if (error instanceof ServerError) return error;
    throw error;
  }
  throw new Error('expected a server error, but the call succeeded');
}

async function until(condition: () => boolean, what: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe('GenericEnvClient against every built-in environment', () => {
  for (const id of BUILTIN_ENVIRONMENTS.keys()) {
    test(`${id}: reset, steps to the end, state and close give the in-process episode`, async () => {
      const { env, server, stop } = await serve(id);
      try {
        const client = await GenericEnvClient.connect(server.url);
        const first = await client.reset({ seed: 5, options: { split: 'test', difficulty: 2 }, episode_id: 'episode-001' });
        expect(first.reward).toBeNull();
        expect(first.done).toBe(false);
        expect(first.observation).toMatchObject({ terminated: false, truncated: false });
        expect(typeof first.observation.text).toBe('string');
        expect(first.observation.valid_actions!.length).toBeGreaterThan(0);
        expect(await client.state()).toEqual({ episode_id: 'episode-001', step_count: 0, seed: 5 });

        for (const seed of [5, 6, 7]) {
          const wire = await playOverWire(client, seed, { split: 'test', difficulty: 2 });
          expect(wire).toEqual(await playInProcess(env, seed, { split: 'test', difficulty: 2 }));
          const state = await client.state();
          expect(state.step_count).toBe(wire.actions.length);
          expect(state.seed).toBe(seed);
          expect(typeof state.episode_id).toBe('string');
        }
        expect(server.activeSessions()).toBe(1);
        await client.close();
        await until(() => server.activeSessions() === 0, 'the session is closed');
      } finally {
        await stop();
      }
    });
  }

  test('a custom environment from a file (in workers) plays the same as in-process', async () => {
    const { env, server, stop } = await serve(fixture('word-guess.js'));
    try {
      const client = await GenericEnvClient.connect(server.url);
      for (const seed of [1, 2, 3]) expect(await playOverWire(client, seed, {})).toEqual(await playInProcess(env, seed, {}));
      await client.close();
    } finally {
      await stop();
    }
  });
});

describe('errors on the session channel', () => {
  let served: Awaited<ReturnType<typeof serve>>;
  beforeAll(async () => {
    served = await serve('reasoning', { maxMessageBytes: 4096 });
  });
  afterAll(() => served.stop());

  test('each malformed message gets its code and the session goes on', async () => {
    const client = await GenericEnvClient.connect(served.server.url);
    const code = async (text: string | Buffer) => {
      const reply = await client.sendRaw(text);
      expect(reply?.type).toBe('error');
      return reply!.data as { code: string; message: string };
    };
    expect((await code('{"type": "reset"')).code).toBe('INVALID_JSON');
    expect(await code('{"type": "jump", "data": {}}')).toMatchObject({ code: 'UNKNOWN_TYPE', message: expect.stringContaining('jump') });
    expect((await code('{"data": {}}')).code).toBe('UNKNOWN_TYPE');
    expect((await code('[1, 2]')).code).toBe('VALIDATION_ERROR');
    expect(await code('{"type": "step", "data": {"action": "guess 1"}}')).toMatchObject({ code: 'VALIDATION_ERROR', message: expect.stringContaining('reset') });
    expect((await code('{"type": "reset", "data": {"seed": -1}}')).code).toBe('VALIDATION_ERROR');
    expect((await code('{"type": "reset", "data": {"seed": 1}, "extra": true}')).code).toBe('VALIDATION_ERROR');
    expect(await code(JSON.stringify({ type: 'step', data: { action: 'x'.repeat(5000) } }))).toMatchObject({ code: 'VALIDATION_ERROR', message: expect.stringContaining('4096') });
    expect((await code(Buffer.from('{"type": "state"}'))).code).toBe('VALIDATION_ERROR'); // a binary frame, not text

    await client.reset({ seed: 3 });
    expect((await serverError(client.step({ action: ['guess 1'] }))).code).toBe('VALIDATION_ERROR');
    expect((await serverError(client.step({ action: null }))).code).toBe('VALIDATION_ERROR');
    expect((await serverError(client.step({ actoin: 'x' }))).code).toBe('VALIDATION_ERROR');
    // Play to the end; a step after done is refused, and a reset starts over.
    const episode = await playOverWire(client, 3, {});
    const late = await serverError(client.step({ action: episode.actions[0] }));
    expect(late.code).toBe('VALIDATION_ERROR');
    expect(late.serverMessage).toContain('episode is over');
    expect((await client.reset({ seed: 4 })).done).toBe(false);
    // A bare number (a client that JSON-parses the model's reply) is taken as its text.
    await client.step({ action: 5 });
    expect((await client.state()).step_count).toBe(1);

    const mcp = await client.sendRaw(JSON.stringify({ type: 'mcp', data: { jsonrpc: '2.0', id: 9, method: 'tools/list' } }));
    expect(mcp).toEqual({ type: 'mcp', data: { jsonrpc: '2.0', id: 9, error: { code: -32601, message: expect.stringContaining('tools/list') } } });
    await client.close();
  });

  test('capacity: one session more than --max-sessions is refused with CAPACITY_REACHED', async () => {
    const { server, stop } = await serve('tool-use', { maxSessions: 2 });
    try {
      const [a, b] = await Promise.all([GenericEnvClient.connect(server.url), GenericEnvClient.connect(server.url)]);
      await until(() => server.activeSessions() === 2, 'both sessions are open');
      const third = await GenericEnvClient.connect(server.url);
      const refusal = await third.receive();
      expect(refusal).toMatchObject({ type: 'error', data: { code: 'CAPACITY_REACHED' } });
      await until(() => third.closed !== null, 'the refused connection is closed');
      expect(third.closed?.code).toBe(4000);
      await a.close();
      await until(() => server.activeSessions() === 1, 'a slot is free');
      const fourth = await GenericEnvClient.connect(server.url);
      expect((await fourth.reset({ seed: 1 })).done).toBe(false);
      await Promise.all([b.close(), fourth.close()]);
    } finally {
      await stop();
    }
  });

  test('an idle session is closed with SESSION_ERROR', async () => {
    const { server, stop } = await serve('tool-use', { idleTimeout: 0.3 });
    try {
      const client = await GenericEnvClient.connect(server.url);
      await client.reset({ seed: 1 });
      expect(await client.receive()).toMatchObject({ type: 'error', data: { code: 'SESSION_ERROR', message: expect.stringContaining('idle') } });
      await until(() => client.closed !== null, 'the connection is closed');
      expect(client.closed?.code).toBe(4001);
      await until(() => server.activeSessions() === 0, 'the session is gone');
    } finally {
      await stop();
    }
  });

  test('a module whose make() throws: FACTORY_ERROR, and the server stays up', async () => {
    const { server, stop } = await serve(fixture('make-throws.js'));
    try {
      const client = await GenericEnvClient.connect(server.url);
      const reply = await client.receive();
      expect(reply).toMatchObject({ type: 'error', data: { code: 'FACTORY_ERROR', message: expect.stringContaining('licence server is unreachable') } });
      await until(() => client.closed !== null, 'the connection is closed');
      expect(await (await fetch(`${server.url}/health`)).json()).toEqual({ status: 'healthy' });
      await until(() => server.activeSessions() === 0, 'the slot is free');
    } finally {
      await stop();
    }
  });
});

describe('a custom environment that throws, hangs and returns NaN', () => {
  test('each failing session gets EXECUTION_ERROR and recovers on reset; a healthy session plays on; the server stays up', async () => {
    const { env, server, stop } = await serve(fixture('faulty.js'), {}, 400);
    try {
      const healthy = await GenericEnvClient.connect(server.url);
      const healthyEpisode = (async () => {
        const episodes = [];
        for (let seed = 100; seed < 104; seed++) episodes.push(await playOverWire(healthy, seed, {}));
        return episodes;
      })();
      const faults = ['throw', 'nan', 'loop', 'async-loop', 'crash', 'missing', 'uncloneable'] as const;
      const failures = await Promise.all(
        faults.map(async (fault) => {
          const client = await GenericEnvClient.connect(server.url);
          await client.reset({ seed: 1, options: { fault, at: 2 } });
          await client.step({ action: 'up' });
          const error = await serverError(client.step({ action: 'up' }));
          // The episode is over after a failure; the next reset (without the fault) plays normally.
          expect((await serverError(client.step({ action: 'up' }))).code).toBe('VALIDATION_ERROR');
          await client.reset({ seed: 2 });
          expect((await client.step({ action: 'down' })).reward).toBe(0.1);
          await client.close();
          return [fault, error] as const;
        }),
      );
      const byFault = Object.fromEntries(failures);
      for (const [, error] of failures) expect(error.code).toBe('EXECUTION_ERROR');
      expect(byFault.throw.serverMessage).toContain('the counter overflowed');
      expect(byFault.nan.serverMessage).toContain('NaN');
      expect(byFault.loop.serverMessage).toMatch(/400 ?ms/);
      expect(byFault['async-loop'].serverMessage).toMatch(/400 ?ms/);
      expect(byFault.crash.serverMessage).toContain('a timer blew up');
      expect(byFault.missing.serverMessage).toContain('reward');
      // The healthy session saw nothing of it.
      const played = await healthyEpisode;
      for (const episode of played) expect(episode).toEqual(await playInProcess(env, episode.seed, {}));
      await healthy.close();
      expect(await (await fetch(`${server.url}/health`)).json()).toEqual({ status: 'healthy' });
    } finally {
      await stop();
    }
  });
});

describe('HTTP', () => {
  let served: Awaited<ReturnType<typeof serve>>;
  beforeAll(async () => {
    served = await serve('tool-use', { maxMessageBytes: 2048 });
  });
  afterAll(() => served.stop());
  const get = (path: string) => fetch(`${served.server.url}${path}`);
  const post = (path: string, body: unknown) => fetch(`${served.server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });

  test('health, metadata, schema, openapi.json and the stateless state', async () => {
    expect(await (await get('/health')).json()).toEqual({ status: 'healthy' });
    expect(await (await get('/metadata')).json()).toMatchObject({ name: 'tool-use', description: BUILTIN_ENVIRONMENTS.get('tool-use')!.description, version: VERSION });
    const schema = await (await get('/schema')).json();
    expect(schema.action).toEqual({ type: 'object', properties: { action: { type: 'string' } }, required: ['action'] });
    expect(schema.observation.required).toEqual(['text', 'valid_actions', 'terminated', 'truncated', 'info']);
    expect(schema.state.properties).toHaveProperty('step_count');
    const openapi = await (await get('/openapi.json')).json();
    expect(openapi.info.version).toBe(VERSION);
    expect(Object.keys(openapi.paths)).toEqual(expect.arrayContaining(['/health', '/metadata', '/schema', '/reset', '/step', '/state', '/mcp']));
    expect(await (await get('/state')).json()).toEqual({ episode_id: null, step_count: 0, seed: null });
  });

  test('POST /reset and POST /step (a fresh instance each) match the in-process environment', async () => {
    const env = served.env;
    const reset = await (await post('/reset', { seed: 11, options: { split: 'test' } })).json();
    const local = await playInProcess(env, 11, { split: 'test' });
    expect(reset).toMatchObject({ reward: null, done: false, observation: { text: local.observations[0] } });
    const step = await (await post('/step', { seed: 11, options: { split: 'test' }, action: { action: local.actions[0] } })).json();
    expect(step).toMatchObject({ reward: local.rewards[0], observation: { text: local.observations[1] } });
  });

  test('bad requests: 404, 405, 413, 422 with a detail; JSON-RPC errors on /mcp', async () => {
    expect((await get('/nope')).status).toBe(404);
    expect((await post('/health', {})).status).toBe(405);
    expect((await get('/reset')).status).toBe(405);
    const tooBig = await post('/reset', { seed: 1, options: { pad: 'x'.repeat(4000) } });
    expect(tooBig.status).toBe(413);
    expect((await tooBig.json()).detail).toContain('2048');
    const badJson = await post('/reset', '{"seed":');
    expect(badJson.status).toBe(422);
    expect((await badJson.json()).detail).toContain('Invalid JSON');
    expect((await post('/reset', { seed: 'one' })).status).toBe(422);
    const badStep = await post('/step', { action: 'answer: 3' });
    expect(badStep.status).toBe(422);
    expect((await badStep.json()).detail).toContain('{"action": {"action"');
    expect(await (await post('/mcp', { jsonrpc: '2.0', id: 'a', method: 'tools/call', params: {} })).json()).toEqual({ jsonrpc: '2.0', id: 'a', error: { code: -32601, message: expect.stringContaining('tools/call') } });
    expect((await (await post('/mcp', '{oops')).json()).error.code).toBe(-32700);
    expect((await (await post('/mcp', { id: 1 })).json()).error.code).toBe(-32600);
  });

  test('only /ws upgrades to a WebSocket', async () => {
    const ws = new WebSocket(`${served.server.url.replace('http', 'ws')}/elsewhere`);
    const failure = await new Promise<Error>((resolve) => ws.once('error', resolve));
    expect(failure.message).toContain('404');
  });
});

describe('load', () => {
  test('256 concurrent sessions play full episodes: every episode arrives, each equal to its seed in-process', async () => {
    const { env, server, stop } = await serve('tool-use');
    try {
      const options = { split: 'test', difficulty: 2 };
      const load = await runOpenEnvLoad(server.url, { sessions: 256, episodesPerSession: 2, firstSeed: 0, options });
      expect(load.records.map((r) => r.seed).sort((a, b) => a - b)).toEqual(Array.from({ length: 512 }, (_, i) => i));
      for (const record of load.records) expect(record).toEqual(await playInProcess(env, record.seed, options));
      await until(() => server.activeSessions() === 0, 'every session is closed');
    } finally {
      await stop();
    }
  }, 180_000);
});

describe('rlplay serve', () => {
  test('serves until SIGTERM, and a taken port is a clear error', async () => {
    const child = spawn(process.execPath, [CLI, 'serve', '--env', 'reasoning', '--port', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    try {
      await until(() => /on (http:\/\/\S+)/.test(stderr), 'the server prints its address', 60_000);
      const url = /on (http:\/\/\S+)/.exec(stderr)![1];
      expect(await (await fetch(`${url}/health`)).json()).toEqual({ status: 'healthy' });
      const client = await GenericEnvClient.connect(url);
      expect((await client.reset({ seed: 1 })).observation.valid_actions!.length).toBeGreaterThan(0);
      await client.close();

      const port = new URL(url).port;
      const second = spawn(process.execPath, [CLI, 'serve', '--env', 'reasoning', '--port', port], { stdio: ['ignore', 'ignore', 'pipe'] });
      let secondErr = '';
      second.stderr.on('data', (chunk: Buffer) => (secondErr += chunk.toString()));
      const secondCode = await new Promise<number | null>((resolve) => second.on('exit', resolve));
      expect(secondCode).toBe(1);
      expect(secondErr).toContain(`port ${port} on 127.0.0.1 is already in use`);
    } finally {
      child.kill('SIGTERM');
    }
    const code = await new Promise<number | null>((resolve) => (child.exitCode !== null ? resolve(child.exitCode) : child.on('exit', resolve)));
    expect(code).toBe(0);
    expect(stderr).toContain('closing sessions');
  }, 120_000);
});
