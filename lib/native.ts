// The single typed require of the compiled addon (node-gyp-build finds build/Release or
// prebuilds/). Nothing else in the package touches the .node file.
import * as fs from 'fs';
import * as path from 'path';

export interface NativeBufferHandle {
  /** encoding: 0 copy as is, 1 Float32Array -> f16 bits, 2 Float32Array -> bf16 bits (binding/half_encode.h) */
  upload(view: ArrayBufferView, encoding?: HalfEncoding): void;
  /** upload() on a worker thread; `view` must not change until the promise settles. */
  uploadAsync(view: ArrayBufferView, encoding?: HalfEncoding): Promise<void>;
  download(): Promise<ArrayBuffer>;
  dispose(): void;
  readonly pointer: bigint;
  readonly bytes: number;
  readonly disposed: boolean;
}

export interface NativeBufferClass {
  new (kind: 0 | 1, ordinal: number, bytes: number): NativeBufferHandle;
  wrap(ordinal: number, pointer: bigint, bytes: number): NativeBufferHandle;
}

/** What `sample` takes: everything validated and expanded to per-row arrays by options.ts. */
export interface NativeSpec {
  kind: 0 | 1 | 2; // fused, reference gumbel, reference inverse-cdf
  device: 0 | 1; // cpu, cuda
  ordinal: number;
  hidden?: NativeBufferHandle;
  weight?: NativeBufferHandle;
  bias?: NativeBufferHandle;
  dtype: 0 | 1 | 2; // f32, f16, bf16
  batch: number;
  vocab: number;
  dim: number;
  numSamples: number;
  temperature: Float32Array;
  seed: BigUint64Array | NativeBufferHandle;
  offset: BigUint64Array | NativeBufferHandle;
  perRowSeed: boolean;
  topK?: Int32Array;
  topP?: Float32Array;
  minP?: Float32Array;
  softcap: number;
  allowed?: Uint32Array | NativeBufferHandle;
  logprobs: boolean;
  topLogprobs: number;
  out?: NativeBufferHandle;
  stream?: bigint;
  biasOffsets?: Int32Array;
  biasTokens?: Int32Array;
  biasValues?: Float32Array;
  bannedOffsets?: Int32Array;
  bannedTokens?: Int32Array;
  penaltyOffsets?: Int32Array;
  penaltyTokens?: Int32Array;
  penaltyCounts?: Int32Array;
  penaltyInPrompt?: Uint8Array;
  // The same lists given as tensors (unchecked: the table kernel reports invalid rows, status 4).
  biasList?: Record<string, unknown>;
  bannedList?: Record<string, unknown>;
  penaltyList?: Record<string, unknown>;
  repetitionPenalty?: Float32Array;
  frequencyPenalty?: Float32Array;
  presencePenalty?: Float32Array;
  filterOrder?: 0 | 1; // Hugging Face's (top-k, top-p, min-p), vLLM's (min-p first)
  logprobsMode?: 0 | 1; // processed, raw (SEMANTICS §4)
  // Vocabulary shards (lib/parallel.ts): the partial state's tensor and layout, or the blocks to merge.
  optionsHash?: bigint;
  partial?: NativeBufferHandle;
  vocabOffset?: number;
  vocabTotal?: number;
  partialCapacity?: number;
  partialMaxBatch?: number;
  /** A shard's lists name global ids (ShardOptions.listIds). */
  listedGlobalIds?: boolean;
  partials?: NativeBufferHandle[];
  /** partials[0] holds partialCount blocks of partialStride bytes (an all-gather's output). */
  partialStride?: number;
  partialCount?: number;
  // The rows pass (SEMANTICS §6): a shard's segment of its rows' candidate values, or the
  // decision's valueSegments segments; valueRows the batch rows, ascending.
  rowValues?: NativeBufferHandle;
  valueRows?: NativeBufferHandle;
  valueRowCount?: number;
  valuePitch?: number;
  valueSegments?: number;
}

export interface NativeResult {
  tokens?: Int32Array;
  rowStatus: Int32Array;
  logprobs?: Float32Array;
  topTokens?: Int32Array;
  topLogprobs?: Float32Array;
  fallbackRows: number;
}

export interface NativeGpuStatus {
  compiledWithCuda: boolean;
  usable: boolean;
  reason: string;
  devices: { name: string; sm: number; multiprocessors: number; memory: number }[];
  /** The CUDA dispatch's escape hatches in force (FLASHSAMPLE_NO_WGMMA, FLASHSAMPLE_NO_TENSOR_MAPS). */
  escapeHatches: { noWgmma: boolean; noTensorMaps: boolean };
}

/** Diagnostics (binding/storage.h): native buffers alive, and bytes reported to V8 as external memory. */
export interface NativeMemoryStats {
  hostBuffers: number;
  hostBytes: number;
  deviceBuffers: number;
  deviceBytes: number;
  /** Wrapped with Tensor.fromDevicePointer (never freed by flashsample). */
  externalBuffers: number;
  /** napi_adjust_external_memory total still outstanding. */
  reportedBytes: number;
  /** glibc only (mallinfo2), the whole process: bytes malloc has handed out, and bytes it holds free. */
  mallocInUse?: number;
  mallocFree?: number;
}

/** Diagnostics (binding/cuda_api.h): time spent in each host-side CUDA step since the process started. */
export interface NativeHostStepStats {
  name: string;
  calls: number;
  totalMs: number;
  maxMs: number;
  over10ms: number;
}

