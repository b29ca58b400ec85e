import type { Tokenizer } from '../engine/index.ts';

/**
 * The text that `newIds` add after `promptIds`. Decoding the new ids alone would lose the space
 * that SentencePiece-style tokenizers strip from the first token of a text, so decode prompt and
 * continuation together and cut off the prompt's text.
 */
export function continuationText(tokenizer: Tokenizer, promptIds: number[], newIds: number[]): string {
  const options = { skipSpecialTokens: true };
  const head = tokenizer.decode(promptIds, options);
  const whole = tokenizer.decode([...promptIds, ...newIds], options);
  return whole.startsWith(head) ? whole.slice(head.length) : tokenizer.decode(newIds, options);
}
