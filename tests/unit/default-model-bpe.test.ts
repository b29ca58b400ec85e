// The default model's tokenizer: a byte-level BPE trained by scripts/default-model/bpe.ts must load
// through our loader (transformers.js), round-trip any text — including characters it never saw —
// add BOS like the post-processor says, and come out the same from the same corpus.
import { describe, expect, test } from 'vitest';
import { MemoryModelSource } from '../../src/engine/model/memory-source.ts';
import { parseModelConfig } from '../../src/engine/model/config.ts';
import { loadTokenizer } from '../../src/engine/model/tokenizer.ts';
import { trainBpe } from '../../scripts/default-model/bpe.ts';
import { tinyModelConfig } from '../shared/tiny-model.ts';

const corpus = ['Observation: the order ORD-1101 is late.\nAction:', ' lookup: order ORD-1101\n', ' answer: 9100\n', 'Observation: 3 letter(s) in the right place.\nAction:', ' guess: apple\n'];

async function tokenizerOf(bpe: ReturnType<typeof trainBpe>) {
  const json = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
  const config = { ...tinyModelConfig({ vocabSize: bpe.vocabSize }), bos_token_id: bpe.ids.bos, eos_token_id: bpe.ids.eos };
  const source = new MemoryModelSource(new Map([['tokenizer.json', json(bpe.tokenizer)], ['tokenizer_config.json', json(bpe.config)]]));
  return loadTokenizer(source, parseModelConfig(config));
}

describe('byte-level BPE of the default model', () => {
  test('loads in transformers.js, adds BOS, round-trips seen and unseen text, merges what is frequent', async () => {
    const bpe = trainBpe(corpus.concat(corpus, corpus), 300, { bos: '<s>', eos: '</s>', pad: '<pad>' });
    expect(bpe.vocabSize).toBeGreaterThan(259);
    const tokenizer = await tokenizerOf(bpe);
    expect(tokenizer.bosTokenId).toBe(bpe.ids.bos);
    expect(tokenizer.eosTokenIds).toContain(bpe.ids.eos);
    for (const text of [corpus[0], ' answer: 9100\n', 'Ünïcödé ✓ and tabs\tand\nnewlines — 漢字', '']) {
      const ids = tokenizer.encode(text, { addSpecialTokens: false });
      expect(tokenizer.decode(ids, { skipSpecialTokens: true })).toBe(text);
    }
    expect(tokenizer.encode('Observation')[0]).toBe(bpe.ids.bos);
    // A frequent word becomes one token; raw bytes would need 11.
    expect(tokenizer.encode('Observation', { addSpecialTokens: false }).length).toBe(1);
  });

  test('the same corpus gives the same tokenizer', () => {
    const a = trainBpe(corpus, 280, { bos: '<s>', eos: '</s>', pad: '<pad>' });
    const b = trainBpe([...corpus], 280, { bos: '<s>', eos: '</s>', pad: '<pad>' });
    expect(JSON.stringify(a.tokenizer)).toBe(JSON.stringify(b.tokenizer));
  });
});
