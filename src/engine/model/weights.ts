// The weights of a Llama-family checkpoint in Hugging Face layout, read into host memory as float32
// and checked, name by name and shape by shape, against the config.
import { isPathInsideFolder, readJsonFile } from './source.ts';
import { openSafetensors, tensorToFloat32 } from './safetensors.ts';
import type { SafetensorsEntry } from './safetensors.ts';
import { DOWNLOAD_AGAIN, ModelLoadError } from './types.ts';
import type { HostLayer, HostLinear, HostTensor, HostWeights, ModelConfig, ModelSource } from './types.ts';

export interface WeightsProgress {
  file: string;
  loadedBytes: number;
  totalBytes: number | null;
}

const SINGLE_FILE = 'model.safetensors';
const INDEX_FILE = 'model.safetensors.index.json';

export async function loadHostWeights(
  source: ModelSource,
  config: ModelConfig,
  onProgress?: (progress: WeightsProgress) => void,
): Promise<HostWeights> {
  const plan = new WeightPlan(config);
  for (const [file, wanted] of await assignToFiles(source, config, plan)) {
    const report = (loadedBytes: number, totalBytes: number | null) => onProgress?.({ file, loadedBytes, totalBytes });
    // A tensor at a time where the source reads by offset (a shard may be larger than any one
    // array): the progress is then this reading, after any download into a cache that openFile
    // reports; other sources report the whole file's download.
    const stored = await openSafetensors(source, file, report);
    try {
      if (file === SINGLE_FILE) checkBiasesMatchConfig(stored.entries.keys(), config, file);
      let loadedBytes = 0;
      for (const planned of wanted) {
        const entry = findEntry(planned, stored.entries, file, config);
        planned.tensor.data = tensorToFloat32(await stored.read(entry), file);
        loadedBytes += entry.end - entry.begin;
        if (stored.readsByOffset) report(loadedBytes, stored.size);
      }
      if (stored.readsByOffset) report(stored.size, stored.size);
    } finally {
      await stored.close();
    }
  }
  return plan.weights;
}

/** One dimension of an expected shape, with the config fields it comes from (for messages). */
interface Dim {
  size: number;
  meaning: string;
}

interface PlannedTensor {
  /** Filled in place once its file is read, so `WeightPlan.weights` is complete at the end. */
  tensor: HostTensor;
  meaning: string;
}

/** The HostWeights the config calls for, with every tensor still empty. */
class WeightPlan {
  readonly tensors: PlannedTensor[] = [];
  readonly weights: HostWeights;

  constructor(config: ModelConfig) {
    const { hiddenSize, intermediateSize, numHeads, numKvHeads, headDim, vocabSize } = config;
    const hidden = { size: hiddenSize, meaning: `hidden_size (${hiddenSize})` };
    const ffn = { size: intermediateSize, meaning: `intermediate_size (${intermediateSize})` };
    const vocab = { size: vocabSize, meaning: `vocab_size (${vocabSize})` };
    const queries = {
      size: numHeads * headDim,
      meaning: `num_attention_heads × head_dim (${numHeads} × ${headDim})`,
    };
    const keys = {
      size: numKvHeads * headDim,
      meaning: `num_key_value_heads × head_dim (${numKvHeads} × ${headDim})`,
    };

    const embedding = this.tensor('model.embed_tokens.weight', [vocab, hidden]);
    const layers: HostLayer[] = [];
    for (let i = 0; i < config.numLayers; i++) {
      const prefix = `model.layers.${i}.`;
      layers.push({
        inputNorm: this.tensor(`${prefix}input_layernorm.weight`, [hidden]),
        q: this.linear(`${prefix}self_attn.q_proj`, queries, hidden, config.qkvBias),
        k: this.linear(`${prefix}self_attn.k_proj`, keys, hidden, config.qkvBias),
        v: this.linear(`${prefix}self_attn.v_proj`, keys, hidden, config.qkvBias),
        o: this.linear(`${prefix}self_attn.o_proj`, hidden, queries, config.oBias),
        postAttentionNorm: this.tensor(`${prefix}post_attention_layernorm.weight`, [hidden]),
        gate: this.linear(`${prefix}mlp.gate_proj`, ffn, hidden, false),
        up: this.linear(`${prefix}mlp.up_proj`, ffn, hidden, false),
        down: this.linear(`${prefix}mlp.down_proj`, hidden, ffn, false),
      });
    }
    const finalNorm = this.tensor('model.norm.weight', [hidden]);
    // Tied models share the embedding matrix; transformers ties them even when lm_head.weight is stored.
    const lmHead = config.tieWordEmbeddings ? embedding : this.tensor('lm_head.weight', [vocab, hidden]);
    this.weights = { embedding, lmHead, layers, finalNorm };
  }

  private tensor(name: string, dims: Dim[]): HostTensor {
    const tensor = { name, shape: dims.map((d) => d.size), data: new Float32Array(0) };
    this.tensors.push({ tensor, meaning: dims.map((d) => d.meaning).join(', ') });
    return tensor;
  }

  private linear(prefix: string, out: Dim, input: Dim, hasBias: boolean): HostLinear {
    return {
      weight: this.tensor(`${prefix}.weight`, [out, input]),
      bias: hasBias ? this.tensor(`${prefix}.bias`, [out]) : null,
    };
  }
}

