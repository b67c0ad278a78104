// open('cpu' | 'cuda' | 'cuda:N' | 'auto') and Device.tensor(): where tensors live and samplers run.
import { bytesPerElement, DType } from './dtype';
import { isTyped, rangeError, typeError } from './errors';
import { native, type HalfEncoding } from './native';
import { checkStream } from './options';
import { captureGraph, CudaGraph, Sampler, SamplerConfig } from './sampler';
import { checkDType, checkShape, elementCount, Tensor, TensorData } from './tensor';

export type DeviceSpec = 'cpu' | 'cuda' | `cuda:${number}` | 'auto';
export type DeviceKind = 'cpu' | 'cuda';

export interface GpuStatus {
  /** A CUDA device can be opened. */
  usable: boolean;
  /** Why not, when not usable ('' when usable). */
  reason: string;
  deviceCount: number;
  /** The addon was compiled with the CUDA kernels (nvcc was found at install time). */
  compiledWithCuda: boolean;
  devices: { name: string; sm: number; multiprocessors: number; memory: number }[];
}

export function gpuStatus(): GpuStatus {
  const s = native.gpuStatus();
  return {
    usable: s.usable,
    reason: s.reason,
    deviceCount: s.devices.length,
    compiledWithCuda: s.compiledWithCuda,
    devices: s.devices,
  };
}

export class Device {
  readonly kind: DeviceKind;
  readonly ordinal: number;
  readonly name: string;

  /** @internal Use open(). */
  constructor(kind: DeviceKind, ordinal: number, name: string) {
    this.kind = kind;
    this.ordinal = ordinal;
    this.name = name;
  }

  /**
   * A tensor holding `data`. Float dtypes take a Float32Array (converted, round to nearest even)
   * or a Uint16Array of raw f16/bf16 bits; 'i32' takes an Int32Array, 'u64' a BigUint64Array.
   */
  tensor(data: TensorData, shape: number[], dtype: DType): Tensor {
    const [dims, type, payload, encoding] = checkTensorData(data, shape, dtype);
    const t = this.empty(dims, type);
    try {
      t.handle('tensor').upload(payload, encoding);
    } catch (e) {
      t.dispose();
      throw e;
    }
    return t;
  }

  /**
   * Like tensor(), with the conversion and the copy on a worker thread: the JS thread is not held
   * for the ~1-4 ms per MB they take (use it for large or frequent uploads on a busy server).
   * Invalid arguments reject with the errors tensor() throws. `data` must not be modified until
   * the promise settles.
   */
  async tensorAsync(data: TensorData, shape: number[], dtype: DType): Promise<Tensor> {
    const [dims, type, payload, encoding] = checkTensorData(data, shape, dtype);
    const t = this.empty(dims, type);
    try {
      await t.handle('tensor').uploadAsync(payload, encoding);
    } catch (e) {
      t.dispose();
      throw e;
    }
    return t;
  }

  /** An uninitialized tensor (e.g. the device output of sampleFusedInto). */
  empty(shape: number[], dtype: DType): Tensor {
    const dims = checkShape('shape', shape);
    const type = checkDType('dtype', dtype);
    const bytes = elementCount(dims) * bytesPerElement(type);
    const handle = new native.NativeBuffer(this.kind === 'cuda' ? 1 : 0, this.ordinal, bytes);
    return new Tensor(this, handle, dims, type, true);
  }

  /**
   * A sampler sized once for an engine: scratch allocated up front, per-row parameters in device
   * memory (setRows or the engine's own kernels), enqueue that only launches (README, "Using
   * flashsample inside an engine").
   */
  createSampler(config: SamplerConfig): Sampler {
    return new Sampler(this, config);
  }

  /**
   * Captures what `fn` enqueues on `stream` (default: a library stream used only for captures)
   * into a CUDA graph, in cudaStreamCaptureModeThreadLocal. `fn` must be synchronous; if it throws,
   * the capture ends and the error is rethrown. CUDA only.
   */
  captureGraph(fn: () => unknown): CudaGraph;
  captureGraph(stream: bigint | undefined, fn: () => unknown): CudaGraph;
  captureGraph(a: bigint | undefined | (() => unknown), b?: () => unknown): CudaGraph {
    return typeof a === 'function' ? captureGraph(this, undefined, a) : captureGraph(this, a, b as () => unknown);
  }

  /** A new non-blocking CUDA stream of this device, as a bigint cudaStream_t. */
  createStream(): bigint {
    if (this.kind !== 'cuda') throw new TypeError(`createStream: streams need a 'cuda' device, got ${this}`);
    return native.createStream(this.ordinal);
  }

  /** Destroys a stream from createStream (work already enqueued on it still completes). */
  destroyStream(stream: bigint): void {
    if (this.kind !== 'cuda') throw new TypeError(`destroyStream: streams need a 'cuda' device, got ${this}`);
    const s = checkStream('stream', stream);
    if (s === undefined) throw typeError('stream', 'a bigint from createStream()', stream);
    native.destroyStream(this.ordinal, s);
  }

