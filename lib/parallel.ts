// Vocabulary-parallel LM heads (docs/SEMANTICS.md §6): a shard of W draws its partial state
// (sampleFused with partial: true), and mergePartials turns the shards' states into the tokens
// the unsharded call draws. The noise is keyed by the global token id, so the merged tokens do
// not depend on how the vocabulary is split.
import type { Device } from './device';
import { checkKnownKeys, raw, rangeError, typeError } from './errors';
import { native, NativeSpec } from './native';
import { Communicator } from './nccl';
import { buildRowSpec, buildSpec, ROW_KEYS, SampleOptions } from './options';
import { checkRows, ROW_NO_CANDIDATE, ROW_UNDECIDED, SampleResult } from './result';
import { Tensor } from './tensor';

/** sampleFused's options for one shard of the LM head. */
export interface ShardOptions extends SampleOptions {
  /** Return the shard's partial state instead of tokens. */
  partial: true;
  /** The shard's first global token id: W holds tokens [vocabOffset, vocabOffset + V). A multiple of 4. */
  vocabOffset: number;
  /** The unsharded vocabulary size. */
  vocabSize: number;
  /** Candidates kept per row, at most: default the largest topK, topLogprobs, or 1024 with top-p /
   *  min-p (0 without). A CUDA shard on its one-pass path (SEMANTICS §6) may keep fewer. */
  candidates?: number;
  /** Rows the state is sized for, so that ranks exchange one size whatever their batch; default B. */
  maxBatch?: number;
  /**
   * How the shard's logitBias, bannedTokens and penaltyTokens name tokens: 'local' (default), the
   * shard's rows of W like bias and allowedTokens; 'global', ids in [0, vocabSize), each applied
   * by the shard that holds it (every shard may then take the same lists).
   */
  listIds?: 'local' | 'global';
}

export const MAX_SHARDS = 64;
export const MAX_PARTIAL_CANDIDATES = 2 ** 20;
/** The default candidates per row when top-p or min-p is set (SEMANTICS §5's 1024). */
export const FILTER_CANDIDATES = 1024;
export const SHARD_KEYS = ['partial', 'vocabOffset', 'vocabSize', 'candidates', 'maxBatch', 'listIds'] as const;
/** Options a shard applies to its own slice of W; a merge cannot take them. */
const SHARD_ONLY = [
  'bias', 'softcap', 'allowedTokens', 'logitBias', 'bannedTokens', 'penaltyTokens', 'repetitionPenalty',
  'frequencyPenalty', 'presencePenalty', ...SHARD_KEYS,
];

// include/partial.h's sizes.
const HEADER_BYTES = 64;
const ROW_BYTES = 40;
const WINNER_BYTES = 16;
const RAW_ROW_BYTES = 32;
/** A row's bytes; rawTop >= 0: with the raw section of logprobsMode 'raw' (include/partial.h). */
const rowBytes = (numSamples: number, capacity: number, rawTop = -1) =>
  ROW_BYTES + WINNER_BYTES * numSamples + 8 * capacity +
  (rawTop < 0 ? 0 : RAW_ROW_BYTES + Math.ceil((4 * (numSamples + capacity)) / 8) * 8 + 8 * rawTop);

/** A shard's partial state: a tensor on the shard's device in include/partial.h's layout. */
export class PartialState {
  /** i32 tensor of `bytes / 4` words: the header, then maxBatch rows (docs/SEMANTICS.md §6). */
  readonly state: Tensor;
  readonly batch: number;
  readonly maxBatch: number;
  readonly numSamples: number;
  /** Candidate keys per row. */
  readonly capacity: number;
  /** Raw top keys per row (logprobsMode 'raw': its raw section; -1: none). */
  readonly rawTop: number;
  readonly vocabOffset: number;
  /** The shard's rows of W. */
  readonly vocabSize: number;
  readonly vocabTotal: number;
  readonly optionsHash: bigint;

  /** @internal */
  constructor(fields: Omit<PartialState, 'bytes' | 'dispose' | 'read'>) {
    this.state = fields.state;
    this.batch = fields.batch;
    this.maxBatch = fields.maxBatch;
    this.numSamples = fields.numSamples;
    this.capacity = fields.capacity;
    this.rawTop = fields.rawTop;
    this.vocabOffset = fields.vocabOffset;
    this.vocabSize = fields.vocabSize;
    this.vocabTotal = fields.vocabTotal;
    this.optionsHash = fields.optionsHash;
  }

  /** Its size in bytes: what one rank sends per exchange. */
  get bytes(): number {
    return partialBytes(this.maxBatch, this.numSamples, this.capacity, this.rawTop);
  }

