// The shapes that model loading hands to the engine. Loading (files, JSON, safetensors, tokenizer)
// and running (GPU buffers, kernels) are kept apart; these types are the seam between them.

export type Architecture = 'llama' | 'qwen2';

export type RopeScaling =
  | { type: 'linear'; factor: number }
  | { type: 'llama3'; factor: number; lowFreqFactor: number; highFreqFactor: number; originalMaxPositions: number };

/** A validated config.json, in the engine's own names. */
export interface ModelConfig {
  architecture: Architecture;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  vocabSize: number;
  maxPositions: number;
  rmsNormEps: number;
  ropeTheta: number;
  ropeScaling: RopeScaling | null;
  tieWordEmbeddings: boolean;
  /** Bias on q_proj, k_proj and v_proj (qwen2 always; llama when attention_bias). */
  qkvBias: boolean;
  /** Bias on o_proj (llama with attention_bias). */
  oBias: boolean;
  bosTokenId: number | null;
  eosTokenIds: number[];
}

/** A tensor in host memory, converted to float32, with the name it had in the checkpoint. */
export interface HostTensor {
  name: string;
  shape: number[];
  data: Float32Array;
}

export interface HostLinear {
  weight: HostTensor;
  bias: HostTensor | null;
}

export interface HostLayer {
  inputNorm: HostTensor;
  q: HostLinear;
  k: HostLinear;
  v: HostLinear;
  o: HostLinear;
  postAttentionNorm: HostTensor;
  gate: HostLinear;
  up: HostLinear;
  down: HostLinear;
}

/** All weights of a Llama-family decoder, shape-checked against its config. */
export interface HostWeights {
  embedding: HostTensor;
  /** The same object as `embedding` when the embeddings are tied. */
  lmHead: HostTensor;
  layers: HostLayer[];
  finalNorm: HostTensor;
}

/** Where a model folder's files come from: a local folder, or any http(s) base URL. */
export interface ModelSource {
  /** The folder path or base URL, for messages. */
  readonly location: string;
  exists(file: string): Promise<boolean>;
  readText(file: string): Promise<string>;
  readBytes(file: string, onProgress?: (loadedBytes: number, totalBytes: number | null) => void): Promise<Uint8Array>;
  /**
   * The file opened for reads by offset, where the source can (a local folder, a picked folder,
   * the Node Hub cache): safetensors shards reach 5 GB, more than one Node array holds (4 GiB), so
   * weights are read a tensor at a time. `onProgress` reports a download into a cache. Without
   * it, files are read whole.
   */
  openFile?(file: string, onProgress?: (loadedBytes: number, totalBytes: number | null) => void): Promise<RandomAccessFile>;
}

/** A file opened for reads at any offset. */
export interface RandomAccessFile {
  readonly size: number;
  /** `length` bytes from `offset`, reporting the bytes read so far; a file that shrank since it was opened is an error naming it. */
  read(offset: number, length: number, onProgress?: (loadedBytes: number) => void): Promise<Uint8Array>;
  close(): Promise<void>;
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
}

/** Text <-> token ids, through transformers.js. */
export interface Tokenizer {
  encode(text: string, options?: { addSpecialTokens?: boolean }): number[];
  decode(ids: number[], options?: { skipSpecialTokens?: boolean }): string;
  /** Whether the model folder carries a chat template. */
  readonly hasChatTemplate: boolean;
  /** Token ids of the conversation rendered by the chat template (throws if there is none). */
  applyChatTemplate(messages: ChatMessage[], options?: { addGenerationPrompt?: boolean }): number[];
  readonly bosTokenId: number | null;
  readonly eosTokenIds: number[];
  readonly padTokenId: number | null;
}

/** Everything read from a model folder, before anything touches the GPU. */
export interface LoadedModelFiles {
  source: ModelSource;
  config: ModelConfig;
  weights: HostWeights;
  tokenizer: Tokenizer;
}

/** The remedy for a downloaded file that is damaged or incomplete. */
export const DOWNLOAD_AGAIN = 'download it again';

/** A model folder that cannot be used, with what is wrong and how to fix it. */
export class ModelLoadError extends Error {
  /**
   * @param diagnosis what is wrong with the file
   * @param remedy what to do about it, where that depends on the file being a downloaded one
   *   ("download it again"): a caller that knows better, such as a run passing over a damaged
   *   checkpoint, reports the diagnosis alone
   */
  constructor(
    readonly diagnosis: string,
    readonly file: string,
    readonly tensor: string | null = null,
    readonly remedy: string | null = null,
  ) {
    super(remedy ? `${diagnosis} — ${remedy}` : diagnosis);
    this.name = 'ModelLoadError';
  }
}
