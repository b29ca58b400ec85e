// The safetensors format, read by hand: an 8-byte little-endian header length N, N bytes of JSON
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}), then the data, with
// offsets counted from the end of the header. https://github.com/huggingface/safetensors
import { DOWNLOAD_AGAIN, ModelLoadError } from './types.ts';

export interface SafetensorsTensor {
  name: string;
  /** The safetensors dtype name: F32, F16, BF16, I64, ... */
  dtype: string;
  shape: number[];
  /** A view into the file's bytes (not a copy, not necessarily aligned). */
  bytes: Uint8Array;
}

const BYTES_PER_ELEMENT: Record<string, number> = {
  F64: 8, F32: 4, F16: 2, BF16: 2, F8_E4M3: 1, F8_E5M2: 1,
  I64: 8, I32: 4, I16: 2, I8: 1, U64: 8, U32: 4, U16: 2, U8: 1, BOOL: 1,
};
const CONVERTIBLE_DTYPES = 'F32, F16 and BF16';
const TRUNCATED = 'the file is truncated or not a safetensors file';

export function parseSafetensors(bytes: Uint8Array, file: string): Map<string, SafetensorsTensor> {
  if (bytes.length < 8) {
    throw new ModelLoadError(`${file} is ${bytes.length} bytes long, too short for a safetensors header: ${TRUNCATED}`, file, null, DOWNLOAD_AGAIN);
  }
  const headerLength = new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true);
  if (headerLength > BigInt(bytes.length - 8)) {
    const gitLfsPointer = looksLikeGitLfsPointer(bytes);
    throw new ModelLoadError(
      `${file}: its first 8 bytes announce a ${headerLength}-byte header but the file is only ${bytes.length} bytes: ` +
        (gitLfsPointer ? 'this is a Git LFS pointer, not the weights' : TRUNCATED),
      file,
      null,
      gitLfsPointer ? 'fetch the real file (git lfs pull)' : DOWNLOAD_AGAIN,
    );
  }
  const dataStart = 8 + Number(headerLength);
  const header = parseHeader(bytes.subarray(8, dataStart), file);
  const dataLength = bytes.length - dataStart;

  const tensors = new Map<string, SafetensorsTensor>();
  for (const [name, entry] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const { dtype, shape, begin, end } = readEntry(entry, name, file);
    if (end > dataLength) {
      throw new ModelLoadError(
        `${file}: tensor '${name}' needs bytes ${begin}..${end} of the data section but the file holds only ` +
          `${dataLength} data bytes (file is ${bytes.length} bytes, at least ${dataStart + end} expected): ${TRUNCATED}`,
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
    tensors.set(name, { name, dtype, shape, bytes: bytes.subarray(dataStart + begin, dataStart + end) });
  }
  return tensors;
}

/** The tensor's values as a new, aligned Float32Array. */
export function tensorToFloat32(tensor: SafetensorsTensor, file: string): Float32Array {
  // Copying into a fresh buffer both aligns the data and lets typed arrays read it directly;
  // safetensors is little-endian, as is every host that runs WebGPU.
  const copy = tensor.bytes.slice();
  switch (tensor.dtype) {
    case 'F32':
      return new Float32Array(copy.buffer);
    case 'F16':
      return float16ToFloat32(new Uint16Array(copy.buffer));
    case 'BF16':
      return bfloat16ToFloat32(new Uint16Array(copy.buffer));
    default:
      throw new ModelLoadError(
        `${file}: tensor '${tensor.name}' has dtype ${tensor.dtype} but only ${CONVERTIBLE_DTYPES} weights can be ` +
          'loaded; use the unquantized F32/F16/BF16 release of the model or convert the checkpoint',
        file,
        tensor.name,
      );
  }
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

function looksLikeGitLfsPointer(bytes: Uint8Array): boolean {
  return new TextDecoder().decode(bytes.subarray(0, 24)).startsWith('version https://git-lfs');
}

function bfloat16ToFloat32(halves: Uint16Array): Float32Array {
  // bfloat16 is the upper half of a float32.
  const out = new Uint32Array(halves.length);
  for (let i = 0; i < halves.length; i++) out[i] = halves[i] << 16;
  return new Float32Array(out.buffer);
}

function float16ToFloat32(halves: Uint16Array): Float32Array {
  const table = float16Table();
  const out = new Float32Array(halves.length);
  for (let i = 0; i < halves.length; i++) out[i] = table[halves[i]];
  return out;
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