  /** The state decoded (copied to the host). */
  async read(): Promise<DecodedPartial> {
    const words = await this.state.toRawArray();
    return decodePartial((words as Int32Array).buffer as ArrayBuffer);
  }

  dispose(): void {
    this.state.dispose();
  }
}

/** A partial state's bytes; rawTop >= 0 (logprobsMode 'raw'): with its raw section of rawTop keys. */
export function partialBytes(maxBatch: number, numSamples: number, capacity: number, rawTop = -1): number {
  return HEADER_BYTES + maxBatch * rowBytes(numSamples, capacity, rawTop);
}

export interface DecodedPartial {
  magic: number;
  version: number;
  batch: number;
  maxBatch: number;
  numSamples: number;
  capacity: number;
  optionsHash: bigint;
  vocabOffset: number;
  vocabSize: number;
  vocabTotal: number;
  hasStats: boolean;
  /** logprobsMode 'raw': raw keys a row (-1: no raw section). */
  rawTop: number;
  rows: {
    /** max of logit / T over the shard's finite drawable tokens (-Infinity: none). */
    zMax: number;
    /** Σ exp(logit / T - zMax) over them. */
    sum: number;
    finiteCount: number;
    infCount: number;
    /** Whether the candidates hold every drawable token of the shard. */
    complete: boolean;
    /** Each sample's winner over the shard: Gumbel score, global token (-1: none), logit. */
    winners: { score: number; token: number; logit: number }[];
    /** The shard's best tokens in (logit descending, token ascending) order: a prefix of its order. */
    candidates: { token: number; logit: number }[];
    /** logprobsMode 'raw': the raw distribution over the shard (after softcap; no mask, no lists,
     *  T = 1), the raw logits of the winners and candidates, and the shard's best raw tokens. */
    raw?: {
      zMax: number;
      sum: number;
      infCount: number;
      winnerLogits: number[];
      candidateLogits: number[];
      keys: { token: number; logit: number }[];
    };
  }[];
}

/** include/partial.h's layout as plain objects (the first `batch` rows). */
export function decodePartial(buffer: ArrayBuffer): DecodedPartial {
  const view = new DataView(buffer);
  const i32 = (at: number) => view.getInt32(at, true);
  const i64 = (at: number) => Number(view.getBigInt64(at, true));
  const d: DecodedPartial = {
    magic: view.getUint32(0, true),
    version: view.getUint32(4, true),
    batch: i32(8),
    maxBatch: i32(12),
    numSamples: i32(16),
    capacity: i32(20),
    optionsHash: view.getBigUint64(24, true),
    vocabOffset: i64(32),
    vocabSize: i64(40),
    vocabTotal: i64(48),
    hasStats: (view.getUint32(56, true) & 1) !== 0,
    rawTop: (view.getUint32(56, true) & 2) !== 0 ? view.getUint32(56, true) >>> 16 : -1,
    rows: [],
  };
  const stride = view.getUint32(60, true);
  const key = new DataView(new ArrayBuffer(4));
  const keyAt = (k: number) => {  // partial_key's (logit, global token) at byte k
    const low = view.getUint32(k, true);
    let bits = view.getUint32(k + 4, true);
    bits = bits & 0x80000000 ? bits & 0x7fffffff : ~bits >>> 0;
    key.setUint32(0, bits);
    return { token: 0xffffffff - low, logit: key.getFloat32(0) };
  };
  for (let b = 0; b < d.batch; b++) {
    const at = HEADER_BYTES + b * stride;
    const winners = [];
    for (let j = 0; j < d.numSamples; j++) {
      const w = at + ROW_BYTES + j * WINNER_BYTES;
      const k = view.getUint32(w + 4, true);
      winners.push({
        score: view.getFloat32(w, true),
        token: k === 0x7fffffff ? -1 : k & 0x7fffffff,
        logit: view.getFloat32(w + 8, true),
      });
    }
    const count = i32(at + 32);
    const candidates = [];
    for (let i = 0; i < count; i++) candidates.push(keyAt(at + ROW_BYTES + d.numSamples * WINNER_BYTES + 8 * i));
    let rawSection: DecodedPartial['rows'][number]['raw'];
    if (d.rawTop >= 0) {
      const r = at + ROW_BYTES + d.numSamples * WINNER_BYTES + 8 * d.capacity;
      const logits = r + RAW_ROW_BYTES;
      const keys = logits + Math.ceil((4 * (d.numSamples + d.capacity)) / 8) * 8;
      const f32 = (i: number) => view.getFloat32(logits + 4 * i, true);
      rawSection = {
        zMax: view.getFloat64(r, true),
        sum: view.getFloat64(r + 8, true),
        infCount: Number(view.getBigInt64(r + 16, true)),
        winnerLogits: Array.from({ length: d.numSamples }, (_, j) => f32(j)),
        candidateLogits: Array.from({ length: count }, (_, i) => f32(d.numSamples + i)),
        keys: Array.from({ length: view.getInt32(r + 24, true) }, (_, i) => keyAt(keys + 8 * i)),
      };
    }
    d.rows.push({
      zMax: view.getFloat64(at, true),
      sum: view.getFloat64(at + 8, true),
      finiteCount: i64(at + 16),
      infCount: i64(at + 24),
      complete: i32(at + 36) !== 0,
      winners,
      candidates,
      ...(rawSection ? { raw: rawSection } : {}),
    });
  }
  return d;
}

