// Who may reach `rlplay serve`: web pages of other origins are refused unless allowed (a page the
// user visits could otherwise drive a server on 127.0.0.1), POST bodies must be JSON (so no
// "simple" cross-site request gets through), and HTTP /reset and /step share --max-sessions with
// the WebSocket sessions, so parallel requests cannot make instances past it.
import WebSocket from 'ws';
import { afterEach, describe, expect, test } from 'vitest';
import type { EnvModule } from '../../src/env/types.ts';
import { serveOpenEnv, type OpenEnvServer } from '../../src/serve/server.ts';
import { rlplay } from '../support/cli.ts';

/** An environment whose reset waits until `release()`, counting the instances alive. */
function gatedEnvironment() {
  let alive = 0;
  let most = 0;
  let made = 0;
  let open!: () => void;
  const gate = new Promise<void>((resolve) => (open = resolve));
  const module: EnvModule = {
    id: 'gated',
    description: 'waits at reset',
    maxEpisodeSteps: 2,
    make: () => {
      made++;
      most = Math.max(most, ++alive);
      return {
        reset: async () => {
          await gate;
          return { observation: 'ready', info: {} };
        },
        step: () => ({ observation: 'done', reward: 1, terminated: true, truncated: false, info: {} }),
        close: () => void alive--,
      };
    },
  };
  return { module, release: open, counts: () => ({ made, most, alive }) };
}

let server: OpenEnvServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const json = { 'content-type': 'application/json' };

describe('rlplay serve settings', () => {
  test('a value out of range is refused with what is allowed, by serveOpenEnv and by the command line; --help shows every setting', async () => {
    const { module } = gatedEnvironment();
    await expect(serveOpenEnv(module, { port: 0, version: 'test', maxSessions: 0 })).rejects.toThrow('rlplay serve setting maxSessions must be an integer ≥ 1 (got 0): set maxSessions=1 or more');
    const refused = await rlplay('serve', '--env', 'tool-use', '--max-message-bytes', '10');
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain("option '--max-message-bytes <n>' argument '10' is invalid. it must be an integer ≥ 1024.");
    const tooLittle = await rlplay('serve', '--env', 'tool-use', '--max-memory-mb', '8');
    expect(tooLittle.stderr).toContain("option '--max-memory-mb <mb>' argument '8' is invalid. it must be an integer ≥ 32.");
    const help = await rlplay('serve', '--help');
    for (const flag of ['--port <n>', '--host <address>', '--max-sessions <n>', '--idle-timeout <s>', '--step-timeout <ms>', '--max-memory-mb <mb>', '--max-message-bytes <n>', '--allow-origin <origin>']) expect(help.stdout).toContain(flag);
    expect(help.stdout).toContain('(default: 256)');
  });
});

describe('rlplay serve access', () => {
  test('a request or WebSocket from a foreign web page is refused with 403 naming --allow-origin; no Origin, the own origin and allowed ones pass', async () => {
    const { module, release } = gatedEnvironment();
    release();
    server = await serveOpenEnv(module, { port: 0, version: 'test', allowOrigin: ['http://localhost:5173'] });
    const foreign = await fetch(`${server.url}/reset`, { method: 'POST', headers: { ...json, origin: 'https://evil.example' }, body: '{}' });
    expect(foreign.status).toBe(403);
    expect((await foreign.json()).detail).toContain('--allow-origin https://evil.example');
    for (const headers of [json, { ...json, origin: 'http://localhost:5173' }, { ...json, origin: server.url }]) {
      expect((await fetch(`${server.url}/reset`, { method: 'POST', headers, body: '{}' })).status).toBe(200);
    }
    const refused = await new Promise<number>((resolve) => {
      const ws = new WebSocket(`${server!.url.replace('http', 'ws')}/ws`, { origin: 'https://evil.example' });
      ws.on('unexpected-response', (_request, response) => resolve(response.statusCode ?? 0));
      ws.on('open', () => resolve(101));
      ws.on('error', () => {});
    });
    expect(refused).toBe(403);
    const allowed = new WebSocket(`${server.url.replace('http', 'ws')}/ws`, { origin: 'http://localhost:5173' });
    await new Promise<void>((resolve, reject) => allowed.once('open', () => resolve()).once('error', reject));
    allowed.close();
  });

  test("'*' allows every origin", async () => {
    const { module, release } = gatedEnvironment();
    release();
    server = await serveOpenEnv(module, { port: 0, version: 'test', allowOrigin: ['*'] });
    expect((await fetch(`${server.url}/reset`, { method: 'POST', headers: { ...json, origin: 'https://any.example' }, body: '{}' })).status).toBe(200);
  });

  test('a POST body that is not JSON (text/plain, a form) is refused with 415 before any instance is made', async () => {
    const { module, release, counts } = gatedEnvironment();
    release();
    server = await serveOpenEnv(module, { port: 0, version: 'test' });
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
      const response = await fetch(`${server.url}/reset`, { method: 'POST', headers: { 'content-type': type }, body: '{"seed":3}' });
      expect(response.status, type).toBe(415);
      expect((await response.json()).detail).toContain('Content-Type: application/json');
    }
    expect(counts().made).toBe(0);
    expect((await fetch(`${server.url}/reset`, { method: 'POST', headers: { 'content-type': 'application/json; charset=utf-8' }, body: '{"seed":3}' })).status).toBe(200);
  });

  test('HTTP /reset and /step share --max-sessions with the WebSocket sessions: past it 503 with Retry-After, never another instance', async () => {
    const { module, release, counts } = gatedEnvironment();
    server = await serveOpenEnv(module, { port: 0, version: 'test', maxSessions: 2 });
    const ws = new WebSocket(`${server.url.replace('http', 'ws')}/ws`);
    await new Promise<void>((resolve, reject) => ws.once('open', () => resolve()).once('error', reject));
    while (counts().made < 1) await new Promise((resolve) => setTimeout(resolve, 5));
    const requests = Array.from({ length: 8 }, (_, i) =>
      fetch(`${server!.url}/${i % 2 ? 'step' : 'reset'}`, { method: 'POST', headers: json, body: JSON.stringify({ seed: i, action: { action: 'go' } }) }),
    );
    // The refused requests are answered while the one admitted waits at its reset.
    const refused: Response[] = [];
    while (refused.length < 7) {
      const settled = await Promise.race(requests.filter((r) => !refused.some((x) => (x as unknown as { r: unknown }).r === r)).map((r) => r.then((response) => Object.assign(response, { r }))));
      expect(settled.status).toBe(503);
      refused.push(settled);
    }
    for (const response of refused) {
      expect(response.headers.get('retry-after')).toBe('1');
      expect((await response.json()).detail).toContain('--max-sessions');
    }
    release();
    const statuses = (await Promise.all(requests)).map((r) => r.status).sort();
    expect(statuses).toEqual([200, 503, 503, 503, 503, 503, 503, 503]);
    expect(counts().most).toBe(2);
    expect(counts().made).toBe(2);
    ws.close();
  });
});
