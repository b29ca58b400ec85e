// The token-level policy on a tiny random model: episodes played side by side in one batched
// generate per step, reproducible, consistent with the Transcript and with teacher-forced scoring;
// environment failures stay in their own episode; pg and nll updates move the policy.
import { beforeAll, describe, expect, test } from 'vitest';
import { TextPolicy, type TextPolicyOptions, type TextStep } from '../../src/agent/text-policy.ts';
import { Transcript } from '../../src/agent/transcript.ts';
import type { PlayedEpisode } from '../../src/agent/policy.ts';
import type { GpuLoraAdapter } from '../../src/engine/lora/gpu-adapter.ts';
import type { ChatMessage } from '../../src/engine/model/types.ts';
import type { LoraSettings } from '../../src/engine/lora/adapter.ts';
import { loadModel, type Model } from '../../src/engine/model.ts';
import { Trainer } from '../../src/engine/train/trainer.ts';
import { ValueHead } from '../../src/engine/train/value-head.ts';
import type { EnvModule } from '../../src/env/types.ts';
import { actionSpans } from '../../src/agent/transcript.ts';
import { MemoryModelSource, seededNormal, syntheticTokenizer, tinyModelFiles } from '../shared/tiny-model.ts';
import { nodeGpu } from '../support/node-gpu.ts';

const LORA: LoraSettings = { r: 4, alpha: 8, targets: ['q_proj', 'v_proj', 'o_proj', 'down_proj'], rslora: false, dropout: 0, layers: null };

/** Three steps; each observation depends on the previous action, rewards on its length. Seed 13 throws at step 2, seed 14 returns a NaN reward. */
const counter: EnvModule = {
  id: 'counter',
  description: 'Count.',
  maxEpisodeSteps: 3,
  make: () => {
    let seed = 0;
    let t = 0;
    return {
      reset: ({ seed: s }: { seed: number }) => {
        seed = s;
        t = 0;
        return { observation: `s${s}`, info: {} };
      },
      step: (action: string) => {
        t++;
        if (seed === 13 && t === 2) throw new Error('the counter broke at step 2');
        return { observation: `t${t} ${action.length}`, reward: seed === 14 ? NaN : action.length % 3, terminated: t >= 3, truncated: false, info: { success: action.length > 2 } };
      },
    };
  },
};

/** One step; the answer `target` earns 1. */
function answer(target: string): EnvModule {
  return {
    id: 'answer',
    description: 'Answer.',
    maxEpisodeSteps: 1,
    make: () => ({
      reset: () => ({ observation: 'go', info: {} }),
      step: (action: string) => ({ observation: 'done', reward: action === target ? 1 : 0, terminated: true, truncated: false, info: { success: action === target } }),
    }),
  };
}

/** Two steps with a scripted expert, never terminating (cut at maxEpisodeSteps). */
const walk: EnvModule = {
  id: 'walk',
  description: 'Walk.',
  maxEpisodeSteps: 2,
  make: () => {
    let t = 0;
    return {
      reset: ({ seed }: { seed: number }) => {
        t = 0;
        return { observation: `at ${seed}`, info: {} };
      },
      step: () => {
        t++;
        return { observation: `step ${t}`, reward: 0, terminated: false, truncated: false, info: {} };
      },
      expertAction: () => (t === 0 ? 'go left' : 'go on'),
    };
  },
};

let model: Model;

beforeAll(async () => {
  model = await loadModel(await nodeGpu(), new MemoryModelSource(tinyModelFiles({ vocabSize: 96, seed: 3 }).files));
});

/** An adapter with random B, so that it changes the model. */
function randomAdapter(seed: number): GpuLoraAdapter {
  const host = model.createAdapter(LORA, seed);
  const normal = seededNormal(seed);
  for (const m of host.modules) m.B = Float32Array.from(m.B, () => 0.3 * normal());
  return model.uploadAdapter(host);
}

function policy(env: EnvModule, adapter: GpuLoraAdapter | null, extra: Partial<TextPolicyOptions> = {}): TextPolicy {
  return new TextPolicy(model, { env, reset: {}, format: 'plain', adapter, microBatch: 2, maxActionTokens: 6, ...extra });
}

