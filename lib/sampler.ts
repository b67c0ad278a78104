// The engine's way in: a sampler sized once (row parameters in device memory, preallocated
// workspace), enqueue that only launches, and CUDA graphs that replay it (README, "Using
// flashsample inside an engine").
import type { Device } from './device';
import { dtypeCode, FloatDType, FLOAT_DTYPES } from './dtype';
import { checkKnownKeys, isTyped, raw, rangeError, typeError } from './errors';
import { native, NativeGraphHandle, NativeSamplerConfig, NativeSamplerHandle } from './native';
import { Communicator } from './nccl';
import { checkInteger, checkShardRange, FILTER_CANDIDATES, Hash64, MAX_PARTIAL_CANDIDATES } from './parallel';
import {
  checkBannedTokens, checkFilterOrder, checkLogitBias, checkLogprobsMode, checkPenaltyTokens, checkSoftcap, checkStream, checkTensor, checkTopLogprobs,
} from './options';
import { disposeSymbol, type Tensor } from './tensor';

export type RowFilter = 'topK' | 'topP' | 'minP';
const ROW_FILTERS: readonly RowFilter[] = ['topK', 'topP', 'minP'];

export interface SamplerConfig {
  /** The most rows one enqueue samples (1 .. 65535). */
  maxBatch: number;
  /** V and D of the LM head W [V, D] that enqueue will get. */
  vocab: number;
  hidden: number;
  dtype: FloatDType;
  /** Independent samples per row; default 1. */
  numSamples?: number;
  /** The per-row filters rows may set (setRows); a sampler with any takes the filtered kernels. */
  filters?: RowFilter[];
  /** enqueue writes log p(token) into logprobsOut; default false. */
  logprobs?: boolean;
  /** enqueue writes the n most probable tokens of each row into topTokensOut / topLogprobsOut. */
  topLogprobs?: number;
  /** Logit soft-capping for every row, as SampleOptions.softcap; default 0 (off). */
  softcap?: number;
  /** enqueue takes an allowedTokens mask (i32 tensor of B * ceil(V / 32) words); default false. */
  allowedTokens?: boolean;
  /** The filters' order for every row, as SampleOptions.filterOrder; default 'hf'. */
  filterOrder?: 'hf' | 'vllm';
  /** What logprobsOut and topLogprobsOut report, as SampleOptions.logprobsMode; default 'processed'. */
  logprobsMode?: 'processed' | 'raw';
  /**
   * Slots per row of a device-resident penalty table (0 .. 65536; default 0: none): the distinct
   * tokens of a row's prompt and output that the repetition, frequency and presence penalties
   * apply to (setPenaltyTokens; enqueue's recordTokens adds each drawn token). Needs numSamples 1.
   */
  penaltyCapacity?: number;
  /** Slots per row of a device-resident logit-bias table (0 .. 65536; default 0: none): setLogitBias. */
  logitBiasCapacity?: number;
  /**
   * Slots per row of a device-resident banned-token table (0 .. 65536; default 0: none): the tokens
   * (typically EOS and stop tokens) a row may not draw while its minTokens is above 0; enqueue's
   * recordTokens counts minTokens down. setBannedTokens. Needs numSamples 1.
   */
  bannedCapacity?: number;
  /** One rank's vocabulary shard, over NCCL (CUDA; list tables hold global ids). */
  tp?: SamplerShardConfig;
}

/**
 * A sampler whose head is one rank's vocabulary shard (one process per GPU): enqueue's W holds rows
 * [vocabOffset, vocabOffset + vocab) of a vocabulary of vocabSize, and every rank's enqueue writes
 * the unsharded call's tokens (README, "Vocabulary-parallel heads"). Every rank creates its sampler
 * with the same configuration but for vocabOffset, vocab and its own communicator.
 */
export interface SamplerShardConfig {
  /** This rank's communicator (nccl.initRank), on the sampler's device. */
  comm: Communicator;
  /** The shard's first global token id (a multiple of 4). */
  vocabOffset: number;
  /** The unsharded vocabulary. */
  vocabSize: number;
  /** Candidates a row in the exchanged state (0 .. 2^20); default: topLogprobs, at least 1024 with any filter. */
  candidates?: number;
  /**
   * Rows a step's rows pass can take (0 .. maxBatch): rows whose kept set the candidates cannot
   * settle, decided from their whole rows. Their values are exchanged every step (rowsPassRows x
   * maxShardVocab x 4 bytes a rank); rows beyond it come back with status 2 and token -1.
   * Default with filters or topLogprobs max(4, ceil(maxBatch / 8)) (at most maxBatch), else 0 (other rows are always settled).
   */
  rowsPassRows?: number;
  /** The most rows of W any rank's shard holds; default ceil(vocabSize / ranks) up to a multiple of 4. */
  maxShardVocab?: number;
}

const SHARD_CONFIG_KEYS = ['comm', 'vocabOffset', 'vocabSize', 'candidates', 'rowsPassRows', 'maxShardVocab'] as const;
/** The most slots a row of a sampler's list tables (penalties, logit bias, bans) can have. */
export const MAX_LIST_CAPACITY = 65536;

