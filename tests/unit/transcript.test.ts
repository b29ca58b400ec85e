// Transcripts: the agent's own tokens are the only actions, over multi-turn episodes, in the plain
// format and through a chat template.
import { existsSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { actionSpans, Transcript } from '../../src/agent/transcript.ts';
import type { ChatMessage } from '../../src/engine/model/types.ts';
import { loadTokenizer } from '../../src/engine/model/tokenizer.ts';
import { parseModelConfig } from '../../src/engine/model/config.ts';
import { MemoryModelSource, syntheticTokenizer, tinyModelConfig } from '../shared/tiny-model.ts';
import { loadFolderTokenizer, STORIES260K_DIR } from '../support/model-folder.ts';

const CHATML = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/**
 * The synthetic character-level tokenizer; with `merges`, also BPE merges of character pairs into
 * one token each; with `chat`, ChatML's markers and a chat template (ChatML unless given).
 */
async function tokenizer(chat: boolean, { merges = [], template = CHATML }: { merges?: string[]; template?: string } = {}) {
  const configJson = tinyModelConfig({ vocabSize: 120 });
  const files = syntheticTokenizer(120);
  const json = files.json as { added_tokens: object[]; model: { vocab: Record<string, number>; merges: string[] } };
  for (const merge of merges) {
    json.model.vocab[merge.replace(' ', '')] = Object.keys(json.model.vocab).length;
    json.model.merges.push(merge);
  }
  const tokenizerConfig: Record<string, unknown> = { ...(files.config as object) };
  if (chat) {
    // ChatML's markers as special tokens, and </s>-like end of turn
    const base = Object.keys(json.model.vocab).length;
    for (const [i, content] of ['<|im_start|>', '<|im_end|>'].entries()) {
      json.model.vocab[content] = base + i;
      json.added_tokens.push({ id: base + i, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
    }
    tokenizerConfig.chat_template = template;
    tokenizerConfig.eos_token = '<|im_end|>';
  }
  const text = (value: object) => new TextEncoder().encode(JSON.stringify(value));
  const source = new MemoryModelSource(new Map([['tokenizer.json', text(json)], ['tokenizer_config.json', text(tokenizerConfig)]]));
  return loadTokenizer(source, parseModelConfig(configJson));
}

describe('Transcript', () => {
  test('plain format: observations are context, each action is masked in, turn after turn', async () => {
    const tok = await tokenizer(false);
    const t = new Transcript(tok, 'plain', 'You are a shop assistant.');
    t.addObservation('hello');
    const first = t.encodeAction('lookup: 12');
    t.addAction(first);
    t.addObservation('order 12 shipped');
    const second = t.encodeAction('answer: shipped');
    t.addAction(second);
    expect(t.ids.length).toBe(t.actionMask.length);
    expect(t.actionMask.reduce((a, m) => a + m, 0)).toBe(first.length + second.length);
    // two separate action spans: the mask switches on, off, on
    const switches = t.actionMask.slice(1).filter((m, i) => m !== t.actionMask[i]).length;
    expect(switches).toBe(3);
    expect(tok.decode(t.ids, { skipSpecialTokens: true })).toBe('You are a shop assistant.\nObservation: hello\nAction: lookup: 12\nObservation: order 12 shipped\nAction: answer: shipped\n');
  });

  test('chat format: the template renders the turns; actions end with the end-of-turn token', async () => {
    const tok = await tokenizer(true);
    const t = new Transcript(tok, 'chat', 'be brief');
    t.addObservation('hi');
    const action = t.encodeAction('ok');
    expect(tok.eosTokenIds).toContain(action[action.length - 1]);
    t.addAction(action);
    t.addObservation('bye');
    expect(tok.decode(t.ids)).toBe('<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n');
    const masked = t.ids.filter((_, i) => t.actionMask[i]);
    expect(tok.decode(masked)).toBe('ok<|im_end|>');
  });

  test('chat format: an action sampled as a non-canonical encoding of its text is kept as sampled, and the conversation continues', async () => {
    const tok = await tokenizer(true, { merges: ['o k'] });
    const id = (piece: string) => tok.encode(piece, { addSpecialTokens: false });
    const [ok] = id('ok');
    const [o, k] = [...id('o'), ...id('k')];
    expect(tok.encode('ok', { addSpecialTokens: false })).toEqual([ok]); // canonical: one token
    const [imStart, imEnd] = [...id('<|im_start|>'), ...id('<|im_end|>')];
    const template = (messages: ChatMessage[], generation: boolean) =>
      tok.applyChatTemplate(messages, { addGenerationPrompt: generation });

    const t = new Transcript(tok, 'chat', 'be brief');
    t.addObservation('hi');
    // Sampled: "o", "k" (the text "ok", not as the tokenizer splits it), a stray special id the text drops, then end of turn.
    const first = [o, k, imStart, imEnd];
    t.addAction(first);
    t.addObservation('bye');
    // A second action sampled without its end-of-turn token, closed by the policy as context.
    const second = [...id('so'), o];
    t.addAction(second);
    t.addContext([imEnd]);
    t.addObservation('end');

    const conversation: ChatMessage[] = [
      { role: 'system', content: 'be brief' },
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'ok' },
      { role: 'user', content: 'bye' },
      { role: 'assistant', content: 'soo' },
      { role: 'user', content: 'end' },
    ];
    // Each observation's tokens are the template's rendering of that turn: the rendering of the
    // conversation through it, beyond the rendering of the conversation through the action before it.
    const firstAt = t.ids.indexOf(o);
    const opening = template(conversation.slice(0, 2), true);
    expect(t.ids.slice(0, firstAt)).toEqual(opening);
    const afterFirst = template(conversation.slice(0, 3), false);
    const firstEnd = afterFirst.indexOf(imEnd, opening.length) + 1; // the canonical action ends at its end-of-turn token
    const secondObservation = template(conversation.slice(0, 4), true).slice(firstEnd);
    expect(t.ids.slice(firstAt + first.length, firstAt + first.length + secondObservation.length)).toEqual(secondObservation);
    const secondAt = firstAt + first.length + secondObservation.length;
    expect(t.ids.slice(secondAt, secondAt + second.length + 1)).toEqual([...second, imEnd]);
    const canonicalThroughSecond = template(conversation.slice(0, 5), false);
    const secondEnd = canonicalThroughSecond.lastIndexOf(imEnd) + 1;
    expect(t.ids.slice(secondAt + second.length + 1)).toEqual(template(conversation, true).slice(secondEnd));
    expect(tok.decode(t.ids, { skipSpecialTokens: true })).toBe(tok.decode(template(conversation, true), { skipSpecialTokens: true }));

    // The mask marks exactly the sampled ids: not the closing context, not the observations.
    const masked = t.ids.flatMap((x, i) => (t.actionMask[i] ? [i] : []));
    expect(masked).toEqual([...first.map((_, j) => firstAt + j), ...second.map((_, j) => secondAt + j)]);
    expect(t.actionMask).toHaveLength(t.ids.length);
    // The next action as text follows the canonical rendering: what the template would write.
    expect(t.encodeAction('ok')).toEqual([ok, imEnd]);
  });

  test('chat format: a template that renders earlier turns differently later fails with a clear error', async () => {
    // ChatML that drops the content of assistant turns before the last message (as templates that strip old reasoning do).
    const dropping = "{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}{{ '<|im_start|>assistant\\n<|im_end|>\\n' }}{% else %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    const t = new Transcript(await tokenizer(true, { template: dropping }), 'chat', '');
    t.addObservation('hi');
    t.addAction(t.encodeAction('ok'));
    expect(() => t.addObservation('bye')).toThrow(/renders earlier turns differently/);
  });

  test('plain format: addContext appends context tokens', async () => {
    const tok = await tokenizer(false);
    const t = new Transcript(tok, 'plain', '');
    t.addObservation('hi');
    const action = tok.encode(' ok', { addSpecialTokens: false });
    t.addAction(action);
    t.addContext(tok.encode('\n', { addSpecialTokens: false }));
    t.addObservation('bye');
    expect(tok.decode(t.ids, { skipSpecialTokens: true })).toBe('Observation: hi\nAction: ok\nObservation: bye\nAction:');
    expect(t.ids.filter((_, i) => t.actionMask[i])).toEqual(action);
  });

  describe.skipIf(!existsSync(STORIES260K_DIR))('plain format with the SentencePiece tokenizer of stories260K', () => {
    test('observations and actions are tokenised as the whole text is: no word boundary at a join', async () => {
      const tok = await loadFolderTokenizer(STORIES260K_DIR);
      const t = new Transcript(tok, 'plain', 'Help Lily.');
      t.addObservation('It was sunny.');
      t.addAction(t.encodeAction('go to the park'));
      t.addObservation('Lily ran.');
      t.addAction(t.encodeAction('play'));
      t.addObservation('The end.');
      const text = 'Help Lily.\nObservation: It was sunny.\nAction: go to the park\nObservation: Lily ran.\nAction: play\nObservation: The end.\nAction:';
      expect(tok.decode(t.ids, { skipSpecialTokens: true })).toBe(text);
      expect(t.ids).toEqual(tok.encode(text));
      // Encoded on its own, an action starts with a lone word boundary: the space after "Action:" twice.
      expect(tok.decode([...tok.encode('Action:'), ...tok.encode(' play\n', { addSpecialTokens: false })], { skipSpecialTokens: true })).toBe('Action:  play\n');
    });

    test('without a system line, the first observation starts the text', async () => {
      const tok = await loadFolderTokenizer(STORIES260K_DIR);
      const t = new Transcript(tok, 'plain', '');
      t.addObservation('Hi.');
      t.addAction(t.encodeAction('hello'));
      t.addObservation('Bye.');
      expect(t.ids).toEqual(tok.encode('Observation: Hi.\nAction: hello\nObservation: Bye.\nAction:'));
    });
  });

  test('an observation of several megabytes that the context cannot hold is refused with both lengths, not a stack overflow', async () => {
    const tok = await tokenizer(false);
    const huge = 'the shelf holds a box. '.repeat(100_000); // 2.3 MB, a token per character
    for (const format of ['plain', 'chat'] as const) {
      const t = new Transcript(format === 'chat' ? await tokenizer(true) : tok, format, 'Find the box.', 2048);
      t.addObservation('You are in a shop.');
      t.addAction(t.encodeAction('look'));
      const before = t.ids.length;
      expect(() => t.addObservation(huge)).toThrow(/^the environment's observation takes 2,300,\d{3} tokens, but the model's context holds 2,048, so no transcript that holds it leaves room for an action: shorten the environment's observations, or use a model with a longer context$/);
      expect(t.ids).toHaveLength(before);
    }
    // Without a context length (as the tests above build it) the same observation is appended whole.
    const unlimited = new Transcript(tok, 'plain', '');
    unlimited.addObservation(huge);
    expect(unlimited.ids.length).toBeGreaterThan(huge.length);
    expect(unlimited.actionMask).toHaveLength(unlimited.ids.length);
  }, 60_000);

  test('a model without a chat template is told to use the plain format', async () => {
    const tok = await tokenizer(false);
    expect(() => new Transcript(tok, 'chat', '')).toThrow(/plain prompt format/);
  });
});

describe('actionSpans', () => {
  test('the runs of 1s of a non-contiguous mask', () => {
    // token: 0 1 2 3 4 5 6 7 8 9 10; role: p p a a o o a o a a a (p prompt, o observation, a action)
    expect(actionSpans([0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1])).toEqual([
      { start: 2, end: 4 },
      { start: 6, end: 7 },
      { start: 8, end: 11 },
    ]);
    expect(actionSpans([1, 1, 0])).toEqual([{ start: 0, end: 2 }]);
    expect(actionSpans([0, 0])).toEqual([]);
    expect(() => actionSpans([0, 2])).toThrow(/must be 0 or 1/);
  });
});
