// ChoicePolicy.update trains on tree-structured sequences (one per episode: the trunk and a branch per
// non-chosen candidate; choiceTrainingBatches). Here it must give the same loss, gradients and updated
// adapter and value head as the layout it replaced, one sequence [state, candidate] per candidate (kept
// below as a test-only helper), on multi-step episodes given in shuffled order, with repeated episodes.
// And ChoicePolicy.play refuses, episode by episode, a state too big to score.
import { describe, expect, test } from 'vitest';
import { ChoicePolicy, choiceTrainingBatches, type ChoiceStep, type ChoiceTrainingItem } from '../../src/agent/choice-policy.ts';
import type { PolicyLoss, UpdateItem, UpdateMetrics } from '../../src/agent/policy.ts';
import type { GpuLoraAdapter } from '../../src/engine/lora/gpu-adapter.ts';
import { loadModel, type Model } from '../../src/engine/model.ts';
import { MemoryModelSource } from '../../src/engine/model/memory-source.ts';
import { packBatch, type TrainBatch } from '../../src/engine/train/batch.ts';
import { Trainer } from '../../src/engine/train/trainer.ts';
import { ValueHead } from '../../src/engine/train/value-head.ts';
import type { EnvModule } from '../../src/env/types.ts';
import { actionEntropy } from '../../src/agent/action-policy.ts';
import { assertClose, randomArray, seededRandom } from '../shared/assert.ts';
import { tinyModelFiles } from '../shared/tiny-model.ts';
import { nodeGpu } from '../support/node-gpu.ts';

/** A few steps of adding to a total; the candidates change in number and length from step to step. */
const counter: EnvModule = {
  id: 'counter',
  description: 'Reach 5.',
  maxEpisodeSteps: 3,
  make: () => {
    let total = 0;
    let steps = 0;
    return {
      reset: ({ seed }) => {
        total = seed % 3;
        steps = 0;
        return { observation: `${total}`, info: {} };
      },
      validActions: () => (steps % 2 === 0 ? ['+1', '+2', 'stop', 'wait'] : ['+1', 'stop', 'x']),
      step: (action: string) => {
        steps++;
        if (action.startsWith('stop')) return { observation: 'done', reward: total === 5 ? 1 : 0, terminated: true, truncated: false, info: { success: total === 5 } };
        total += action === '+1' ? 1 : action === '+2' ? 2 : 0;
        return { observation: `${total}`, reward: -0.1, terminated: false, truncated: false, info: {} };
      },
    };
  },
};

/** The update as it was: one training sequence per candidate, `microBatch` sequences per micro-batch. */
async function perCandidateUpdate(policy: ChoicePolicy, trainer: Trainer, items: UpdateItem<ChoiceStep>[], loss: PolicyLoss): Promise<UpdateMetrics> {
  const { lengthNormalize, microBatch } = policy.options;
  const valueWeight = loss.value ?? 0;
  const perItem = await candidateGradients(policy, items, loss);
  const actionTokens = items.reduce((n, { step }) => n + step.actionTokens.reduce((m, t) => m + t.length, 0), 0);
  const scale = actionTokens / items.length;
  const batches = perCandidateBatches(perItem, { lengthNormalize, microBatch, scale, value: valueWeight > 0 });
  const metrics = await trainer.step(batches, { pg: 1, value: valueWeight * scale, valueClip: loss.valueClip ?? 0 });
  return { ...metrics, approxKl: 0, clipFraction: 0, entropy: 0, logProb: 0 };
}

/** g_b for every candidate of every item, as ChoicePolicy.update works them out (PPO, entropy, KL). */
async function candidateGradients(policy: ChoicePolicy, items: UpdateItem<ChoiceStep>[], loss: PolicyLoss): Promise<ChoiceTrainingItem[]> {
  const clip = loss.clip ?? 0.2;
  const current = await policy.scoreStates(items.map((item) => item.step));
  return items.map((item, i) => {
    const { step, advantage } = item;
    const logPi = current[i].logProbs;
    const a = step.chosen;
    const ratio = Math.exp(logPi[a] - step.logProb);
    const clippedRatio = Math.min(Math.max(ratio, 1 - clip), 1 + clip);
    let gChosen = ratio * advantage <= clippedRatio * advantage ? -ratio * advantage : 0;
    gChosen += (loss.kl ?? 0) * (1 - Math.exp(step.referenceLogProb! - logPi[a]));
    const h = actionEntropy(logPi);
    const g = logPi.map((lp, b) => gChosen * ((b === a ? 1 : 0) - Math.exp(lp)) + (loss.entropy ?? 0) * Math.exp(lp) * (lp + h));
    return { step, g, target: item.return ?? 0, oldValue: step.value ?? 0 };
  });
}

