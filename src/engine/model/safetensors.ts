// The safetensors format, read by hand: an 8-byte little-endian header length N, N bytes of JSON
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}), then the data, with
// offsets counted from the end of the header. https://github.com/huggingface/safetensors
import { DOWNLOAD_AGAIN, ModelLoadError } from './types.ts';
import type { ModelSource, RandomAccessFile } from './types.ts';

export interface SafetensorsTensor {
  name: string;
  /** The safetensors dtype name: F32, F16, BF16, I64, ... */
  dtype: string;
  shape: number[];
  /** A view into the file's bytes (not a copy, not necessarily aligned). */
  bytes: Uint8Array;
}

/** A tensor's place in a safetensors file, read from its header. */
export interface SafetensorsEntry {
  name: string;
  dtype: string;
  shape: number[];
  /** Where its bytes start and end, counted from the start of the file. */
  begin: number;
  end: number;
}

/** A safetensors file opened for reading one tensor at a time (a shard may be larger than any one array). */
export interface SafetensorsReader {
  /** Every tensor of the header, in header order. */
  readonly entries: Map<string, SafetensorsEntry>;
  /** The file's size in bytes. */
  readonly size: number;
  /** Whether tensors are read from the file as asked for (else the file was read whole first). */
  readonly readsByOffset: boolean;
  read(entry: SafetensorsEntry): Promise<SafetensorsTensor>;
  close(): Promise<void>;
}

const BYTES_PER_ELEMENT: Record<string, number> = {
  F64: 8, F32: 4, F16: 2, BF16: 2, F8_E4M3: 1, F8_E5M2: 1,
  I64: 8, I32: 4, I16: 2, I8: 1, U64: 8, U32: 4, U16: 2, U8: 1, BOOL: 1,
};
const CONVERTIBLE_DTYPES = 'F32, F16 and BF16';
const TRUNCATED = 'the file is truncated or not a safetensors file';
/** The safetensors library refuses larger headers; a larger length is a damaged file, not a header to allocate. */
const MAX_HEADER_BYTES = 100_000_000;
/** Enough of the file's start for the header length and a Git LFS pointer's first line. */
const PREAMBLE_BYTES = 24;

/** A safetensors file held whole in memory: every tensor as a view into `bytes`. */
export function parseSafetensors(bytes: Uint8Array, file: string): Map<string, SafetensorsTensor> {
  const headerEnd = headerEndOf(bytes.subarray(0, PREAMBLE_BYTES), bytes.length, file);
  const entries = parseEntries(bytes.subarray(8, headerEnd), headerEnd, bytes.length, file);
  const tensors = new Map<string, SafetensorsTensor>();
  for (const { name, dtype, shape, begin, end } of entries.values()) tensors.set(name, { name, dtype, shape, bytes: bytes.subarray(begin, end) });
  return tensors;
}

/**
 * A safetensors file of `source`, its header read with a small read and each tensor from its
 * offset when the source reads by offset; other sources' files are read whole.
 */
export async function openSafetensors(
  source: ModelSource,
  file: string,
  onProgress?: (loadedBytes: number, totalBytes: number | null) => void,
): Promise<SafetensorsReader> {
  const opened = source.openFile ? await source.openFile(file, onProgress) : bytesAsFile(await source.readBytes(file, onProgress));
  try {
    const headerEnd = headerEndOf(await opened.read(0, Math.min(PREAMBLE_BYTES, opened.size)), opened.size, file);
    const entries = parseEntries(await opened.read(8, headerEnd - 8), headerEnd, opened.size, file);
    return {
      entries,
      size: opened.size,
      readsByOffset: source.openFile !== undefined,
      read: async ({ name, dtype, shape, begin, end }) => ({ name, dtype, shape, bytes: await opened.read(begin, end - begin) }),
      close: () => opened.close(),
    };
  } catch (error) {
    await opened.close();
    throw error;
  }
}

/** A file already in memory, read by offset. */
function bytesAsFile(bytes: Uint8Array): RandomAccessFile {
  return { size: bytes.length, read: async (offset, length) => bytes.subarray(offset, offset + length), close: async () => {} };
}

/** Where the header ends (and the data starts), from the file's first bytes and its size. */
function headerEndOf(preamble: Uint8Array, fileSize: number, file: string): number {
  if (fileSize < 8) {
    throw new ModelLoadError(`${file} is ${fileSize} bytes long, too short for a safetensors header: ${TRUNCATED}`, file, null, DOWNLOAD_AGAIN);
  }
  const headerLength = new DataView(preamble.buffer, preamble.byteOffset, 8).getBigUint64(0, true);
  if (headerLength > BigInt(fileSize - 8)) {
    const gitLfsPointer = new TextDecoder().decode(preamble).startsWith('version https://git-lfs');
    throw new ModelLoadError(
      `${file}: its first 8 bytes announce a ${headerLength}-byte header but the file is only ${fileSize} bytes: ` +
        (gitLfsPointer ? 'this is a Git LFS pointer, not the weights' : TRUNCATED),
      file,
      null,
      gitLfsPointer ? 'fetch the real file (git lfs pull)' : DOWNLOAD_AGAIN,
    );
  }
  if (headerLength > BigInt(MAX_HEADER_BYTES)) {
    throw new ModelLoadError(
      `${file}: its first 8 bytes announce a ${headerLength}-byte header, more than the ${MAX_HEADER_BYTES} bytes safetensors allows: the file is corrupt`,
      file,
      null,
      DOWNLOAD_AGAIN,
    );
  }
  return 8 + Number(headerLength);
}

