// A small builder for ONNX graphs: named inputs and outputs with symbolic dimensions, float32
// weights and deduplicated constants as initializers, nodes with unique names, and the encoded
// ModelProto. The protobuf schema and encoder come from onnx-proto (ONNX's own onnx.proto compiled
// by protobufjs); this file only decides what goes in. Browser-safe.
import onnxProto from 'onnx-proto';
import type { onnx as proto } from 'onnx-proto';

// onnx-proto is CommonJS: its namespace is the default export in Node's ESM loader and in Vite.
const { onnx } = onnxProto;

/** The operator set the graphs are written against (ReduceMean with an axes attribute, Split with split as an input). */
const ONNX_OPSET = 14;
/** ONNX IR version 8 (onnx 1.10), which every onnxruntime since 1.10 reads. */
const IR_VERSION = 8;
/** A protobuf message cannot exceed 2 GiB; bigger models need ONNX external data, which we do not write. */
export const ONNX_PROTOBUF_LIMIT_BYTES = 2 ** 31 - 1;

export type ElementType = 'float32' | 'int64' | 'bool';

/** TensorProto.DataType codes, as Cast's `to` attribute takes them. */
export const ELEMENT_TYPE: Record<ElementType, number> = {
  float32: onnx.TensorProto.DataType.FLOAT,
  int64: onnx.TensorProto.DataType.INT64,
  bool: onnx.TensorProto.DataType.BOOL,
};

/** A dimension: a fixed size, or the name of a dynamic axis (e.g. "batch_size"). */
export type Dim = number | string;

/** Node attributes: integers and lists of integers are all these graphs need. */
export type Attributes = Record<string, number | number[]>;

export class OnnxGraph {
  private readonly nodes: proto.INodeProto[] = [];
  private readonly initializers: proto.ITensorProto[] = [];
  private readonly inputs: proto.IValueInfoProto[] = [];
  private readonly outputs: proto.IValueInfoProto[] = [];
  private readonly constants = new Map<string, string>();
  private readonly usedNames = new Set<string>();
  /** Bytes of tensor data in the initializers so far. */
  initializerBytes = 0;
  /** Prefix of the next nodes' names, e.g. "/layers.0/self_attn", as PyTorch's exporter names them. */
  scope = '';

  constructor(readonly name: string) {}

  /** A graph input; returns its name, to use as a value. */
  input(name: string, type: ElementType, shape: Dim[]): string {
    this.inputs.push(valueInfo(this.claim(name), type, shape));
    return name;
  }

  /** Declares an existing value (the output of some node) a graph output. */
  output(value: string, type: ElementType, shape: Dim[]): void {
    this.outputs.push(valueInfo(value, type, shape));
  }

  /** A float32 weight, stored as raw little-endian bytes. */
  weight(name: string, dims: number[], data: Float32Array): string {
    const count = dims.reduce((n, d) => n * d, 1);
    if (count !== data.length) throw new Error(`internal: weight ${name} has ${data.length} values for dims [${dims}]`);
    const rawData = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    this.initializers.push({ name: this.claim(name), dims, dataType: ELEMENT_TYPE.float32, rawData });
    this.initializerBytes += rawData.byteLength;
    return name;
  }

  /** An int64 constant (dims [] for a scalar), shared by every use of the same values. */
  int64(values: number[], dims: number[] = [values.length]): string {
    return this.constant('int64', dims, values, () => new Uint8Array(BigInt64Array.from(values, BigInt).buffer));
  }

  /** A float32 constant (dims [] for a scalar), shared by every use of the same values. */
  float32(values: number[], dims: number[] = [values.length]): string {
    return this.constant('float32', dims, values, () => new Uint8Array(Float32Array.from(values).buffer));
  }

  /** One node with one output; returns the output's name (`output` when given, e.g. a graph output). */
  op(type: string, inputs: string[], attributes: Attributes = {}, output?: string): string {
    return this.node(type, inputs, 1, attributes, output ? [output] : undefined)[0];
  }

  /** One node with `outputs` outputs; returns their names. */
  node(type: string, inputs: string[], outputs: number, attributes: Attributes = {}, names?: string[]): string[] {
    const nodeName = this.claim(this.unique(`${this.scope}/${type}`));
    const output = names ?? Array.from({ length: outputs }, (_, i) => `${nodeName}_output_${i}`);
    for (const name of output) this.claim(name);
    this.nodes.push({ name: nodeName, opType: type, input: inputs, output, attribute: Object.entries(attributes).map(([key, value]) => attribute(key, value)) });
    return output;
  }

  /** The serialized ModelProto (an .onnx file). */
  encode(metadata: Record<string, string> = {}): Uint8Array {
    if (this.initializerBytes > ONNX_PROTOBUF_LIMIT_BYTES) {
      throw new RangeError(`the ONNX graph holds ${this.initializerBytes} bytes of weights, more than the 2 GiB a protobuf file can hold`);
    }
    const model: proto.IModelProto = {
      irVersion: IR_VERSION,
      opsetImport: [{ domain: '', version: ONNX_OPSET }],
      producerName: 'rlplay',
      graph: { name: this.name, node: this.nodes, initializer: this.initializers, input: this.inputs, output: this.outputs },
      metadataProps: Object.entries(metadata).map(([key, value]) => ({ key, value })),
    };
    const bytes = onnx.ModelProto.encode(model).finish();
    // In Node protobufjs hands back a Buffer; callers get a plain Uint8Array either way.
    return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  private constant(type: ElementType, dims: number[], values: number[], bytes: () => Uint8Array): string {
    const key = `${type}[${dims}]${values}`;
    let name = this.constants.get(key);
    if (!name) {
      name = this.claim(this.unique(`/const_${type}`));
      this.initializers.push({ name, dims, dataType: ELEMENT_TYPE[type], rawData: bytes() });
      this.constants.set(key, name);
    }
    return name;
  }

  /** `base`, or `base_N` for the first N that is free. */
  private unique(base: string): string {
    if (!this.usedNames.has(base)) return base;
    let n = 1;
    while (this.usedNames.has(`${base}_${n}`)) n++;
    return `${base}_${n}`;
  }

  private claim(name: string): string {
    if (this.usedNames.has(name)) throw new Error(`internal: the ONNX graph already has a value named ${name}`);
    this.usedNames.add(name);
    return name;
  }
}

function valueInfo(name: string, type: ElementType, shape: Dim[]): proto.IValueInfoProto {
  const dim = shape.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d }));
  return { name, type: { tensorType: { elemType: ELEMENT_TYPE[type], shape: { dim } } } };
}

function attribute(name: string, value: Attributes[string]): proto.IAttributeProto {
  const { AttributeType } = onnx.AttributeProto;
  if (Array.isArray(value)) return { name, type: AttributeType.INTS, ints: value };
  return { name, type: AttributeType.INT, i: value };
}