export type HalfEncoding = 0 | 1 | 2;

/** binding/sampler.cc: an engine sampler's native side (lib/sampler.ts validates its arguments). */
export interface NativeSamplerHandle {
  setRows(first: number, count: number, fields: number, staging: Uint8Array, stagingAt: Uint32Array, stream?: bigint): void;
  /** kind 0: penalty table (tokens, counts, inPrompt), 1: logit bias (tokens, values), 2: banned (tokens). */
  setListRows(kind: 0 | 1 | 2, first: number, count: number, columns: (Int32Array | Float32Array | Uint8Array)[], stream?: bigint): void;
  enqueue(spec: Record<string, unknown>): void;
  readRows(): Promise<ArrayBuffer>;
  dispose(): void;
  readonly pointer: bigint;
  readonly layout: {
    temperature: number; topK: number; topP: number; minP: number; seed: number; offset: number;
    repetitionPenalty: number; frequencyPenalty: number; presencePenalty: number; minTokens: number;
    fallbackRows: number; penaltyCapacity: number; penaltyTokenIds?: number; penaltyCounts?: number;
    penaltyInPrompt?: number; logitBiasCapacity: number; logitBiasTokenIds?: number; logitBiasValues?: number;
    bannedCapacity: number; bannedTokenIds?: number; unrecordedTokens: number; bytes: number;
  };
  readonly workspaceBytes: number;
}

export interface NativeSamplerConfig {
  /** A rank's shard (binding/sampler.cc, sharded_step). */
  tp?: {
    comm: NativeCommHandle; vocabOffset: number; vocabSize: number; candidates: number; rowsPassRows: number;
    maxShardVocab: number; optionsHash: bigint;
  };
  device: 0 | 1;
  ordinal: number;
  maxBatch: number;
  dtype: 0 | 1 | 2;
  vocab: number;
  dim: number;
  numSamples: number;
  topK: boolean;
  topP: boolean;
  minP: boolean;
  logprobs: boolean;
  topLogprobs: number;
  softcap: number;
  allowedTokens: boolean;
  filterOrder: 0 | 1; // Hugging Face's, vLLM's (min-p first)
  logprobsMode: 0 | 1; // processed, raw
  penaltyCapacity: number; // slots a row of each list table (0: none)
  logitBiasCapacity: number;
  bannedCapacity: number;
}

export interface NativeGraphHandle {
  launch(stream?: bigint): void;
  dispose(): void;
  readonly disposed: boolean;
}

/** binding/nccl.cc: one rank of an NCCL communicator. */
export interface NativeCommHandle {
  readonly info: { rank: number; size: number; ordinal: number; closed: boolean };
  abort(): void;
  dispose(): void;
}

export interface NativeAddon {
  NativeBuffer: NativeBufferClass;
  memoryStats(): NativeMemoryStats;
  hostStepStats(): NativeHostStepStats[];
  gpuStatus(): NativeGpuStatus;
  cpuThreads(): number;
  cpuIsa(): 'avx512' | 'avx2' | 'baseline';
  philox(c0: number, c1: number, c2: number, c3: number, k0: number, k1: number): number[];
  gumbel(bits: number): number;
  maxBatch: number;
  maxSamples: number;
  sample(spec: NativeSpec): Promise<NativeResult>;
  /** binding/sample.cc: include/merge.h over spec.partials; mergeError is a PartialError (0 = none). */
  mergePartials(
    spec: NativeSpec,
  ): Promise<NativeResult & { tokens: Int32Array; mergeError: number; mergeWhich: number; largestShard: number }>;
  ncclStatus(): { loaded: boolean; path: string; version: number; error: string };
  ncclUniqueId(): Uint8Array;
  ncclInitRank(id: Uint8Array, nranks: number, rank: number, ordinal: number, timeoutMs: number): Promise<NativeCommHandle>;
  ncclInitAll(ordinals: number[]): Promise<NativeCommHandle[]>;
  ncclAllGather(
    comms: NativeCommHandle[], sends: NativeBufferHandle[], recvs: NativeBufferHandle[], bytes: number,
    stream: bigint | undefined, timeoutMs: number,
  ): Promise<void>;
  timeSampler(
    spec: NativeSpec,
    inputs: { hidden: NativeBufferHandle; weight: NativeBufferHandle }[],
    warmup: number,
    iters: number,
  ): Promise<Float64Array>;
  readBandwidth(ordinal: number, bytes: number, iters: number): Promise<number>;
  NativeSampler: new (config: NativeSamplerConfig) => NativeSamplerHandle;
  captureBegin(ordinal: number, stream?: bigint): void;
  captureEnd(): NativeGraphHandle;
  captureAbort(): void;
  capturing(): boolean;
  createStream(ordinal: number): bigint;
  destroyStream(ordinal: number, stream: bigint): void;
  synchronize(ordinal: number, stream?: bigint): Promise<void>;
}

function packageRoot(): string {
  // lib/native.ts runs from lib/ (ts-jest) or dist/lib/ (compiled): walk up to package.json.
  let dir = __dirname;
  while (!fs.existsSync(path.join(dir, 'package.json'))) {
    const parent = path.dirname(dir);
    if (parent === dir) return path.resolve(__dirname, '..');
    dir = parent;
  }
  return dir;
}

// eslint-disable-next-line @typescript-eslint/no-var-requires
const loadBinding: (dir: string) => unknown = require('node-gyp-build');

export const native = loadBinding(packageRoot()) as NativeAddon;
