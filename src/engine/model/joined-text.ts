// Text pieces that follow other text, tokenised and decoded in that context. A text's tokens are not
// its pieces' tokens put together: a SentencePiece-style tokenizer starts every text it encodes with
// a word boundary ('▁', decoded as a space that the decoder strips again from the start of a text),
// and a BPE merge may join the end of one piece to the start of the next. So a piece after a prompt
// is encoded together with the prompt, and new tokens are decoded together with the ones before them.
import type { Tokenizer } from './types.ts';

/** `prompt + completion` encoded as one text, cut where the completion begins. */
export interface JoinedEncoding {
  /** The tokens that hold only prompt characters (BOS first when the encoding adds it). */
  prompt: number[];
  /** The rest: every token that holds a character of the completion. */
  completion: number[];
  /** Whether the join falls inside a token: the first completion token then also holds the prompt's last characters. */
  joinInsideToken: boolean;
}

/**
 * Encodes `prompt + completion` as one text and splits its tokens, as TRL does for prompt-completion
 * data: the prompt's tokens are those of the joint encoding, not of the prompt encoded alone. The
 * rule at the join: a token belongs to the completion if it holds any completion character, so a
 * token that spans the join (the prompt "Lily. " and the completion "It", encoded as '▁It') is learnt
 * as part of the completion. transformers.js gives no character offsets, so the cut is found by
 * prefix matching: the joint tokens that the prompt's own encoding begins with hold only prompt
 * characters; past them, the longest run of joint tokens that decodes to a prefix of the prompt's text.
 */
export function encodeJoined(
  tokenizer: Tokenizer,
  prompt: string,
  completion: string,
  options?: { addSpecialTokens?: boolean },
): JoinedEncoding {
  const whole = tokenizer.encode(prompt + completion, options);
  const own = tokenizer.encode(prompt, options);
  let cut = 0;
  while (cut < own.length && whole[cut] === own[cut]) cut++;
  if (cut === own.length) return { prompt: whole.slice(0, cut), completion: whole.slice(cut), joinInsideToken: false };
  const promptText = tokenizer.decode(own);
  // Decoded text only grows with more tokens (an unfinished multi-byte character decodes to one
  // replacement character, no longer than the character itself), so the search ends once it is
  // longer than the prompt's text.
  let decoded = tokenizer.decode(whole.slice(0, cut));
  for (let k = cut + 1; k <= whole.length; k++) {
    const text = tokenizer.decode(whole.slice(0, k));
    if (text.length > promptText.length) break;
    if (promptText.startsWith(text)) [cut, decoded] = [k, text];
  }
  return { prompt: whole.slice(0, cut), completion: whole.slice(cut), joinInsideToken: decoded !== promptText };
}

/**
 * The text that `newIds` add after `promptIds`, as printed after the prompt: decoded together with
 * the prompt's tokens, so that a space the decoder would strip from the start of a text (a
 * SentencePiece word boundary) stays, and the prompt's text is cut off.
 */
export function continuationText(tokenizer: Tokenizer, promptIds: number[], newIds: number[]): string {
  const options = { skipSpecialTokens: true };
  const head = tokenizer.decode(promptIds, options);
  const whole = tokenizer.decode([...promptIds, ...newIds], options);
  return whole.startsWith(head) ? whole.slice(head.length) : tokenizer.decode(newIds, options);
}