const CONFIG_KEYS = [
  'maxBatch', 'vocab', 'hidden', 'dtype', 'numSamples', 'filters', 'logprobs', 'topLogprobs', 'softcap',
  'allowedTokens', 'filterOrder', 'logprobsMode', 'penaltyCapacity', 'logitBiasCapacity', 'bannedCapacity', 'tp',
] as const;

/** Per-row values for setRows: typed arrays of one length n, for rows first .. first + n - 1. */
export interface RowValues {
  temperature?: Float32Array;
  topK?: Int32Array;
  topP?: Float32Array;
  minP?: Float32Array;
  seed?: BigUint64Array;
  offset?: BigUint64Array;
  /** The penalties (samplers with a penalty table): SampleOptions' repetitionPenalty, ... per row. */
  repetitionPenalty?: Float32Array;
  frequencyPenalty?: Float32Array;
  presencePenalty?: Float32Array;
  /** Steps a row's banned tokens still apply (samplers with a banned table); recordTokens counts it down. */
  minTokens?: Int32Array;
}

/** The penalty table's slots (readRows), row b's at b * penaltyCapacity: token -1 is a free slot. */
export interface PenaltyTable {
  tokenIds: Int32Array;
  outputCounts: Int32Array;
  inPrompt: Uint8Array;
}

/** What readRows returns: every field of every row (maxBatch each). */
export interface Rows {
  temperature: Float32Array;
  topK: Int32Array;
  topP: Float32Array;
  minP: Float32Array;
  seed: BigUint64Array;
  offset: BigUint64Array;
  repetitionPenalty: Float32Array;
  frequencyPenalty: Float32Array;
  presencePenalty: Float32Array;
  minTokens: Int32Array;
  /** Rows of the last enqueue that took the materializing fallback (the filters issue's extra pass). */
  fallbackRows: number;
  /** The penalty table (maxBatch * penaltyCapacity slots), or null without one. */
  penaltyTable: PenaltyTable | null;
  /** The logit-bias table (maxBatch * logitBiasCapacity slots), or null without one. */
  logitBiasTable: { tokenIds: Int32Array; values: Float32Array } | null;
  /** The banned-token table (maxBatch * bannedCapacity slots), or null without one. */
  bannedTable: { tokenIds: Int32Array } | null;
  /** Drawn tokens that recordTokens could not add to a full table, since the sampler was created. */
  unrecordedTokens: number;
}

/**
 * Byte offsets of the row-parameter block (Sampler.devicePointer): each field is an array of
 * maxBatch elements, row b at offset + b * elementBytes, in the dtype named by ROW_FIELDS.
 */
export interface RowLayout {
  temperature: number;
  topK: number;
  topP: number;
  minP: number;
  seed: number;
  offset: number;
  repetitionPenalty: number;
  frequencyPenalty: number;
  presencePenalty: number;
  minTokens: number;
  fallbackRows: number;
  /** Slots a row of the penalty table (0: none); the table's arrays, with a table: */
  penaltyCapacity: number;
  /** i32 [maxBatch, penaltyCapacity]: token ids, -1 = a free slot (the first free slots take new tokens). */
  penaltyTokenIds?: number;
  /** i32 [maxBatch, penaltyCapacity]: the token's count in the row's output so far. */
  penaltyCounts?: number;
  /** u8 [maxBatch, penaltyCapacity]: 1 when the token occurs in the row's prompt. */
  penaltyInPrompt?: number;
  /** Slots a row of the logit-bias table (0: none); with one: token ids (i32, -1 free) and values (f32). */
  logitBiasCapacity: number;
  logitBiasTokenIds?: number;
  logitBiasValues?: number;
  /** Slots a row of the banned-token table (0: none); with one: token ids (i32, -1 free). */
  bannedCapacity: number;
  bannedTokenIds?: number;
  /** i32: tokens recordTokens could not add to a full penalty table (cumulative). */
  unrecordedTokens: number;
  /** Bytes of the block that hold the fields above. */
  bytes: number;
}

/** The fields of the row-parameter block, in bit order: [name, dtype, domain]. */
export const ROW_FIELDS = [
  ['temperature', 'f32', 'a finite number >= 0 (0 = greedy); default 1'],
  ['topK', 'i32', 'an integer >= 0 (0 = off); default 0'],
  ['topP', 'f32', 'a number in (0, 1] (1 = off); default 1'],
  ['minP', 'f32', 'a number in [0, 1) (0 = off); default 0'],
  ['seed', 'u64', 'any 64-bit value; default 0'],
  ['offset', 'u64', 'any 64-bit value (the decode step); default 0'],
  ['repetitionPenalty', 'f32', 'a finite number > 0 (1 = off); default 1'],
  ['frequencyPenalty', 'f32', 'a finite number (0 = off); default 0'],
  ['presencePenalty', 'f32', 'a finite number (0 = off); default 0'],
  ['minTokens', 'i32', 'an integer >= 0 (the steps the banned tokens still apply); default 0'],
] as const;
const PENALTY_FIELDS = ['repetitionPenalty', 'frequencyPenalty', 'presencePenalty'];

