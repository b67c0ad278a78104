// NCCL communicators for vocabulary-parallel heads (sampleFusedTP in parallel.ts). libnccl is
// loaded at run time (binding/gpu/nccl.cc): FLASHSAMPLE_NCCL_LIB names it, else libnccl.so.2 on the
// loader's path; nothing of NCCL is needed to install flashsample.
import { Device, open } from './device';
import { isTyped, rangeError, typeError } from './errors';
import { native, NativeCommHandle } from './native';

export interface NcclStatus {
  loaded: boolean;
  /** The library loaded ('' when none was). */
  path: string;
  /** ncclGetVersion's code, e.g. 22703 for 2.27.3 (0 when none was loaded). */
  version: number;
  /** Why none was loaded: every path tried, with the loader's reason. */
  error: string;
}

export interface CommOptions {
  /** How long a collective (or, for initRank, the other ranks' joining) may take before the
   *  communicator is aborted and the call fails; default 30 s for collectives, 120 s for initRank. */
  timeoutMs?: number;
}

const COLLECTIVE_TIMEOUT_MS = 30_000;
const INIT_TIMEOUT_MS = 120_000;

function checkTimeout(value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 2 ** 31 - 1) {
    throw rangeError('timeoutMs', 'an integer number of milliseconds in [1, 2^31 - 1]', value);
  }
  return value;
}

function cudaDevice(name: string, device: unknown): Device {
  if (typeof device === 'string') device = open(device as 'cuda');
  if (typeof device === 'number') {
    if (!Number.isInteger(device) || device < 0) throw rangeError(name, 'a CUDA device index >= 0', device);
    device = open(`cuda:${device}`);
  }
  if (!(device instanceof Device)) throw typeError(name, "a 'cuda' Device, 'cuda:N' or a device index", device);
  if (device.kind !== 'cuda') throw typeError(name, "a 'cuda' device (NCCL runs between GPUs)", device.kind);
  return device;
}

function loaded(): void {
  const s = native.ncclStatus();
  if (!s.loaded) throw new Error(s.error);
}

/** One rank of an NCCL communicator: its rank, the number of ranks and the GPU it drives. */
export class Communicator {
  readonly rank: number;
  readonly size: number;
  readonly device: Device;
  /** The timeout of its collectives (CommOptions.timeoutMs). */
  readonly timeoutMs: number;
  /** @internal */
  readonly handle: NativeCommHandle;
  /** @internal The ranks this process drives with it (nccl.initAll's GPUs; 1 for initRank). */
  readonly localRanks: number;

  /** @internal Use nccl.initRank or nccl.initAll. */
  constructor(handle: NativeCommHandle, timeoutMs: number, localRanks = 1) {
    const info = handle.info;
    this.handle = handle;
    this.localRanks = localRanks;
    this.rank = info.rank;
    this.size = info.size;
    this.device = open(`cuda:${info.ordinal}`);
    this.timeoutMs = timeoutMs;
  }

  /** Aborted (by abort(), a timeout or a peer's error) or disposed: it cannot be used again. */
  get closed(): boolean {
    return this.handle.info.closed;
  }

  /** Aborts the communicator: collectives in flight fail at once, on this rank. */
  abort(): void {
    this.handle.abort();
  }

  /** Frees the communicator (aborting what is still in flight). Idempotent. */
  dispose(): void {
    this.handle.dispose();
  }

  toString(): string {
    return `Communicator(rank ${this.rank} of ${this.size} on ${this.device})`;
  }
}

export const nccl = {
  /** Whether libnccl could be loaded, which one, or why not. */
  status(): NcclStatus {
    return native.ncclStatus();
  },

  /** A new unique id (128 bytes) for initRank: rank 0 makes it and hands it to the others its own way. */
  createUniqueId(): Uint8Array {
    loaded();
    return native.ncclUniqueId();
  },

  /**
   * This process's rank of a communicator of `nranks` ranks, one GPU per rank (one process per GPU
   * or per node; NCCL's own transports between nodes). Resolves once every rank has joined; rejects
   * after timeoutMs (default 120 s) if one does not, with the communicator aborted.
   */
  async initRank(id: Uint8Array, nranks: number, rank: number, device: Device | string | number, options: CommOptions = {}): Promise<Communicator> {
    if (!isTyped(id, 'Uint8Array') || id.length !== 128) throw typeError('id', 'a Uint8Array of 128 bytes (nccl.createUniqueId())', id);
    if (typeof nranks !== 'number' || !Number.isInteger(nranks) || nranks < 1 || nranks > 65536) {
      throw rangeError('nranks', 'an integer in [1, 65536]', nranks);
    }
    if (typeof rank !== 'number' || !Number.isInteger(rank) || rank < 0 || rank >= nranks) {
      throw rangeError('rank', `an integer in [0, ${nranks - 1}]`, rank);
    }
    const initTimeout = checkTimeout(options.timeoutMs, INIT_TIMEOUT_MS);
    const dev = cudaDevice('device', device);
    loaded();
    const handle = await native.ncclInitRank(id.slice(), nranks, rank, dev.ordinal, initTimeout);
    return new Communicator(handle, checkTimeout(options.timeoutMs, COLLECTIVE_TIMEOUT_MS));
  },

  /** One communicator per GPU of `devices`, all driven by this process (ncclCommInitAll). */
  async initAll(devices: (Device | string | number)[], options: CommOptions = {}): Promise<Communicator[]> {
    if (!Array.isArray(devices) || devices.length < 1) throw typeError('devices', 'a non-empty array of CUDA devices', devices);
    const ordinals = devices.map((d, i) => cudaDevice(`devices[${i}]`, d).ordinal);
    if (new Set(ordinals).size !== ordinals.length) throw rangeError('devices', 'distinct GPUs (one rank per GPU)', ordinals);
    const timeout = checkTimeout(options.timeoutMs, COLLECTIVE_TIMEOUT_MS);
    loaded();
    const handles = await native.ncclInitAll(ordinals);
    return handles.map((h) => new Communicator(h, timeout, handles.length));
  },
};
