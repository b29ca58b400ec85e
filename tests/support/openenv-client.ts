// A client that sends exactly what OpenEnv's GenericEnvClient (src/openenv/core/env_client.py and
// generic_client.py) sends over its WebSocket, so the server is tested against the trainers' own
// wire behaviour: connect to <base>/ws; reset(**kwargs) -> {"type": "reset", "data": kwargs};
// step(action_dict) -> {"type": "step", "data": action_dict}; state() -> {"type": "state"};
// close() -> {"type": "close"}, then the socket is closed. Each request waits for one reply, and an
// {"type": "error"} reply raises "Server error: <message> (code: <code>)", as upstream does.
import WebSocket from 'ws';
import { mulberry32 } from '../../src/common/random.ts';
import type { EnvModule } from '../../src/env/types.ts';
import type { OpenEnvErrorCode, OpenEnvObservation } from '../../src/serve/openenv.ts';

/** GenericEnvClient._parse_result: observation, reward, done (metadata is never sent by rlplay). */
export interface StepResult {
  observation: OpenEnvObservation;
  reward: number | null;
  done: boolean;
}

export class ServerError extends Error {
  constructor(
    readonly code: OpenEnvErrorCode | string,
    readonly serverMessage: string,
  ) {
    super(`Server error: ${serverMessage} (code: ${code})`);
  }
}

interface Reply {
  type: string;
  data?: Record<string, unknown>;
}

export class GenericEnvClient {
  private readonly replies: Reply[] = [];
  private readonly waiting: Array<(reply: Reply | null) => void> = [];
  /** Set when the server closes the connection: code and reason. */
  closed: { code: number; reason: string } | null = null;

  private constructor(private readonly ws: WebSocket) {
    ws.on('message', (data) => this.deliver(JSON.parse(data.toString()) as Reply));
    ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString() };
      for (const resolve of this.waiting.splice(0)) resolve(null);
    });
  }

  /** base_url as GenericEnvClient takes it (http:// is turned into ws://, then /ws is appended). */
  static async connect(baseUrl: string): Promise<GenericEnvClient> {
    const ws = new WebSocket(`${baseUrl.replace(/^http/, 'ws').replace(/\/$/, '')}/ws`);
    // Listening from the start: a refusal can arrive in the same packet as the handshake.
    const client = new GenericEnvClient(ws);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    return client;
  }

  private deliver(reply: Reply): void {
    const resolve = this.waiting.shift();
    if (resolve) resolve(reply);
    else this.replies.push(reply);
  }

  /** The next message from the server (null once the connection is closed). */
  receive(): Promise<Reply | null> {
    const queued = this.replies.shift();
    if (queued) return Promise.resolve(queued);
    if (this.closed) return Promise.resolve(null);
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** Sends raw text (for malformed messages) and returns the reply as is. */
  async sendRaw(text: string | Buffer): Promise<Reply | null> {
    this.ws.send(text);
    return this.receive();
  }

  private async sendAndReceive(message: Record<string, unknown>): Promise<Reply> {
    const reply = await this.sendRaw(JSON.stringify(message));
    if (reply === null) throw new Error(`the server closed the connection (${this.closed?.code} ${this.closed?.reason})`);
    if (reply.type === 'error') throw new ServerError(String(reply.data?.code ?? 'UNKNOWN'), String(reply.data?.message ?? 'Unknown error'));
    return reply;
  }

  async reset(kwargs: Record<string, unknown> = {}): Promise<StepResult> {
    return parseResult((await this.sendAndReceive({ type: 'reset', data: kwargs })).data);
  }

  async step(action: Record<string, unknown>): Promise<StepResult> {
    return parseResult((await this.sendAndReceive({ type: 'step', data: action })).data);
  }

  async state(): Promise<Record<string, unknown>> {
    return (await this.sendAndReceive({ type: 'state' })).data ?? {};
  }

  /** disconnect(): {"type": "close"}, then the socket closes; resolves once it is closed. */
  async close(): Promise<void> {
    if (this.closed) return;
    const done = new Promise<void>((resolve) => this.ws.once('close', () => resolve()));
    this.ws.send(JSON.stringify({ type: 'close' }));
    this.ws.close();
    await done;
  }
}