function perCandidateBatches(perItem: ChoiceTrainingItem[], o: { lengthNormalize: boolean; microBatch: number; scale: number; value: boolean }): TrainBatch[] {
  const empty = (): TrainBatch => ({ sequences: [], actionMask: [], advantages: [], valueMask: [], returns: [], oldValues: [] });
  const batches: TrainBatch[] = [];
  let batch = empty();
  for (const { step, g, target, oldValue } of perItem) {
    step.actionTokens.forEach((tokens, b) => {
      const weight = (-g[b] * o.scale) / (o.lengthNormalize ? tokens.length : 1);
      const P = step.context.length;
      const sequence = [...step.context, ...tokens];
      batch.sequences.push(sequence);
      batch.actionMask.push(sequence.map((_, t) => (t < P ? 0 : 1)));
      batch.advantages!.push(sequence.map((_, t) => (t < P ? 0 : weight)));
      const onValue = b === step.chosen && o.value;
      batch.valueMask!.push(sequence.map((_, t) => (onValue && t === P ? 1 : 0)));
      batch.returns!.push(sequence.map((_, t) => (onValue && t === P ? target : 0)));
      batch.oldValues!.push(sequence.map((_, t) => (onValue && t === P ? oldValue : 0)));
      if (batch.sequences.length === o.microBatch) {
        batches.push(batch);
        batch = empty();
      }
    });
  }
  if (batch.sequences.length > 0) batches.push(batch);
  return batches;
}

/** Real tokens, padded tokens (B × T summed over micro-batches) and action tokens of a layout. */
function tokenCounts(batches: TrainBatch[]): { tokens: number; padded: number; actionTokens: number; sequences: number } {
  const packed = batches.map(packBatch);
  return {
    tokens: batches.reduce((n, b) => n + b.sequences.reduce((m, s) => m + s.length, 0), 0),
    padded: packed.reduce((n, p) => n + p.B * p.T, 0),
    actionTokens: packed.reduce((n, p) => n + p.actionTokens, 0),
    sequences: batches.reduce((n, b) => n + b.sequences.length, 0),
  };
}

let modelPromise: Promise<Model> | undefined;
const tinyModel = () => (modelPromise ??= nodeGpu().then((gpu) => loadModel(gpu, new MemoryModelSource(tinyModelFiles({ vocabSize: 96, seed: 7 }).files))));

/** An adapter with random B (so that A gets gradients too), the same for the same seed. */
function randomAdapter(model: Model, seed: number): GpuLoraAdapter {
  const host = model.createAdapter({ r: 2, alpha: 4, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], rslora: false, dropout: 0, layers: null }, seed);
  const random = seededRandom(seed);
  for (const m of host.modules) m.B = randomArray(random, m.B.length, 0.3);
  return model.uploadAdapter(host);
}

