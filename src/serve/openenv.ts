// The OpenEnv wire format for rlplay environments, apart from any transport: what a session does
// with each message, the observation object, the JSON Schemas and the OpenAPI document. The
// Pydantic models of OpenEnv's src/openenv/core/env_server/types.py are the de-facto spec;
// server.ts carries these messages over WebSocket and HTTP.
//
// One OpenEnvSession is one environment instance (one WebSocket connection). Observations carry
// the text, the valid actions, `terminated`, `truncated` and the environment's `info`: OpenEnv's
// serializer drops an observation field called `metadata` and has no `truncated`, so both travel
// inside the observation under these names, and `done = terminated || truncated`.
import { randomInt, randomUUID } from 'node:crypto';
import { EnvError, describeThrown } from '../env/guard.ts';
import type { Env, EnvInfo, EnvModule, ResetOptions } from '../env/types.ts';

/** OpenEnv's WSErrorCode. */
export type OpenEnvErrorCode =
  | 'INVALID_JSON'
  | 'UNKNOWN_TYPE'
  | 'VALIDATION_ERROR'
  | 'EXECUTION_ERROR'
  | 'CAPACITY_REACHED'
  | 'FACTORY_ERROR'
  | 'SESSION_ERROR';

export interface OpenEnvObservation {
  /** What the agent reads. */
  text: string;
  /** The actions that make sense now (null when the environment does not list them or the episode is over). */
  valid_actions: string[] | null;
  terminated: boolean;
  truncated: boolean;
  /** The environment's info (task success under `success` once an episode ends). */
  info: EnvInfo;
}

/** The `data` of an observation message, and the body of POST /reset and POST /step. */
export interface OpenEnvResult {
  observation: OpenEnvObservation;
  reward: number | null;
  done: boolean;
}

export interface OpenEnvState {
  episode_id: string | null;
  step_count: number;
  /** The reset seed of the current episode (null before the first reset). */
  seed: number | null;
}

export type OutgoingMessage =
  | { type: 'observation'; data: OpenEnvResult }
  | { type: 'state'; data: OpenEnvState }
  | { type: 'mcp'; data: JsonRpcResponse }
  | { type: 'error'; data: { message: string; code: OpenEnvErrorCode } };

/** What a session answers: a message to send, and whether the connection ends after it. */
export interface SessionReply {
  message: OutgoingMessage | null;
  close: boolean;
}

