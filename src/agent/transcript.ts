// An episode as the model reads it: one growing sequence of token ids, with a mask marking the
// agent's own tokens. Only those are actions; the system prompt, observations and tool outputs are
// context, masked out of every loss. A multi-turn transcript alternates the two, so the mask is
// non-contiguous.
//
// With a chat template the turns are rendered by the tokenizer's template (system, user for
// observations, assistant for actions); without one, as a plain transcript:
//
//   <bos>{system}
//   Observation: {observation}
//   Action: {action}
//   Observation: ...
//
// Each plain-format piece of text is encoded as it follows the format's text before it (a newline
// before an observation, "Action:" before an action's text), not on its own: a SentencePiece-style
// tokenizer starts every text it encodes with a word boundary, and the transcript would hold one at
// every join that the whole text does not have (see encodeJoined).
//
// An observation whose tokens alone fill the model's context is refused with an error that says
// so: no transcript that holds it leaves room for an action.
//
// Action tokens are appended exactly as the policy produced them (sampled ids, or the encoding of a
// chosen valid action), so training sees the very sequence that was sampled. Sampled ids need not be
// the tokenizer's own encoding of their text (another split of the same text, special or unknown ids
// that the text drops), so in the chat format the transcript does not re-tokenize itself: it keeps,
// beside its ids, the template's canonical rendering of the conversation so far (each action as the
// template renders its text, up to its end-of-turn token), and each new turn's tokens are the part
// of the template's rendering of the longer conversation beyond that canonical rendering. The
// canonical rendering of earlier turns must stay the same as turns are added (else a clear error).
import { append } from '../common/tokens.ts';
import { encodeJoined } from '../engine/model/joined-text.ts';
import type { ChatMessage, Tokenizer } from '../engine/model/types.ts';

export type PromptFormat = 'chat' | 'plain';

export class Transcript {
  readonly ids: number[] = [];
  /** 1 for the agent's own tokens, 0 for context. */
  readonly actionMask: number[] = [];
  private readonly messages: ChatMessage[] = [];
  /**
   * Chat format: the template's rendering of the conversation the transcript holds, with every
   * action as the template renders its text (ids differ from it only inside action spans).
   */
  private canonical: number[] = [];
  /** Plain format: whether the transcript holds text yet (a system line or a turn), which the next observation follows. */
  private hasText: boolean;

  /** `contextLength`: the model's context in tokens (its positions), which no observation may fill. */
  constructor(
    private readonly tokenizer: Tokenizer,
    readonly format: PromptFormat,
    system: string,
    private readonly contextLength = Number.POSITIVE_INFINITY,
  ) {
    if (format === 'chat' && !tokenizer.hasChatTemplate) throw new Error('this model has no chat template: use the plain prompt format');
    this.hasText = system !== '';
    if (format === 'chat') {
      if (system) this.messages.push({ role: 'system', content: system });
    } else {
      this.push(tokenizer.encode(system ? `${system}\n` : ''), 0);
    }
  }

  /** Appends an observation and the cue after which the agent writes its action. */
  addObservation(text: string): void {
    if (this.format === 'plain') {
      const turn = this.encodeAfter(this.hasText ? '\n' : '', `Observation: ${text}\nAction:`);
      this.checkFits(turn);
      this.push(turn, 0);
      this.hasText = true;
      return;
    }
    const messages: ChatMessage[] = [...this.messages, { role: 'user', content: text }];
    const rendered = this.tokenizer.applyChatTemplate(messages, { addGenerationPrompt: true });
    const turn = this.suffixAfterCanonical(rendered);
    this.checkFits(turn);
    this.messages.push(messages.at(-1)!);
    this.push(turn, 0);
    this.canonical = rendered;
  }

  /** Appends the agent's action tokens as produced (ending with the end-of-turn tokens, if any). */
  addAction(ids: number[]): void {
    if (ids.length === 0) throw new RangeError('an action needs at least one token');
    if (this.format === 'chat') {
      const content = this.tokenizer.decode(ids, { skipSpecialTokens: true });
      const turn = this.renderAction(content);
      this.messages.push({ role: 'assistant', content });
      this.canonical = [...this.canonical, ...turn];
    }
    this.push(ids, 1);
  }

