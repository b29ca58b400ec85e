// The default model's card (README.md in its folder): how it was made, on what data, how well it
// does before any RL, its limits and licence.
import type { EvaluationReport } from '../../src/rl/evaluate.ts';
import type { ChoiceStageSummary } from './choice-stage.ts';

export interface CardFacts {
  /** The command that makes the same build again. */
  regenerate: string;
  settings: { seed: number; episodesPerEnv: Record<string, number>; difficulties: number[]; maxTokens: number; noise: number; epochs: number; vocabSize: number; evalEpisodes: number; batchSize: number; lr: number; choice: { steps: number; maxSeconds: number; episodesPerStep: number; lr: number; target: number; targetFor: Record<string, number>; maxStepsFor: Record<string, number>; window: number; probeEpisodes: number; probeEvery: number } };
  config: { hidden_size: number; intermediate_size: number; num_hidden_layers: number; num_attention_heads: number; num_key_value_heads: number; vocab_size: number; max_position_embeddings: number };
  parameters: number;
  tokens: number;
  trainSeconds: number;
  choice: ChoiceStageSummary;
  dataSuccess: Record<string, number>;
  baseline: EvaluationReport[];
  adapterName: string;
}

const pct = (x: number) => `${(100 * x).toFixed(0)}%`;

/** A line for the limits when an environment's baseline is outside the 20–70% RL should start from. */
function outsideBand(baseline: EvaluationReport[]): string {
  const low = baseline.filter((r) => r.successRate.value < 0.2).map((r) => `${r.env} (${pct(r.successRate.value)})`);
  const high = baseline.filter((r) => r.successRate.value > 0.7).map((r) => `${r.env} (${pct(r.successRate.value)})`);
  const parts = [
    ...(low.length > 0 ? [`below 20% on ${low.join(', ')}: RL there starts from fewer successes`] : []),
    ...(high.length > 0 ? [`above 70% on ${high.join(', ')}: little room left for RL to show`] : []),
  ];
  return parts.length > 0 ? `- Its baseline is outside the 20–70% it is meant to start RL from: ${parts.join('; ')}.\n` : '';
}

