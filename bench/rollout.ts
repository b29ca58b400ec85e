// npm run bench:rollout -- [--model DIR|URL|hf:OWNER/REPO] [--envs ID,...] [--episodes N] [--difficulty D]
//
// What the prompt cache saves in action-level rollouts. For each environment, N greedy episodes are
// played side by side on the test split (the base model), and the scoring calls of their steps are
// then replayed two ways on the same GPU, in the same run:
//   afresh  scoreContinuations: every step's transcripts from their first token;
//   cached  a PromptCache: each transcript continues from its KV cache of the step before.
// Prints the prompt token rows each way feeds (padding included), the milliseconds of each, and the
// ratio. The candidates are scored alike both ways; what differs is the transcripts.
import { parseArgs } from 'node:util';
import { ChoicePolicy, type ChoiceStep } from '../src/agent/choice-policy.ts';
import { promptFormat } from '../src/cli/agent-options.ts';
import { DEFAULT_MODEL_DIR, loadModelForCli } from '../src/cli/load.ts';
import { PromptCache, type StreamRequest } from '../src/engine/prompt-cache.ts';
import { BUILTIN_ENVIRONMENTS } from '../src/env/builtin/index.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: DEFAULT_MODEL_DIR },
    envs: { type: 'string', default: [...BUILTIN_ENVIRONMENTS.keys()].join(',') },
    episodes: { type: 'string', default: '8' },
    difficulty: { type: 'string', default: '1' },
  },
});
const episodes = Number(values.episodes);
if (!Number.isInteger(episodes) || episodes < 1) {
  console.error(`--episodes ${values.episodes}: give a whole number of at least 1`);
  process.exit(2);
}

const model = await loadModelForCli(values.model!, { quiet: true });
console.log(`model ${values.model} (WebGPU: ${model.gpuModel.gpu.adapterName}); ${episodes} greedy test episodes per environment, difficulty ${values.difficulty}`);
const rows: string[][] = [['environment', 'steps', 'rows afresh', 'rows cached', 'ms afresh', 'ms cached', 'speed-up']];
for (const id of values.envs!.split(',')) {
  const env = BUILTIN_ENVIRONMENTS.get(id);
  if (!env) throw new Error(`unknown environment ${id}; choose from ${[...BUILTIN_ENVIRONMENTS.keys()].join(', ')}`);
  const policy = new ChoicePolicy(model, { env, reset: { split: 'test', difficulty: Number(values.difficulty) }, format: promptFormat(model), adapter: null, microBatch: 8, lengthNormalize: true });
  const played = await policy.play(Array.from({ length: episodes }, (_, seed) => ({ seed })), { greedy: true });
  const longest = Math.max(...played.map((e) => e.steps.length));
  if (longest === 0) {
    console.log(`  ${id}: no episode took a step (${played.find((e) => e.error)?.error ?? 'none did'}); nothing to compare`);
    continue;
  }
  // The scoring calls of the rollout: at step t, every episode that took a t-th action.
  const calls: StreamRequest[][] = Array.from({ length: longest }, (_, t) =>
    played.flatMap((e, stream) => (e.steps[t] ? [{ stream, prompt: (e.steps[t] as ChoiceStep).context, continuations: (e.steps[t] as ChoiceStep).actionTokens }] : [])),
  );
  const afreshRows = calls.reduce((n, call) => n + call.length * Math.max(...call.map((r) => r.prompt.length)), 0);
  let start = performance.now();
  for (const call of calls) await model.scoreContinuations(call);
  const afreshMs = performance.now() - start;
  const cache = new PromptCache(model.gpuModel, null);
  start = performance.now();
  for (const call of calls) await cache.score(call);
  const cachedMs = performance.now() - start;
  cache.dispose();
  rows.push([id, String(calls.length), String(afreshRows), String(cache.stats.promptRows), afreshMs.toFixed(0), cachedMs.toFixed(0), `${(afreshMs / cachedMs).toFixed(2)}x`]);
  console.log(`  ${id}: ${calls.length} steps, ${afreshMs.toFixed(0)} ms afresh, ${cachedMs.toFixed(0)} ms cached (rebuilt ${cache.stats.rebuilt}, extended ${cache.stats.extended}, uncached ${cache.stats.uncached})`);
}
const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
console.log();
for (const r of rows) console.log(r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]) : cell.padStart(widths[c]))).join('  '));
process.exit(0);
