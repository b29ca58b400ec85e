// `rlplay serve`: one environment over the OpenEnv protocol (openenv.ts), so that distributed RL
// trainers that speak it (TRL, verifiers/prime-rl, SkyRL, Unsloth) train on the very environment
// and reward designed in rlplay. WebSocket /ws is the session channel (one connection = one
// instance); HTTP gives health, metadata, schemas, the OpenAPI document, stateless reset/step/state
// and a JSON-RPC /mcp. The WebSocket protocol itself is the `ws` library's.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import { checkSettings } from '../common/settings.ts';
import type { EnvModule } from '../env/types.ts';
import {
  ACTION_SCHEMA,
  answerJsonRpc,
  errorMessage,
  OBSERVATION_SCHEMA,
  OpenEnvError,
  OpenEnvSession,
  openApiDocument,
  parseAction,
  parseResetRequest,
  STATE_SCHEMA,
  type OutgoingMessage,
} from './openenv.ts';
import { SERVE_DEFAULTS, SERVE_SETTINGS, type ServeSettings } from './settings.ts';

/**
 * The settings (SERVE_SETTINGS: each one's meaning, default and range) to change, and rlplay's
 * version for /metadata and /openapi.json. stepTimeout applies where the environment is loaded
 * (resolveEnvironment); the server only checks it.
 */
export type ServeOptions = Partial<ServeSettings> & { version: string };

/** WebSocket close codes: normal, and the application codes for a refused or idle session. */
const CLOSE_NORMAL = 1000;
const CLOSE_REFUSED = 4000;
const CLOSE_IDLE = 4001;

export interface OpenEnvServer {
  /** http://host:port */
  readonly url: string;
  readonly port: number;
  /** Sessions open now. */
  activeSessions(): number;
  /** Stops accepting, closes every session (and its instance), then the server. */
  close(): Promise<void>;
}