export class OpenEnvError extends Error {
  constructor(
    readonly code: OpenEnvErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export const errorMessage = (code: OpenEnvErrorCode, message: string): OutgoingMessage => ({ type: 'error', data: { message, code } });

// ---------------------------------------------------------------------------------------------
// Validating requests

const isPlainObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

function invalid(message: string): never {
  throw new OpenEnvError('VALIDATION_ERROR', message);
}

export interface ResetRequest {
  seed: number;
  options: ResetOptions | undefined;
  episodeId: string;
}

/** Reads reset parameters ({ seed?, options?, episode_id? }; other keys are ignored, as upstream allows). */
export function parseResetRequest(data: unknown): ResetRequest {
  if (data === undefined || data === null) data = {};
  if (!isPlainObject(data)) invalid('reset data must be an object such as {"seed": 42, "options": {"split": "test"}}');
  const { seed, options, episode_id: episodeId } = data;
  if (seed !== undefined && seed !== null && !(typeof seed === 'number' && Number.isSafeInteger(seed) && seed >= 0)) {
    invalid(`reset seed must be a non-negative integer, got ${JSON.stringify(seed)}`);
  }
  if (options !== undefined && options !== null && !isPlainObject(options)) {
    invalid(`reset options must be an object such as {"split": "test", "difficulty": 2}, got ${JSON.stringify(options)}`);
  }
  if (episodeId !== undefined && episodeId !== null && !(typeof episodeId === 'string' && episodeId.length <= 255)) {
    invalid('reset episode_id must be a string of at most 255 characters');
  }
  return {
    // Without a seed the episode is drawn at random, and the seed is reported in the state.
    seed: typeof seed === 'number' ? seed : randomInt(2 ** 31),
    options: isPlainObject(options) ? (options as ResetOptions) : undefined,
    episodeId: typeof episodeId === 'string' ? episodeId : randomUUID(),
  };
}

/**
 * Reads an action ({ "action": "<text>" }); `metadata` and other keys are ignored. A number or a
 * boolean is taken as its text: clients that parse a model's reply as JSON before wrapping it
 * (verifiers does) turn a bare `42` into a number.
 */
export function parseAction(data: unknown): string {
  if (!isPlainObject(data)) invalid('step data must be an object {"action": "<text>"}');
  if (!('action' in data)) invalid('step data has no "action"; send {"type": "step", "data": {"action": "<text>"}}');
  const action = data.action;
  if (typeof action === 'string') return action;
  if ((typeof action === 'number' && Number.isFinite(action)) || typeof action === 'boolean') return String(action);
  invalid(`step action must be a string, got ${JSON.stringify(action) ?? String(action)}`);
}

/** The environment's own failures (EnvError: threw, malformed result, time limit, crash) are EXECUTION_ERRORs. */
function executionError(error: unknown): OpenEnvError {
  if (error instanceof OpenEnvError) return error;
  return new OpenEnvError('EXECUTION_ERROR', error instanceof EnvError ? error.message : describeThrown(error));
}

/** JSON.stringify fails on bigints and cycles; a clear error instead of a dropped session. */
function jsonSafeInfo(info: EnvInfo, where: string): EnvInfo {
  try {
    return JSON.parse(JSON.stringify(info)) as EnvInfo;
  } catch (error) {
    throw new OpenEnvError('EXECUTION_ERROR', `the environment's info from ${where} cannot be sent as JSON (${describeThrown(error)}); keep info to numbers, strings, booleans, arrays and plain objects`);
  }
}

// ---------------------------------------------------------------------------------------------
// A session

/**
 * One environment instance behind one connection. Messages are handled one at a time, in order,
 * whatever the client pipelines. Every failure becomes an error message; only a failed make()
 * (FACTORY_ERROR) and a close message end the connection.
 */
export class OpenEnvSession {
  private env: Env | null = null;
  private episodeId: string | null = null;
  private seed: number | null = null;
  private stepCount = 0;
  private done = true;
  /** The last reset succeeded. */
  private started = false;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly module: EnvModule) {}

  /** Creates the instance; a failure is an OpenEnvError with code FACTORY_ERROR. */
  async open(): Promise<void> {
    try {
      this.env = await this.module.make();
    } catch (error) {
      throw new OpenEnvError('FACTORY_ERROR', `could not create an instance of ${this.module.id}: ${error instanceof EnvError ? error.message : describeThrown(error)}`);
    }
  }

  /** Handles one text message; answers are produced in the order messages arrive. */
  handle(raw: string): Promise<SessionReply> {
    const reply = this.queue.then(() => this.dispatch(raw));
    this.queue = reply.catch(() => {});
    return reply;
  }

  private async dispatch(raw: string): Promise<SessionReply> {
    let message: unknown;
    try {
      message = JSON.parse(raw);
    } catch (error) {
      return { message: errorMessage('INVALID_JSON', `Invalid JSON: ${(error as Error).message}`), close: false };
    }
    try {
      if (!isPlainObject(message)) invalid('a message must be a JSON object such as {"type": "reset", "data": {"seed": 1}}');
      const type = message.type;
      const extra = Object.keys(message).filter((key) => key !== 'type' && key !== 'data');
      switch (type) {
        case 'reset':
        case 'step':
        case 'state':
        case 'close':
        case 'mcp':
          if (extra.length > 0) invalid(`unexpected field${extra.length > 1 ? 's' : ''} ${extra.map((k) => JSON.stringify(k)).join(', ')} in a ${type} message; a message has only "type" and "data"`);
          break;
        default:
          return { message: errorMessage('UNKNOWN_TYPE', `Unknown message type: ${typeof type === 'string' ? type : JSON.stringify(type) ?? 'none'}; the types are reset, step, state, close and mcp`), close: false };
      }
      switch (type) {
        case 'reset':
          return { message: { type: 'observation', data: await this.reset(parseResetRequest(message.data)) }, close: false };
        case 'step':
          return { message: { type: 'observation', data: await this.step(parseAction(message.data)) }, close: false };
        case 'state':
          return { message: { type: 'state', data: this.state() }, close: false };
        case 'mcp':
          return { message: { type: 'mcp', data: answerJsonRpc(message.data) }, close: false };
        default:
          return { message: null, close: true };
      }
    } catch (error) {
      const failure = executionError(error);
      return { message: errorMessage(failure.code, failure.message), close: false };
    }
  }

  async reset(request: ResetRequest): Promise<OpenEnvResult> {
    const env = this.instance();
    this.episodeId = request.episodeId;
    this.seed = request.seed;
    this.stepCount = 0;
    this.started = false; // until reset succeeds
    const { observation, info } = await env.reset({ seed: request.seed, options: request.options });
    const validActions = env.validActions ? await env.validActions() : null;
    this.started = true;
    this.done = false;
    return { observation: { text: observation, valid_actions: validActions, terminated: false, truncated: false, info: jsonSafeInfo(info, 'reset()') }, reward: null, done: false };
  }

  async step(action: string): Promise<OpenEnvResult> {
    const env = this.instance();
    if (!this.started) invalid('no episode is running (no reset yet, or the last reset failed); send {"type": "reset"} first');
    if (this.done) invalid(`the episode is over (done after ${this.stepCount} step${this.stepCount === 1 ? '' : 's'}); send {"type": "reset"} to start a new one`);
    this.stepCount++;
    // A failed step ends the episode: the instance's state is unknown after it.
    this.done = true;
    const result = await env.step(action);
    // The step limit is the environment's maxEpisodeSteps, as in rlplay's own rollouts.
    const truncated = result.truncated || (!result.terminated && this.stepCount >= this.module.maxEpisodeSteps);
    const done = result.terminated || truncated;
    const validActions = !done && env.validActions ? await env.validActions() : null;
    this.done = done;
    return {
      observation: { text: result.observation, valid_actions: validActions, terminated: result.terminated, truncated, info: jsonSafeInfo(result.info, `step() ${this.stepCount}`) },
      reward: result.reward,
      done,
    };
  }

  state(): OpenEnvState {
    return { episode_id: this.episodeId, step_count: this.stepCount, seed: this.seed };
  }

  private instance(): Env {
    if (!this.env) throw new OpenEnvError('SESSION_ERROR', 'the session has no environment instance (it was closed)');
    return this.env;
  }

  /** Closes the instance (best effort: a failing close() must not take the server down). */
  async close(): Promise<void> {
    const env = this.env;
    this.env = null;
    await this.queue;
    try {
      await env?.close?.();
    } catch {
      // The instance is dropped either way.
    }
  }
}

// ---------------------------------------------------------------------------------------------
// MCP (JSON-RPC 2.0): rlplay environments expose no MCP tools, so every method is "not found".

export interface JsonRpcResponse {
  jsonrpc: '2.0';
  id: string | number | null;
  error: { code: number; message: string };
}

export const JSON_RPC_PARSE_ERROR = -32700;
export const JSON_RPC_INVALID_REQUEST = -32600;
export const JSON_RPC_METHOD_NOT_FOUND = -32601;

/** Answers a parsed JSON-RPC request (or a body that failed to parse, as `undefined` + parseError). */
export function answerJsonRpc(request: unknown, parseError = false): JsonRpcResponse {
  if (parseError) return { jsonrpc: '2.0', id: null, error: { code: JSON_RPC_PARSE_ERROR, message: 'Parse error: the body is not valid JSON' } };
  const id = isPlainObject(request) && (typeof request.id === 'string' || typeof request.id === 'number') ? request.id : null;
  if (!isPlainObject(request) || request.jsonrpc !== '2.0' || typeof request.method !== 'string') {
    return { jsonrpc: '2.0', id, error: { code: JSON_RPC_INVALID_REQUEST, message: 'Invalid Request: expected {"jsonrpc": "2.0", "method": "...", "id": ...}' } };
  }
  return {
    jsonrpc: '2.0',
    id,
    error: { code: JSON_RPC_METHOD_NOT_FOUND, message: `Method not found: ${request.method} (this environment has no MCP tools; play it through /ws or POST /reset and /step)` },
  };
}

// ---------------------------------------------------------------------------------------------
// Schemas and the OpenAPI document

export const ACTION_SCHEMA = { type: 'object', properties: { action: { type: 'string' } }, required: ['action'] } as const;

export const OBSERVATION_SCHEMA = {
  type: 'object',
  properties: {
    text: { type: 'string', description: 'What the agent reads' },
    valid_actions: { anyOf: [{ type: 'array', items: { type: 'string' } }, { type: 'null' }], description: 'The actions that make sense now, when the environment lists them' },
    terminated: { type: 'boolean', description: 'The task reached a terminal state' },
    truncated: { type: 'boolean', description: 'The episode was cut short (step limit)' },
    info: { type: 'object', description: "The environment's info; `success` (boolean) once an episode ends" },
  },
  required: ['text', 'valid_actions', 'terminated', 'truncated', 'info'],
} as const;

export const STATE_SCHEMA = {
  type: 'object',
  properties: {
    episode_id: { anyOf: [{ type: 'string' }, { type: 'null' }] },
    step_count: { type: 'integer', minimum: 0 },
    seed: { anyOf: [{ type: 'integer' }, { type: 'null' }], description: 'The reset seed of the current episode' },
  },
  required: ['episode_id', 'step_count'],
} as const;

/** OpenAPI 3.1 description of the HTTP side (the WebSocket protocol is described in docs/scale-out.md). */
export function openApiDocument(module: EnvModule, version: string): Record<string, unknown> {
  const json = (schema: unknown, description: string) => ({ description, content: { 'application/json': { schema } } });
  const result = { type: 'object', properties: { observation: OBSERVATION_SCHEMA, reward: { anyOf: [{ type: 'number' }, { type: 'null' }] }, done: { type: 'boolean' } }, required: ['observation', 'reward', 'done'] };
  const resetBody = { type: 'object', properties: { seed: { type: 'integer', minimum: 0 }, episode_id: { type: 'string', maxLength: 255 }, options: { type: 'object' } } };
  return {
    openapi: '3.1.0',
    info: { title: `rlplay environment: ${module.id}`, version, description: `${module.description}\n\nOne WebSocket connection to /ws is one session with its own instance. The HTTP /reset, /step and /state are stateless: each request uses a fresh instance.` },
    paths: {
      '/health': { get: { summary: 'Health check', responses: { 200: json({ type: 'object', properties: { status: { const: 'healthy' } } }, 'The server is up') } } },
      '/metadata': { get: { summary: "The environment's name and description", responses: { 200: json({ type: 'object', properties: { name: { type: 'string' }, description: { type: 'string' }, version: { type: 'string' } } }, 'Metadata') } } },
      '/schema': { get: { summary: 'JSON Schemas of action, observation and state', responses: { 200: json({ type: 'object', properties: { action: { type: 'object' }, observation: { type: 'object' }, state: { type: 'object' } } }, 'Schemas') } } },
      '/reset': { post: { summary: 'Reset a fresh instance (stateless)', requestBody: { content: { 'application/json': { schema: resetBody } } }, responses: { 200: json(result, 'The first observation'), 422: json({ type: 'object' }, 'Invalid request'), 500: json({ type: 'object' }, 'The environment failed') } } },
      '/step': {
        post: {
          summary: 'Reset a fresh instance with `seed` and `options`, then take one action (stateless)',
          requestBody: { required: true, content: { 'application/json': { schema: { type: 'object', properties: { action: ACTION_SCHEMA, ...resetBody.properties }, required: ['action'] } } } },
          responses: { 200: json(result, 'The observation after the action'), 422: json({ type: 'object' }, 'Invalid request'), 500: json({ type: 'object' }, 'The environment failed') },
        },
      },
      '/state': { get: { summary: 'The state of a fresh instance (stateless: sessions live on /ws)', responses: { 200: json(STATE_SCHEMA, 'State') } } },
      '/mcp': { post: { summary: 'MCP JSON-RPC 2.0 (no tools: every method answers "method not found")', responses: { 200: json({ type: 'object' }, 'A JSON-RPC 2.0 response') } } },
    },
  };
}
