import { describe, expect, it } from 'vitest';
import { decodeTensor, parseSafetensors, tensorToFloat32 } from '../../src/engine/model/safetensors.ts';
import { ModelLoadError } from '../../src/engine/model/types.ts';
import { bfloat16Bits, float16Bits, roundToDtype, writeSafetensors } from '../support/model-folder.ts';

const FILE = 'model.safetensors';

/** A safetensors file built by hand from a header object and raw data, independent of writeSafetensors. */
function rawSafetensors(header: object, data: Uint8Array): Uint8Array {
  const headerBytes = new TextEncoder().encode(JSON.stringify(header));
  const bytes = new Uint8Array(8 + headerBytes.length + data.length);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(headerBytes.length), true);
  bytes.set(headerBytes, 8);
  bytes.set(data, 8 + headerBytes.length);
  return bytes;
}

function halves(bits: number[]): Uint8Array {
  return new Uint8Array(Uint16Array.from(bits).buffer);
}

function loadError(run: () => unknown): ModelLoadError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(ModelLoadError);
    expect((error as Error).message).toContain(FILE);
    return error as ModelLoadError;
  }
  throw new Error('expected a ModelLoadError');
}

describe('parseSafetensors and tensorToFloat32', () => {
  it('read back what writeSafetensors wrote, skipping __metadata__', () => {
    const a = Float32Array.from({ length: 6 }, (_, i) => i / 7 - 0.3);
    const b = Float32Array.from([1e-8, -3.5e7]);
    const tensors = parseSafetensors(
      writeSafetensors([
        { name: 'a', dtype: 'F32', shape: [2, 3], data: a },
        { name: 'b', dtype: 'F32', shape: [2], data: b },
      ]),
      FILE,
    );
    expect([...tensors.keys()]).toEqual(['a', 'b']);
    expect(tensors.get('a')).toMatchObject({ name: 'a', dtype: 'F32', shape: [2, 3] });
    expect(tensorToFloat32(tensors.get('a')!, FILE)).toEqual(a);
    expect(tensorToFloat32(tensors.get('b')!, FILE)).toEqual(b);
  });

  it('decode a file read as a Node Buffer (whose slice() is a view of the whole file) to the tensor alone', () => {
    const a = Float32Array.from([0.125, -2, 3]);
    const b = Float32Array.from([4, 5]);
    const file = Buffer.from(writeSafetensors([
      { name: 'a', dtype: 'F32', shape: [3], data: a },
      { name: 'b', dtype: 'F32', shape: [2], data: b },
    ]));
    const tensors = parseSafetensors(file, FILE);
    expect(decodeTensor(tensors.get('b')!, FILE)).toEqual({ values: b, maxAbs: 5 });
    expect(tensorToFloat32(tensors.get('a')!, FILE)).toEqual(a);
  });

  it('converts F16 exactly, subnormals included', () => {
    const cases: [number, number][] = [
      [0x0000, 0],
      [0x8000, -0],
      [0x3c00, 1],
      [0xc000, -2],
      [0x3555, 0.333251953125],
      [0x7bff, 65504],
      [0x0400, 2 ** -14],
      [0x0001, 2 ** -24],
      [0x83ff, -1023 * 2 ** -24],
    ];
    const bytes = rawSafetensors(
      { x: { dtype: 'F16', shape: [cases.length], data_offsets: [0, cases.length * 2] } },
      halves(cases.map(([bits]) => bits)),
    );
    const values = tensorToFloat32(parseSafetensors(bytes, FILE).get('x')!, FILE);
    expect([...values]).toEqual(cases.map(([, value]) => value));
  });

  it('converts BF16 exactly', () => {
    const cases: [number, number][] = [
      [0x3f80, 1],
      [0x8000, -0],
      [0xc049, -3.140625],
      [0x7f7f, 3.3895313892515355e38],
      [0x0001, 2 ** -133],
    ];
    const bytes = rawSafetensors(
      { x: { dtype: 'BF16', shape: [cases.length], data_offsets: [0, cases.length * 2] } },
      halves(cases.map(([bits]) => bits)),
    );
    const values = tensorToFloat32(parseSafetensors(bytes, FILE).get('x')!, FILE);
    expect([...values]).toEqual(cases.map(([, value]) => value));
  });

  it('refuses a NaN or infinite value in any float dtype, naming the tensor, its first bad index and the likely cause', () => {
    const cases: [string, Uint8Array, string][] = [
      ['F16', halves([0x3c00, 0x7c00, 0x7e00]), 'Infinity at index 1 of 3'],
      ['F16', halves([0x3c00, 0x3c00, 0xfc00]), '-Infinity at index 2 of 3'],
      ['BF16', halves([0x7fc0, 0x3f80]), 'NaN at index 0 of 2'],
      ['BF16', halves([0x3f80, 0xff80]), '-Infinity at index 1 of 2'],
      ['F32', new Uint8Array(Float32Array.of(1, 2, NaN, Infinity).buffer), 'NaN at index 2 of 4'],
      ['F32', new Uint8Array(Float32Array.of(-Infinity).buffer), '-Infinity at index 0 of 1'],
    ];
    for (const [dtype, data, found] of cases) {
      const bytes = rawSafetensors({ 'model.norm.weight': { dtype, shape: [data.length / (dtype === 'F32' ? 4 : 2)], data_offsets: [0, data.length] } }, data);
      const error = loadError(() => tensorToFloat32(parseSafetensors(bytes, FILE).get('model.norm.weight')!, FILE));
      expect(error.tensor).toBe('model.norm.weight');
      expect(error.message).toContain(`${FILE}: tensor 'model.norm.weight' holds ${found}; the file is corrupt, or its values overflowed when it was saved as ${dtype}`);
    }
    expect(loadError(() => tensorToFloat32(parseSafetensors(rawSafetensors({ w: { dtype: 'F16', shape: [1], data_offsets: [0, 2] } }, halves([0x7c00])), FILE).get('w')!, FILE)).message).toContain(
      '(F16 holds at most 65504)',
    );
  });

  it('finds the largest magnitude in the same pass', () => {
    const tensor = parseSafetensors(writeSafetensors([{ name: 'w', dtype: 'F32', shape: [4], data: Float32Array.of(0.5, -3, 2, 0) }]), FILE).get('w')!;
    expect(decodeTensor(tensor, FILE)).toEqual({ values: Float32Array.of(0.5, -3, 2, 0), maxAbs: 3 });
  });

  it('writes F16/BF16 by rounding to nearest even, and reads representable values back unchanged', () => {
    expect(float16Bits(1 + 2 ** -11)).toBe(0x3c00); // a tie: stays on the even mantissa
    expect(float16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02); // a tie: rounds up to the even mantissa
    expect(float16Bits(70000)).toBe(0x7c00);
    expect(float16Bits(2 ** -25 * 1.5)).toBe(0x0001);
    expect(bfloat16Bits(1 + 2 ** -8)).toBe(0x3f80);
    expect(bfloat16Bits(1 + 3 * 2 ** -8)).toBe(0x3f82);

    const values = Float32Array.from({ length: 64 }, (_, i) => Math.sin(i) * 10 ** ((i % 9) - 4));
    for (const dtype of ['F16', 'BF16'] as const) {
      const stored = roundToDtype(values, dtype);
      const file = writeSafetensors([{ name: 'w', dtype, shape: [8, 8], data: stored }]);
      expect(tensorToFloat32(parseSafetensors(file, FILE).get('w')!, FILE)).toEqual(stored);
    }
  });

  it('gets a header padded to 8 bytes from writeSafetensors', () => {
    const bytes = writeSafetensors([{ name: 'x', dtype: 'F32', shape: [1], data: Float32Array.of(1) }]);
    expect(Number(new DataView(bytes.buffer).getBigUint64(0, true)) % 8).toBe(0);
  });

  it('reads tensors that start at unaligned offsets', () => {
    const wide = Float32Array.from([1.5, -2.25, 3e-3]);
    const file = writeSafetensors([
      { name: 'odd', dtype: 'F16', shape: [3], data: Float32Array.from([1, 2, 3]) },
      { name: 'wide', dtype: 'F32', shape: [3], data: wide },
    ]);
    const tensor = parseSafetensors(file, FILE).get('wide')!;
    expect(tensor.bytes.byteOffset % 4).not.toBe(0);
    expect(tensorToFloat32(tensor, FILE)).toEqual(wide);
  });

  describe('errors name the file, the tensor and the fix', () => {
    const good = writeSafetensors([
      { name: 'model.embed_tokens.weight', dtype: 'F32', shape: [4, 4], data: new Float32Array(16) },
    ]);

    it('a file too short for the header length', () => {
      expect(loadError(() => parseSafetensors(good.subarray(0, 5), FILE)).message).toContain('5 bytes long');
    });

    it('a header length beyond the file', () => {
      const message = loadError(() => parseSafetensors(good.subarray(0, 40), FILE)).message;
      expect(message).toContain('truncated or not a safetensors file — download it again');
      const pointer = new TextEncoder().encode('version https://git-lfs.github.com/spec/v1\noid sha256:abc\n');
      expect(loadError(() => parseSafetensors(pointer, FILE)).message).toContain('Git LFS pointer');
    });

    it('a header that is not JSON', () => {
      const bytes = good.slice();
      bytes[8] = '#'.charCodeAt(0);
      expect(loadError(() => parseSafetensors(bytes, FILE)).message).toContain('header is not valid JSON');
    });

    it('truncated data, with the bytes expected and present', () => {
      const error = loadError(() => parseSafetensors(good.subarray(0, good.length - 10), FILE));
      expect(error.tensor).toBe('model.embed_tokens.weight');
      expect(error.message).toContain("tensor 'model.embed_tokens.weight' needs bytes 0..64");
      expect(error.message).toContain('only 54 data bytes');
      expect(error.message).toContain(`at least ${good.length} expected`);
    });

    it('a byte length that does not match shape and dtype', () => {
      const bytes = rawSafetensors({ w: { dtype: 'F32', shape: [2, 3], data_offsets: [0, 20] } }, new Uint8Array(20));
      const message = loadError(() => parseSafetensors(bytes, FILE)).message;
      expect(message).toContain("tensor 'w' is F32 with shape [2, 3], which takes 24 bytes");
      expect(message).toContain('span 20 bytes');
    });

    it('a malformed header entry', () => {
      const bytes = rawSafetensors({ w: { dtype: 'F32', shape: [2], data_offsets: [8, 0] } }, new Uint8Array(8));
      expect(loadError(() => parseSafetensors(bytes, FILE)).message).toContain("header entry of tensor 'w'");
    });

    it('a dtype that cannot be converted, listing those that can', () => {
      const bytes = rawSafetensors({ q: { dtype: 'I8', shape: [4], data_offsets: [0, 4] } }, new Uint8Array(4));
      const tensor = parseSafetensors(bytes, FILE).get('q')!;
      const error = loadError(() => tensorToFloat32(tensor, FILE));
      expect(error.tensor).toBe('q');
      expect(error.message).toContain("tensor 'q' has dtype I8 but only F32, F16 and BF16");
    });
  });
});
