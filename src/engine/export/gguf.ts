// GGUF LoRA adapters for llama.cpp (`llama-cli --lora`, `llama-server --lora`), laid out as
// llama.cpp's convert_lora_to_gguf.py writes them, so they load on a GGUF of the same base model:
//   metadata  general.architecture (llama | qwen2), general.type = "adapter", adapter.type = "lora",
//             adapter.lora.alpha (float32; llama.cpp scales by alpha / r)
//   tensors   blk.{layer}.{attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down}.weight.lora_a
//             and .lora_b, float32. GGUF lists dimensions fastest-varying first, so PEFT's lora_A
//             [r, in] is ne = [in, r] and lora_B [out, r] is ne = [r, out], with the same bytes.
// llama.cpp stores a Llama's q and k projections with each head's rotary halves interleaved
// (convert_hf_to_gguf's permute), so lora_B of q_proj and k_proj gets the same row order; Qwen2
// keeps Hugging Face's order.
import { loraScaling, type HostLoraAdapter, type LoraTarget } from '../lora/adapter.ts';
import type { ModelConfig } from '../model/types.ts';

export const GGUF_ALIGNMENT = 32;
const GGUF_MAGIC = 0x46554747; // "GGUF", little-endian
const GGUF_VERSION = 3;
const GGML_TYPE_F32 = 0;
const enum ValueType {
  UINT32 = 4,
  FLOAT32 = 6,
  STRING = 8,
}

const GGUF_NAMES: Record<LoraTarget, string> = {
  q_proj: 'attn_q',
  k_proj: 'attn_k',
  v_proj: 'attn_v',
  o_proj: 'attn_output',
  gate_proj: 'ffn_gate',
  up_proj: 'ffn_up',
  down_proj: 'ffn_down',
};

type Metadata = [key: string, type: ValueType, value: string | number][];

interface GgufTensor {
  name: string;
  /** Fastest-varying first, as GGUF's ne. */
  dims: number[];
  data: Float32Array;
}

/**
 * The rows of a q or k projection's output reordered from Hugging Face's rotary layout (per head:
 * first halves, then second halves) to llama.cpp's (the two halves interleaved).
 */
export function interleaveRotaryRows(rowsMajor: Float32Array, heads: number, cols: number): Float32Array {
  const rows = rowsMajor.length / cols;
  const headDim = rows / heads;
  const half = headDim / 2;
  const out = new Float32Array(rowsMajor.length);
  for (let h = 0; h < heads; h++) {
    for (let part = 0; part < 2; part++) {
      for (let j = 0; j < half; j++) {
        const from = h * headDim + part * half + j;
        const to = h * headDim + j * 2 + part;
        out.set(rowsMajor.subarray(from * cols, (from + 1) * cols), to * cols);
      }
    }
  }
  return out;
}

/** The adapter as a GGUF LoRA file for llama.cpp, on the base model described by `config`. */
export function ggufLoraAdapter(adapter: HostLoraAdapter, config: ModelConfig, name = 'rlplay LoRA adapter'): Uint8Array {
  const { r } = adapter.settings;
  // llama.cpp scales by alpha / r; rsLoRA's alpha / sqrt(r) is the same scale with alpha * sqrt(r).
  const alpha = loraScaling(adapter.settings) * r;
  const metadata: Metadata = [
    ['general.architecture', ValueType.STRING, config.architecture],
    ['general.type', ValueType.STRING, 'adapter'],
    ['general.name', ValueType.STRING, name],
    ['general.alignment', ValueType.UINT32, GGUF_ALIGNMENT],
    ['adapter.type', ValueType.STRING, 'lora'],
    ['adapter.lora.alpha', ValueType.FLOAT32, alpha],
  ];
  const tensors: GgufTensor[] = adapter.modules.flatMap((m) => {
    const base = `blk.${m.layer}.${GGUF_NAMES[m.target]}.weight`;
    const heads = m.target === 'q_proj' ? config.numHeads : m.target === 'k_proj' ? config.numKvHeads : 0;
    const B = config.architecture === 'llama' && heads > 0 ? interleaveRotaryRows(m.B, heads, r) : m.B;
    return [
      { name: `${base}.lora_a`, dims: [m.inFeatures, r], data: m.A },
      { name: `${base}.lora_b`, dims: [r, m.outFeatures], data: B },
    ];
  });
  return writeGguf(metadata, tensors);
}

function writeGguf(metadata: Metadata, tensors: GgufTensor[]): Uint8Array {
  const encoder = new TextEncoder();
  const chunks: Uint8Array[] = [];
  let size = 0;
  const push = (bytes: Uint8Array) => {
    chunks.push(bytes);
    size += bytes.length;
  };
  const scalar = (bytes: number, write: (view: DataView) => void) => {
    const buffer = new Uint8Array(bytes);
    write(new DataView(buffer.buffer));
    push(buffer);
  };
  const u32 = (v: number) => scalar(4, (d) => d.setUint32(0, v, true));
  const u64 = (v: number) => scalar(8, (d) => d.setBigUint64(0, BigInt(v), true));
  const string = (s: string) => {
    const bytes = encoder.encode(s);
    u64(bytes.length);
    push(bytes);
  };

  u32(GGUF_MAGIC);
  u32(GGUF_VERSION);
  u64(tensors.length);
  u64(metadata.length);
  for (const [key, type, value] of metadata) {
    string(key);
    u32(type);
    if (type === ValueType.STRING) string(value as string);
    else if (type === ValueType.UINT32) u32(value as number);
    else scalar(4, (d) => d.setFloat32(0, value as number, true));
  }
  const aligned = (n: number) => Math.ceil(n / GGUF_ALIGNMENT) * GGUF_ALIGNMENT;
  let offset = 0;
  const offsets = tensors.map((t) => {
    const at = offset;
    offset = aligned(offset + t.data.byteLength);
    return at;
  });
  tensors.forEach((t, i) => {
    string(t.name);
    u32(t.dims.length);
    for (const d of t.dims) u64(d);
    u32(GGML_TYPE_F32);
    u64(offsets[i]);
  });
  push(new Uint8Array(aligned(size) - size));
  const dataStart = size;
  const out = new Uint8Array(dataStart + offset);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  tensors.forEach((t, i) => out.set(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), dataStart + offsets[i]));
  return out;
}
