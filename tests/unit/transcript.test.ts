// Transcripts: the agent's own tokens are the only actions, over multi-turn episodes, in the plain
// format and through a chat template.
import { describe, expect, test } from 'vitest';
import { Transcript } from '../../src/agent/transcript.ts';
import { loadTokenizer } from '../../src/engine/model/tokenizer.ts';
import { parseModelConfig } from '../../src/engine/model/config.ts';
import { MemoryModelSource, syntheticTokenizer, tinyModelConfig } from '../shared/tiny-model.ts';

const CHATML = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

async function tokenizer(chat: boolean) {
  const configJson = tinyModelConfig({ vocabSize: 120 });
  const files = syntheticTokenizer(120);
  const json = files.json as { added_tokens: object[]; model: { vocab: Record<string, number> } };
  const tokenizerConfig: Record<string, unknown> = { ...(files.config as object) };
  if (chat) {
    // ChatML's markers as special tokens, and </s>-like end of turn
    const base = Object.keys(json.model.vocab).length;
    for (const [i, content] of ['<|im_start|>', '<|im_end|>'].entries()) {
      json.model.vocab[content] = base + i;
      json.added_tokens.push({ id: base + i, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
    }
    tokenizerConfig.chat_template = CHATML;
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

  test('a model without a chat template is told to use the plain format', async () => {
    const tok = await tokenizer(false);
    expect(() => new Transcript(tok, 'chat', '')).toThrow(/plain prompt format/);
  });
});