describe('ChoicePolicy.update on tree-structured sequences', () => {
  test('same gradients and updated adapter and value head as one sequence per candidate', async () => {
    const model = await tinyModel();
    const gpu = model.gpuModel.gpu;
    const C = model.config.hiddenSize;
    const random = seededRandom(11);
    const valueInit = { weight: randomArray(random, C, 0.3), bias: 0.1 };
    // Two identical learners: the tree layout (ChoicePolicy.update) and the per-candidate one.
    const learners = [0, 1].map(() => {
      const adapter = randomAdapter(model, 5);
      const valueHead = new ValueHead(gpu, C, valueInit);
      const policy = new ChoicePolicy(model, { env: counter, reset: {}, format: 'plain', adapter, valueHead, microBatch: 3, lengthNormalize: true });
      // eps = 1 keeps the first AdamW steps proportional to the gradient (not its sign), so they compare
      const trainer = new Trainer(model.gpuModel, { train: adapter, valueHead, optimizer: { schedule: { kind: 'constant', lr: 1e-2 }, eps: 1, maxGradNorm: 0 } });
      return { adapter, valueHead, policy, trainer };
    });
    // Episodes of several steps; seeds 3 and 3 again play the same episode twice (repeated states).
    const episodes = await learners[0].policy.play([{ seed: 1 }, { seed: 2 }, { seed: 3 }, { seed: 3 }], { values: true, reference: true });
    expect(episodes.every((e) => !e.error)).toBe(true);
    expect(episodes.some((e) => e.steps.length >= 3)).toBe(true);
    const items: UpdateItem<ChoiceStep>[] = episodes.flatMap((e) => e.steps.map((step) => ({ step: step as ChoiceStep, advantage: random() * 2 - 1, return: random() * 2 - 1 })));
    // shuffled, as PPO's minibatches are
    for (let i = items.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [items[i], items[j]] = [items[j], items[i]];
    }
    const loss: PolicyLoss = { objective: 'ppo', clip: 0.2, entropy: 0.05, kl: 0.1, value: 0.5 };

    // the layouts: the same action tokens, far fewer tokens, one sequence per episode
    const perItem = await candidateGradients(learners[0].policy, items, loss);
    const scale = 1;
    const options = { lengthNormalize: true, microBatch: 3, scale, value: true };
    const tree = tokenCounts(choiceTrainingBatches(perItem, options));
    const flat = tokenCounts(perCandidateBatches(perItem, options));
    console.log(`${items.length} steps of ${episodes.length} episodes: per candidate ${JSON.stringify(flat)}, tree ${JSON.stringify(tree)}`);
    expect(tree.actionTokens).toBe(flat.actionTokens);
    expect(tree.sequences).toBeLessThan(flat.sequences / 4);
    expect(tree.tokens).toBeLessThan(flat.tokens / 2);

    for (let update = 0; update < 2; update++) {
      const metrics = [
        await learners[0].policy.update(learners[0].trainer, items, loss),
        await perCandidateUpdate(learners[1].policy, learners[1].trainer, items, loss),
      ];
      const what = `update ${update}`;
      expect(metrics[0].actionTokens).toBe(metrics[1].actionTokens);
      assertClose([metrics[0]['losses/total']], [metrics[1]['losses/total']], `${what}: loss`, 1e-6, 1e-4);
      assertClose(Object.values(metrics[0].terms), Object.values(metrics[1].terms), `${what}: loss terms`, 1e-6, 1e-4);
      assertClose([metrics[0]['losses/grad_norm'], metrics[0]['losses/value_grad_norm']], [metrics[1]['losses/grad_norm'], metrics[1]['losses/value_grad_norm']], `${what}: gradient norms`, 1e-7, 1e-4);
      const [grads, expected] = await Promise.all(learners.map(async (l) => new Map([...(await l.adapter.parameters.readGrads()), ...(await l.valueHead.parameters.readGrads())])));
      let largest = 0;
      for (const g of expected.values()) for (const x of g) largest = Math.max(largest, Math.abs(x));
      expect(largest).toBeGreaterThan(1e-4);
      for (const [name, g] of expected) assertClose(grads.get(name)!, g, `${what}: gradient of ${name}`, 1e-4 * largest, 1e-3);
      const [params, expectedParams] = await Promise.all(learners.map(async (l) => new Map([...(await l.adapter.parameters.read()), ...(await l.valueHead.parameters.read())])));
      for (const [name, p] of expectedParams) assertClose(params.get(name)!, p, `${what}: updated ${name}`, 1e-6, 1e-5);
    }
    for (const l of learners) {
      l.trainer.dispose();
      l.valueHead.dispose();
      l.adapter.dispose();
    }
  }, 120_000);

  test('without a value loss, identical states train once, with the gradients of one sequence per candidate', async () => {
    const model = await tinyModel();
    // Two identical learners: ChoicePolicy.update, which merges identical states, and the per-candidate layout.
    const learners = [0, 1].map(() => {
      const adapter = randomAdapter(model, 5);
      const policy = new ChoicePolicy(model, { env: counter, reset: {}, format: 'plain', adapter, microBatch: 3, lengthNormalize: true });
      const trainer = new Trainer(model.gpuModel, { train: adapter, optimizer: { schedule: { kind: 'constant', lr: 1e-2 }, eps: 1, maxGradNorm: 0 } });
      return { adapter, policy, trainer };
    });
    // As a GRPO group: three episodes from seed 3 (played alike), one from seed 1, each with its own advantage.
    const episodes = await learners[0].policy.play([{ seed: 3 }, { seed: 1 }, { seed: 3 }, { seed: 3 }], { reference: true });
    expect(episodes.every((e) => !e.error && e.steps.length >= 2)).toBe(true);
    const advantages = [0.7, -0.4, -0.9, 0.3];
    const items: UpdateItem<ChoiceStep>[] = episodes.flatMap((e, i) => e.steps.map((step) => ({ step: step as ChoiceStep, advantage: advantages[i] })));
    const loss: PolicyLoss = { objective: 'ppo', clip: 0.2, entropy: 0.05, kl: 0.1 };
    for (let update = 0; update < 2; update++) {
      const metrics = [await learners[0].policy.update(learners[0].trainer, items, loss), await perCandidateUpdate(learners[1].policy, learners[1].trainer, items, loss)];
      const what = `update ${update}`;
      // the three copies of each state of seed 3 train as one
      const seed3 = episodes[0].steps.reduce((n, step) => n + (step as ChoiceStep).actionTokens.reduce((m, t) => m + t.length, 0), 0);
      expect(metrics[0].actionTokens).toBe(metrics[1].actionTokens - 2 * seed3);
      assertClose([metrics[0]['losses/total']], [metrics[1]['losses/total']], `${what}: loss`, 1e-6, 1e-4);
      assertClose([metrics[0]['losses/grad_norm']], [metrics[1]['losses/grad_norm']], `${what}: gradient norm`, 1e-7, 1e-4);
      const [grads, expected] = await Promise.all(learners.map((l) => l.adapter.parameters.readGrads()));
      let largest = 0;
      for (const g of expected.values()) for (const x of g) largest = Math.max(largest, Math.abs(x));
      expect(largest).toBeGreaterThan(1e-4);
      for (const [name, g] of expected) assertClose(grads.get(name)!, g, `${what}: gradient of ${name}`, 1e-4 * largest, 1e-3);
    }
    for (const l of learners) {
      l.trainer.dispose();
      l.adapter.dispose();
    }
  }, 120_000);

  test('scores the candidates anew only once the adapter has changed since the steps were played', async () => {
    const model = await tinyModel();
    const adapter = randomAdapter(model, 9);
    const policy = new ChoicePolicy(model, { env: counter, reset: {}, format: 'plain', adapter, microBatch: 3, lengthNormalize: true });
    const trainer = new Trainer(model.gpuModel, { train: adapter, optimizer: { schedule: { kind: 'constant', lr: 1e-2 } } });
    const episodes = await policy.play([{ seed: 1 }, { seed: 2 }]);
    const items: UpdateItem<ChoiceStep>[] = episodes.flatMap((e) => e.steps.map((step, t) => ({ step: step as ChoiceStep, advantage: t % 2 ? 1 : -1 })));
    // what the steps recorded is the policy as it is until the adapter changes
    const rescored = await policy.scoreStates(items.map((item) => item.step));
    items.forEach(({ step }, i) => assertClose(step.logProbs, rescored[i].logProbs, `step ${i}: recorded log π`, 1e-5, 1e-4));
    // scored episode by episode through KV caches (the states shuffled, one repeated), the same policy
    const states = [...items.map((item) => item.step).reverse(), items[0].step];
    const byEpisode = await policy.scoreEpisodeStates(states);
    const alone = await policy.scoreStates(states);
    expect(items.length).toBeGreaterThan(episodes.length); // an episode of several steps: a chain of states
    states.forEach((_, i) => assertClose(byEpisode[i].logProbs, alone[i].logProbs, `state ${i}: log π scored episode by episode`, 1e-5, 1e-5));
    const scoreEpisodeStates = policy.scoreEpisodeStates.bind(policy);
    let scorings = 0;
    policy.scoreEpisodeStates = (...args) => {
      scorings++;
      return scoreEpisodeStates(...args);
    };
    try {
      const first = await policy.update(trainer, items, { objective: 'ppo' });
      expect(scorings).toBe(0);
      expect(first.approxKl).toBe(0);
      const second = await policy.update(trainer, items, { objective: 'ppo' });
      expect(scorings).toBe(1);
      expect(second.approxKl).toBeGreaterThan(0);
      // a write to the adapter is a change too
      const before = adapter.parameters.revision;
      const name = adapter.parameters.names()[0];
      adapter.parameters.write(name, (await adapter.parameters.read()).get(name)!);
      expect(adapter.parameters.revision).not.toBe(before);
    } finally {
      policy.scoreEpisodeStates = scoreEpisodeStates;
      trainer.dispose();
      adapter.dispose();
    }
  }, 60_000);

  test('with a temperature τ, the gradient is that of −mean A log π_τ(a|s) (central differences)', async () => {
    const model = await tinyModel();
    const adapter = randomAdapter(model, 13);
    const policy = new ChoicePolicy(model, { env: counter, reset: {}, format: 'plain', adapter, microBatch: 3, lengthNormalize: true, temperature: 0.4 });
    const trainer = new Trainer(model.gpuModel, { train: adapter, optimizer: { schedule: { kind: 'constant', lr: 1e-2 }, maxGradNorm: 0 } });
    try {
      const episodes = await policy.play([{ seed: 1 }, { seed: 2 }]);
      const items: UpdateItem<ChoiceStep>[] = episodes.flatMap((e) => e.steps.map((step, t) => ({ step: step as ChoiceStep, advantage: t % 2 ? 0.7 : -1.3 })));
      const objective = async () => {
        const scored = await policy.scoreStates(items.map((item) => item.step));
        return -items.reduce((sum, { step, advantage }, i) => sum + advantage * scored[i].logProbs[step.chosen], 0) / items.length;
      };
      const start = await adapter.parameters.read();
      await policy.update(trainer, items, { objective: 'pg' });
      const grads = await adapter.parameters.readGrads();
      // the three largest gradient entries, each against (L(θ + ε) − L(θ − ε)) / 2ε at the starting point
      const largest = [...grads].flatMap(([name, g]) => [...g].map((value, k) => ({ name, k, value }))).sort((a, b) => Math.abs(b.value) - Math.abs(a.value)).slice(0, 3);
      expect(Math.abs(largest[0].value)).toBeGreaterThan(1e-3);
      const eps = 1e-2;
      for (const { name, k, value } of largest) {
        const at = async (delta: number) => {
          for (const [n, v] of start) adapter.parameters.write(n, v);
          const moved = start.get(name)!.slice();
          moved[k] += delta;
          adapter.parameters.write(name, moved);
          return objective();
        };
        const numeric = ((await at(eps)) - (await at(-eps))) / (2 * eps);
        assertClose([value], [numeric], `∂L/∂${name}[${k}]`, 2e-3, 3e-2);
      }
    } finally {
      trainer.dispose();
      adapter.dispose();
    }
  }, 60_000);

  test('chains follow prefixes, not the order or the episode of the items, and respect the micro-batch budget', () => {
    const step = (context: number[], actionTokens: number[][], chosen: number): ChoiceTrainingItem => ({ step: { context, actionTokens, chosen }, g: actionTokens.map((_, b) => b + 1), target: 0.5, oldValue: 0 });
    const s0 = step([1, 10, 11], [[20], [21, 22], []], 1);
    const s1 = step([1, 10, 11, 21, 22, 12], [[23, 24], [25]], 0);
    const s2 = step([1, 10, 11, 21, 22, 12, 23, 24, 13], [[26], [27]], 1);
    const other = step([1, 10, 11, 20, 14], [[28], [29]], 0); // took the other action at s0's state
    const options = { lengthNormalize: false, microBatch: 100, scale: 1, value: true };
    const batches = choiceTrainingBatches([s2, other, s0, s1], options);
    expect(batches).toHaveLength(1);
    const [chain, alone] = batches[0].sequences.length === 2 ? batches[0].sequences : [[], []];
    // s0 → s1 → s2 on one trunk ending with s2's chosen action, then the branches: s0's [20] (its empty
    // candidate has none), s1's [25], s2's [26]; the other episode on its own
    expect(chain).toEqual([1, 10, 11, 21, 22, 12, 23, 24, 13, 27, 11, 20, 12, 25, 13, 26]);
    expect(alone).toEqual([1, 10, 11, 20, 14, 28, 14, 29]);
    const b = batches[0];
    expect(b.positions![0]).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 5, 6, 8, 9]);
    expect(b.attendPrefix![0]).toEqual([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 5, 5, 8, 8]);
    expect(b.segmentStart![0]).toEqual([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 10, 12, 12, 14, 14]);
    expect(b.actionMask[0]).toEqual([0, 0, 0, 1, 1, 0, 1, 1, 0, 1, 0, 1, 0, 1, 0, 1]);
    expect(b.advantages![0]).toEqual([0, 0, 0, -2, -2, 0, -1, -1, 0, -2, 0, -1, 0, -2, 0, -1]);
    expect(b.valueMask![0]).toEqual([0, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    expect(packBatch(b).actionTokens).toBe(3 + 3 + 2 + 2); // every candidate's tokens once: s0's, s1's, s2's, other's
    // a small budget cuts the chain into pieces, each with the trunk up to its last step
    const small = choiceTrainingBatches([s2, s1, s0], { ...options, microBatch: 1 });
    const sequences = small.flatMap((x) => x.sequences);
    expect(sequences.length).toBeGreaterThan(1);
    const longest = Math.max(...[s0, s1, s2].flatMap((s) => s.step.actionTokens.map((t) => s.step.context.length + t.length)));
    for (const x of small) expect(x.sequences.length * Math.max(...x.sequences.map((s) => s.length))).toBeLessThanOrEqual(Math.max(longest, ...x.sequences.map((s) => s.length)));
    expect(small.reduce((n, x) => n + packBatch(x).actionTokens, 0)).toBe(3 + 3 + 2);
  });
});

