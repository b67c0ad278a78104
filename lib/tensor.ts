// Tensor: a shape, a dtype and native memory on one device (host memory for the CPU backend,
// stream-ordered pool memory for CUDA, or device memory owned by another engine).
import { Device } from './device';
import { bytesPerElement, decodeBF16, decodeF16, DType, DTYPES } from './dtype';
import { raw, rangeError, typeError } from './errors';
import { native, NativeBufferHandle } from './native';

// Node 20 may lack Symbol.dispose; the well-known symbol is registered under this name.
export const disposeSymbol: typeof Symbol.dispose =
  (Symbol as { dispose?: typeof Symbol.dispose }).dispose ?? (Symbol.for('Symbol.dispose') as typeof Symbol.dispose);

export type TensorData = Float32Array | Uint16Array | Int32Array | BigUint64Array;

// Fallback only: dispose() is the way to free memory promptly. The native handle frees its
// memory when collected too; this registry just makes that happen for tensors dropped unused.
const collected = new FinalizationRegistry<NativeBufferHandle>((handle) => handle.dispose());

/** The most elements a tensor may have: its size in bytes (8 per element at most) stays an exact
 *  double, which is how it reaches the native side. */
export const MAX_ELEMENTS = 2 ** 50;

export function checkShape(name: string, shape: unknown): number[] {
  const expected = 'a non-empty array of non-negative integers';
  if (!Array.isArray(shape) || shape.length === 0 || shape.some((d) => typeof d !== 'number')) {
    throw typeError(name, expected, shape);
  }
  // Numbers that are negative, fractional, NaN or infinite: the right kind, out of the domain.
  if (shape.some((d) => !Number.isSafeInteger(d) || d < 0)) throw rangeError(name, expected, shape);
  if (elementCount(shape) > MAX_ELEMENTS) throw rangeError(name, `at most 2^50 elements in all`, shape);
  return [...shape];
}

export function checkDType(name: string, dtype: unknown): DType {
  if (typeof dtype !== 'string' || !DTYPES.includes(dtype as DType)) {
    throw typeError(name, `one of ${DTYPES.map((d) => `'${d}'`).join(', ')}`, dtype);
  }
  return dtype as DType;
}

export function elementCount(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

export class Tensor {
  readonly shape: readonly number[];
  readonly dtype: DType;
  readonly device: Device;
  /** False for memory wrapped with fromDevicePointer: dispose() then only forgets it. */
  readonly owned: boolean;
  #handle: NativeBufferHandle | null;

  /** @internal Use Device.tensor, Device.empty or Tensor.fromDevicePointer. */
  constructor(device: Device, handle: NativeBufferHandle, shape: number[], dtype: DType, owned: boolean) {
    this.device = device;
    this.#handle = handle;
    this.shape = Object.freeze(shape);
    this.dtype = dtype;
    this.owned = owned;
    if (owned) collected.register(this, handle, this);
  }

  /**
   * Wraps device memory that another engine owns, without copying; dispose() never frees it.
   * The pointer must be device memory of `device`, 16-byte aligned (the kernels' vector loads).
   */
  static fromDevicePointer(device: Device, ptr: bigint, shape: number[], dtype: DType): Tensor {
    if (!(device instanceof Device)) throw typeError('device', 'a Device from open()', device);
    // The arguments' own form first, then whether the device can take them.
    if (typeof ptr !== 'bigint') throw typeError('ptr', 'a bigint device address', ptr);
    if (ptr <= 0n || ptr >= 1n << 64n) throw rangeError('ptr', 'a non-null 64-bit device address', ptr);
    if (ptr % 16n !== 0n) throw rangeError('ptr', 'a 16-byte aligned address (vectorized loads)', ptr);
    const dims = checkShape('shape', shape);
    const type = checkDType('dtype', dtype);
    if (device.kind !== 'cuda') throw typeError('device', "a 'cuda' device", raw(`${device}`));
    const bytes = elementCount(dims) * bytesPerElement(type);
    const handle = native.NativeBuffer.wrap(device.ordinal, ptr, bytes);
    return new Tensor(device, handle, dims, type, false);
  }

  /** @internal A Tensor this copy of the library created (not an object made from its prototype). */
  static isTensor(value: unknown): value is Tensor {
    return typeof value === 'object' && value !== null && #handle in value;
  }

  get disposed(): boolean {
    return this.#handle === null;
  }

  get size(): number {
    return elementCount(this.shape);
  }

  /** The device address (CUDA tensors), e.g. to hand to another engine. */
  get devicePointer(): bigint {
    if (this.device.kind !== 'cuda') throw new TypeError('devicePointer: only CUDA tensors have one');
    return this.handle('tensor').pointer;
  }

  /** @internal The native handle; throws if the tensor was disposed. */
  handle(name: string): NativeBufferHandle {
    if (this.#handle === null) throw new TypeError(`${name}: the tensor has been disposed`);
    return this.#handle;
  }

  /** The raw elements: Uint16Array bit patterns for f16/bf16. */
  async toRawArray(): Promise<TensorData> {
    const bytes = await this.handle('tensor').download();
    switch (this.dtype) {
      case 'f32':
        return new Float32Array(bytes, 0, this.size);
      case 'f16':
      case 'bf16':
        return new Uint16Array(bytes, 0, this.size);
      case 'i32':
        return new Int32Array(bytes, 0, this.size);
      case 'u64':
        return new BigUint64Array(bytes, 0, this.size);
    }
  }

  /** The elements, f16 and bf16 decoded to Float32Array. */
  async toArray(): Promise<Float32Array | Int32Array | BigUint64Array> {
    const bytes = await this.toRawArray();
    if (this.dtype === 'bf16') return decodeBF16(bytes as Uint16Array);
    if (this.dtype === 'f16') return decodeF16(bytes as Uint16Array);
    return bytes as Float32Array | Int32Array | BigUint64Array;
  }

  /** Frees the memory (once every call in flight that uses it has finished). Idempotent. */
  dispose(): void {
    if (this.#handle === null) return;
    collected.unregister(this);
    if (this.owned) this.#handle.dispose();
    this.#handle = null;
  }

  [disposeSymbol](): void {
    this.dispose();
  }

  toString(): string {
    return `Tensor(${this.dtype}[${this.shape.join(', ')}] on ${this.device}${this.disposed ? ', disposed' : ''})`;
  }
}
