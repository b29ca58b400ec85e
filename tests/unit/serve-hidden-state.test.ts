// `rlplay serve` never sends what solves an instance before its episode ends: every built-in is
// served by the real server and played over the WebSocket (with the `ws` client, as OpenEnv's
// GenericEnvClient plays it) and over HTTP POST /reset and /step; every frame a client receives
// (observations, info, state, error messages) is searched for the hidden values of the contract
// (tests/support/env-contract.ts).
import { afterAll, beforeAll, describe, test } from 'vitest';
import { BUILTIN_ENVIRONMENTS } from '../../src/env/builtin/index.ts';
import type { ExpertEnv, ResetOptions } from '../../src/env/types.ts';
import type { OpenEnvResult } from '../../src/serve/openenv.ts';
import { serveOpenEnv, type OpenEnvServer } from '../../src/serve/server.ts';
import { checkHiddenStateStaysHidden, type PlayChannel } from '../support/env-contract.ts';
import { GenericEnvClient } from '../support/openenv-client.ts';

const SEEDS = [0, 1];

/** A WebSocket session: each reset and step, then a state message and a malformed step (which the session refuses without stepping). */
async function openWebSocketChannel(url: string, twin: ExpertEnv): Promise<PlayChannel> {
  const client = await GenericEnvClient.connect(url);
  const exchange = async (what: string, message: unknown) => {
    const reply = await client.sendRaw(JSON.stringify(message));
    if (reply === null) throw new Error(`the server closed the session after a ${what} (${client.closed?.code} ${client.closed?.reason})`);
    return reply;
  };
  const played = async (what: string, message: unknown) => {
    const observation = await exchange(what, message);
    if (observation.type !== 'observation') throw new Error(`${what}: expected an observation, got ${JSON.stringify(observation)}`);
    const state = await exchange('state', { type: 'state' });
    const refusal = await exchange('malformed step', { type: 'step', data: { actoin: 'x' } });
    return {
      result: observation.data as unknown as OpenEnvResult,
      frames: [
        { what: `ws ${what}`, frame: observation },
        { what: `ws ${what} state`, frame: state },
        { what: `ws ${what} error`, frame: refusal },
      ],
    };
  };
  return {
    reset: async (seed, options) => {
      await twin.reset({ seed, options });
      return played('reset', { type: 'reset', data: { seed, options } });
    },
    step: async (action) => {
      await twin.step(action);
      return played('step', { type: 'step', data: { action } });
    },
    close: () => client.close(),
  };
}

/** The stateless HTTP side: POST /reset, GET /state, then POST /step (a fresh instance, reset with the same seed and options, and one action) and a malformed /step. */
function openHttpChannel(url: string, twin: ExpertEnv): PlayChannel {
  let reset: { seed: number; options: ResetOptions } | null = null;
  const call = async (path: string, body?: unknown) => {
    const response = await fetch(`${url}${path}`, body === undefined ? {} : { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: response.status, headers: Object.fromEntries(response.headers), body: (await response.json()) as unknown };
  };
  return {
    async reset(seed, options) {
      reset = { seed, options };
      await twin.reset({ seed, options });
      const first = await call('/reset', reset);
      return { result: first.body as OpenEnvResult, frames: [{ what: 'POST /reset', frame: first }, { what: 'GET /state', frame: await call('/state') }] };
    },
    async step(action) {
      await twin.step(action);
      const after = await call('/step', { ...reset, action: { action } });
      const refusal = await call('/step', { ...reset, action });
      return { result: after.body as OpenEnvResult, frames: [{ what: 'POST /step', frame: after }, { what: 'POST /step (malformed)', frame: refusal }] };
    },
    close: async () => {},
  };
}

for (const module of BUILTIN_ENVIRONMENTS.values()) {
  describe(`${module.id} served over the wire`, () => {
    let server: OpenEnvServer;
    beforeAll(async () => {
      server = await serveOpenEnv(module, { port: 0, version: 'test' });
    });
    afterAll(() => server.close());

    test('no WebSocket frame holds a hidden value before the episode ends', async () => {
      await checkHiddenStateStaysHidden(module, { open: (_, twin) => openWebSocketChannel(server.url, twin), seeds: SEEDS });
    }, 120_000);

    test('no HTTP /reset, /step or /state body holds a hidden value (a fresh instance per request)', async () => {
      await checkHiddenStateStaysHidden(module, { open: async (_, twin) => openHttpChannel(server.url, twin), seeds: SEEDS, maxSteps: 1 });
    }, 120_000);
  });
}
