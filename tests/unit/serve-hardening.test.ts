// `rlplay serve` against hostile input: a bad WebSocket frame closes its own session with the
// RFC 6455 code and never the process; a request body over the limit is answered 413 and the
// connection is closed cleanly. The server runs as the real command, in its own process.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { GenericEnvClient, playOverWire } from '../support/openenv-client.ts';

const CLI = join(import.meta.dirname, '../../bin/rlplay.js');
const MAX_MESSAGE_BYTES = 1024;

let child: ChildProcess;
let url: string;
let exited: number | null | undefined;

beforeAll(async () => {
  child = spawn(process.execPath, [CLI, 'serve', '--env', 'tool-use', '--port', '0', '--max-message-bytes', String(MAX_MESSAGE_BYTES)], { stdio: ['ignore', 'ignore', 'pipe'] });
  child.on('exit', (code) => (exited = code));
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const deadline = Date.now() + 60_000;
  while (!/on (http:\/\/\S+)/.test(stderr)) {
    if (Date.now() > deadline || exited !== undefined) throw new Error(`rlplay serve did not start: ${stderr}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  url = /on (http:\/\/\S+)/.exec(stderr)![1];
}, 70_000);

afterAll(() => {
  child.kill('SIGTERM');
});

/** A raw TCP connection that has completed the WebSocket handshake on /ws. */
async function rawWebSocket(): Promise<Socket> {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  socket.write(
    `GET /ws HTTP/1.1\r\nHost: ${hostname}:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
      `Sec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
  );
  let head = '';
  await new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      head += chunk.toString('latin1');
      if (head.includes('\r\n\r\n')) {
        socket.off('data', onData);
        if (!head.startsWith('HTTP/1.1 101')) reject(new Error(`no upgrade: ${head}`));
        else resolve();
      }
    };
    socket.on('data', onData);
  });
  return socket;
}

/** A client frame: FIN set, the given first-byte flags and opcode, masked unless told otherwise. */
function frame(payload: Buffer, { firstByte = 0x81, masked = true } = {}): Buffer {
  const mask = randomBytes(4);
  const body = masked ? Buffer.from(payload.map((byte, i) => byte ^ mask[i % 4])) : payload;
  return Buffer.concat([Buffer.from([firstByte, (masked ? 0x80 : 0) | payload.length]), masked ? mask : Buffer.alloc(0), body]);
}

/** Sends `bytes` and reads until the server ends the connection: the close code of its close frame, and whether the end was clean (no reset). */
async function closeCodeAfter(bytes: Buffer): Promise<{ code: number | null; reset: boolean }> {
  const socket = await rawWebSocket();
  const chunks: Buffer[] = [];
  let reset = false;
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  socket.on('error', () => (reset = true));
  const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.write(bytes);
  await ended;
  const data = Buffer.concat(chunks);
  // The server's close frame: 0x88, a length below 126, then the two-byte code.
  const at = data.indexOf(0x88);
  return { code: at >= 0 && data.length >= at + 4 ? data.readUInt16BE(at + 2) : null, reset };
}

describe('a bad WebSocket frame closes only its own session', () => {
  test('unmasked (1002), RSV1 set (1002), invalid UTF-8 (1007), over 4 × --max-message-bytes (1009); the process, /health and another session go on', async () => {
    const healthy = await GenericEnvClient.connect(url);
    await healthy.reset({ seed: 1 });

    expect((await closeCodeAfter(frame(Buffer.from('{"type":"state"}'), { masked: false }))).code).toBe(1002);
    expect((await closeCodeAfter(frame(Buffer.from('{"type":"state"}'), { firstByte: 0xc1 }))).code).toBe(1002);
    expect((await closeCodeAfter(frame(Buffer.from([0x7b, 0xff, 0xfe, 0x7d])))).code).toBe(1007);

    const big = new WebSocket(`${url.replace(/^http/, 'ws')}/ws`);
    big.on('error', () => {});
    const closed = new Promise<number>((resolve) => big.on('close', (code) => resolve(code)));
    big.on('open', () => big.send('z'.repeat(4 * MAX_MESSAGE_BYTES + 1)));
    expect(await closed).toBe(1009);

    expect(exited).toBeUndefined();
    expect(await (await fetch(`${url}/health`)).json()).toEqual({ status: 'healthy' });
    const episode = await playOverWire(healthy, 2, {});
    expect(episode.actions.length).toBeGreaterThan(0);
    await healthy.close();
  }, 60_000);
});

describe('a body over --max-message-bytes', () => {
  test('is answered 413 with Connection: close, and the connection ends cleanly', async () => {
    const { hostname, port } = new URL(url);
    const socket = connect(Number(port), hostname);
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    const chunks: Buffer[] = [];
    let reset = false;
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', () => (reset = true));
    const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    const body = JSON.stringify({ seed: 1, options: { pad: 'x'.repeat(8 * MAX_MESSAGE_BYTES) } });
    socket.write(`POST /reset HTTP/1.1\r\nHost: ${hostname}:${port}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`);
    // The rest of the body follows in pieces, as a slow client sends it, while the server answers.
    for (let i = 0; i < body.length; i += 1000) {
      if (socket.destroyed) break;
      socket.write(body.slice(i, i + 1000));
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    await ended;
    const answer = Buffer.concat(chunks).toString('utf8');
    expect(answer).toMatch(/^HTTP\/1\.1 413/);
    expect(answer.toLowerCase()).toContain('connection: close');
    expect(answer).toContain('--max-message-bytes');
    expect(reset).toBe(false);
    expect(await (await fetch(`${url}/health`)).json()).toEqual({ status: 'healthy' });
  }, 30_000);
});
