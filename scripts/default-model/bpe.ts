// A byte-level BPE tokenizer trained on a corpus, written as a Hugging Face `tokenizer.json` (the
// GPT-2 scheme: text split by the GPT-2 pre-tokenizer pattern, each piece's UTF-8 bytes mapped to
// printable characters, then merged pairwise). Any text encodes — unseen characters fall back to
// their bytes — and transformers.js loads the file as it loads GPT-2's.
//
// Training: start from the 256 byte symbols; repeatedly merge the most frequent adjacent pair
// (ties broken by the lexically smallest pair, so the result is deterministic) until the vocabulary
// is full. Pair counts are updated incrementally over the distinct pieces, weighted by frequency.

/** GPT-2's pattern: contractions, letters, digits, other symbols, whitespace. */
const PIECE = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

/** GPT-2's byte → printable character table (bytes that print as themselves keep their character). */
export function bytesToUnicode(): string[] {
  const printable: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b);
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b);
  for (let b = 0xae; b <= 0xff; b++) printable.push(b);
  const table = new Array<string>(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) table[b] = printable.includes(b) ? String.fromCharCode(b) : String.fromCharCode(256 + extra++);
  return table;
}

export interface SpecialTokens {
  bos: string;
  eos: string;
  /** Padding, kept apart from EOS (attention masks are built from the pad id). */
  pad: string;
}

export interface TrainedBpe {
  /** The tokenizer.json object. */
  tokenizer: Record<string, unknown>;
  /** tokenizer_config.json. */
  config: Record<string, unknown>;
  vocabSize: number;
  ids: { bos: number; eos: number; pad: number };
}

/** Trains a byte-level BPE of `vocabSize` tokens (special tokens included) on `texts`. */
export function trainBpe(texts: Iterable<string>, vocabSize: number, special: SpecialTokens): TrainedBpe {
  const byteChar = bytesToUnicode();
  const encoder = new TextEncoder();
  // Distinct pieces with their counts, each as a list of symbols.
  const counts = new Map<string, number>();
  for (const text of texts) for (const piece of text.match(PIECE) ?? []) counts.set(piece, (counts.get(piece) ?? 0) + 1);
  const words = [...counts.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([piece, count]) => ({ symbols: Array.from(encoder.encode(piece), (b) => byteChar[b]), count }));

  const specials = [special.bos, special.eos, special.pad];
  const vocab = new Map<string, number>();
  specials.forEach((s) => vocab.set(s, vocab.size));
  for (const c of [...byteChar].sort()) vocab.set(c, vocab.size);
  if (vocabSize < vocab.size) throw new RangeError(`vocabSize must be at least ${vocab.size} (the 256 bytes and 3 special tokens)`);

  // pair → total count, and pair → the words it occurs in.
  const key = (a: string, b: string) => `${a}\u0000${b}`;
  const pairCounts = new Map<string, number>();
  const where = new Map<string, Set<number>>();
  const addPairs = (w: number, sign: 1 | -1) => {
    const { symbols, count } = words[w];
    for (let i = 0; i + 1 < symbols.length; i++) {
      const k = key(symbols[i], symbols[i + 1]);
      pairCounts.set(k, (pairCounts.get(k) ?? 0) + sign * count);
      if (sign > 0) {
        let set = where.get(k);
        if (!set) where.set(k, (set = new Set()));
        set.add(w);
      }
    }
  };
  words.forEach((_, w) => addPairs(w, 1));

  const merges: [string, string][] = [];
  while (vocab.size < vocabSize) {
    let best: string | null = null;
    let bestCount = 0;
    for (const [k, c] of pairCounts) {
      if (c > bestCount || (c === bestCount && c > 0 && best !== null && k < best)) {
        best = k;
        bestCount = c;
      }
    }
    if (best === null || bestCount < 2) break; // nothing left worth merging
    const [a, b] = best.split('\u0000');
    const merged = a + b;
    merges.push([a, b]);
    vocab.set(merged, vocab.size);
    for (const w of where.get(best) ?? []) {
      const symbols = words[w].symbols;
      addPairs(w, -1);
      const next: string[] = [];
      for (let i = 0; i < symbols.length; i++) {
        if (i + 1 < symbols.length && symbols[i] === a && symbols[i + 1] === b) {
          next.push(merged);
          i++;
        } else next.push(symbols[i]);
      }
      words[w].symbols = next;
      addPairs(w, 1);
    }
    where.delete(best);
    pairCounts.delete(best);
  }

  const ids = { bos: 0, eos: 1, pad: 2 };
  const added = specials.map((content, id) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }));
  const tokenizer = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: special.bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [{ SpecialToken: { id: special.bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { [special.bos]: { id: special.bos, ids: [ids.bos], tokens: [special.bos] } },
    },
    decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab: Object.fromEntries(vocab),
      merges: merges.map(([x, y]) => [x, y]),
    },
  };
  const config = {
    add_bos_token: true,
    add_eos_token: false,
    bos_token: special.bos,
    eos_token: special.eos,
    pad_token: special.pad,
    clean_up_tokenization_spaces: false,
    model_max_length: 4096,
    tokenizer_class: 'PreTrainedTokenizerFast',
    added_tokens_decoder: Object.fromEntries(added.map(({ id, ...rest }) => [String(id), rest])),
  };
  return { tokenizer, config, vocabSize: vocab.size, ids };
}
