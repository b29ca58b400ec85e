// The model folder's tokenizer through transformers.js, built from files we have read ourselves, so
// the same code serves local folders and URLs and transformers.js never fetches anything.
import { PreTrainedTokenizer } from '@huggingface/transformers';
import { readJsonFile } from './source.ts';
import { ModelLoadError } from './types.ts';
import type { ChatMessage, ModelConfig, ModelSource, Tokenizer } from './types.ts';

const TOKENIZER_FILE = 'tokenizer.json';
const TOKENIZER_CONFIG_FILE = 'tokenizer_config.json';
const CHAT_TEMPLATE_FILE = 'chat_template.jinja';
const GENERATION_CONFIG_FILE = 'generation_config.json';

export async function loadTokenizer(source: ModelSource, config: ModelConfig): Promise<Tokenizer> {
  const [hasTokenizer, hasTokenizerConfig, hasChatTemplateFile, hasGenerationConfig] = await Promise.all(
    [TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, CHAT_TEMPLATE_FILE, GENERATION_CONFIG_FILE].map((f) => source.exists(f)),
  );
  if (!hasTokenizer) {
    throw new ModelLoadError(
      `${source.location} has no ${TOKENIZER_FILE}: the model folder must hold the Hugging Face tokenizers file ` +
        `${TOKENIZER_FILE} (a folder with only a SentencePiece tokenizer.model needs it made, e.g. by saving ` +
        'the tokenizer with transformers in Python)',
      TOKENIZER_FILE,
    );
  }
  const tokenizerJson = await readJsonObject(source, TOKENIZER_FILE);
  const tokenizerConfig = hasTokenizerConfig ? await readJsonObject(source, TOKENIZER_CONFIG_FILE) : {};
  const generationConfig = hasGenerationConfig ? await readJsonObject(source, GENERATION_CONFIG_FILE) : {};
  // transformers saves templates to chat_template.jinja nowadays, and prefers it to tokenizer_config's.
  if (hasChatTemplateFile) tokenizerConfig.chat_template = await source.readText(CHAT_TEMPLATE_FILE);
  const chatTemplateFile = hasChatTemplateFile ? CHAT_TEMPLATE_FILE : TOKENIZER_CONFIG_FILE;

  let tokenizer: PreTrainedTokenizer;
  try {
    // AutoTokenizer would pick a subclass by tokenizer_class; for decoder-only models those differ
    // only in padding side, and the engine pads by itself.
    tokenizer = new PreTrainedTokenizer(tokenizerJson, tokenizerConfig);
  } catch (error) {
    throw new ModelLoadError(
      `${TOKENIZER_FILE} could not be loaded by transformers.js (${(error as Error).message}); it must be a ` +
        'Hugging Face tokenizers file, as saved with a fast tokenizer',
      TOKENIZER_FILE,
      null,
      'download it again or re-save it',
    );
  }
  checkVocabularyFits(tokenizer, config);

  return new TransformersTokenizer(tokenizer, source.location, chatTemplateFile, {
    bosTokenId: idOrNull(tokenizer.bos_token_id) ?? idOrNull(generationConfig.bos_token_id) ?? config.bosTokenId,
    eosTokenIds: unique([
      ...idList(generationConfig.eos_token_id),
      ...config.eosTokenIds,
      ...idList(tokenizer.eos_token_id),
    ]),
    // Only a pad token the folder names: transformers.js would fall back to EOS, and pad == EOS breaks
    // attention masks that are built from the pad id.
    padTokenId: configuredTokenId(tokenizer, tokenizerConfig.pad_token),
  });
}

class TransformersTokenizer implements Tokenizer {
  readonly bosTokenId: number | null;
  readonly eosTokenIds: number[];
  readonly padTokenId: number | null;

  constructor(
    private readonly tokenizer: PreTrainedTokenizer,
    private readonly location: string,
    private readonly chatTemplateFile: string,
    ids: { bosTokenId: number | null; eosTokenIds: number[]; padTokenId: number | null },
  ) {
    this.bosTokenId = ids.bosTokenId;
    this.eosTokenIds = ids.eosTokenIds;
    this.padTokenId = ids.padTokenId;
  }

  get hasChatTemplate(): boolean {
    return this.tokenizer.chat_template != null;
  }

  /** Special tokens (BOS for Llama) come from tokenizer.json's post-processor, as in transformers.js. */
  encode(text: string, options?: { addSpecialTokens?: boolean }): number[] {
    return this.tokenizer.encode(text, { add_special_tokens: options?.addSpecialTokens ?? true });
  }

  decode(ids: number[], options?: { skipSpecialTokens?: boolean }): string {
    // transformers.js rejects an empty list; nothing decodes to nothing.
    if (ids.length === 0) return '';
    return this.tokenizer.decode(ids, { skip_special_tokens: options?.skipSpecialTokens ?? false });
  }

  applyChatTemplate(messages: ChatMessage[], options?: { addGenerationPrompt?: boolean }): number[] {
    if (!this.hasChatTemplate) {
      throw new ModelLoadError(
        `${this.location} has no chat template (chat_template in ${TOKENIZER_CONFIG_FILE}, or ${CHAT_TEMPLATE_FILE}); ` +
          'use plain-text prompts with this model',
        TOKENIZER_CONFIG_FILE,
      );
    }
    try {
      return this.tokenizer.apply_chat_template(messages, {
        add_generation_prompt: options?.addGenerationPrompt ?? false,
        tokenize: true,
        return_tensor: false,
        return_dict: false,
      });
    } catch (error) {
      throw new ModelLoadError(
        `the chat template in ${this.chatTemplateFile} failed: ${(error as Error).message}`,
        this.chatTemplateFile,
      );
    }
  }
}

async function readJsonObject(source: ModelSource, file: string): Promise<Record<string, unknown>> {
  const json = await readJsonFile(source, file);
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw new ModelLoadError(`${file} must hold a JSON object but holds ${JSON.stringify(json)}`, file);
  }
  return json as Record<string, unknown>;
}

/** Token ids beyond the embedding matrix would index past it: the tokenizer belongs to another model. */
function checkVocabularyFits(tokenizer: PreTrainedTokenizer, config: ModelConfig) {
  let largestId = -1;
  for (const id of tokenizer.get_vocab().values()) largestId = Math.max(largestId, id);
  if (largestId >= config.vocabSize) {
    throw new ModelLoadError(
      `${TOKENIZER_FILE} has token ids up to ${largestId} but config.json has vocab_size ${config.vocabSize}: ` +
        'the tokenizer and the weights come from different models',
      TOKENIZER_FILE,
    );
  }
}

/** The id of a special token as tokenizer_config.json gives it: a string, an AddedToken {content}, or null. */
function configuredTokenId(tokenizer: PreTrainedTokenizer, token: unknown): number | null {
  const text = typeof token === 'string' ? token : (token as { content?: unknown } | null)?.content;
  return typeof text === 'string' ? idOrNull(tokenizer.convert_tokens_to_ids(text)) : null;
}

function idOrNull(id: unknown): number | null {
  return typeof id === 'number' && Number.isInteger(id) && id >= 0 ? id : null;
}

function idList(ids: unknown): number[] {
  return (Array.isArray(ids) ? ids : [ids]).map(idOrNull).filter((id) => id !== null);
}

function unique(ids: number[]): number[] {
  return [...new Set(ids)];
}