/** Serves `module` until close(); fails if the port cannot be bound (with the port in the message). */
export async function serveOpenEnv(module: EnvModule, options: ServeOptions): Promise<OpenEnvServer> {
  const { version, ...overrides } = options;
  checkSettings('rlplay serve', SERVE_SETTINGS, withoutUndefined(overrides));
  const settings = { ...SERVE_DEFAULTS, ...withoutUndefined(overrides), version };
  const sessions = new Set<OpenEnvSession>();
  const sockets = new Set<WebSocket>();
  /** Each connection's handling, until its instance is closed: close() waits for all of them. */
  const handling = new Set<Promise<void>>();
  let closing = false;

  const capacity: Capacity = {
    take: () => {
      if (sessions.size >= settings.maxSessions) return null;
      const session = new OpenEnvSession(module);
      sessions.add(session); // the slot is held while the instance is made
      return session;
    },
    release: (session) => sessions.delete(session),
    refusal: () => `the server is at capacity (${sessions.size} of ${settings.maxSessions} environment instances, WebSocket sessions and HTTP requests together); retry later, or start it with a larger --max-sessions`,
  };
  let ownOrigins: string[] = [];
  const originAllowed = (origin: string | undefined) =>
    origin === undefined || settings.allowOrigin.includes('*') || settings.allowOrigin.includes(origin) || ownOrigins.includes(origin);
  const originRefusal = (origin: string) => `requests from the web page ${origin} are refused: start rlplay serve with --allow-origin ${origin} to allow them`;

  const http = createServer((request, response) => {
    if (!originAllowed(request.headers.origin)) return sendJson(response, 403, { detail: originRefusal(request.headers.origin!) });
    handleHttp(module, settings, capacity, request, response).catch((error: unknown) => {
      if (!response.headersSent) sendJson(response, 500, { detail: (error as Error).message });
      else response.destroy();
    });
  });
  // Bodies above the soft limit are refused with a message; ws closes a connection (1009) whose
  // message is above the hard limit without reading it.
  const wss = new WebSocketServer({ noServer: true, maxPayload: settings.maxMessageBytes * 4 });
  http.on('upgrade', (request, socket, head) => {
    // A connection reset before or during the handshake concerns this socket only.
    socket.on('error', () => socket.destroy());
    if (new URL(request.url ?? '/', 'http://x').pathname !== '/ws' || closing) {
      socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n');
      return;
    }
    if (!originAllowed(request.headers.origin)) {
      const text = originRefusal(request.headers.origin!);
      socket.end(`HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`);
      return;
    }
    wss.handleUpgrade(request, socket, head, (ws) => {
      const done = runSession(ws).finally(() => handling.delete(done));
      handling.add(done);
    });
  });

  async function runSession(ws: WebSocket): Promise<void> {
    sockets.add(ws);
    // A bad frame (unmasked, RSV1 set, invalid UTF-8, over maxPayload) is an 'error' on this socket
    // alone: ws has already closed it with the RFC 6455 code (1002, 1007, 1009), and the session
    // ends with it. Without a listener the error would end the whole process.
    ws.on('error', () => {});
    ws.on('close', () => sockets.delete(ws));
    const send = (message: OutgoingMessage) => {
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(message));
    };
    const session = capacity.take();
    if (!session) {
      send(errorMessage('CAPACITY_REACHED', capacity.refusal()));
      ws.close(CLOSE_REFUSED, 'capacity reached');
      return;
    }
    let idleTimer: NodeJS.Timeout | undefined;
    const touch = () => {
      if (settings.idleTimeout <= 0) return;
      clearTimeout(idleTimer);
      idleTimer = setTimeout(() => {
        send(errorMessage('SESSION_ERROR', `the session was idle for ${settings.idleTimeout} s and is closed; open a new connection`));
        ws.close(CLOSE_IDLE, 'idle timeout');
      }, settings.idleTimeout * 1000);
    };
    const ended = new Promise<void>((resolve) => ws.on('close', () => resolve()));
    // Messages that arrive while the instance is being made wait for it.
    const opened = session.open();
    ws.on('message', (data, isBinary) => {
      touch();
      void (async () => {
        const text = Buffer.isBuffer(data) ? data : Buffer.concat(Array.isArray(data) ? data : [Buffer.from(data)]);
        if (isBinary) return send(errorMessage('VALIDATION_ERROR', 'binary messages are not understood; send JSON text messages'));
        if (text.length > settings.maxMessageBytes) {
          return send(errorMessage('VALIDATION_ERROR', `the message has ${text.length} bytes, more than the limit of ${settings.maxMessageBytes} (--max-message-bytes)`));
        }
        try {
          await opened;
        } catch {
          return; // answered below
        }
        const reply = await session.handle(text.toString('utf8'));
        if (reply.message) send(reply.message);
        if (reply.close) ws.close(CLOSE_NORMAL);
      })();
    });
    touch();
    try {
      await opened;
    } catch (error) {
      const failure = error as OpenEnvError;
      send(errorMessage(failure.code ?? 'FACTORY_ERROR', failure.message));
      ws.close(CLOSE_REFUSED, 'factory error');
    }
    await ended;
    clearTimeout(idleTimer);
    await session.close();
    sessions.delete(session);
  }

  await new Promise<void>((resolve, reject) => {
    http.once('error', (error: NodeJS.ErrnoException) => {
      if (error.code === 'EADDRINUSE') reject(new Error(`port ${settings.port} on ${settings.host} is already in use; stop what uses it or pass another --port`));
      else if (error.code === 'EADDRNOTAVAIL') reject(new Error(`cannot listen on ${settings.host}: no such address on this machine; use 127.0.0.1, or 0.0.0.0 for every interface`));
      else reject(error);
    });
    http.listen(settings.port, settings.host, () => resolve());
  });
  const port = (http.address() as AddressInfo).port;
  const hostInUrl = settings.host.includes(':') ? `[${settings.host}]` : settings.host;
  ownOrigins = [...new Set([`http://${hostInUrl}:${port}`, `http://127.0.0.1:${port}`, `http://localhost:${port}`])];
  return {
    url: `http://${hostInUrl}:${port}`,
    port,
    activeSessions: () => sessions.size,
    async close() {
      closing = true;
      for (const ws of sockets) ws.close(1001, 'server shutting down');
      await Promise.all(handling);
      wss.close();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}

function withoutUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}

// ---------------------------------------------------------------------------------------------
// HTTP

function sendJson(response: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  response.end(text);
}

/**
 * Answers a request whose body is not read to the end (413): with `Connection: close`, and the
 * socket is ended once the answer is out, with what the client still sends read and dropped, so
 * that it sees the answer and a clean end, not a reset.
 */
function sendJsonAndClose(request: IncomingMessage, response: ServerResponse, status: number, body: unknown): void {
  response.shouldKeepAlive = false;
  response.setHeader('connection', 'close');
  request.on('data', () => {});
  request.resume();
  sendJson(response, status, body);
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The body as text; over `limit` bytes an HttpError 413 at once, and the rest is drained, not kept (breaking off the stream would reset the connection). */
function readBody(request: IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    request.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        if (size - chunk.length <= limit) reject(new HttpError(413, `the request body is larger than the limit of ${limit} bytes (--max-message-bytes)`));
        chunks.length = 0;
        return;
      }
      chunks.push(chunk);
    });
    request.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    request.on('error', reject);
  });
}