export function modelCard(f: CardFacts): string {
  const c = f.config;
  const s = f.settings;
  return `---
license: mit
library_name: transformers.js
pipeline_tag: text-generation
tags: [rlplay, llama, reinforcement-learning, agents]
---

# rlplay-agent-mini

The default model of [rlplay](../../../README.md): a ${(f.parameters / 1e6).toFixed(2)}M-parameter Llama made by rlplay
itself, from nothing, so that a first reinforcement-learning run needs no download and no keys.
It has read transcripts of rlplay's five built-in environments and speaks their formats, but it
is far from perfect: the point is to leave room for RL to show.

## How it was made

\`${f.regenerate}\` makes it (\`scripts/default-model/\`): the same weights again on the same GPU and
driver; another one rounds floats differently, so its weights and the figures below can differ:

1. **Data**: ${Object.entries(s.episodesPerEnv).map(([env, n]) => `${n} ${env}`).join(', ')} episodes (train split, difficulty ${s.difficulties.join(', ')}), played by each
   environment's scripted expert with noise — at each step, with probability ${s.noise}, a uniformly
   random valid action instead of the expert's — so the data holds mistakes, recoveries and failures.
   Success in the data: ${Object.entries(f.dataSuccess).map(([env, x]) => `${env} ${pct(x)}`).join(', ')}.
2. **Tokenizer**: a byte-level BPE of ${c.vocab_size} tokens (\`<s>\`, \`</s>\`, \`<pad>\`, the 256 bytes,
   and merges) trained on those transcripts; any text encodes.
3. **Model**: Llama architecture, ${c.num_hidden_layers} layers, hidden size ${c.hidden_size}, MLP ${c.intermediate_size},
   ${c.num_attention_heads} query heads sharing ${c.num_key_value_heads} key/value heads, tied embeddings, ${c.max_position_embeddings} positions,
   float32. Initialised at random, then trained full-parameter with rlplay's WGSL engine: ${s.epochs} epoch${s.epochs === 1 ? '' : 's'}
   over ${f.tokens} tokens of plain transcripts (\`Observation: … / Action: …\`, each cut after the last step that fits in ${s.maxTokens} tokens), the loss on the agent's
   action tokens only, AdamW (lr ${s.lr}, warm-up then cosine, weight decay 0.01), ${s.batchSize} transcripts
   per step.
4. **Choosing among valid actions**: then, on the same episodes' states, the loss −log π(expert | s)
   of the action-level policy (a softmax over the state's valid actions of their mean token
   log-probabilities), the expert's action as the label even where the episode took a random one;
   ${s.choice.episodesPerStep} episodes per step, AdamW (lr ${s.choice.lr}, warm-up then cosine), at most ${s.choice.steps} steps. Each
   environment stops once ${s.choice.probeEpisodes > 0
     ? `its greedy success reaches ${pct(s.choice.target)} on ${s.choice.probeEpisodes} train-split episodes, played at the start and every ${s.choice.probeEvery} steps`
     : `its greedy policy agrees with the expert over whole episodes in ${pct(s.choice.target)}
   of its last ${s.choice.window} episodes (measured before training on them)`}${targetsAndLimits(s.choice)}, so that RL has room left:
   ${Object.entries(f.choice.environments).map(([env, e]) => `${env} ${e.episodes} episodes (${choiceOutcome(e)})`).join(', ')}${f.choice.cutShortBy ? `; it ended after ${f.choice.steps} steps (${f.choice.cutShortBy === 'time budget' ? `its time budget of ${s.choice.maxSeconds / 60} minutes` : '--choice-stop-after'})` : ''}.

Both stages took ${(f.trainSeconds / 60).toFixed(0)} minutes on ${f.adapterName}.

## Baseline, before any RL

Greedy action-level policy (a softmax over each step's valid actions, scored by mean token
log-probability), test split, difficulty 1, ${s.evalEpisodes} episodes per environment, 95% Wilson intervals:

| environment | success | mean return | episode length |
| --- | --- | --- | --- |
${f.baseline.map((r) => `| ${r.env} | ${pct(r.successRate.value)} [${pct(r.successRate.low)}, ${pct(r.successRate.high)}] | ${r.meanReturn.value.toFixed(3)} | ${r.meanLength.value.toFixed(1)} |`).join('\n')}

## Use

\`\`\`sh
npx rlplay quickstart   # PPO on tool-use: success before and after, the adapter, the ONNX export
npx rlplay eval  --model public/models/rlplay-agent-mini --env tool-use --episodes 50
npx rlplay train --model public/models/rlplay-agent-mini --env tool-use --algo ppo --episodes 256 --out runs/tool-ppo
\`\`\`

## Limits

${outsideBand(f.baseline)}- It knows only the five built-in environments' transcripts, in the plain format (no chat template);
  it writes no other useful text.
- Its free-text actions (text mode) are less reliable than its choices among listed actions.
- Tiny and trained briefly on purpose: it is a starting point for RL, not a capable agent.

## Licence

MIT, like rlplay. The data was generated by rlplay's own environments; no third-party text.
`;
}

/** The per-environment exceptions to the choice stage's target, in words (empty when there are none). */
function targetsAndLimits(choice: { targetFor: Record<string, number>; maxStepsFor: Record<string, number> }): string {
  const parts = [
    ...Object.entries(choice.targetFor).map(([env, target]) => `${env}'s target is ${pct(target)}`),
    ...Object.entries(choice.maxStepsFor).map(([env, steps]) => (steps === 0 ? `${env} trains no step` : `${env} trains ${steps} step${steps === 1 ? '' : 's'} at most`)),
  ];
  return parts.length > 0 ? ` (${parts.join('; ')})` : '';
}

/** How one environment's choice training ended and its last estimate, in words. */
function choiceOutcome(e: ChoiceStageSummary['environments'][string]): string {
  if (e.stoppedBy === 'target') return `stopped at ${pct(e.estimate!)}`;
  return `${e.stoppedBy === 'step limit' ? 'stopped at its step limit' : 'to the end'}, ${e.estimate === null ? 'not measured' : `last ${pct(e.estimate)}`}`;
}