/** The header's tensors, checked against the data section that follows it. */
function parseEntries(headerBytes: Uint8Array, dataStart: number, fileSize: number, file: string): Map<string, SafetensorsEntry> {
  const header = parseHeader(headerBytes, file);
  const dataLength = fileSize - dataStart;
  const entries = new Map<string, SafetensorsEntry>();
  for (const [name, entry] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const { dtype, shape, begin, end } = readEntry(entry, name, file);
    if (end > dataLength) {
      throw new ModelLoadError(
        `${file}: tensor '${name}' needs bytes ${begin}..${end} of the data section but the file holds only ` +
          `${dataLength} data bytes (file is ${fileSize} bytes, at least ${dataStart + end} expected): ${TRUNCATED}`,
        file,
        name,
        DOWNLOAD_AGAIN,
      );
    }
    const elementBytes = BYTES_PER_ELEMENT[dtype];
    const expectedBytes = elementBytes === undefined ? null : elementBytes * shape.reduce((n, d) => n * d, 1);
    if (expectedBytes !== null && expectedBytes !== end - begin) {
      throw new ModelLoadError(
        `${file}: tensor '${name}' is ${dtype} with shape [${shape.join(', ')}], which takes ${expectedBytes} bytes, ` +
          `but its data_offsets span ${end - begin} bytes: the file is corrupt`,
        file,
        name,
        DOWNLOAD_AGAIN,
      );
    }
    entries.set(name, { name, dtype, shape, begin: dataStart + begin, end: dataStart + end });
  }
  return entries;
}

/** A tensor's values as a new, aligned Float32Array, and the largest of their magnitudes. */
export interface DecodedTensor {
  values: Float32Array;
  maxAbs: number;
}

/**
 * The tensor's values as a new, aligned Float32Array. A NaN or infinite value is refused, naming
 * the tensor and its index: no weight, adapter or optimizer moment is ever one, and let through
 * it surfaces much later as NaN log-probabilities with no hint of where they came from.
 */
export function tensorToFloat32(tensor: SafetensorsTensor, file: string): Float32Array {
  return decodeTensor(tensor, file).values;
}

/** tensorToFloat32, with the largest magnitude found in the same pass. */
export function decodeTensor(tensor: SafetensorsTensor, file: string): DecodedTensor {
  const decoded = decodeFloats(tensor, file);
  if (decoded.firstNonFinite >= 0) {
    const index = decoded.firstNonFinite;
    const overflow = tensor.dtype === 'F16' ? ' (F16 holds at most 65504)' : '';
    throw new ModelLoadError(
      `${file}: tensor '${tensor.name}' holds ${decoded.values[index]} at index ${index} of ${decoded.values.length}; ` +
        `the file is corrupt, or its values overflowed when it was saved as ${tensor.dtype}${overflow} or came from a run that diverged`,
      file,
      tensor.name,
      'download it again, or save the weights again from a sound copy (in BF16 or F32)',
    );
  }
  return { values: decoded.values, maxAbs: decoded.maxAbs };
}

/**
 * The values of an F32, F16 or BF16 tensor as float32, the largest magnitude and the index of the
 * first NaN or infinity (-1 if none), found in the one pass that converts them.
 */