describe('ChoicePolicy.play refuses a state it cannot score, in that episode alone', () => {
  /** One step; seed 0 lists `many` actions, other seeds two; with `huge`, seed 0's observation is that text. */
  const offering = (many: number, huge?: string): EnvModule => ({
    id: 'offering',
    description: 'Pick.',
    maxEpisodeSteps: 1,
    make: () => {
      let seed = 0;
      return {
        reset: ({ seed: s }) => {
          seed = s;
          return { observation: seed === 0 && huge !== undefined ? huge : `pick ${seed}`, info: {} };
        },
        validActions: () => (seed === 0 ? Array.from({ length: many }, (_, i) => `n${i}`) : ['yes', 'no']),
        step: (action: string) => ({ observation: 'done', reward: action === 'yes' ? 1 : 0, terminated: true, truncated: false, info: { success: action === 'yes' } }),
      };
    },
  });
  const play = async (env: EnvModule, maxActions?: number) =>
    new ChoicePolicy(await tinyModel(), { env, reset: {}, format: 'plain', adapter: null, microBatch: 4, lengthNormalize: true, maxActions }).play([{ seed: 0 }, { seed: 1 }]);

  test('more valid actions than the limit (256 by default, or maxActions) fail at that step, before any is scored', async () => {
    const [flooded, fine] = await play(offering(10_000));
    expect(flooded.error).toBe(
      'environment offering offered 10000 valid actions at step 0, more than the 256 the choice mode scores (each is scored every step): list fewer from validActions(), raise the limit (--max-actions), or play it in text mode (--mode text)',
    );
    expect(flooded.steps).toHaveLength(0);
    expect(fine.error).toBeUndefined();
    expect(fine.steps).toHaveLength(1);
    const [limited] = await play(offering(300), 299);
    expect(limited.error).toMatch(/offered 300 valid actions at step 0, more than the 299 /);
    const [allowed] = await play(offering(300), 300);
    expect(allowed.error).toBeUndefined();
    expect(allowed.steps[0].actions).toHaveLength(300);
  }, 60_000);

  test('an observation of megabytes fails with its length and the context, not a stack overflow', async () => {
    const [flooded, fine] = await play(offering(2, 'a crate of apples. '.repeat(60_000)));
    expect(flooded.error).toMatch(/^the environment's observation takes 1,140,\d{3} tokens, but the model's context holds 128, /);
    expect(fine.steps).toHaveLength(1);
  }, 30_000);
});
