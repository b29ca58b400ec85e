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
// Action tokens are appended exactly as the policy produced them (sampled ids, or the encoding of a
// chosen valid action), so training sees the very sequence that was sampled.
import type { ChatMessage, Tokenizer } from '../engine/model/types.ts';

export type PromptFormat = 'chat' | 'plain';

export class Transcript {
  readonly ids: number[] = [];
  /** 1 for the agent's own tokens, 0 for context. */
  readonly actionMask: number[] = [];
  private readonly messages: ChatMessage[] = [];

  constructor(
    private readonly tokenizer: Tokenizer,
    readonly format: PromptFormat,
    system: string,
  ) {
    if (format === 'chat' && !tokenizer.hasChatTemplate) throw new Error('this model has no chat template: use the plain prompt format');
    if (format === 'chat') {
      if (system) this.messages.push({ role: 'system', content: system });
    } else {
      this.push(tokenizer.encode(system ? `${system}\n` : ''), 0);
    }
  }

  /** Appends an observation and the cue after which the agent writes its action. */
  addObservation(text: string): void {
    if (this.format === 'plain') {
      this.push(this.tokenizer.encode(`Observation: ${text}\nAction:`, { addSpecialTokens: false }), 0);
      return;
    }
    this.messages.push({ role: 'user', content: text });
    this.push(this.renderedSuffix(this.tokenizer.applyChatTemplate(this.messages, { addGenerationPrompt: true })), 0);
  }

  /** Appends the agent's action tokens as produced (ending with the end-of-turn tokens, if any). */
  addAction(ids: number[]): void {
    if (ids.length === 0) throw new RangeError('an action needs at least one token');
    this.push(ids, 1);
    if (this.format === 'chat') {
      this.messages.push({ role: 'assistant', content: this.tokenizer.decode(ids, { skipSpecialTokens: true }) });
    }
  }

  /**
   * The tokens of an action written as text, as they would follow the current transcript: for the
   * chat format including the template's end-of-turn marker, for the plain format ending with a newline.
   */
  encodeAction(text: string): number[] {
    if (this.format === 'plain') return this.tokenizer.encode(` ${text}\n`, { addSpecialTokens: false });
    const withAction = this.tokenizer.applyChatTemplate([...this.messages, { role: 'assistant', content: text }]);
    const suffix = this.suffixAfter(withAction, this.ids);
    // Templates close an assistant turn with an end-of-turn token and often a newline after it; the
    // action ends at the end-of-turn token, the newline belongs to the next rendering.
    const end = suffix.findIndex((id) => this.tokenizer.eosTokenIds.includes(id));
    return end >= 0 ? suffix.slice(0, end + 1) : suffix;
  }

  private push(ids: number[], mask: 0 | 1): void {
    this.ids.push(...ids);
    for (let i = 0; i < ids.length; i++) this.actionMask.push(mask);
  }

  /** The tokens a fresh rendering adds after what the transcript already holds. */
  private renderedSuffix(rendered: number[]): number[] {
    return this.suffixAfter(rendered, this.ids);
  }

  private suffixAfter(rendered: number[], prefix: number[]): number[] {
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