type ListCapacity = 'penaltyCapacity' | 'logitBiasCapacity' | 'bannedCapacity';
/** The list tables by native kind (binding's ListKind): the option each holds, its capacity, its name. */
const LIST_TABLES: readonly { option: string; capacity: ListCapacity; table: string }[] = [
  { option: 'penaltyTokens', capacity: 'penaltyCapacity', table: 'a penalty table' },
  { option: 'logitBias', capacity: 'logitBiasCapacity', table: 'a logit-bias table' },
  { option: 'bannedTokens', capacity: 'bannedCapacity', table: 'a banned-token table' },
];

export interface EnqueueArgs {
  /** Hidden states [B, D] (B <= maxBatch), on the sampler's device, its dtype. */
  H: Tensor;
  /** LM head [V, D]. */
  W: Tensor;
  /** i32 tensor of at least B * numSamples elements: the tokens (-1 where a row has none). */
  out: Tensor;
  /** Rows to sample: the first `batch` rows of H and of the parameter block; default H's B. */
  batch?: number;
  /** cudaStream_t as a bigint; default the stream being captured, else the library's stream. */
  stream?: bigint;
  /** i32 tensor of at least B elements: per-row status codes (README: 0 ok, 1 nothing drawable). */
  statusOut?: Tensor;
  /** f32 tensor of at least B * numSamples elements; required exactly when created with logprobs. */
  logprobsOut?: Tensor;
  /** i32 / f32 tensors of at least B * topLogprobs elements; required when created with topLogprobs. */
  topTokensOut?: Tensor;
  topLogprobsOut?: Tensor;
  /** [V] tensor added to the logits. */
  bias?: Tensor;
  /** i32 tensor of B * ceil(V / 32) words; required exactly when created with allowedTokens. */
  allowedTokens?: Tensor;
  /** After the draw, offset[b] += 1 on the device for b < batch (graph replays draw fresh noise). */
  advanceOffset?: boolean;
  /**
   * After the draw, on the device: each row's token is counted in its penalty table (a new token
   * takes the row's first free slot; a row whose table is full gets status 3), and its minTokens
   * counts down. Needs a penalty or banned-token table.
   */
  recordTokens?: boolean;
}

const ENQUEUE_KEYS = [
  'H', 'W', 'out', 'batch', 'stream', 'statusOut', 'logprobsOut', 'topTokensOut', 'topLogprobsOut', 'bias',
  'allowedTokens', 'advanceOffset', 'recordTokens',
] as const;

function positiveInt(name: string, value: unknown, max: number): number {
  if (typeof value !== 'number') throw typeError(name, `an integer in [1, ${max}]`, value);
  if (!Number.isInteger(value) || value < 1 || value > max) throw rangeError(name, `an integer in [1, ${max}]`, value);
  return value;
}

function optionalBool(name: string, value: unknown): boolean {
  if (value === undefined) return false;
  if (typeof value !== 'boolean') throw typeError(name, 'a boolean', value);
  return value;
}

/**
 * A sampler sized once for an engine (device.createSampler): all memory allocated up front, row
 * parameters in a device block that setRows or the engine's own kernels write, and enqueue that
 * validates synchronously and then only launches: capturable in a CUDA graph.
 */
export class Sampler {
  readonly device: Device;
  readonly maxBatch: number;
  readonly vocab: number;
  readonly hidden: number;
  readonly dtype: FloatDType;
  readonly numSamples: number;
  readonly filters: readonly RowFilter[];
  readonly logprobs: boolean;
  readonly topLogprobs: number;
  readonly softcap: number;
  readonly filterOrder: 'hf' | 'vllm';
  readonly logprobsMode: 'processed' | 'raw';
  readonly allowedTokens: boolean;
  readonly penaltyCapacity: number;
  readonly logitBiasCapacity: number;
  readonly bannedCapacity: number;
  /** A sharded sampler's settings (createSampler's tp, defaults filled in), else null. */
  readonly shard: Readonly<Omit<Required<SamplerShardConfig>, 'comm'> & { rank: number; ranks: number }> | null;
  #native: NativeSamplerHandle | null;