/** Each step's summed log-prob, and per-token log-probs, recomputed by teacher-forced scoring of the episodes' transcripts. */
async function rescore(episodes: PlayedEpisode<TextStep>[], adapter: GpuLoraAdapter | null): Promise<{ perToken: number[][]; sums: number[] }> {
  const played = episodes.filter((e) => e.steps.length > 0);
  const { tokenLogprobs } = await model.score(played.map((e) => e.steps.at(-1)!.tokens.ids), { adapter });
  const perToken: number[][] = [];
  played.forEach((e, i) => {
    const spans = actionSpans(e.steps.at(-1)!.tokens.actionMask);
    e.steps.forEach((_, k) => perToken.push(tokenLogprobs[i].slice(spans[k].start, spans[k].end).map((x) => x!)));
  });
  return { perToken, sums: perToken.map((xs) => xs.reduce((a, b) => a + b, 0)) };
}

function expectClose(got: number[], want: number[], tolerance: number) {
  expect(got).toHaveLength(want.length);
  got.forEach((x, i) => expect(Math.abs(x - want[i]), `entry ${i}: ${x} vs ${want[i]}`).toBeLessThan(tolerance));
}

describe('TextPolicy.play', () => {
  test('side by side: reproducible, consistent with the Transcript and with scoring, the same as alone (sampled and greedy)', async () => {
    const adapter = randomAdapter(5);
    const p = policy(counter, adapter);
    const requests = [{ seed: 1 }, { seed: 2 }, { seed: 1, samplingSeed: 7 }];
    const first = await p.play(requests);
    expect(await p.play(requests)).toEqual(first);
    expect(first.map((e) => [e.seed, e.samplingSeed])).toEqual([[1, 1], [2, 2], [1, 7]]);
    // The same reset seed with another sampling seed draws other actions.
    expect(first[2].steps.map((s) => s.action)).not.toEqual(first[0].steps.map((s) => s.action));

    const tok = model.tokenizer;
    const newline = tok.encode('\n', { addSpecialTokens: false }).at(-1)!;
    for (const e of first) {
      expect(e.error).toBeUndefined();
      expect(e.steps).toHaveLength(3);
      expect(e.totalReward).toBe(e.steps.reduce((a, s) => a + s.reward, 0));
      expect(e.success).toBe(e.steps[2].action.length > 2);
      const start = new Transcript(tok, 'plain', counter.description);
      start.addObservation(`s${e.seed}`);
      e.steps.forEach((step, k) => {
        const { ids, actionMask, logprobs } = step.tokens;
        expect(step.index).toBe(k);
        expect(step.transcript).toBe(e.steps[0].transcript);
        expect(actionMask).toHaveLength(ids.length);
        expect(step.transcript.ids.slice(0, ids.length)).toEqual(ids);
        expect(step.transcript.actionMask.slice(0, ids.length)).toEqual(actionMask);
        const spans = actionSpans(actionMask);
        expect(spans).toHaveLength(k + 1);
        expect(ids.slice(0, spans[0].start)).toEqual(start.ids);
        const action = ids.slice(spans[k].start, spans[k].end);
        expect(logprobs).toHaveLength(action.length);
        expect(action.length).toBeLessThanOrEqual(6);
        expect(step.action).toBe(tok.decode(action, { skipSpecialTokens: true }).split('\n')[0].trim());
        expect(step.observation).toBe(k === 0 ? `s${e.seed}` : `t${k} ${e.steps[k - 1].action.length}`);
        if (k > 0) {
          // Between two actions: the closing newline when the action was cut off, then the observation and the cue.
          const previous = ids.slice(spans[k - 1].start, spans[k - 1].end);
          const cut = !tok.decode([previous.at(-1)!]).includes('\n');
          const context = ids.slice(spans[k - 1].end, spans[k].start);
          expect(context[0] === newline).toBe(cut);
          expect(tok.decode(context)).toBe(`${cut ? '\n' : ''}Observation: ${step.observation}\nAction:`);
        }
      });
    }
    const { perToken, sums } = await rescore(first, adapter);
    const steps = first.flatMap((e) => e.steps);
    expectClose(steps.map((s) => s.logProb), sums, 1e-4);
    expectClose(steps.flatMap((s) => s.tokens.logprobs), perToken.flat(), 1e-4);

    // Each episode samples from its own sampling seed and the step: alone it is the same episode as in the batch.
    for (const [i, request] of requests.entries()) {
      const [alone] = await p.play([request]);
      expect(alone.steps.map((s) => s.tokens.ids)).toEqual(first[i].steps.map((s) => s.tokens.ids));
      expect(alone.steps.map((s) => s.action)).toEqual(first[i].steps.map((s) => s.action));
      expectClose(alone.steps.map((s) => s.logProb), first[i].steps.map((s) => s.logProb), 1e-4);
    }
    const [reordered] = await p.play([requests[2], requests[0]]);
    expect(reordered.steps.map((s) => s.tokens.ids)).toEqual(first[2].steps.map((s) => s.tokens.ids));

    const greedy = await p.play(requests, { greedy: true });
    expect(greedy[2]).toEqual({ ...greedy[0], samplingSeed: 7 }); // greedy ignores the sampling seed
    for (const [i, request] of requests.entries()) {
      const [alone] = await p.play([request], { greedy: true });
      expect(alone.steps.map((s) => s.tokens.ids)).toEqual(greedy[i].steps.map((s) => s.tokens.ids));
      expect(alone.steps.map((s) => s.action)).toEqual(greedy[i].steps.map((s) => s.action));
      expectClose(alone.steps.map((s) => s.logProb), greedy[i].steps.map((s) => s.logProb), 1e-4);
    }
    adapter.dispose();
  });

  test('a failing environment ends only its own episode', async () => {
    const p = policy(counter, null);
    const finished: number[] = [];
    const episodes = await p.play([{ seed: 1 }, { seed: 13 }, { seed: 14 }, { seed: 2 }], { onEpisode: (e) => finished.push(e.seed) });
    expect(episodes.map((e) => e.seed)).toEqual([1, 13, 14, 2]);
    expect(finished.sort((a, b) => a - b)).toEqual([1, 2, 13, 14]);
    expect(episodes[1].error).toMatch(/the counter broke at step 2/);
    expect(episodes[1].steps).toHaveLength(1);
    expect(episodes[2].error).toMatch(/reward NaN.*finite/);
    expect(episodes[2].steps).toHaveLength(0);
    for (const e of [episodes[0], episodes[3]]) {
      expect(e.error).toBeUndefined();
      expect(e.steps).toHaveLength(3);
      expect(e.steps[2].terminated).toBe(true);
    }
    // No scripted expert: nothing to imitate, so the whole call fails, with the way out.
    await expect(p.play([{ seed: 1 }, { seed: 2 }], { expert: true })).rejects.toThrow(/environment counter has no scripted expert .*--set source=successes/);
  });

  test('an episode that outgrows the model\'s context is cut short', async () => {
    const long: EnvModule = { ...walk, id: 'long', maxEpisodeSteps: 50 };
    const [e] = await policy(long, null).play([{ seed: 1 }]);
    expect(e.error).toBeUndefined();
    expect(e.steps.length).toBeGreaterThan(1);
    expect(e.steps.length).toBeLessThan(50);
    expect(e.steps.at(-1)!.truncated).toBe(true);
    expect(e.steps.slice(0, -1).every((s) => !s.truncated)).toBe(true);
    expect(e.steps[0].transcript.ids.length + 6).toBeGreaterThan(model.gpuModel.ropePositions);
  });

  test('an observation of megabytes ends its episode with the lengths of the observation and of the context, not a stack overflow', async () => {
    const huge = 'a crate of apples. '.repeat(60_000); // 1.1 MB, a token per character
    const flood = (at: 'reset' | 'step'): EnvModule => ({
      id: 'flood',
      description: 'Read.',
      maxEpisodeSteps: 2,
      make: () => ({
        reset: () => ({ observation: at === 'reset' ? huge : 'go', info: {} }),
        step: () => ({ observation: huge, reward: 0, terminated: false, truncated: false, info: {} }),
      }),
    });
    const tooLong = /the environment's observation takes 1,140,\d{3} tokens, but the model's context holds 128, .*shorten the environment's observations, or use a model with a longer context/;
    const [first] = await policy(flood('reset'), null).play([{ seed: 1 }]);
    expect(first.error).toMatch(tooLong);
    expect(first.steps).toHaveLength(0);
    const [later] = await policy(flood('step'), null).play([{ seed: 1 }]);
    expect(later.error).toMatch(/the transcript cannot continue after the action .* at step 0: /);
    expect(later.error).toMatch(tooLong);
    expect(later.steps).toHaveLength(1);
  }, 30_000);

  test('reference log-probs and values are recorded when asked', async () => {
    const adapter = model.uploadAdapter(model.createAdapter(LORA, 2)); // fresh: B = 0, the policy is the reference
    const C = model.config.hiddenSize;
    const zero = new ValueHead(model.gpu, C);
    const episodes = await policy(walk, adapter, { valueHead: zero }).play([{ seed: 1 }, { seed: 2 }], { reference: true, values: true });
    for (const e of episodes) {
      expect(e.steps).toHaveLength(2);
      expect(e.steps[1].truncated).toBe(true); // cut at maxEpisodeSteps
      expect(e.finalValue).toBe(0);
      for (const s of e.steps) {
        expect(s.value).toBe(0);
        expect(Math.abs(s.referenceLogProb! - s.logProb)).toBeLessThan(1e-4);
        expectClose(s.referenceLogProbs!, s.tokens.logprobs, 1e-4);
      }
    }

    // A value head with weights: V(s) = w · h + b at the last token before each action, and at the last observation.
    const normal = seededNormal(11);
    const weight = Float32Array.from({ length: C }, () => normal());
    const head = new ValueHead(model.gpu, C, { weight, bias: 0.5 });
    const valued = await policy(walk, adapter, { valueHead: head }).play([{ seed: 3 }], { values: true });
    const e = valued[0];
    const ids = e.steps[0].transcript.ids;
    const starts = actionSpans(e.steps[0].transcript.actionMask).map((s) => s.start - 1);
    const { hidden } = await model.score([ids], { adapter, hiddenAt: [[...starts, ids.length - 1]] });
    const v = (h: Float32Array) => h.reduce((a, x, i) => a + x * weight[i], 0.5);
    expectClose([...e.steps.map((s) => s.value!), e.finalValue!], hidden![0].map(v), 1e-4);

    await expect(policy(walk, adapter).play([{ seed: 1 }], { values: true })).rejects.toThrow(/no value head/);
    zero.dispose();
    head.dispose();
    adapter.dispose();
  });

  test('chat format: actions stop at the end-of-turn token; the expert and sampled actions play multi-turn', async () => {
    const files = syntheticTokenizer(96);
    const json = files.json as { added_tokens: object[]; model: { vocab: Record<string, number> } };
    const base = Object.keys(json.model.vocab).length;
    for (const [i, content] of ['<|im_start|>', '<|im_end|>'].entries()) {
      json.model.vocab[content] = base + i;
      json.added_tokens.push({ id: base + i, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
    }
    const chatTemplate = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    const chatFiles = tinyModelFiles({ vocabSize: 96, seed: 3, tokenizer: { json, config: { ...(files.config as object), chat_template: chatTemplate, eos_token: '<|im_end|>' } } }).files;
    const chat = await loadModel(model.gpu, new MemoryModelSource(chatFiles));
    const end = base + 1;
    const p = new TextPolicy(chat, { env: answer('a'), reset: {}, format: 'chat', adapter: null, microBatch: 4, maxActionTokens: 8 });
    const played = await p.play([1, 2, 3, 4, 5, 6].map((seed) => ({ seed })));
    for (const e of played) {
      const { ids, actionMask, logprobs } = e.steps[0].tokens;
      const action = ids.filter((_, t) => actionMask[t]);
      const stops = action.flatMap((id, t) => (chat.tokenizer.eosTokenIds.includes(id) ? [t] : []));
      // Either it ended with its end-of-turn token (and only there), or it ran to maxActionTokens.
      expect(stops.length === 0 ? action.length === 8 : stops[0] === action.length - 1).toBe(true);
      expect(e.steps[0].action).toBe(chat.tokenizer.decode(action, { skipSpecialTokens: true }).trim());
      expect(logprobs).toHaveLength(action.length);
    }
    const { tokenLogprobs } = await chat.score(played.map((e) => e.steps[0].tokens.ids));
    const sums = played.map((e, i) => e.steps[0].tokens.actionMask.reduce((a, m, t) => a + (m ? tokenLogprobs[i][t]! : 0), 0));
    expectClose(played.map((e) => e.steps[0].logProb), sums, 1e-4);

    const [demo] = await new TextPolicy(chat, { env: walk, reset: {}, format: 'chat', adapter: null, microBatch: 4 }).play([{ seed: 4 }], { expert: true });
    const transcript = new Transcript(chat.tokenizer, 'chat', walk.description);
    transcript.addObservation('at 4');
    transcript.addAction(transcript.encodeAction('go left'));
    transcript.addObservation('step 1');
    transcript.addAction(transcript.encodeAction('go on'));
    transcript.addObservation('step 2');
    expect(demo.steps.map((s) => s.action)).toEqual(['go left', 'go on']);
    expect(demo.steps[0].transcript.ids).toEqual(transcript.ids);
    expect(demo.steps[0].transcript.actionMask).toEqual(transcript.actionMask);
    expect(demo.steps[1].tokens.ids.at(-1)).toBe(end);

    // Sampled multi-turn episodes: actions are kept as sampled (special ids, ids the tokenizer does
    // not know, any split of their text), and each next observation is the template's rendering of
    // that turn after the conversation so far.
    const sampled = new TextPolicy(chat, { env: counter, reset: {}, format: 'chat', adapter: null, microBatch: 4, maxActionTokens: 5, sampling: { temperature: 1.3, topK: 50, topP: 0.95 } });
    const requests = [1, 2, 3, 4, 5, 6].map((seed) => ({ seed }));
    const episodes = await sampled.play(requests);
    const template = (messages: ChatMessage[], generation: boolean) => chat.tokenizer.applyChatTemplate(messages, { addGenerationPrompt: generation });
    let noncanonical = 0;
    for (const e of episodes) {
      expect(e.error).toBeUndefined();
      expect(e.steps).toHaveLength(3);
      const { ids, actionMask } = e.steps[2].transcript;
      const spans = actionSpans(actionMask);
      expect(spans).toHaveLength(3);
      const messages: ChatMessage[] = [{ role: 'system', content: counter.description }, { role: 'user', content: e.steps[0].observation }];
      expect(ids.slice(0, spans[0].start)).toEqual(template(messages, true));
      e.steps.forEach((step, k) => {
        const action = ids.slice(spans[k].start, spans[k].end);
        expect(action).toHaveLength(step.tokens.logprobs.length); // the sampled ids, exactly: generate reported one log-prob each
        const content = chat.tokenizer.decode(action, { skipSpecialTokens: true });
        expect(step.action).toBe(content.trim());
        const before = template(messages, true).length;
        messages.push({ role: 'assistant', content });
        // The canonical action: the template's rendering of its text, up to its end-of-turn token.
        const canonical = template(messages, false);
        const canonicalEnd = canonical.indexOf(end, before) + 1;
        if (JSON.stringify(canonical.slice(before, canonicalEnd)) !== JSON.stringify(action)) noncanonical++;
        if (k === 2) return;
        messages.push({ role: 'user', content: e.steps[k + 1].observation });
        const closing = action.at(-1) === end ? [] : [end]; // a cut-off action is closed as context
        expect(ids.slice(spans[k].end, spans[k + 1].start)).toEqual([...closing, ...template(messages, true).slice(canonicalEnd)]);
      });
    }
    expect(noncanonical).toBeGreaterThan(0); // some sampled actions are not their text's encoding
    const rescored = await chat.score(episodes.map((e) => e.steps[2].tokens.ids));
    const perStep = episodes.flatMap((e, i) => actionSpans(e.steps[2].tokens.actionMask).map((span) => rescored.tokenLogprobs[i].slice(span.start, span.end).map((x) => x!)));
    expectClose(episodes.flatMap((e) => e.steps.flatMap((s) => s.tokens.logprobs)), perStep.flat(), 1e-4);
    for (const [i, request] of requests.entries()) {
      const [alone] = await sampled.play([request]);
      expect(alone.steps.map((s) => s.tokens.ids)).toEqual(episodes[i].steps.map((s) => s.tokens.ids));
    }
    chat.dispose();
  });
});

describe('TextPolicy.update', () => {
  /** The next-token probabilities where the answer of `answer` starts. */
  async function answerProbabilities(adapter: GpuLoraAdapter): Promise<number[]> {
    const transcript = new Transcript(model.tokenizer, 'plain', answer('').description);
    transcript.addObservation('go');
    const { logits } = await model.score([transcript.ids], { adapter, logits: true });
    const row = [...logits![0].at(-1)!];
    const max = Math.max(...row);
    const exp = row.map((x) => Math.exp(x - max));
    const total = exp.reduce((a, b) => a + b, 0);
    return exp.map((x) => x / total);
  }

  test('pg raises the probability of the rewarded answer', async () => {
    const adapter = model.uploadAdapter(model.createAdapter(LORA, 1));
    // Sampling from the two likeliest tokens (top-k 2), the less likely one of them earns 1: the
    // token-level analogue of the action-level yes-or-no test.
    const initial = await answerProbabilities(adapter);
    const [top, second] = initial.map((q, id) => ({ q, id })).sort((a, b) => b.q - a.q);
    const target = model.tokenizer.decode([second.id]);
    expect(target).toMatch(/^[a-zA-Z0-9]$/); // a visible one-character answer (seed 3 of the tiny model)
    const share = (q: number[]) => q[second.id] / (q[second.id] + q[top.id]);
    const trainer = new Trainer(model.gpuModel, { train: adapter, optimizer: { schedule: { kind: 'constant', lr: 2e-2 } } });
    const p = policy(answer(target), adapter, { maxActionTokens: 1, microBatch: 8, sampling: { topK: 2 } });
    for (let u = 0; u < 5; u++) {
      const episodes = await p.play(Array.from({ length: 16 }, (_, i) => ({ seed: i, samplingSeed: 100 * u + i })));
      const mean = episodes.reduce((a, e) => a + e.totalReward, 0) / episodes.length;
      const metrics = await p.update(trainer, episodes.map((e) => ({ step: e.steps[0], advantage: e.totalReward - mean })), { objective: 'pg' });
      expect(metrics.actionTokens).toBe(16);
      expect(Math.abs(metrics.approxKl)).toBeLessThan(1e-4); // on-policy: the old log-probs are the current ones
      expect(metrics.logProb).toBeCloseTo(episodes.reduce((a, e) => a + e.steps[0].logProb, 0) / 16, 3);
    }
    const after = share(await answerProbabilities(adapter));
    expect(share(initial)).toBeLessThan(0.5);
    expect(after).toBeGreaterThan(share(initial) + 0.2);
    trainer.dispose();
    adapter.dispose();
  });

  test("nll on the expert's demonstrations raises their log-prob; ppo with KL and value losses runs", async () => {
    const adapter = model.uploadAdapter(model.createAdapter(LORA, 3));
    const valueHead = new ValueHead(model.gpu, model.config.hiddenSize);
    const trainer = new Trainer(model.gpuModel, { train: adapter, valueHead, optimizer: { schedule: { kind: 'constant', lr: 2e-2 } } });
    const p = policy(walk, adapter, { valueHead });
    const demos = async () => p.play([{ seed: 1 }, { seed: 2 }, { seed: 3 }], { expert: true });
    const meanLogProb = (episodes: PlayedEpisode<TextStep>[]) => {
      const steps = episodes.flatMap((e) => e.steps);
      return steps.reduce((a, s) => a + s.logProb, 0) / steps.length;
    };
    const first = await demos();
    const transcript = new Transcript(model.tokenizer, 'plain', walk.description);
    transcript.addObservation('at 1');
    expect(first[0].steps[0].tokens.ids.filter((_, t) => first[0].steps[0].tokens.actionMask[t])).toEqual(transcript.encodeAction('go left'));
    const { sums } = await rescore(first, adapter);
    expectClose(first.flatMap((e) => e.steps.map((s) => s.logProb)), sums, 1e-4);
    const before = meanLogProb(first);
    const items = first.flatMap((e) => e.steps.map((step) => ({ step, advantage: 0 })));
    for (let u = 0; u < 4; u++) {
      const metrics = await p.update(trainer, items, { objective: 'nll' });
      if (u === 0) expect(metrics.logProb).toBeCloseTo(before, 3);
    }
    const after = meanLogProb(await demos());
    expect(after).toBeGreaterThan(before + 1);

    // PPO with a KL penalty and a clipped value loss on sampled episodes: every input is wired.
    const episodes = await p.play([{ seed: 1 }, { seed: 2 }], { reference: true, values: true });
    const ppoItems = episodes.flatMap((e) => e.steps.map((step, k) => ({ step, advantage: k === 0 ? 1 : -1, return: 1 })));
    const metrics = await p.update(trainer, ppoItems, { objective: 'ppo', clip: 0.2, kl: 0.1, value: 0.5, valueClip: 0.2 });
    expect(metrics.clipFraction).toBe(0);
    expect(Math.abs(metrics.approxKl)).toBeLessThan(1e-4);
    expect(metrics.terms['losses/kl']).toBeGreaterThan(0); // the adapter has moved away from the reference
    expect(metrics.terms['losses/value']).toBeGreaterThan(0);
    expect(metrics['losses/value_grad_norm']).toBeGreaterThan(0);
    expect(Number.isFinite(metrics.entropy) && metrics.entropy > 0).toBe(true);
    await expect(p.update(trainer, ppoItems.map(({ step, advantage }) => ({ step, advantage })), { objective: 'pg', value: 1 })).rejects.toThrow(/return/);
    const unreferenced = await p.play([{ seed: 1 }]);
    await expect(p.update(trainer, [{ step: unreferenced[0].steps[0], advantage: 1 }], { objective: 'pg', kl: 0.1 })).rejects.toThrow(/reference: true/);
    trainer.dispose();
    valueHead.dispose();
    adapter.dispose();
  });
});