/** Which checkpoint file holds each planned tensor: the single file, or the shards of the index's weight_map. */
async function assignToFiles(
  source: ModelSource,
  config: ModelConfig,
  plan: WeightPlan,
): Promise<Map<string, PlannedTensor[]>> {
  if (await source.exists(SINGLE_FILE)) return new Map([[SINGLE_FILE, plan.tensors]]);
  if (!(await source.exists(INDEX_FILE))) {
    throw new ModelLoadError(
      `no weights in ${source.location}: looked for ${SINGLE_FILE} and, for sharded checkpoints, ${INDEX_FILE}; ` +
        'only safetensors checkpoints are read (convert PyTorch .bin or GGUF files to safetensors)',
      SINGLE_FILE,
    );
  }
  const weightMap = readWeightMap(await readJsonFile(source, INDEX_FILE));
  checkBiasesMatchConfig(weightMap.keys(), config, INDEX_FILE);
  const byFile = new Map<string, PlannedTensor[]>();
  for (const planned of plan.tensors) {
    const file = weightMap.get(planned.tensor.name);
    if (file === undefined) {
      throw missingTensor(planned, INDEX_FILE, `${INDEX_FILE} (weight_map)`, [...weightMap.keys()], config);
    }
    const wanted = byFile.get(file) ?? [];
    wanted.push(planned);
    byFile.set(file, wanted);
  }
  return byFile;
}

function readWeightMap(index: unknown): Map<string, string> {
  const weightMap = (index as { weight_map?: unknown } | null)?.weight_map;
  if (typeof weightMap !== 'object' || weightMap === null || Array.isArray(weightMap)) {
    throw new ModelLoadError(
      `${INDEX_FILE} has no weight_map object (tensor name → shard file): the index is damaged`,
      INDEX_FILE,
      null,
      DOWNLOAD_AGAIN,
    );
  }
  const entries = Object.entries(weightMap);
  const bad = entries.find(([, file]) => typeof file !== 'string');
  if (bad) {
    throw new ModelLoadError(
      `${INDEX_FILE}: weight_map maps '${bad[0]}' to ${JSON.stringify(bad[1])}, not to a file name: ` +
        'the index is damaged',
      INDEX_FILE,
      bad[0],
      DOWNLOAD_AGAIN,
    );
  }
  const outside = entries.find(([, file]) => !isPathInsideFolder(file as string));
  if (outside) {
    throw new ModelLoadError(
      `${INDEX_FILE}: weight_map maps '${outside[0]}' to ${JSON.stringify(outside[1])}, which is not a file inside the ` +
        'model folder (shard names are relative paths without "..", "." or empty parts): the index is damaged or was made to read other files',
      INDEX_FILE,
      outside[0],
      DOWNLOAD_AGAIN,
    );
  }
  return new Map(entries as [string, string][]);
}

/** The stored entry of a planned tensor, checked for presence and shape. */
function findEntry(planned: PlannedTensor, stored: Map<string, SafetensorsEntry>, file: string, config: ModelConfig): SafetensorsEntry {
  const { tensor } = planned;
  const found = stored.get(tensor.name);
  if (!found) {
    if (file === SINGLE_FILE) throw missingTensor(planned, file, file, [...stored.keys()], config);
    throw new ModelLoadError(
      `${file} has no tensor '${tensor.name}' though ${INDEX_FILE} maps it there: the shard and the index do ` +
        'not match — download the model again',
      file,
      tensor.name,
    );
  }
  if (found.shape.join() !== tensor.shape.join()) {
    throw new ModelLoadError(
      `${file}: tensor '${tensor.name}' has shape [${found.shape.join(', ')}] but config.json implies ` +
        `[${tensor.shape.join(', ')}] (${planned.meaning}); config.json does not describe these weights — ` +
        'check those fields, or that both files come from the same model',
      file,
      tensor.name,
    );
  }
  return found;
}

function missingTensor(
  planned: PlannedTensor,
  file: string,
  searched: string,
  present: string[],
  config: ModelConfig,
): ModelLoadError {
  const { name } = planned.tensor;
  const examples = present.slice(0, 3).map((n) => `'${n}'`).join(', ');
  const holds = present.length === 0 ? 'it holds no tensors' : `it holds ${present.length}, such as ${examples}`;
  const fix =
    name === 'lm_head.weight'
      ? 'config.json says tie_word_embeddings is false, so the output layer must be stored; if the model shares ' +
        'it with the embedding, set tie_word_embeddings to true, otherwise the download is incomplete'
      : `a ${config.architecture} checkpoint in Hugging Face layout has it: the folder may hold another ` +
        'architecture, a model saved without its "model." prefix, or an incomplete download';
  return new ModelLoadError(
    `${searched} has no tensor '${name}' (${holds}); ${fix}`,
    file,
    name,
  );
}

/** Attention biases the config does not ask for would be silently ignored and give wrong outputs. */
function checkBiasesMatchConfig(names: Iterable<string>, config: ModelConfig, file: string) {
  for (const name of names) {
    const projection = /\.self_attn\.([qkvo])_proj\.bias$/.exec(name)?.[1];
    if (!projection) continue;
    const expected = projection === 'o' ? config.oBias : config.qkvBias;
    if (expected) continue;
    const fix =
      config.architecture === 'llama'
        ? 'config.json has attention_bias false; set it to true if the model has attention biases'
        : 'Qwen2 models have bias on q/k/v only; the checkpoint is not a Qwen2 model';
    throw new ModelLoadError(`${file} holds '${name}', a bias the config does not ask for: ${fix}`, file, name);
  }
}