  /** @internal Use device.createSampler. */
  constructor(device: Device, config: SamplerConfig) {
    if (config === null || typeof config !== 'object' || Array.isArray(config)) {
      throw typeError('config', 'an object', config);
    }
    checkKnownKeys('createSampler', config, CONFIG_KEYS);
    this.device = device;
    this.maxBatch = positiveInt('maxBatch', config.maxBatch, native.maxBatch);
    this.vocab = positiveInt('vocab', config.vocab, 2 ** 31 - 2);
    this.hidden = positiveInt('hidden', config.hidden, 2 ** 31 - 1);
    if (typeof config.dtype !== 'string' || !FLOAT_DTYPES.includes(config.dtype)) {
      throw typeError('dtype', "'f32', 'f16' or 'bf16'", config.dtype);
    }
    this.dtype = config.dtype;
    this.numSamples = config.numSamples === undefined ? 1 : positiveInt('numSamples', config.numSamples, native.maxSamples);
    const filters = config.filters ?? [];
    if (!Array.isArray(filters) || filters.some((f) => !ROW_FILTERS.includes(f))) {
      throw typeError('filters', "an array of 'topK', 'topP', 'minP'", filters);
    }
    this.filters = Object.freeze([...new Set(filters)]);
    this.logprobs = optionalBool('logprobs', config.logprobs);
    this.allowedTokens = optionalBool('allowedTokens', config.allowedTokens);
    this.topLogprobs = checkTopLogprobs(config.topLogprobs ?? 0);
    this.softcap = checkSoftcap(config.softcap ?? 0);
    const filterOrder = checkFilterOrder(config.filterOrder ?? 'hf');
    this.filterOrder = filterOrder === 1 ? 'vllm' : 'hf';
    const logprobsMode = checkLogprobsMode(config.logprobsMode ?? 'processed');
    this.logprobsMode = logprobsMode === 1 ? 'raw' : 'processed';
    if (this.maxBatch * this.numSamples > 2 ** 31 - 1) {
      throw rangeError('numSamples', `maxBatch * numSamples below 2^31 (maxBatch is ${this.maxBatch})`, this.numSamples);
    }
    const capacity = (name: ListCapacity, counted: boolean): number => {
      const c = config[name] ?? 0;
      if (typeof c !== 'number') throw typeError(name, `an integer in [0, ${MAX_LIST_CAPACITY}]`, c);
      if (!Number.isInteger(c) || c < 0 || c > MAX_LIST_CAPACITY) throw rangeError(name, `an integer in [0, ${MAX_LIST_CAPACITY}]`, c);
      if (counted && c > 0 && this.numSamples !== 1) {
        throw rangeError(name, '0 with numSamples > 1 (a row has one output to count)', c);
      }
      if (c * this.maxBatch > 2 ** 31 - 1) throw rangeError(name, `maxBatch * ${name} below 2^31 (maxBatch is ${this.maxBatch})`, c);
      return c;
    };
    this.penaltyCapacity = capacity('penaltyCapacity', true);
    this.logitBiasCapacity = capacity('logitBiasCapacity', false);
    this.bannedCapacity = capacity('bannedCapacity', true);
    const tp = config.tp === undefined ? undefined : this.#shardConfig(config.tp, filterOrder);
    this.shard = tp === undefined ? null : Object.freeze({
      vocabOffset: tp.vocabOffset, vocabSize: tp.vocabSize, candidates: tp.candidates, rowsPassRows: tp.rowsPassRows,
      maxShardVocab: tp.maxShardVocab, rank: config.tp!.comm.rank, ranks: config.tp!.comm.size,
    });
    this.#native = new native.NativeSampler({
      ...(tp === undefined ? {} : { tp }),
      device: device.kind === 'cuda' ? 1 : 0,
      ordinal: device.ordinal,
      maxBatch: this.maxBatch,
      dtype: dtypeCode(this.dtype),
      vocab: this.vocab,
      dim: this.hidden,
      numSamples: this.numSamples,
      topK: this.filters.includes('topK'),
      topP: this.filters.includes('topP'),
      minP: this.filters.includes('minP'),
      logprobs: this.logprobs,
      topLogprobs: this.topLogprobs,
      softcap: this.softcap,
      allowedTokens: this.allowedTokens,
      filterOrder,
      logprobsMode,
      penaltyCapacity: this.penaltyCapacity,
      logitBiasCapacity: this.logitBiasCapacity,
      bannedCapacity: this.bannedCapacity,
    });
  }

  #shardConfig(tp: SamplerShardConfig, filterOrder: number): NativeSamplerConfig['tp'] {
    if (tp === null || typeof tp !== 'object' || Array.isArray(tp)) throw typeError('tp', 'an object {comm, vocabOffset, vocabSize}', tp);
    checkKnownKeys('tp', tp, SHARD_CONFIG_KEYS);
    if (this.device.kind !== 'cuda') throw new TypeError(`tp: a sharded sampler needs a 'cuda' device, got ${this.device}`);
    if (!(tp.comm instanceof Communicator)) throw typeError('tp.comm', 'a Communicator (nccl.initRank)', tp.comm);
    if (tp.comm.closed) throw new TypeError('tp.comm: the communicator was aborted or disposed');
    if (tp.comm.localRanks > 1) {
      // (NCCL needs one thread's collectives on several GPUs in one group; a step is one rank's)
      throw new TypeError(
        `tp.comm: one of nccl.initAll's ${tp.comm.localRanks} communicators, driven from one thread: a sharded sampler needs one process per GPU (nccl.initRank); use sampleFusedTP(comms, shards) here`,
      );
    }
    if (!tp.comm.device.sameAs(this.device)) {
      throw typeError('tp.comm', `a communicator on ${this.device} (the sampler's device)`, raw(`one on ${tp.comm.device}`));
    }
    const { vocabTotal: vocabSize, vocabOffset } = checkShardRange('tp.', tp.vocabSize, tp.vocabOffset, this.vocab, 'vocab', `vocab ${this.vocab}`);
    const filtered = this.filters.length > 0;
    const candidates = tp.candidates === undefined
      ? Math.min(Math.max(this.topLogprobs, filtered ? FILTER_CANDIDATES : 0), vocabSize)
      : checkInteger('tp.candidates', tp.candidates, 0, MAX_PARTIAL_CANDIDATES);
    const rowsPassRows = tp.rowsPassRows === undefined
      ? (filtered || this.topLogprobs > 0 ? Math.min(this.maxBatch, Math.max(4, Math.ceil(this.maxBatch / 8))) : 0)
      : checkInteger('tp.rowsPassRows', tp.rowsPassRows, 0, this.maxBatch, ' (at most maxBatch)');
    const even = Math.ceil(Math.ceil(vocabSize / tp.comm.size) / 4) * 4;
    const maxShardVocab = tp.maxShardVocab === undefined ? Math.min(even, vocabSize) : checkInteger('tp.maxShardVocab', tp.maxShardVocab, 1, vocabSize);
    if (maxShardVocab < this.vocab) {
      throw rangeError('tp.maxShardVocab', `at least this shard's vocab ${this.vocab} (the most rows any rank's shard holds; every rank the same)`, maxShardVocab);
    }
    // (the numbers every rank's sampler must agree on: the merge compares the hash)
    const optionsHash = new Hash64().add(new Float64Array([
      vocabSize, this.maxBatch, this.numSamples, this.topLogprobs, filterOrder, this.logprobs ? 1 : 0,
      ...ROW_FILTERS.map((f) => (this.filters.includes(f) ? 1 : 0)), candidates, rowsPassRows, maxShardVocab,
    ])).value;
    return { comm: tp.comm.handle, vocabOffset, vocabSize, candidates, rowsPassRows, maxShardVocab, optionsHash };
  }

  #handle(what: string): NativeSamplerHandle {
    if (this.#native === null) throw new TypeError(`${what}: the sampler has been disposed`);
    return this.#native;
  }

  get disposed(): boolean {
    return this.#native === null;
  }

  /** The row-parameter block's device address (CUDA); its layout is `layout`. */
  get devicePointer(): bigint {
    if (this.device.kind !== 'cuda') throw new TypeError('devicePointer: only CUDA samplers have one');
    return this.#handle('devicePointer').pointer;
  }

  get layout(): RowLayout {
    return this.#handle('layout').layout;
  }

  /** Device memory preallocated for the kernels' temporaries (0 on the CPU). */
  get workspaceBytes(): number {
    return this.#handle('workspaceBytes').workspaceBytes;
  }

  /**
   * Writes rows first .. first + n - 1 of the given fields (typed arrays of one length n), in one
   * stream-ordered copy on `stream` (default the library's). Fields left out keep their values.
   * Not allowed during graph capture: call it between replays.
   */
  setRows(first: number, rows: RowValues, options: { stream?: bigint } = {}): void {
    const handle = this.#handle('setRows');
    if (rows === null || typeof rows !== 'object' || Array.isArray(rows)) throw typeError('rows', 'an object of typed arrays', rows);
    checkKnownKeys('setRows', rows, ROW_FIELDS.map(([name]) => name));
    if (options === null || typeof options !== 'object') throw typeError('options', 'an object', options);
    checkKnownKeys('setRows options', options, ['stream']);
    const stream = checkStream('stream', options.stream);
    if (stream !== undefined && this.device.kind !== 'cuda') {
      throw new TypeError(`stream: a CUDA stream needs a 'cuda' sampler, got one on ${this.device}`);
    }
    let count = -1;
    const given: [number, ArrayBufferView & { length: number }][] = [];
    ROW_FIELDS.forEach(([name, dtype, domain], field) => {
      const values = rows[name];
      if (values === undefined) return;
      const kind = dtype === 'f32' ? 'Float32Array' : dtype === 'i32' ? 'Int32Array' : 'BigUint64Array';
      if (!isTyped(values, kind)) throw typeError(name, `a ${kind}`, values);
      if (count >= 0 && values.length !== count) {
        throw rangeError(name, `${count} values (the length of the other fields)`, values);
      }
      count = values.length;
      if (name === 'topK' || name === 'topP' || name === 'minP') {
        if (!this.filters.includes(name)) {
          throw new TypeError(`${name}: this sampler was created without '${name}' in filters (createSampler({ filters }))`);
        }
      }
      if (PENALTY_FIELDS.includes(name) && this.penaltyCapacity === 0) {
        throw new TypeError(`${name}: this sampler was created without a penalty table (createSampler({ penaltyCapacity }))`);
      }
      if (name === 'minTokens' && this.bannedCapacity === 0) {
        throw new TypeError('minTokens: this sampler was created without a banned-token table (createSampler({ bannedCapacity }))');
      }
      const check = fieldCheck(name);
      if (check) {
        for (let i = 0; i < values.length; i++) {
          const x = (values as unknown as ArrayLike<number>)[i];
          if (!check(x)) throw rangeError(`${name}[${i}]`, domain.split(';')[0], x);
        }
      }
      given.push([field, values]);
    });
    if (given.length === 0) throw typeError('rows', `at least one of ${ROW_FIELDS.map(([n]) => n).join(', ')}`, rows);
    if (typeof first !== 'number' || !Number.isInteger(first) || first < 0) {
      throw rangeError('first', 'an integer >= 0', first);
    }
    if (count < 1 || first + count > this.maxBatch) {
      throw rangeError('rows', `1 .. ${this.maxBatch - Math.min(first, this.maxBatch)} rows from row ${first} (maxBatch is ${this.maxBatch})`, raw(`${count} rows`));
    }
    // Packed: each given field's `count` values, 8-byte aligned sections.
    const at = new Uint32Array(ROW_FIELDS.length);
    let bytes = 0;
    for (const [field, values] of given) {
      at[field] = bytes;
      bytes += Math.ceil(values.byteLength / 8) * 8;
    }
    const staging = new Uint8Array(bytes);
    let fields = 0;
    for (const [field, values] of given) {
      staging.set(new Uint8Array(values.buffer, values.byteOffset, values.byteLength), at[field]);
      fields |= 1 << field;
    }
    handle.setRows(first, count, fields, staging, at, stream);
  }

  /**
   * Replaces the penalty tables of rows first .. first + n - 1 (n = rowOffsets.length - 1) with
   * the tokens given, as SampleOptions.penaltyTokens lists them (a row's prompt tokens, and its
   * output so far with their counts): at most penaltyCapacity distinct ids a row, the other slots
   * freed. One stream-ordered copy on `stream` (default the library's); never waits. Not allowed
   * during graph capture.
   */
  setPenaltyTokens(
    first: number,
    penaltyTokens: { rowOffsets: Int32Array; tokenIds: Int32Array; outputCounts: Int32Array; inPrompt: Uint8Array },
    options: { stream?: bigint } = {},
  ): void {
    this.#setList(0, first, penaltyTokens, options, (n, vocab) => {
      const c = checkPenaltyTokens(penaltyTokens, n, vocab);
      return { offsets: c.offsets, columns: [c.tokens, c.counts, c.inPrompt] };
    });
  }

  /**
   * Replaces the logit-bias tables of rows first .. first + n - 1, as SampleOptions.logitBias lists
   * them (at most logitBiasCapacity distinct ids a row). As setPenaltyTokens otherwise.
   */
  setLogitBias(
    first: number,
    logitBias: { rowOffsets: Int32Array; tokenIds: Int32Array; values: Float32Array },
    options: { stream?: bigint } = {},
  ): void {
    this.#setList(1, first, logitBias, options, (n, vocab) => {
      const c = checkLogitBias(logitBias, n, vocab);
      return { offsets: c.offsets, columns: [c.tokens, c.values] };
    });
  }

  /**
   * Replaces the banned-token tables of rows first .. first + n - 1, as SampleOptions.bannedTokens
   * lists them (at most bannedCapacity ids a row): they apply while the row's minTokens (setRows)
   * is above 0. As setPenaltyTokens otherwise.
   */
  setBannedTokens(
    first: number,
    bannedTokens: { rowOffsets: Int32Array; tokenIds: Int32Array },
    options: { stream?: bigint } = {},
  ): void {
    this.#setList(2, first, bannedTokens, options, (n, vocab) => {
      const c = checkBannedTokens(bannedTokens, n, vocab);
      return { offsets: c.offsets, columns: [c.tokens] };
    });
  }

  /**
   * The three list setters: checks (ids in [0, vocab): a sharded sampler's tables hold global ids),
   * then the rows' slots dense ([n, capacity], -1 past a row's ids).
   */
  #setList(
    kind: 0 | 1 | 2, first: number, lists: unknown, options: { stream?: bigint },
    check: (rows: number, vocab: number) => { offsets: Int32Array; columns: (Int32Array | Float32Array | Uint8Array)[] },
  ): void {
    const { option: name, capacity: capacityName, table } = LIST_TABLES[kind];
    const what = `set${name[0].toUpperCase()}${name.slice(1)}`;
    const handle = this.#handle(what);
    const cap = this[capacityName];
    if (cap === 0) throw new TypeError(`${what}: this sampler was created without ${table} (createSampler({ ${capacityName} }))`);
    if (options === null || typeof options !== 'object') throw typeError('options', 'an object', options);
    checkKnownKeys(`${what} options`, options, ['stream']);
    const stream = checkStream('stream', options.stream);
    if (stream !== undefined && this.device.kind !== 'cuda') {
      throw new TypeError(`stream: a CUDA stream needs a 'cuda' sampler, got one on ${this.device}`);
    }
    if (typeof first !== 'number' || !Number.isInteger(first) || first < 0 || first >= this.maxBatch) {
      throw rangeError('first', `an integer in [0, ${this.maxBatch - 1}] (maxBatch is ${this.maxBatch})`, first);
    }
    const offsets = (lists as { rowOffsets?: unknown } | null)?.rowOffsets;
    const vocab = this.shard?.vocabSize ?? this.vocab;
    if (!isTyped(offsets, 'Int32Array')) check(1, vocab); // throws its message
    const count = (offsets as Int32Array).length - 1;
    if (count < 1 || first + count > this.maxBatch) {
      throw rangeError(`${name}.rowOffsets`, `an Int32Array of 2 .. ${this.maxBatch - first + 1} values (rows from row ${first}, maxBatch ${this.maxBatch}, + 1)`, offsets);
    }
    const c = check(count, vocab);
    const dense = c.columns.map((col, i) => {
      const out = new (col.constructor as new (n: number) => Int32Array | Float32Array | Uint8Array)(count * cap);
      if (i === 0) out.fill(-1);
      return out;
    });
    for (let r = 0; r < count; r++) {
      const n = c.offsets[r + 1] - c.offsets[r];
      if (n > cap) {
        throw rangeError(`${name}.rowOffsets[${r + 1}]`, `at most ${cap} tokens in row ${r} (the sampler's ${capacityName})`, raw(`${n} tokens`));
      }
      c.columns.forEach((col, i) => dense[i].set(col.subarray(c.offsets[r], c.offsets[r + 1]) as never, r * cap));
    }
    handle.setListRows(kind, first, count, dense, stream);
  }

  /**
   * Launches sampling of the first `batch` rows (rows b of H with parameter row b) on `stream`:
   * validates synchronously, then only enqueues (no host copy, allocation or wait). The tensors
   * and the sampler stay alive until the work is done. On the CPU it runs synchronously.
   */
  enqueue(args: EnqueueArgs): void {
    const handle = this.#handle('enqueue');
    if (args === null || typeof args !== 'object' || Array.isArray(args)) throw typeError('args', 'an object', args);
    checkKnownKeys('enqueue', args, ENQUEUE_KEYS);
    const H = checkTensor('H', args.H);
    const W = checkTensor('W', args.W);
    const onDevice = (name: string, t: Tensor) => {
      if (!t.device.sameAs(this.device)) throw typeError(name, `a tensor on ${this.device} (the sampler's device)`, raw(`${t}`));
    };
    onDevice('H', H);
    onDevice('W', W);
    if (H.dtype !== this.dtype) throw typeError('H', `dtype '${this.dtype}' (the sampler's)`, raw(`'${H.dtype}'`));
    if (W.dtype !== this.dtype) throw typeError('W', `dtype '${this.dtype}' (the sampler's)`, raw(`'${W.dtype}'`));
    if (H.shape.length !== 2 || H.shape[1] !== this.hidden) {
      throw rangeError('H', `shape [B, ${this.hidden}] (the sampler's hidden size)`, raw(`[${H.shape.join(', ')}]`));
    }
    if (W.shape.length !== 2 || W.shape[0] !== this.vocab || W.shape[1] !== this.hidden) {
      throw rangeError('W', `shape [${this.vocab}, ${this.hidden}] (the sampler's vocab and hidden size)`, raw(`[${W.shape.join(', ')}]`));
    }
    const batch = args.batch === undefined ? H.shape[0] : positiveInt('batch', args.batch, this.maxBatch);
    if (batch > this.maxBatch) throw rangeError('H', `at most maxBatch = ${this.maxBatch} rows`, raw(`[${H.shape.join(', ')}]`));
    if (batch > H.shape[0]) throw rangeError('batch', `at most the ${H.shape[0]} rows of H`, batch);
    const stream = checkStream('stream', args.stream);
    if (stream !== undefined && this.device.kind !== 'cuda') {
      throw new TypeError(`stream: a CUDA stream needs a 'cuda' sampler, got one on ${this.device}`);
    }
    const output = (name: string, value: unknown, dtype: 'i32' | 'f32', elements: number, what: string) => {
      const t = checkTensor(name, value);
      onDevice(name, t);
      if (t.dtype !== dtype || t.size < elements) {
        const expected = `an '${dtype}' tensor of at least ${elements} elements (${what})`;
        if (t.dtype !== dtype) throw typeError(name, expected, raw(`${t}`));
        throw rangeError(name, expected, raw(`${t}`));
      }
      return t.handle(name);
    };
    const S = this.numSamples;
    const spec: Record<string, unknown> = {
      hidden: H.handle('H'),
      weight: W.handle('W'),
      out: output('out', args.out, 'i32', batch * S, 'B * numSamples'),
      batch,
      stream,
      advanceOffset: optionalBool('advanceOffset', args.advanceOffset),
      recordTokens: optionalBool('recordTokens', args.recordTokens),
    };
    if (spec.recordTokens && this.penaltyCapacity === 0 && this.bannedCapacity === 0) {
      throw new TypeError('recordTokens: this sampler was created without a penalty or banned-token table (createSampler({ penaltyCapacity, bannedCapacity }))');
    }
    if (args.statusOut !== undefined) spec.status = output('statusOut', args.statusOut, 'i32', batch, 'one per row');
    if (this.logprobs) {
      if (args.logprobsOut === undefined) throw typeError('logprobsOut', `an 'f32' tensor of at least ${batch * S} elements (the sampler was created with logprobs)`, undefined);
      spec.logprobs = output('logprobsOut', args.logprobsOut, 'f32', batch * S, 'B * numSamples');
    } else if (args.logprobsOut !== undefined) {
      throw new TypeError('logprobsOut: this sampler was created without logprobs (createSampler({ logprobs: true }))');
    }
    const n = this.topLogprobs;
    if (n > 0) {
      spec.topTokens = output('topTokensOut', args.topTokensOut, 'i32', batch * n, 'B * topLogprobs');
      spec.topLogprobs = output('topLogprobsOut', args.topLogprobsOut, 'f32', batch * n, 'B * topLogprobs');
    } else if (args.topTokensOut !== undefined || args.topLogprobsOut !== undefined) {
      throw new TypeError('topTokensOut: this sampler was created without topLogprobs (createSampler({ topLogprobs: n }))');
    }
    if (args.bias !== undefined) {
      const bias = checkTensor('bias', args.bias);
      onDevice('bias', bias);
      if (bias.dtype !== this.dtype) throw typeError('bias', `dtype '${this.dtype}' (the dtype of W)`, raw(`'${bias.dtype}'`));
      if (bias.shape.length !== 1 || bias.size !== this.vocab) throw rangeError('bias', `shape [${this.vocab}]`, raw(`[${bias.shape.join(', ')}]`));
      spec.bias = bias.handle('bias');
    }
    const words = batch * Math.ceil(this.vocab / 32);
    if (this.allowedTokens) {
      spec.allowed = output('allowedTokens', args.allowedTokens, 'i32', words, 'B * ceil(V / 32) words');
    } else if (args.allowedTokens !== undefined) {
      throw new TypeError('allowedTokens: this sampler was created without allowedTokens (createSampler({ allowedTokens: true }))');
    }
    handle.enqueue(spec);
  }

  /** Every row's parameters as the device holds them after the sampler's last work. */
  async readRows(): Promise<Rows> {
    const bytes = await this.#handle('readRows').readRows();
    const l = this.layout;
    const B = this.maxBatch;
    const view = new DataView(bytes);
    // n elements at byte offset `at` (a table's column: present when its capacity is not 0)
    const i32 = (at: number | undefined, n: number) => new Int32Array(bytes.slice(at!, at! + 4 * n));
    const f32 = (at: number | undefined, n: number) => new Float32Array(bytes.slice(at!, at! + 4 * n));
    const u64 = (at: number, n: number) => new BigUint64Array(bytes.slice(at, at + 8 * n));
    const pen = B * this.penaltyCapacity, bias = B * this.logitBiasCapacity, ban = B * this.bannedCapacity;
    return {
      temperature: f32(l.temperature, B),
      topK: i32(l.topK, B),
      topP: f32(l.topP, B),
      minP: f32(l.minP, B),
      seed: u64(l.seed, B),
      offset: u64(l.offset, B),
      repetitionPenalty: f32(l.repetitionPenalty, B),
      frequencyPenalty: f32(l.frequencyPenalty, B),
      presencePenalty: f32(l.presencePenalty, B),
      minTokens: i32(l.minTokens, B),
      fallbackRows: view.getInt32(l.fallbackRows, true),
      penaltyTable: pen === 0 ? null : {
        tokenIds: i32(l.penaltyTokenIds, pen),
        outputCounts: i32(l.penaltyCounts, pen),
        inPrompt: new Uint8Array(bytes.slice(l.penaltyInPrompt!, l.penaltyInPrompt! + pen)),
      },
      logitBiasTable: bias === 0 ? null : { tokenIds: i32(l.logitBiasTokenIds, bias), values: f32(l.logitBiasValues, bias) },
      bannedTable: ban === 0 ? null : { tokenIds: i32(l.bannedTokenIds, ban) },
      unrecordedTokens: view.getInt32(l.unrecordedTokens, true),
    };
  }

  /** Frees the sampler once work in flight and graphs that captured it are done with it. */
  dispose(): void {
    this.#native?.dispose();
    this.#native = null;
  }

  [disposeSymbol](): void {
    this.dispose();
  }
}