function parseResult(data: Record<string, unknown> | undefined): StepResult {
  return { observation: (data?.observation ?? {}) as OpenEnvObservation, reward: (data?.reward ?? null) as number | null, done: Boolean(data?.done) };
}

/** One played episode, as both sides see it: enough to tell any two episodes apart. */
export interface EpisodeRecord {
  seed: number;
  observations: string[];
  actions: string[];
  rewards: number[];
  success: boolean | undefined;
  truncated: boolean;
}

/** The action the seeded "random agent" takes: the same on the wire and in-process. */
export function pickAction(validActions: string[], random: () => number): string {
  return validActions[Math.floor(random() * validActions.length)];
}

/** An episode over the wire, choosing among the valid actions with mulberry32(seed). */
export async function playOverWire(client: GenericEnvClient, seed: number, options: Record<string, unknown>, onStep?: (ms: number) => void): Promise<EpisodeRecord> {
  const random = mulberry32(seed);
  let result = await client.reset({ seed, options });
  const record: EpisodeRecord = { seed, observations: [result.observation.text], actions: [], rewards: [], success: undefined, truncated: false };
  while (!result.done) {
    const action = pickAction(result.observation.valid_actions ?? [], random);
    const started = performance.now();
    result = await client.step({ action });
    onStep?.(performance.now() - started);
    record.actions.push(action);
    record.rewards.push(result.reward ?? Number.NaN);
    record.observations.push(result.observation.text);
  }
  record.success = result.observation.info.success as boolean | undefined;
  record.truncated = result.observation.truncated;
  return record;
}

/** The same episode in-process, on the module itself: what the server must reproduce. */
export async function playInProcess(module: EnvModule, seed: number, options: Record<string, unknown>): Promise<EpisodeRecord> {
  const random = mulberry32(seed);
  const env = await module.make();
  try {
    const reset = await env.reset({ seed, options });
    const record: EpisodeRecord = { seed, observations: [reset.observation], actions: [], rewards: [], success: undefined, truncated: false };
    for (let t = 1; ; t++) {
      const action = pickAction(await env.validActions!(), random);
      const result = await env.step(action);
      record.actions.push(action);
      record.rewards.push(result.reward);
      record.observations.push(result.observation);
      const truncated = result.truncated || (!result.terminated && t >= module.maxEpisodeSteps);
      if (result.terminated || truncated) {
        record.success = result.info.success;
        record.truncated = truncated;
        return record;
      }
    }
  } finally {
    await env.close?.();
  }
}

export interface LoadResult {
  records: EpisodeRecord[];
  /** Every step's round trip, in milliseconds. */
  stepMs: number[];
  seconds: number;
  /** The most sessions open at once on the server, as the clients saw it (all connected before any played). */
  sessions: number;
}

/**
 * `sessions` clients connect at once, then each plays `episodesPerSession` episodes back to back
 * with seeds firstSeed + session * episodesPerSession + e, all concurrently.
 */
export async function runOpenEnvLoad(url: string, settings: { sessions: number; episodesPerSession: number; firstSeed: number; options: Record<string, unknown> }): Promise<LoadResult> {
  const clients = await Promise.all(Array.from({ length: settings.sessions }, () => GenericEnvClient.connect(url)));
  const stepMs: number[] = [];
  const started = performance.now();
  const perSession = await Promise.all(
    clients.map(async (client, s) => {
      const records: EpisodeRecord[] = [];
      for (let e = 0; e < settings.episodesPerSession; e++) {
        records.push(await playOverWire(client, settings.firstSeed + s * settings.episodesPerSession + e, settings.options, (ms) => stepMs.push(ms)));
      }
      await client.close();
      return records;
    }),
  );
  return { records: perSession.flat(), stepMs, seconds: (performance.now() - started) / 1000, sessions: clients.length };
}

export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}