  /** Resolves once the work enqueued so far on `stream` (default the library's) is done; the wait
   *  happens on a worker thread. On the CPU, where enqueue is synchronous, it resolves at once. */
  async synchronize(stream?: bigint): Promise<void> {
    const s = checkStream('stream', stream);
    if (this.kind !== 'cuda') {
      if (s !== undefined) throw new TypeError(`stream: a CUDA stream needs a 'cuda' device, got ${this}`);
      return;
    }
    return native.synchronize(this.ordinal, s);
  }

  sameAs(other: Device): boolean {
    return this.kind === other.kind && this.ordinal === other.ordinal;
  }

  toString(): string {
    return this.kind === 'cpu' ? 'cpu' : `cuda:${this.ordinal}`;
  }
}

/** Validates tensor()'s arguments: the shape, the dtype, and data of that many elements. */
function checkTensorData(
  data: TensorData,
  shape: number[],
  dtype: DType,
): [number[], DType, Float32Array | Uint16Array | Int32Array | BigUint64Array, HalfEncoding] {
  const dims = checkShape('shape', shape);
  const type = checkDType('dtype', dtype);
  const count = elementCount(dims);
  const [payload, encoding] = encodePayload(data, type);
  if (payload.length !== count) {
    throw rangeError('data', `${count} elements for shape [${dims.join(', ')}]`, data);
  }
  return [dims, type, payload, encoding];
}

/**
 * The typed array to upload and how the addon converts it on the way: 0 as is, 1 float32 -> f16,
 * 2 float32 -> bf16 (binding/half_encode.h, the rules of encodeF16 / encodeBF16 bit for bit; in
 * JS those loops blocked the event loop for ~15 ms per 2-3 MB tensor).
 */
function encodePayload(
  data: unknown,
  dtype: DType,
): [Float32Array | Uint16Array | Int32Array | BigUint64Array, HalfEncoding] {
  switch (dtype) {
    case 'f32':
      if (isTyped(data, 'Float32Array')) return [data, 0];
      throw typeError('data', "a Float32Array for dtype 'f32'", data);
    case 'f16':
    case 'bf16':
      if (isTyped(data, 'Uint16Array')) return [data, 0];
      if (isTyped(data, 'Float32Array')) return [data, dtype === 'bf16' ? 2 : 1];
      throw typeError('data', `a Float32Array or a Uint16Array of raw bits for dtype '${dtype}'`, data);
    case 'i32':
      if (isTyped(data, 'Int32Array')) return [data, 0];
      throw typeError('data', "an Int32Array for dtype 'i32'", data);
    case 'u64':
      if (isTyped(data, 'BigUint64Array')) return [data, 0];
      throw typeError('data', "a BigUint64Array for dtype 'u64'", data);
  }
}

const cpuDevice = new Device('cpu', 0, `cpu (${native.cpuThreads()} threads)`);

// FLASHSAMPLE_CPU_ISA caps the CPU backend's vector kernels (products and exps; cpu/cpu_logits.cc
// reads it once, at load; every path gives the same bits). A value it does not know would leave
// the widest path in place unnoticed: opening the CPU device says so instead.
const CPU_ISAS = ['avx512', 'avx2', 'baseline'];
const cpuIsa = process.env.FLASHSAMPLE_CPU_ISA;
const cpuIsaError =
  cpuIsa === undefined || cpuIsa === '' || CPU_ISAS.includes(cpuIsa)
    ? undefined
    : typeError('FLASHSAMPLE_CPU_ISA', "'avx512', 'avx2' or 'baseline' (or unset)", cpuIsa);
function openCpu(): Device {
  if (cpuIsaError) throw cpuIsaError;
  return cpuDevice;
}
const cudaDevices = new Map<number, Device>();

/** Opens a device: 'auto' is CUDA device 0 when a GPU is usable, else the CPU. */
export function open(spec: DeviceSpec = 'auto'): Device {
  if (typeof spec !== 'string') throw typeError('device', "'cpu', 'cuda', 'cuda:N' or 'auto'", spec);
  if (spec === 'cpu') return openCpu();
  const status = native.gpuStatus();
  if (spec === 'auto') return status.usable ? open('cuda:0') : openCpu();
  const match = /^cuda(?::(\d+))?$/.exec(spec);
  if (!match) throw typeError('device', "'cpu', 'cuda', 'cuda:N' or 'auto'", spec);
  if (!status.usable) {
    const reason = status.reason.startsWith('no usable GPU') ? status.reason : `no usable GPU: ${status.reason}`;
    throw new Error(`device: cannot open '${spec}': ${reason}`);
  }
  const ordinal = match[1] === undefined ? 0 : Number(match[1]);
  if (ordinal >= status.devices.length) {
    throw rangeError('device', `a CUDA device index below ${status.devices.length}`, spec);
  }
  let device = cudaDevices.get(ordinal);
  if (!device) {
    device = new Device('cuda', ordinal, status.devices[ordinal].name);
    cudaDevices.set(ordinal, device);
  }
  return device;
}