function fieldCheck(name: string): ((x: number) => boolean) | null {
  switch (name) {
    case 'temperature':
      return (x) => Number.isFinite(x) && x >= 0;
    case 'topK':
      return (x) => x >= 0;
    case 'topP':
      return (x) => x > 0 && x <= 1;
    case 'minP':
      return (x) => x >= 0 && x < 1;
    case 'repetitionPenalty':
      return (x) => Number.isFinite(x) && x > 0;
    case 'frequencyPenalty':
    case 'presencePenalty':
      return Number.isFinite;
    case 'minTokens':
      return (x) => x >= 0;
  }
  return null;
}

/** A captured CUDA graph (device.captureGraph): replay it with launch(). */
export class CudaGraph {
  readonly device: Device;
  #native: NativeGraphHandle | null;

  /** @internal */
  constructor(device: Device, handle: NativeGraphHandle) {
    this.device = device;
    this.#native = handle;
  }

  get disposed(): boolean {
    return this.#native === null;
  }

  /** Replays the graph on `stream` (default the library's), after the last work of its samplers. */
  launch(stream?: bigint): void {
    if (this.#native === null) throw new TypeError('launch: the graph has been disposed');
    this.#native.launch(checkStream('stream', stream));
  }

  /** Frees the graph (and what it holds) once its launches in flight are done. */
  dispose(): void {
    this.#native?.dispose();
    this.#native = null;
  }

  [disposeSymbol](): void {
    this.dispose();
  }
}

/** device.captureGraph: runs `fn` (synchronous) with the stream in capture, returns the graph. */
export function captureGraph(device: Device, stream: bigint | undefined, fn: () => unknown): CudaGraph {
  if (device.kind !== 'cuda') throw new TypeError(`captureGraph: CUDA graphs need a 'cuda' device, got ${device}`);
  checkStream('stream', stream);
  if (typeof fn !== 'function') throw typeError('fn', 'a function that enqueues the work to capture', fn);
  native.captureBegin(device.ordinal, stream);
  let result: unknown;
  try {
    result = fn();
  } catch (e) {
    native.captureAbort();
    throw e;
  }
  if (result !== null && typeof result === 'object' && typeof (result as { then?: unknown }).then === 'function') {
    native.captureAbort();
    throw new TypeError('fn: expected a synchronous function (it returned a promise): the capture ends when fn returns');
  }
  return new CudaGraph(device, native.captureEnd());
}
