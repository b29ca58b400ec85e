// Supervised fine-tuning data and its schedule: JSONL examples, tokenised; the loss sees only the
// completion tokens (or, for plain text, every token after the first). A prompt and its completion
// are encoded as one text and cut at the join (encodeJoined), as TRL does: encoded apart, a
// SentencePiece-style tokenizer would start the completion with a word boundary of its own, and
// the model would learn to write two spaces there.
import { mulberry32 } from '../../common/random.ts';
import { encodeJoined } from '../model/joined-text.ts';
import type { Tokenizer } from '../model/types.ts';
import type { TrainBatch } from './batch.ts';

export interface SftExample {
  /** Tokens the model is given (no loss on them), BOS included: those of the joint encoding that hold only prompt characters. */
  prompt: number[];
  /** Tokens the model learns to produce: every token that holds a completion character. */
  completion: number[];
}

/** Parses {"prompt", "completion"} or {"text"} lines; errors name the line and what it should hold. */
export function parseSftJsonl(text: string, tokenizer: Tokenizer, file = 'data'): SftExample[] {
  const examples: SftExample[] = [];
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    const where = `${file}:${i + 1}`;
    let record: unknown;
    try {
      record = JSON.parse(line);
    } catch (error) {
      throw new Error(`${where}: not valid JSON (${(error as Error).message}); each line must be one JSON object`);
    }
    const r = record as Record<string, unknown>;
    if (typeof r.text === 'string') {
      const ids = tokenizer.encode(r.text);
      if (ids.length < 2) throw new Error(`${where}: "text" encodes to ${ids.length} token(s); it needs at least one token to learn after the first`);
      examples.push({ prompt: ids.slice(0, 1), completion: ids.slice(1) });
    } else if (typeof r.prompt === 'string' && typeof r.completion === 'string') {
      const { prompt, completion } = encodeJoined(tokenizer, r.prompt, r.completion);
      if (completion.length === 0) throw new Error(`${where}: "completion" is empty; there is nothing to learn`);
      // Nothing predicts a sequence's first token: it may not be a completion token.
      if (prompt.length === 0) throw new Error(`${where}: "prompt" encodes to no token before the completion (this tokenizer adds no BOS); give a prompt with at least one whole token`);
      examples.push({ prompt, completion });
    } else {
      throw new Error(`${where}: expected {"prompt": "...", "completion": "..."} or {"text": "..."}, got keys ${JSON.stringify(Object.keys(r ?? {}))}`);
    }
  });
  if (examples.length === 0) throw new Error(`${file}: no examples; write one JSON object per line`);
  return examples;
}

/** Example indices of every step: each epoch a fresh seeded shuffle, cut into batches. */
export function sftSchedule(count: number, batchSize: number, epochs: number, seed: number): number[][] {
  if (!Number.isInteger(batchSize) || batchSize < 1) throw new RangeError(`batch size must be a whole number >= 1, got ${batchSize}`);
  if (!Number.isInteger(epochs) || epochs < 1) throw new RangeError(`epochs must be a whole number >= 1, got ${epochs}`);
  const steps: number[][] = [];
  for (let epoch = 0; epoch < epochs; epoch++) {
    const random = mulberry32(seed * 1000003 + epoch);
    const order = Array.from({ length: count }, (_, i) => i);
    for (let i = count - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [order[i], order[j]] = [order[j], order[i]];
    }
    for (let i = 0; i < count; i += batchSize) steps.push(order.slice(i, i + batchSize));
  }
  return steps;
}

export function sftBatch(examples: SftExample[]): TrainBatch {
  return {
    sequences: examples.map((e) => [...e.prompt, ...e.completion]),
    actionMask: examples.map((e) => [...e.prompt.map(() => 0), ...e.completion.map(() => 1)]),
  };
}