function decodeFloats(tensor: SafetensorsTensor, file: string): DecodedTensor & { firstNonFinite: number } {
  // Copying into a fresh buffer both aligns the data and lets typed arrays read it directly;
  // safetensors is little-endian, as is every host that runs WebGPU. The constructor always copies
  // (a Node Buffer's slice() is a view of the whole file).
  const copy = new Uint8Array(tensor.bytes);
  let values: Float32Array;
  let maxAbs = 0;
  let firstNonFinite = -1;
  // One comparison per value in the common case: NaN fails every comparison and Infinity exceeds
  // every maximum, so both reach the branch, where they are told apart from a new maximum.
  const check = (value: number, i: number) => {
    const magnitude = Math.abs(value);
    if (!(magnitude <= maxAbs)) {
      if (magnitude === Infinity || magnitude !== magnitude) {
        if (firstNonFinite < 0) firstNonFinite = i;
      } else {
        maxAbs = magnitude;
      }
    }
  };
  switch (tensor.dtype) {
    case 'F32': {
      values = new Float32Array(copy.buffer);
      for (let i = 0; i < values.length; i++) check(values[i], i);
      break;
    }
    case 'F16': {
      const halves = new Uint16Array(copy.buffer);
      const table = float16Table();
      values = new Float32Array(halves.length);
      for (let i = 0; i < halves.length; i++) check((values[i] = table[halves[i]]), i);
      break;
    }
    case 'BF16': {
      // bfloat16 is the upper half of a float32.
      const halves = new Uint16Array(copy.buffer);
      const bits = new Uint32Array(halves.length);
      values = new Float32Array(bits.buffer);
      for (let i = 0; i < halves.length; i++) {
        bits[i] = halves[i] << 16;
        check(values[i], i);
      }
      break;
    }
    default:
      throw new ModelLoadError(
        `${file}: tensor '${tensor.name}' has dtype ${tensor.dtype} but only ${CONVERTIBLE_DTYPES} weights can be ` +
          'loaded; use the unquantized F32/F16/BF16 release of the model or convert the checkpoint',
        file,
        tensor.name,
      );
  }
  return { values, maxAbs, firstNonFinite };
}

function parseHeader(headerBytes: Uint8Array, file: string): Record<string, unknown> {
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder().decode(headerBytes));
  } catch (error) {
    throw new ModelLoadError(`${file}: the header is not valid JSON (${(error as Error).message}): ${TRUNCATED}`, file, null, DOWNLOAD_AGAIN);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) {
    throw new ModelLoadError(`${file}: the header is not a JSON object: ${TRUNCATED}`, file, null, DOWNLOAD_AGAIN);
  }
  return header as Record<string, unknown>;
}

function readEntry(entry: unknown, name: string, file: string) {
  const { dtype, shape, data_offsets: offsets } = (entry ?? {}) as Record<string, unknown>;
  const isCount = (n: unknown): n is number => typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;
  if (
    typeof dtype !== 'string' ||
    !Array.isArray(shape) ||
    !shape.every(isCount) ||
    !Array.isArray(offsets) ||
    offsets.length !== 2 ||
    !offsets.every(isCount) ||
    offsets[0] > offsets[1]
  ) {
    throw new ModelLoadError(
      `${file}: the header entry of tensor '${name}' is ${JSON.stringify(entry)}, not ` +
        `{"dtype": ..., "shape": [...], "data_offsets": [begin, end]}: ${TRUNCATED}`,
      file,
      name,
      DOWNLOAD_AGAIN,
    );
  }
  return { dtype, shape: shape as number[], begin: offsets[0] as number, end: offsets[1] as number };
}

let float16Values: Float32Array | null = null;

/** All 65,536 IEEE half-precision values, built once (faster than decoding bits per element). */
function float16Table(): Float32Array {
  if (float16Values) return float16Values;
  float16Values = new Float32Array(65536);
  for (let bits = 0; bits < 65536; bits++) {
    const sign = bits & 0x8000 ? -1 : 1;
    const exponent = (bits >> 10) & 0x1f;
    const mantissa = bits & 0x3ff;
    if (exponent === 0) float16Values[bits] = sign * mantissa * 2 ** -24;
    else if (exponent === 31) float16Values[bits] = mantissa ? NaN : sign * Infinity;
    else float16Values[bits] = sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
  }
  return float16Values;
}

export interface TensorToSerialize {
  name: string;
  dtype: SafetensorsTensor['dtype'];
  shape: number[];
  /** Little-endian element bytes. */
  bytes: Uint8Array;
}

/** A safetensors file: u64 header length, JSON header padded to 8 bytes, then the tensors in order. */
export function serializeSafetensors(tensors: TensorToSerialize[], metadata: Record<string, string> = { format: 'pt' }): Uint8Array {
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.bytes.length] };
    offset += t.bytes.length;
  }
  let headerText = JSON.stringify(header);
  headerText += ' '.repeat((8 - (headerText.length % 8)) % 8);
  const headerBytes = new TextEncoder().encode(headerText);
  const bytes = new Uint8Array(8 + headerBytes.length + offset);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(headerBytes.length), true);
  bytes.set(headerBytes, 8);
  let position = 8 + headerBytes.length;
  for (const t of tensors) {
    bytes.set(t.bytes, position);
    position += t.bytes.length;
  }
  return bytes;
}

/** An F32 tensor for serializeSafetensors. */
export function float32Tensor(name: string, shape: number[], data: Float32Array): TensorToSerialize {
  const count = shape.reduce((n, d) => n * d, 1);
  if (count !== data.length) throw new RangeError(`${name}: shape [${shape}] holds ${count} values, data has ${data.length}`);
  return { name, dtype: 'F32', shape, bytes: new Uint8Array(data.slice().buffer) };
}
