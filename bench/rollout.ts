// npm run bench:rollout -- [--model DIR|URL|hf:OWNER/REPO] [--envs ID,...] [--modes choice,text] [--episodes N] [--difficulty D]
//
// What keeping each episode's KV cache from step to step saves in rollouts. For each environment and
// policy mode, N greedy episodes are played side by side on the test split (the base model), and the
// model calls of their steps are then replayed two ways on the same GPU, in the same run:
//   afresh  every step's transcripts from their first token: scoreContinuations (choice mode, scoring
//           the valid actions) or generate (text mode, writing the action);
//   cached  a PromptCache: each transcript continues from its KV cache of the step before.
// Prints the prompt token rows each way feeds (padding included), the milliseconds of each, and the
// ratio. The candidates are scored, and the actions decoded, alike both ways; what differs is the
// transcripts.
import { parseArgs } from 'node:util';
import { ChoicePolicy, type ChoiceStep } from '../src/agent/choice-policy.ts';
import type { PolicyOptions } from '../src/agent/policy.ts';
import { TextPolicy, type TextStep } from '../src/agent/text-policy.ts';
import { promptFormat } from '../src/cli/agent-options.ts';
import { DEFAULT_MODEL_DIR, loadModelForCli } from '../src/cli/load.ts';
import { PromptCache, type StreamRequest } from '../src/engine/prompt-cache.ts';
import { BUILTIN_ENVIRONMENTS } from '../src/env/builtin/index.ts';
import type { BuiltinEnvModule } from '../src/env/types.ts';

const MODES = ['choice', 'text'] as const;
const { values } = parseArgs({
  options: {
    model: { type: 'string', default: DEFAULT_MODEL_DIR },
    envs: { type: 'string', default: [...BUILTIN_ENVIRONMENTS.keys()].join(',') },
    modes: { type: 'string', default: MODES.join(',') },
    episodes: { type: 'string', default: '8' },
    difficulty: { type: 'string', default: '1' },
  },
});
const episodes = Number(values.episodes);
if (!Number.isInteger(episodes) || episodes < 1) {
  console.error(`--episodes ${values.episodes}: give a whole number of at least 1`);
  process.exit(2);
}
const modes = values.modes!.split(',') as (typeof MODES)[number][];
for (const mode of modes) {
  if (!MODES.includes(mode)) {
    console.error(`--modes ${values.modes}: choose from ${MODES.join(', ')}`);
    process.exit(2);
  }
}

const model = await loadModelForCli(values.model!, { quiet: true });
console.log(`model ${values.model} (WebGPU: ${model.gpuModel.gpu.adapterName}); ${episodes} greedy test episodes per environment and mode, difficulty ${values.difficulty}`);
const options = (env: BuiltinEnvModule): PolicyOptions => ({ env, reset: { split: 'test', difficulty: Number(values.difficulty) }, format: promptFormat(model), adapter: null, microBatch: 8 });

/** One step's model calls, afresh and through a cache, and the token rows of the afresh ones. */
interface Replay {
  steps: number;
  afreshRows: number;
  afresh(step: number): Promise<unknown>;
  cached(cache: PromptCache, step: number): Promise<unknown>;
}

/** Choice mode: at step t, every episode that took a t-th action scores its valid actions. */
async function choiceReplay(env: BuiltinEnvModule): Promise<Replay | string> {
  const policy = new ChoicePolicy(model, { ...options(env), lengthNormalize: true });
  const played = await policy.play(Array.from({ length: episodes }, (_, seed) => ({ seed })), { greedy: true });
  const longest = Math.max(...played.map((e) => e.steps.length));
  if (longest === 0) return played.find((e) => e.error)?.error ?? 'none did';
  const calls: StreamRequest[][] = Array.from({ length: longest }, (_, t) =>
    played.flatMap((e, stream) => (e.steps[t] ? [{ stream, prompt: (e.steps[t] as ChoiceStep).context, continuations: (e.steps[t] as ChoiceStep).actionTokens }] : [])),
  );
  return {
    steps: longest,
    afreshRows: calls.reduce((n, call) => n + call.length * Math.max(...call.map((r) => r.prompt.length)), 0),
    afresh: (t) => model.scoreContinuations(calls[t]),
    cached: (cache, t) => cache.score(calls[t]),
  };
}

/** Text mode: at step t, every episode that took a t-th action writes it, greedily. */
async function textReplay(env: BuiltinEnvModule): Promise<Replay | string> {
  const policy = new TextPolicy(model, options(env));
  const played = await policy.play(Array.from({ length: episodes }, (_, seed) => ({ seed })), { greedy: true });
  const longest = Math.max(...played.map((e) => e.steps.length));
  if (longest === 0) return played.find((e) => e.error)?.error ?? 'none did';
  // A step's prompt: its transcript up to its action, which is the tokens generate wrote.
  const calls = Array.from({ length: longest }, (_, t) =>
    played.flatMap((e, stream) => {
      const step = e.steps[t] as TextStep | undefined;
      return step ? [{ stream, prompt: step.tokens.ids.slice(0, step.tokens.ids.length - step.tokens.logprobs.length) }] : [];
    }),
  );
  const generation = { maxNewTokens: policy.maxActionTokens, sampling: { greedy: true }, stopTokenIds: policy.stopTokens().ids };
  return {
    steps: longest,
    afreshRows: calls.reduce((n, call) => n + call.length * Math.max(...call.map((r) => r.prompt.length)), 0),
    afresh: (t) => model.generate(calls[t].map((r) => r.prompt), generation),
    cached: (cache, t) => cache.generate(calls[t], generation),
  };
}

const rows: string[][] = [['environment', 'mode', 'steps', 'rows afresh', 'rows cached', 'ms afresh', 'ms cached', 'speed-up']];
for (const id of values.envs!.split(',')) {
  const env = BUILTIN_ENVIRONMENTS.get(id);
  if (!env) throw new Error(`unknown environment ${id}; choose from ${[...BUILTIN_ENVIRONMENTS.keys()].join(', ')}`);
  for (const mode of modes) {
    const replay = await (mode === 'choice' ? choiceReplay(env) : textReplay(env));
    if (typeof replay === 'string') {
      console.log(`  ${id}, ${mode}: no episode took a step (${replay}); nothing to compare`);
      continue;
    }
    let start = performance.now();
    for (let t = 0; t < replay.steps; t++) await replay.afresh(t);
    const afreshMs = performance.now() - start;
    const cache = new PromptCache(model.gpuModel, null);
    start = performance.now();
    for (let t = 0; t < replay.steps; t++) await replay.cached(cache, t);
    const cachedMs = performance.now() - start;
    cache.dispose();
    rows.push([id, mode, String(replay.steps), String(replay.afreshRows), String(cache.stats.promptRows), afreshMs.toFixed(0), cachedMs.toFixed(0), `${(afreshMs / cachedMs).toFixed(2)}x`]);
    console.log(`  ${id}, ${mode}: ${replay.steps} steps, ${afreshMs.toFixed(0)} ms afresh, ${cachedMs.toFixed(0)} ms cached (rebuilt ${cache.stats.rebuilt}, extended ${cache.stats.extended}, uncached ${cache.stats.uncached})`);
  }
}
const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
console.log();
for (const r of rows) console.log(r.map((cell, c) => (c < 2 ? cell.padEnd(widths[c]) : cell.padStart(widths[c]))).join('  '));
process.exit(0);