/** Two FNV-1a lanes over bytes, 64 bits: what partial states carry to tell calls apart. */
export class Hash64 {
  #a = 0x811c9dc5 | 0;
  #b = 0x01000193 ^ 0x5bd1e995;
  add(view: ArrayBufferView): this {
    const u8 = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
    for (let i = 0; i < u8.length; i++) {
      this.#a = Math.imul(this.#a ^ u8[i], 0x01000193);
      this.#b = Math.imul(this.#b ^ u8[i], 0x01000193) ^ (this.#b >>> 15);
    }
    return this;
  }
  get value(): bigint {
    return (BigInt(this.#a >>> 0) << 32n) | BigInt(this.#b >>> 0);
  }
}

/**
 * A 64-bit hash of the options that say how rows are drawn (ROW_KEYS, B and the vocabulary), so
 * that partials of different calls are told apart at the merge.
 */
function optionsHash(spec: Pick<NativeSpec, (typeof ROW_KEYS)[number] | 'perRowSeed'>, batch: number, vocabTotal: number): bigint {
  const h = new Hash64();
  const field = (tag: number, view?: ArrayBufferView) => {
    h.add(new Int32Array([tag, view ? view.byteLength : -1]));
    if (view) h.add(view);
  };
  field(1, new Float64Array([batch, vocabTotal, spec.numSamples, spec.topLogprobs, spec.filterOrder ?? 0]));
  field(2, new Uint8Array([spec.perRowSeed ? 1 : 0, spec.logprobs ? 1 : 0]));
  field(3, spec.temperature);
  field(4, ArrayBuffer.isView(spec.seed) ? spec.seed : undefined);
  field(5, ArrayBuffer.isView(spec.offset) ? spec.offset : undefined);
  field(6, spec.topK);
  field(7, spec.topP);
  field(8, spec.minP);
  return h.value;
}

function defaultCapacity(spec: NativeSpec, vocabTotal: number): number {
  let c = spec.topLogprobs;
  if (spec.topK) for (const k of spec.topK) c = Math.max(c, k);
  const active = (a: Float32Array | undefined, off: number) => a !== undefined && a.some((x) => x !== off);
  if (active(spec.topP, 1) || active(spec.minP, 0)) c = Math.max(c, FILTER_CANDIDATES);
  return Math.min(c, vocabTotal, MAX_PARTIAL_CANDIDATES);
}

/** Whether a call's spec reports raw log-probabilities (logprobsMode 'raw' with logprobs or topLogprobs). */
function reportsRaw(spec: Pick<NativeSpec, 'logprobsMode' | 'logprobs' | 'topLogprobs'>): boolean {
  return spec.logprobsMode === 1 && (spec.logprobs || spec.topLogprobs > 0);
}
/** reportsRaw of a call's options, before they become a spec. */
function optionsReportRaw(options: SampleOptions): boolean {
  return options.logprobsMode === 'raw' && (options.logprobs === true || (options.topLogprobs ?? 0) > 0);
}

export function checkInteger(name: string, value: unknown, min: number, max: number, why = ''): number {
  const expected = `an integer in [${min}, ${max}]${why}`;
  if (typeof value !== 'number') throw typeError(name, expected, value);
  if (!Number.isInteger(value) || value < min || value > max) throw rangeError(name, expected, value);
  return value;
}

/**
 * A shard's place: vocabSize (>= its V rows) and vocabOffset (a multiple of 4, the shard inside the
 * vocabulary), their names after `prefix`; `rows` and `count` name the shard's V in the messages.
 */
export function checkShardRange(
  prefix: string, vocabSize: unknown, vocabOffset: unknown, V: number, rows: string, count: string,
): { vocabTotal: number; vocabOffset: number } {
  const vocabTotal = checkInteger(`${prefix}vocabSize`, vocabSize, V, 2 ** 31 - 2, ` (the unsharded vocabulary, >= ${rows})`);
  const offset = checkInteger(`${prefix}vocabOffset`, vocabOffset, 0, vocabTotal - V, ` (vocabOffset + ${count} <= vocabSize)`);
  if (offset % 4 !== 0) {
    throw rangeError(`${prefix}vocabOffset`, 'a multiple of 4 (one Philox block serves an aligned quad of tokens; pad shards to multiples of 4)', offset);
  }
  return { vocabTotal, vocabOffset: offset };
}

/** A shard call's native spec, its state tensor (allocated, unwritten) and the state's fields. */
export function buildPartialSpec(H: unknown, W: unknown, options: ShardOptions): { spec: NativeSpec; partial: PartialState } {
  const { spec, operands } = buildSpec(H, W, options, 'fused', SHARD_KEYS);
  const o = options as unknown as Record<string, unknown>;
  if (o.partial !== true) throw typeError('partial', 'true (vocabOffset and vocabSize then say where the shard lies)', o.partial);
  const V = operands.vocab;
  const { vocabTotal, vocabOffset } = checkShardRange('', o.vocabSize, o.vocabOffset, V, 'the rows of W', `${V} rows of W`);
  const capacity = o.candidates === undefined
    ? defaultCapacity(spec, vocabTotal)
    : checkInteger('candidates', o.candidates, 0, MAX_PARTIAL_CANDIDATES);
  const maxBatch = o.maxBatch === undefined ? operands.batch : checkInteger('maxBatch', o.maxBatch, operands.batch, native.maxBatch, ' (>= B)');
  if (o.listIds !== undefined && o.listIds !== 'local' && o.listIds !== 'global') throw typeError('listIds', "'local' or 'global'", o.listIds);
  if (o.listIds === 'global') spec.listedGlobalIds = true;
  const optionsHashValue = optionsHash(spec, operands.batch, vocabTotal);
  const rawTop = reportsRaw(spec) ? spec.topLogprobs : -1;
  const bytes = partialBytes(maxBatch, spec.numSamples, capacity, rawTop);
  const state = operands.device.empty([bytes / 4], 'i32');
  spec.partial = state.handle('partial');
  spec.vocabOffset = vocabOffset;
  spec.vocabTotal = vocabTotal;
  spec.partialCapacity = capacity;
  spec.partialMaxBatch = maxBatch;
  spec.optionsHash = optionsHashValue;
  const partial = new PartialState({
    state, batch: operands.batch, maxBatch, numSamples: spec.numSamples, capacity, rawTop, vocabOffset, vocabSize: V, vocabTotal,
    optionsHash: optionsHashValue,
  });
  return { spec, partial };
}

/** sampleFused(H, Wshard, { partial: true, vocabOffset, vocabSize, ... }): the shard's partial state. */
export async function samplePartial(H: Tensor, W: Tensor, options: ShardOptions): Promise<PartialState> {
  const { spec, partial } = buildPartialSpec(H, W, options);
  try {
    await native.sample(spec);
  } catch (e) {
    partial.dispose();
    throw e;
  }
  return partial;
}

export interface MergeResult extends SampleResult {
  /** Rows whose kept set the shards' candidates could not settle (tokens -1): run the shards again
   *  with more `candidates` (as many as the largest shard's rows settles every row). */
  undecidedRows: Int32Array;
  /** sampleSharded / sampleFusedTP: the rows the candidates could not settle, which the rows pass
   *  decided (SEMANTICS §6); raise `candidates` if they are many. mergePartials: empty. */
  rowsPassRows: Int32Array;
}

// PartialError (include/partial.h) -> message; `who` names the partial (partials[i], or a rank).
const MERGE_ERRORS: Record<number, (who: string, batch: number, vocab: number, first: string) => string> = {
  1: (who) => `${who}: not a partial state (its header's magic or version is wrong)`,
  2: (who, batch, _v, first) => `${who}: made for another batch size than ${first} (${batch} rows)`,
  3: (who) => `${who}: made with another numSamples than the merge's options`,
  4: (who) =>
    `${who}: made with other per-row options than the merge's (temperature, seed, offset, numSamples, topK, topP, minP, logprobs, topLogprobs or filterOrder differ)`,
  5: (who, _b, vocab, first) => `${who}: made for another vocabulary size than ${first} (${vocab})`,
  6: (who, _b, vocab) => `partials: the shards do not cover the vocabulary [0, ${vocab}) exactly once (${who} overlaps another or leaves a gap)`,
  7: (who) => `${who}: made without the statistics that filters and logprobs need (give the shards the merge's options)`,
  8: (who) => `${who}: its header does not match its size (not a partial state of this layout)`,
  9: (who) => `${who}: made without the raw section that logprobsMode 'raw' needs, or with another topLogprobs (give the shards the merge's options)`,
};

/** The native merge of `spec`'s blocks; `who(i)` names block i in errors. */
async function mergeNative(spec: NativeSpec, who: (i: number) => string): Promise<MergeResult & { largestShard: number }> {
  const r = await native.mergePartials(spec);
  if (r.mergeError !== 0) {
    const describe = MERGE_ERRORS[r.mergeError];
    const message = describe
      ? describe(who(r.mergeWhich), spec.batch, spec.vocab, who(0))
      : `partials: cannot be merged (code ${r.mergeError})`;
    throw r.mergeError === 1 || r.mergeError === 8 ? new TypeError(message) : new RangeError(message);
  }
  checkRows(r);
  const undecided: number[] = [];
  for (let b = 0; b < r.rowStatus.length; b++) if (r.rowStatus[b] === ROW_UNDECIDED) undecided.push(b);
  const out: MergeResult & { largestShard: number } = {
    tokens: r.tokens, fallbackRows: 0, undecidedRows: Int32Array.from(undecided), rowsPassRows: new Int32Array(0),
    largestShard: r.largestShard,
  };
  if (r.logprobs) out.logprobs = r.logprobs;
  if (r.topTokens) {
    out.topTokens = r.topTokens;
    out.topLogprobs = r.topLogprobs;
  }
  return out;
}

/** The merge's spec: the per-row options of `options` for `batch` rows over `vocabTotal`. */
function mergeSpec(device: Device, batch: number, vocabTotal: number, options: unknown): NativeSpec {
  if (options === undefined) options = {};
  if (options === null || typeof options !== 'object' || Array.isArray(options)) throw typeError('options', 'an object', options);
  for (const key of SHARD_ONLY) {
    if ((options as Record<string, unknown>)[key] !== undefined) {
      throw new TypeError(`${key}: applies to a shard's own rows of W: give it to sampleFused(H, Wshard, { partial: true, ... })`);
    }
  }
  checkKnownKeys('options', options, ROW_KEYS);
  const rows = buildRowSpec(batch, device, options as SampleOptions);
  return {
    kind: 0,
    device: device.kind === 'cuda' ? 1 : 0,
    ordinal: device.ordinal,
    dtype: 0,
    batch,
    vocab: vocabTotal,
    dim: 1,
    softcap: 0,
    ...rows,
    optionsHash: optionsHash(rows, batch, vocabTotal),
  };
}

/**
 * The tokens the unsharded call draws, from its shards' partial states (same device, any order).
 * `options`: the per-row options the shards were called with (temperature, seed, offset,
 * numSamples, topK, topP, minP, logprobs, topLogprobs, filterOrder, stream).
 */
export async function mergePartials(partials: readonly PartialState[], options?: SampleOptions): Promise<MergeResult> {
  if (!Array.isArray(partials) || partials.length < 1 || partials.length > MAX_SHARDS) {
    throw typeError('partials', `an array of 1 .. ${MAX_SHARDS} partial states (sampleFused with partial: true)`, partials);
  }
  let device: Device | undefined;
  const handles = partials.map((p, i) => {
    if (!(p instanceof PartialState)) throw typeError(`partials[${i}]`, 'a partial state (sampleFused with partial: true)', p);
    if (p.state.disposed) throw new TypeError(`partials[${i}]: the partial state has been disposed`);
    device ??= p.state.device;
    if (!p.state.device.sameAs(device)) {
      throw typeError(`partials[${i}]`, `a partial state on ${device} (the device of partials[0])`, raw(`one on ${p.state.device}`));
    }
    return p.state.handle(`partials[${i}]`);
  });
  const { batch, vocabTotal } = partials[0];
  const spec = mergeSpec(device!, batch, vocabTotal, options);
  spec.partials = handles;
  const { largestShard: _largest, ...result } = await mergeNative(spec, (i) => `partials[${i}]`);
  return result;
}

/** sampleFusedTP's options: the call's (as sampleFused's) and the shard's place in the vocabulary. */
export interface TPOptions extends SampleOptions {
  /** This rank's first global token id (a multiple of 4). */
  vocabOffset: number;
  /** How the lists name tokens (ShardOptions.listIds); with 'global', the call's lists go to every shard. */
  listIds?: 'local' | 'global';
  /** The unsharded vocabulary. */
  vocabSize: number;
  /** Candidates per row (ShardOptions.candidates); every rank must give the same. */
  candidates?: number;
  /** Rows the exchanged state is sized for (every rank the same); default B. */
  maxBatch?: number;
}

/** One local rank's shard, for a process that drives several GPUs (nccl.initAll). */
export interface TPShard {
  H: Tensor;
  W: Tensor;
  vocabOffset: number;
  /** The shard's own options: bias, allowedTokens, softcap, logitBias, bannedTokens, penalties. */
  options?: SampleOptions;
}

/**
 * Samples from a head sharded by vocabulary across the ranks of an NCCL communicator: the fused
 * pass on this rank's shard, an all-gather of the partial states (a few bytes per row, not V),
 * then the merge on every rank, so every rank returns the tokens of the unsharded call. Rows the
 * candidates cannot settle get the rows pass (SEMANTICS §6): each rank's candidate values of those
 * rows, all-gathered, and the rows decided whole on every rank.
 * One process per GPU: sampleFusedTP(comm, H, Wshard, options). One process driving several GPUs
 * (nccl.initAll): sampleFusedTP(comms, shards, options), one shard per communicator, one NCCL
 * group per exchange; it resolves with one result per local rank.
 * Every rank must call it with the same per-row options, B (or maxBatch), numSamples and
 * candidates: ranks that disagree on options are an error after the exchange; ranks whose states
 * differ in size cannot meet, and the exchange times out (Communicator.timeoutMs), aborted.
 */
export async function sampleFusedTP(comm: Communicator, H: Tensor, W: Tensor, options: TPOptions): Promise<MergeResult>;
export async function sampleFusedTP(comms: Communicator[], shards: TPShard[], options: Omit<TPOptions, 'vocabOffset'>): Promise<MergeResult[]>;
export async function sampleFusedTP(
  first: Communicator | Communicator[], second: Tensor | TPShard[], third: Tensor | Omit<TPOptions, 'vocabOffset'>,
  fourth?: TPOptions,
): Promise<MergeResult | MergeResult[]> {
  if (Array.isArray(first)) {
    if (!Array.isArray(second) || second.length !== first.length) {
      throw typeError('shards', `an array of ${first.length} shards {H, W, vocabOffset} (one per communicator)`, second);
    }
    return runTP(first, second as TPShard[], third as TPOptions);
  }
  const options = fourth as TPOptions;
  if (options === null || typeof options !== 'object') throw typeError('options', 'an object with vocabOffset and vocabSize', options);
  const { vocabOffset, ...rest } = options;
  return (await runTP([first], [{ H: second as Tensor, W: third as Tensor, vocabOffset, options: {} }], rest as TPOptions))[0];
}

/** A shard's options in one round: the call's, the shard's own, its place, and `candidates` if set. */
function roundOptions(options: Omit<TPOptions, 'vocabOffset'>, s: TPShard, candidates: number | undefined): ShardOptions {
  return {
    ...options, ...s.options, partial: true, vocabOffset: s.vocabOffset, vocabSize: options.vocabSize,
    ...(candidates === undefined ? {} : { candidates }),
  };
}

/** The per-row options of `options` (ROW_KEYS): what a merge takes. */
function rowOptionsOf(options: SampleOptions): SampleOptions {
  return Object.fromEntries(ROW_KEYS.filter((k) => options[k] !== undefined).map((k) => [k, options[k]]));
}

/** Bytes of one shard's segment in the rows pass (include/partial.h, RowValuesHeader, row_values_bytes):
 *  a 32-byte header, then `rows` rows of `pitch` float32 candidate values (and with `raw`,
 *  logprobsMode 'raw', as many rows of raw logits), rounded up to 16 bytes so that the next
 *  segment's header stays aligned whatever the pitch. */
function rowValuesBytes(rows: number, pitch: number, raw = false): number {
  return Math.ceil((32 + rows * pitch * (raw ? 8 : 4)) / 16) * 16;
}

/** The rows pass's shard call: the candidate values of `rows` (the merge's undecided rows) of the
 *  shard's vocabulary into a segment of `pitch` floats a row, instead of a partial state. */
function buildRowValuesSpec(s: TPShard, options: ShardOptions, rows: Int32Array, pitch: number) {
  const { spec, partial } = buildPartialSpec(s.H, s.W, { ...options, candidates: 0 });
  const device = partial.state.device;
  const values = device.empty([rowValuesBytes(rows.length, pitch, reportsRaw(spec)) / 4], 'i32');
  const rowIds = device.tensor(rows, [rows.length], 'i32');
  spec.rowValues = values.handle('rowValues');
  spec.valueRows = rowIds.handle('valueRows');
  spec.valueRowCount = rows.length;
  spec.valuePitch = pitch;
  return { spec, values, dispose: () => [partial, rowIds].forEach((t) => t.dispose()) };
}

/** The rows pass's decision on `device`: the rows of `first` in `rowIds` drawn whole from the
 *  shards' `segments` segments in `values`, written into a copy of `first`'s outputs. */
async function decideRows(
  device: Device, first: MergeResult, rowIds: Int32Array, rowOptions: SampleOptions, vocabTotal: number,
  values: Tensor, segments: number, pitch: number,
): Promise<MergeResult> {
  const batch = first.tokens.length / ((rowOptions.numSamples as number | undefined) ?? 1);
  const spec = mergeSpec(device, batch, vocabTotal, rowOptions);
  const rows = device.tensor(rowIds, [rowIds.length], 'i32');
  try {
    spec.rowValues = values.handle('rowValues');
    spec.valueRows = rows.handle('valueRows');
    spec.valueRowCount = rowIds.length;
    spec.valuePitch = pitch;
    spec.valueSegments = segments;
    const r = await native.mergePartials(spec);  // (spec.rowValues: the rows pass's decision)
    const out: MergeResult = { ...first, tokens: first.tokens.slice(), undecidedRows: new Int32Array(0), rowsPassRows: rowIds.slice() };
    if (first.logprobs) out.logprobs = first.logprobs.slice();
    if (first.topTokens) {
      out.topTokens = first.topTokens.slice();
      out.topLogprobs = first.topLogprobs!.slice();
    }
    const S = first.tokens.length / batch;
    const n = first.topTokens ? first.topTokens.length / batch : 0;
    for (const b of rowIds) {
      if (r.rowStatus[b] === ROW_UNDECIDED) {
        throw new RangeError(`the rows pass: the ranks' segments do not cover the vocabulary [0, ${vocabTotal}) exactly once`);
      }
      if (r.rowStatus[b] === ROW_NO_CANDIDATE) {
        throw new RangeError(`row ${b}: no token can be drawn: every logit of the row is NaN or -Infinity, or masked out by allowedTokens`);
      }
      out.tokens.set(r.tokens.subarray(b * S, (b + 1) * S), b * S);
      if (out.logprobs && r.logprobs) out.logprobs.set(r.logprobs.subarray(b * S, (b + 1) * S), b * S);
      if (n && r.topTokens) {
        out.topTokens!.set(r.topTokens.subarray(b * n, (b + 1) * n), b * n);
        out.topLogprobs!.set(r.topLogprobs!.subarray(b * n, (b + 1) * n), b * n);
      }
    }
    return out;
  } finally {
    rows.dispose();
  }
}

async function runTP(comms: Communicator[], shards: TPShard[], options: TPOptions): Promise<MergeResult[]> {
  if (comms.length < 1) throw typeError('comms', 'a non-empty array of communicators', comms);
  comms.forEach((c, i) => {
    const name = comms.length > 1 ? `comms[${i}]` : 'comm';
    if (!(c instanceof Communicator)) throw typeError(name, 'a Communicator (nccl.initRank or nccl.initAll)', c);
    if (c.closed) throw new TypeError(`${name}: the communicator was aborted or disposed`);
    const s = shards[i];
    if (s === null || typeof s !== 'object') throw typeError(`shards[${i}]`, 'a shard {H, W, vocabOffset}', s);
    for (const [key, t] of [['H', s.H], ['W', s.W]] as const) {
      if (t instanceof Tensor && !t.device.sameAs(c.device)) {
        throw typeError(comms.length > 1 ? `shards[${i}].${key}` : key, `a tensor on ${c.device} (the communicator's device)`, raw(`one on ${t.device}`));
      }
    }
  });
  const size = comms[0].size;
  const timeoutMs = Math.max(...comms.map((c) => c.timeoutMs));
  const rowOptions = rowOptionsOf(options);
  // One round: every step is enqueued on the stream at once (the partials, the all-gather after
  // them, the merges after it), and one wait covers all: no host round trip between the steps.
  const round = async (candidates: number | undefined) => {
    const built: { spec: NativeSpec; partial: PartialState }[] = [];
    const recvs: Tensor[] = [];
    try {
      for (const s of shards) built.push(buildPartialSpec(s.H, s.W, roundOptions(options, s, candidates)));
      const bytes = built[0].partial.bytes;
      for (const b of built) recvs.push(b.partial.state.device.empty([(size * bytes) / 4], 'i32'));
      const merges = recvs.map((recv, i) => {
        const spec = mergeSpec(recv.device, built[i].partial.batch, built[i].partial.vocabTotal, rowOptions);
        spec.partials = [recv.handle('recv')];
        spec.partialStride = bytes;
        spec.partialCount = size;
        return spec;
      });
      const pending: Promise<unknown>[] = built.map((b) => native.sample(b.spec));
      pending.push(
        native.ncclAllGather(
          comms.map((c) => c.handle), built.map((b) => b.partial.state.handle('partial')), recvs.map((r) => r.handle('recv')),
          bytes, options.stream, timeoutMs,
        ),
      );
      const merged = merges.map((spec) => mergeNative(spec, (r) => `rank ${r}`));
      // Settle every step before the tensors are released; then the first failure, if any.
      const settled = await Promise.allSettled([...pending, ...merged]);
      const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) throw failed.reason;
      const results = await Promise.all(merged);
      return { value: results.map(({ largestShard: _largest, ...r }) => r), largest: results[0].largestShard };
    } finally {
      for (const b of built) b.partial.dispose();
      for (const r of recvs) r.dispose();
    }
  };
  const first = await round(options.candidates);
  // Every rank merged the same states, so they agree on the undecided rows. The rows pass: each
  // rank's candidate values of those rows, all-gathered (rows × the largest shard, not B × V), and
  // every rank decides them whole; enqueued at once as the round is.
  const rowIds = first.value[0].undecidedRows;
  if (rowIds.length === 0) return first.value;
  const pitch = first.largest;
  const bytes = rowValuesBytes(rowIds.length, pitch, optionsReportRaw(options));
  const built: ReturnType<typeof buildRowValuesSpec>[] = [];
  const recvs: Tensor[] = [];
  try {
    for (const s of shards) built.push(buildRowValuesSpec(s, roundOptions(options, s, undefined), rowIds, pitch));
    for (const b of built) recvs.push(b.values.device.empty([(size * bytes) / 4], 'i32'));
    const pending: Promise<unknown>[] = built.map((b) => native.sample(b.spec));
    pending.push(
      native.ncclAllGather(
        comms.map((c) => c.handle), built.map((b) => b.values.handle('rowValues')), recvs.map((r) => r.handle('recv')),
        bytes, options.stream, timeoutMs,
      ),
    );
    const decided = recvs.map((recv, i) =>
      decideRows(recv.device, first.value[i], rowIds, rowOptions, options.vocabSize, recv, size, pitch));
    const settled = await Promise.allSettled([...pending, ...decided]);
    const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
    return await Promise.all(decided);
  } finally {
    for (const b of built) {
      b.values.dispose();
      b.dispose();
    }
    for (const r of recvs) r.dispose();
  }
}

/**
 * Samples from a head whose vocabulary shards live on devices of this process, without NCCL (a
 * machine without libnccl, shards on the CPU and the GPU): each shard's partial state, the states
 * copied through the host to the first shard's device, the merge there. Rows the candidates cannot
 * settle take the rows pass, as in sampleFusedTP, their values gathered through the host. The
 * tokens are the unsharded call's.
 */
export async function sampleSharded(shards: TPShard[], options: Omit<TPOptions, 'vocabOffset'>): Promise<MergeResult> {
  if (!Array.isArray(shards) || shards.length < 1 || shards.length > MAX_SHARDS) {
    throw typeError('shards', `an array of 1 .. ${MAX_SHARDS} shards {H, W, vocabOffset}`, shards);
  }
  if (options === null || typeof options !== 'object') throw typeError('options', 'an object with vocabSize', options);
  shards.forEach((s, i) => {
    if (s === null || typeof s !== 'object') throw typeError(`shards[${i}]`, 'a shard {H, W, vocabOffset}', s);
  });
  const rowOptions = rowOptionsOf(options);
  const largest = Math.max(...shards.map((s) => (s.W instanceof Tensor ? s.W.shape[0] : 0)));
  const round = async (candidates: number | undefined) => {
    const partials: PartialState[] = [];
    try {
      for (const s of shards) partials.push(await samplePartial(s.H, s.W, roundOptions(options, s, candidates)));
      const device = partials[0].state.device;
      for (let i = 1; i < partials.length; i++) {
        const p = partials[i];
        if (p.state.device.sameAs(device)) continue;
        const words = (await p.state.toRawArray()) as Int32Array;
        partials[i] = new PartialState({ ...p, state: device.tensor(words, [words.length], 'i32') });
        p.dispose();
      }
      return await mergePartials(partials, rowOptions);
    } finally {
      for (const p of partials) p.dispose();
    }
  };
  const first = await round(options.candidates);
  // The rows pass: each shard's candidate values of the undecided rows, through the host into one
  // buffer on the first shard's device, where the rows are decided whole.
  const rowIds = first.undecidedRows;
  if (rowIds.length === 0) return first;
  const words = rowValuesBytes(rowIds.length, largest, optionsReportRaw(options)) / 4;
  const gathered = new Int32Array(shards.length * words);
  for (let i = 0; i < shards.length; i++) {
    const b = buildRowValuesSpec(shards[i], roundOptions(options, shards[i], undefined), rowIds, largest);
    try {
      await native.sample(b.spec);
      gathered.set((await b.values.toRawArray()) as Int32Array, i * words);
    } finally {
      b.values.dispose();
      b.dispose();
    }
  }
  const device = (shards[0].W as Tensor).device;
  const values = device.tensor(gathered, [gathered.length], 'i32');
  try {
    return await decideRows(device, first, rowIds, rowOptions, options.vocabSize, values, shards.length, largest);
  } finally {
    values.dispose();
  }
}