  /**
   * Appends context tokens (mask 0) that the policy adds itself, such as the end marker of an action
   * that was cut off before it. In the chat format they complete the current turn as the template
   * renders it (the canonical rendering already ends the action with its end-of-turn token), so they
   * do not change how the next turns are rendered.
   */
  addContext(ids: number[]): void {
    this.push(ids, 0);
  }

  /**
   * The tokens of an action written as text, as they would follow the current transcript: for the
   * chat format including the template's end-of-turn marker, for the plain format ending with a newline.
   */
  encodeAction(text: string): number[] {
    if (this.format === 'plain') return this.encodeAfter('Action:', ` ${text}\n`);
    return this.renderAction(text);
  }

  /**
   * The plain format's tokens of `text` where it follows `context` in the transcript's text: the
   * part of their joint encoding after `context`. When the join falls inside a token, the tokens
   * before `text` are already in the transcript (an action's may be sampled ones), so `text` is
   * encoded on its own.
   */
  private encodeAfter(context: string, text: string): number[] {
    const options = { addSpecialTokens: false };
    if (context === '') return this.tokenizer.encode(text, options);
    const joined = encodeJoined(this.tokenizer, context, text, options);
    return joined.joinInsideToken ? this.tokenizer.encode(text, options) : joined.completion;
  }

  /** An observation's turn must leave room in the model's context for at least one action token. */
  private checkFits(turn: number[]): void {
    if (turn.length < this.contextLength) return;
    throw new Error(
      `the environment's observation takes ${turn.length.toLocaleString('en-US')} tokens, but the model's context holds ` +
        `${this.contextLength.toLocaleString('en-US')}, so no transcript that holds it leaves room for an action: ` +
        "shorten the environment's observations, or use a model with a longer context",
    );
  }

  /**
   * The template's tokens of an assistant turn with `content` after the canonical rendering: up to
   * and including its end-of-turn token. Templates close an assistant turn with an end-of-turn token
   * and often a newline after it; the action ends at the end-of-turn token, the newline belongs to
   * the next turn's rendering.
   */
  private renderAction(content: string): number[] {
    const rendered = this.tokenizer.applyChatTemplate([...this.messages, { role: 'assistant', content }]);
    const suffix = this.suffixAfterCanonical(rendered);
    const end = suffix.findIndex((id) => this.tokenizer.eosTokenIds.includes(id));
    return end >= 0 ? suffix.slice(0, end + 1) : suffix;
  }

  private push(ids: number[], mask: 0 | 1): void {
    append(this.ids, ids);
    for (let i = 0; i < ids.length; i++) this.actionMask.push(mask);
  }

  /** The tokens a rendering of a longer conversation adds after the canonical rendering of the transcript's. */
  private suffixAfterCanonical(rendered: number[]): number[] {
    const prefix = this.canonical;
    for (let i = 0; i < prefix.length; i++) {
      if (rendered[i] !== prefix[i]) {
        throw new Error(
          `the chat template renders earlier turns differently once later turns are added (token ${i}), so the ` +
            'transcript cannot grow turn by turn; use the plain prompt format with this model',
        );
      }
    }
    return rendered.slice(prefix.length);
  }
}

/** The tokens of one environment step's action: [start, end) in the transcript. */
export interface ActionSpan {
  start: number;
  end: number;
}

/**
 * The maximal runs of 1s in an action mask, in order: one span per action, since context tokens
 * (mask 0: the prompt, observations, tool output) separate a transcript's actions.
 */
export function actionSpans(actionMask: readonly number[]): ActionSpan[] {
  const spans: ActionSpan[] = [];
  actionMask.forEach((m, t) => {
    if (m !== 0 && m !== 1) throw new RangeError(`action mask entry ${t} is ${m}; it must be 0 or 1`);
    if (m === 1 && actionMask[t - 1] !== 1) spans.push({ start: t, end: t + 1 });
    else if (m === 1) spans[spans.length - 1].end = t + 1;
  });
  return spans;
}