async function readJson(request: IncomingMessage, limit: number): Promise<unknown> {
  const text = await readBody(request, limit);
  if (text.trim() === '') return {};
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new HttpError(422, `Invalid JSON: ${(error as Error).message}`);
  }
}

const ROUTES: Record<string, 'GET' | 'POST'> = {
  '/health': 'GET',
  '/metadata': 'GET',
  '/schema': 'GET',
  '/openapi.json': 'GET',
  '/state': 'GET',
  '/reset': 'POST',
  '/step': 'POST',
  '/mcp': 'POST',
};

/** The one limit on environment instances alive at once, shared by WebSocket sessions and HTTP requests. */
interface Capacity {
  /** A session holding a slot, or null when every slot is taken. */
  take(): OpenEnvSession | null;
  release(session: OpenEnvSession): void;
  /** Why take() gave null, with the fix. */
  refusal(): string;
}

/** A POST body must be JSON: a text/plain or form body is what a web page can send without asking (a "simple" cross-site request). */
function checkJsonContentType(request: IncomingMessage): void {
  const type = request.headers['content-type'];
  if (type === undefined) return;
  const mime = type.split(';')[0].trim().toLowerCase();
  if (mime !== 'application/json') throw new HttpError(415, `the request body is ${mime || 'untyped'}, but rlplay serve takes JSON: send it with Content-Type: application/json`);
}

async function handleHttp(module: EnvModule, settings: ServeSettings & { version: string }, capacity: Capacity, request: IncomingMessage, response: ServerResponse): Promise<void> {
  const path = new URL(request.url ?? '/', 'http://x').pathname;
  const method = ROUTES[path];
  if (!method) return sendJson(response, 404, { detail: 'Not Found' });
  if (request.method !== method) {
    response.setHeader('allow', method);
    return sendJson(response, 405, { detail: 'Method Not Allowed' });
  }
  try {
    if (method === 'POST') checkJsonContentType(request);
    switch (path) {
      case '/health':
        return sendJson(response, 200, { status: 'healthy' });
      case '/metadata':
        return sendJson(response, 200, { name: module.id, description: module.description, version: settings.version, readme_content: null, author: null, documentation_url: null });
      case '/schema':
        return sendJson(response, 200, { action: ACTION_SCHEMA, observation: OBSERVATION_SCHEMA, state: STATE_SCHEMA });
      case '/openapi.json':
        return sendJson(response, 200, openApiDocument(module, settings.version));
      case '/state':
        // Stateless, as upstream: a fresh instance has no episode.
        return sendJson(response, 200, { episode_id: null, step_count: 0, seed: null });
      case '/mcp': {
        let body: unknown;
        try {
          body = JSON.parse(await readBody(request, settings.maxMessageBytes));
        } catch (error) {
          if (error instanceof HttpError) throw error;
          return sendJson(response, 200, answerJsonRpc(undefined, true));
        }
        return sendJson(response, 200, answerJsonRpc(body));
      }
      case '/reset':
      case '/step': {
        const body = await readJson(request, settings.maxMessageBytes);
        const reset = parseResetRequest(body);
        let action: string | null = null;
        if (path === '/step') {
          const data = typeof body === 'object' && body !== null ? (body as { action?: unknown }).action : undefined;
          if (typeof data !== 'object' || data === null || Array.isArray(data)) {
            throw new OpenEnvError('VALIDATION_ERROR', 'POST /step takes {"action": {"action": "<text>"}, "seed": S, "options": {...}}: the action is an object, as on /ws');
          }
          action = parseAction(data);
        }
        // Stateless: a fresh instance for this request only (sessions live on /ws), in a slot of the shared limit.
        const session = capacity.take();
        if (!session) {
          response.setHeader('retry-after', '1');
          return sendJson(response, 503, { detail: capacity.refusal(), code: 'CAPACITY_REACHED' });
        }
        try {
          await session.open();
          const first = await session.reset(reset);
          return sendJson(response, 200, action === null ? first : await session.step(action));
        } finally {
          await session.close();
          capacity.release(session);
        }
      }
    }
  } catch (error) {
    if (error instanceof HttpError) {
      if (error.status === 413) return sendJsonAndClose(request, response, error.status, { detail: error.message });
      return sendJson(response, error.status, { detail: error.message });
    }
    if (error instanceof OpenEnvError) return sendJson(response, error.code === 'VALIDATION_ERROR' ? 422 : 500, { detail: error.message, code: error.code });
    return sendJson(response, 500, { detail: (error as Error).message, code: 'EXECUTION_ERROR' });
  }
}
