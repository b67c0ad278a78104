// Validates SampleOptions once, with uniform messages, into the plain spec the native side takes.
import type { Device } from './device';
import { dtypeCode, FloatDType, FLOAT_DTYPES } from './dtype';
import { checkKnownKeys, describe, isTyped, raw, rangeError, typeError } from './errors';
import { native, NativeSpec } from './native';
import { Tensor } from './tensor';

export interface SampleOptions {
  /** number or Float32Array(B); 0 = greedy argmax; default 1. */
  temperature?: number | Float32Array;
  /** One seed for the call (rows get independent streams), or one per row (BigUint64Array or a u64 device tensor). */
  seed?: number | bigint | BigUint64Array | Tensor;
  /** Philox counter offset, e.g. the decode step: one for the call or one per row; default 0. */
  offset?: number | bigint | BigUint64Array | Tensor;
  /** Independent samples per row, 1 .. 65536; default 1. */
  numSamples?: number;
  /** [V] tensor added to the logits (same dtype and device as W). */
  bias?: Tensor;
  /** Keep the k largest logits; 0 = off. */
  topK?: number | Int32Array;
  /** Nucleus mass in (0, 1]; 1 = off. */
  topP?: number | Float32Array;
  /** Keep tokens with p >= minP * p_max, minP in [0, 1); 0 = off. */
  minP?: number | Float32Array;
  /** Logits become softcap * tanh(logit / softcap) before the temperature; 0 = off. */
  softcap?: number;
  /** Per-row bitmask over the vocabulary, bit set = allowed: Uint32Array(B * ceil(V / 32)) or an i32 tensor of that size. */
  allowedTokens?: Uint32Array | Tensor;
  /** Also return log p(token) under the distribution it was drawn from. */
  logprobs?: boolean;
  /** Also return the n most probable tokens of each row with their log-probabilities. */
  topLogprobs?: number;
  /** What logprobs and topLogprobs report: 'processed' (default), the distribution each token was
   *  drawn from; 'raw', softmax of the logits after softcap and the model's bias, before the lists,
   *  the mask, the temperature and the filters (vLLM's raw_logprobs). */
  logprobsMode?: 'processed' | 'raw';
  /** cudaStream_t (as a bigint) to order the work after an engine's own; CUDA only. */
  stream?: bigint;
  /**
   * Per-row sparse bias added to the logits (OpenAI's logit_bias): CSR over rows. Each list may
   * also come as tensors on the call's device (i32; values f32; inPrompt i32), checked on the
   * device: a row with an invalid entry makes the call reject naming the list and the row.
   */
  logitBias?: { rowOffsets: Int32Array; tokenIds: Int32Array; values: Float32Array } | { rowOffsets: Tensor; tokenIds: Tensor; values: Tensor };
  /** Per-row tokens given probability 0 (min_tokens bans of EOS / stop tokens): CSR. */
  bannedTokens?: { rowOffsets: Int32Array; tokenIds: Int32Array } | { rowOffsets: Tensor; tokenIds: Tensor };
  /** The tokens the penalties apply to, per row (CSR): their output counts and prompt membership. */
  penaltyTokens?:
    | { rowOffsets: Int32Array; tokenIds: Int32Array; outputCounts: Int32Array; inPrompt: Uint8Array }
    | { rowOffsets: Tensor; tokenIds: Tensor; outputCounts: Tensor; inPrompt: Tensor };
  /** r > 0 (1 = off): a listed token seen in the prompt or the output has its logit divided by r if positive, multiplied if not. */
  repetitionPenalty?: number | Float32Array;
  /** Subtracted once per output occurrence of a listed token (0 = off). */
  frequencyPenalty?: number | Float32Array;
  /** Subtracted once from a listed token that occurs in the output (0 = off). */
  presencePenalty?: number | Float32Array;
  /** 'hf' (default): top-k, top-p, then min-p; 'vllm': min-p first, so top-p's mass is that of the
   *  min-p survivors. */
  filterOrder?: 'hf' | 'vllm';
}

export interface ReferenceOptions extends SampleOptions {
  /** 'inverse-cdf' (default): softmax, cumulative sum, one uniform per sample. 'gumbel': argmax with the fused sampler's noise. */
  method?: 'inverse-cdf' | 'gumbel';
}

const SAMPLE_KEYS = [
  'temperature', 'seed', 'offset', 'numSamples', 'bias', 'topK', 'topP', 'minP', 'softcap',
  'allowedTokens', 'logprobs', 'topLogprobs', 'stream', 'logitBias', 'bannedTokens', 'penaltyTokens',
  'repetitionPenalty', 'frequencyPenalty', 'presencePenalty', 'filterOrder', 'logprobsMode',
] as const;
const REFERENCE_KEYS = [...SAMPLE_KEYS, 'method'] as const;

export const MAX_TOP_LOGPROBS = 1024;
const TWO_64 = 1n << 64n;

/** Something that claims to be a Tensor: ours, one of another copy of the library, or an object
 *  made from the prototype. checkTensor tells them apart. */
function looksLikeTensor(value: unknown): boolean {
  return value instanceof Tensor || (typeof value === 'object' && value !== null && value.constructor?.name === 'Tensor');
}

export function checkTensor(name: string, value: unknown): Tensor {
  if (!Tensor.isTensor(value)) {
    const got = looksLikeTensor(value) ? raw('a Tensor that this copy of flashsample did not create') : value;
    throw typeError(name, 'a Tensor (from Device.tensor)', got);
  }
  if (value.disposed) throw new TypeError(`${name}: the tensor has been disposed`);
  return value;
}

const shapeText = (t: Tensor) => raw(`[${t.shape.join(', ')}]`);

interface Operands {
  device: Device;
  batch: number;
  vocab: number;
  dim: number;
  dtype: FloatDType;
}

export function checkOperands(H: unknown, W: unknown): Operands {
  const h = checkTensor('H', H);
  const w = checkTensor('W', W);
  if (!FLOAT_DTYPES.includes(h.dtype as FloatDType)) {
    throw typeError('H', "a float dtype ('f32', 'f16' or 'bf16')", raw(`'${h.dtype}'`));
  }
  if (h.dtype !== w.dtype) {
    throw new TypeError(`W: expected the dtype of H ('${h.dtype}'), got '${w.dtype}'`);
  }
  if (!h.device.sameAs(w.device)) {
    throw new TypeError(`W: expected a tensor on the device of H (${h.device}), got one on ${w.device}`);
  }
  if (h.shape.length !== 2) throw rangeError('H', 'shape [B, D]', shapeText(h));
  if (w.shape.length !== 2) throw rangeError('W', 'shape [V, D]', shapeText(w));
  const [batch, dim] = h.shape;
  const [vocab, wdim] = w.shape;
  if (wdim !== dim) {
    throw new RangeError(`W: expected shape [V, ${dim}] (D of H), got [${w.shape.join(', ')}]`);
  }
  if (batch < 1 || batch > native.maxBatch) throw rangeError('H', `a batch size in [1, ${native.maxBatch}]`, batch);
  if (vocab < 1 || vocab >= 2 ** 31 - 1) throw rangeError('W', 'a vocabulary size in [1, 2^31 - 2]', vocab);
  if (dim < 1) throw rangeError('H', 'a hidden size D >= 1', dim);
  return { device: h.device, batch, vocab, dim, dtype: h.dtype as FloatDType };
}

function perRowFloat(
  name: string, value: unknown, batch: number, fallback: number,
  ok: (x: number) => boolean, domain: string,
): Float32Array {
  if (value === undefined) return new Float32Array(batch).fill(fallback);
  if (typeof value === 'number') {
    if (!ok(value)) throw rangeError(name, domain, value);
    return new Float32Array(batch).fill(value);
  }
  if (isTyped(value, 'Float32Array')) {
    if (value.length !== batch) throw rangeError(name, `a Float32Array of length ${batch} (one per row)`, value);
    for (let i = 0; i < batch; i++) {
      if (!ok(value[i])) throw rangeError(`${name}[${i}]`, domain, value[i]);
    }
    return value.slice();
  }
  throw typeError(name, `a number or a Float32Array of length ${batch}`, value);
}

function u64(name: string, value: number | bigint): bigint {
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value) || value < 0) {
      throw rangeError(name, 'an integer in [0, 2^53) (use a bigint for larger values)', value);
    }
    return BigInt(value);
  }
  if (value < 0n || value >= TWO_64) throw rangeError(name, 'a bigint in [0, 2^64)', value);
  return value;
}

function perRowU64(
  name: string, value: unknown, batch: number, device: Device,
): { rows: BigUint64Array | Tensor; perRow: boolean } {
  if (value === undefined) return { rows: new BigUint64Array(batch), perRow: false };
  if (typeof value === 'number' || typeof value === 'bigint') {
    return { rows: new BigUint64Array(batch).fill(u64(name, value)), perRow: false };
  }
  if (isTyped(value, 'BigUint64Array')) {
    if (value.length !== batch) throw rangeError(name, `a BigUint64Array of length ${batch} (one per row)`, value);
    return { rows: value.slice(), perRow: true };
  }
  if (looksLikeTensor(value)) {
    const t = checkTensor(name, value);
    if (t.dtype !== 'u64') throw typeError(name, `a u64 tensor of ${batch} elements`, raw(`${t}`));
    if (t.size !== batch) throw rangeError(name, `a u64 tensor of ${batch} elements (one per row)`, raw(`${t}`));
    if (!t.device.sameAs(device)) throw typeError(name, `a tensor on ${device}`, raw(`${t}`));
    return { rows: t, perRow: true };
  }
  if (Array.isArray(value)) {
    throw typeError(name, `a number, a bigint or a BigUint64Array of length ${batch}`, value);
  }
  throw typeError(name, `a number, a bigint, a BigUint64Array of length ${batch} or a u64 tensor`, value);
}

function perRowInt(name: string, value: unknown, batch: number, max: number): Int32Array {
  const ok = (x: number) => Number.isInteger(x) && x >= 0 && x <= max;
  const domain = `an integer in [0, ${max}]`;
  if (typeof value === 'number') {
    if (!ok(value)) throw rangeError(name, domain, value);
    return new Int32Array(batch).fill(value);
  }
  if (isTyped(value, 'Int32Array')) {
    if (value.length !== batch) throw rangeError(name, `an Int32Array of length ${batch} (one per row)`, value);
    for (let i = 0; i < batch; i++) if (!ok(value[i])) throw rangeError(`${name}[${i}]`, domain, value[i]);
    return value.slice();
  }
  throw typeError(name, `an integer or an Int32Array of length ${batch}`, value);
}

/** A bigint cudaStream_t handle, or undefined when none is given. */
export function checkStream(name: string, stream: unknown): bigint | undefined {
  if (stream === undefined) return undefined;
  if (typeof stream !== 'bigint') throw typeError(name, 'a bigint cudaStream_t handle', stream);
  if (stream < 0n || stream >= TWO_64) throw rangeError(name, 'a cudaStream_t handle in [0, 2^64)', stream);
  return stream;
}

export function checkSoftcap(value: unknown): number {
  if (typeof value !== 'number') throw typeError('softcap', 'a finite number >= 0', value);
  if (!Number.isFinite(value) || value < 0) throw rangeError('softcap', 'a finite number >= 0', value);
  return value;
}

/** 'hf' or 'vllm' (SampleOptions.filterOrder), as the native code's 0 or 1. */
export function checkFilterOrder(value: unknown): 0 | 1 {
  if (value !== 'hf' && value !== 'vllm') throw typeError('filterOrder', "'hf' or 'vllm'", value);
  return value === 'vllm' ? 1 : 0;
}

/** 'processed' or 'raw' (SampleOptions.logprobsMode), as the native code's 0 or 1. */
export function checkLogprobsMode(value: unknown): 0 | 1 {
  if (value !== 'processed' && value !== 'raw') throw typeError('logprobsMode', "'processed' or 'raw'", value);
  return value === 'raw' ? 1 : 0;
}

export function checkTopLogprobs(value: unknown): number {
  const expected = `an integer in [0, ${MAX_TOP_LOGPROBS}]`;
  if (typeof value !== 'number') throw typeError('topLogprobs', expected, value);
  if (!Number.isInteger(value) || value < 0 || value > MAX_TOP_LOGPROBS) throw rangeError('topLogprobs', expected, value);
  return value;
}

/** Validates a per-row CSR list: rowOffsets Int32Array(B + 1) from 0, non-decreasing, ending at the
 *  entries' length; token ids in [0, V), distinct within a row unless `repeats`. */
function checkCsr(
  name: string, value: unknown, batch: number, vocab: number, fields: Record<string, string>, repeats: boolean,
): { offsets: Int32Array; tokens: Int32Array; arrays: Record<string, ArrayBufferView & { length: number }> } {
  const shape = `{ rowOffsets: Int32Array(${batch + 1}), tokenIds: Int32Array${Object.entries(fields).map(([k, t]) => `, ${k}: ${t}`).join('')} }`;
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw typeError(name, shape, value);
  checkKnownKeys(name, value, ['rowOffsets', 'tokenIds', ...Object.keys(fields)]);
  const v = value as Record<string, unknown>;
  const offsets = v.rowOffsets;
  const tokens = v.tokenIds;
  if (!isTyped(offsets, 'Int32Array')) throw typeError(`${name}.rowOffsets`, `an Int32Array of length ${batch + 1}`, offsets);
  if (offsets.length !== batch + 1) throw rangeError(`${name}.rowOffsets`, `an Int32Array of length ${batch + 1} (B + 1)`, offsets);
  if (!isTyped(tokens, 'Int32Array')) throw typeError(`${name}.tokenIds`, 'an Int32Array', tokens);
  if (offsets[0] !== 0) throw rangeError(`${name}.rowOffsets[0]`, '0', offsets[0]);
  for (let b = 0; b < batch; b++) {
    if (offsets[b + 1] < offsets[b]) {
      throw rangeError(`${name}.rowOffsets[${b + 1}]`, `a value >= rowOffsets[${b}] = ${offsets[b]} (non-decreasing)`, offsets[b + 1]);
    }
  }
  if (offsets[batch] !== tokens.length) {
    throw rangeError(`${name}.rowOffsets[${batch}]`, `the length of tokenIds (${tokens.length})`, offsets[batch]);
  }
  const arrays: Record<string, ArrayBufferView & { length: number }> = {};
  for (const [key, type] of Object.entries(fields)) {
    const a = v[key];
    if (!isTyped(a, type as 'Int32Array' | 'Float32Array' | 'Uint8Array')) throw typeError(`${name}.${key}`, `a ${type} of length ${tokens.length}`, a);
    if (a.length !== tokens.length) throw rangeError(`${name}.${key}`, `a ${type} of length ${tokens.length} (one per token id)`, a);
    arrays[key] = a;
  }
  for (let b = 0; b < batch; b++) {
    const seen = repeats ? null : new Set<number>();
    for (let i = offsets[b]; i < offsets[b + 1]; i++) {
      const t = tokens[i];
      if (t < 0 || t >= vocab) throw rangeError(`${name}.tokenIds[${i}]`, `a token id in [0, ${vocab}) (row ${b})`, t);
      if (seen) {
        if (seen.has(t)) throw rangeError(`${name}.tokenIds[${i}]`, `a token id not listed before in row ${b}`, t);
        seen.add(t);
      }
    }
  }
  return { offsets: offsets.slice(), tokens: tokens.slice(), arrays };
}

/** The three penalties' per-row values (defaults 1, 0, 0) of a call with penaltyTokens. */
function penaltyValues(spec: NativeSpec, opts: SampleOptions, batch: number): void {
  spec.repetitionPenalty = perRowFloat(
    'repetitionPenalty', opts.repetitionPenalty, batch, 1, (x) => Number.isFinite(x) && x > 0, 'a finite number > 0',
  );
  spec.frequencyPenalty = perRowFloat('frequencyPenalty', opts.frequencyPenalty, batch, 0, Number.isFinite, 'a finite number');
  spec.presencePenalty = perRowFloat('presencePenalty', opts.presencePenalty, batch, 0, Number.isFinite, 'a finite number');
}

/** Whether a list option came as tensors (its rowOffsets is one). */
function tensorList(value: unknown): boolean {
  return value !== null && typeof value === 'object' && looksLikeTensor((value as { rowOffsets?: unknown }).rowOffsets);
}

/**
 * A list given as tensors on the call's device: i32 rowOffsets (B + 1) and tokenIds (n), and the
 * list's other fields (n each, of the dtypes given). Their contents are checked on the device.
 */
function checkTensorList(
  name: string, value: unknown, batch: number, device: Device, fields: Record<string, 'i32' | 'f32'>,
): Record<string, unknown> {
  checkKnownKeys(name, value as object, ['rowOffsets', 'tokenIds', ...Object.keys(fields)]);
  const v = value as Record<string, unknown>;
  const tensor = (key: string, dtype: 'i32' | 'f32', size: number | null) => {
    const t = checkTensor(`${name}.${key}`, v[key]);
    const expected = `an '${dtype}' tensor on ${device}${size === null ? '' : ` of ${size} elements`}`;
    if (t.dtype !== dtype || !t.device.sameAs(device)) throw typeError(`${name}.${key}`, expected, raw(`${t}`));
    if (size !== null && t.size !== size) throw rangeError(`${name}.${key}`, expected, raw(`${t}`));
    return t;
  };
  const offsets = tensor('rowOffsets', 'i32', batch + 1);
  const tokens = tensor('tokenIds', 'i32', null);
  const out: Record<string, unknown> = {
    offsets: offsets.handle(`${name}.rowOffsets`), tokens: tokens.handle(`${name}.tokenIds`), entries: tokens.size,
  };
  const native: Record<string, string> = { values: 'values', outputCounts: 'counts', inPrompt: 'inPrompt' };
  for (const [key, dtype] of Object.entries(fields)) {
    out[native[key]] = tensor(key, dtype, tokens.size).handle(`${name}.${key}`);
  }
  return out;
}

/** SampleOptions.logitBias (or Sampler.setLogitBias) for `rows` rows, checked and copied. */
export function checkLogitBias(value: unknown, rows: number, vocab: number): { offsets: Int32Array; tokens: Int32Array; values: Float32Array } {
  const c = checkCsr('logitBias', value, rows, vocab, { values: 'Float32Array' }, false);
  const values = c.arrays.values as Float32Array;
  for (let i = 0; i < values.length; i++) {
    if (!Number.isFinite(values[i])) throw rangeError(`logitBias.values[${i}]`, 'a finite number', values[i]);
  }
  return { offsets: c.offsets, tokens: c.tokens, values: values.slice() };
}

/** SampleOptions.bannedTokens (or Sampler.setBannedTokens) for `rows` rows, checked and copied. */
export function checkBannedTokens(value: unknown, rows: number, vocab: number): { offsets: Int32Array; tokens: Int32Array } {
  const c = checkCsr('bannedTokens', value, rows, vocab, {}, true);
  return { offsets: c.offsets, tokens: c.tokens };
}

/** SampleOptions.penaltyTokens (or Sampler.setPenaltyTokens) for `rows` rows, checked and copied. */
export function checkPenaltyTokens(
  value: unknown, rows: number, vocab: number,
): { offsets: Int32Array; tokens: Int32Array; counts: Int32Array; inPrompt: Uint8Array } {
  const c = checkCsr('penaltyTokens', value, rows, vocab, { outputCounts: 'Int32Array', inPrompt: 'Uint8Array' }, false);
  const counts = c.arrays.outputCounts as Int32Array;
  for (let i = 0; i < counts.length; i++) {
    if (counts[i] < 0) throw rangeError(`penaltyTokens.outputCounts[${i}]`, 'a count >= 0', counts[i]);
  }
  const inPrompt = c.arrays.inPrompt as Uint8Array;
  for (let i = 0; i < inPrompt.length; i++) {
    if (inPrompt[i] > 1) throw rangeError(`penaltyTokens.inPrompt[${i}]`, '0 or 1', inPrompt[i]);
  }
  return { offsets: c.offsets, tokens: c.tokens, counts: counts.slice(), inPrompt: inPrompt.slice() };
}

export type SamplerCode = 0 | 1 | 2;

/** The options that say how a row is drawn, whatever W holds: what sampleFused and mergePartials
 *  share (and what a partial state's options hash covers). */
export const ROW_KEYS = [
  'temperature', 'seed', 'offset', 'numSamples', 'topK', 'topP', 'minP', 'logprobs', 'topLogprobs',
  'filterOrder', 'logprobsMode', 'stream',
] as const;

type RowSpec = Pick<
  NativeSpec,
  'numSamples' | 'temperature' | 'seed' | 'offset' | 'perRowSeed' | 'topK' | 'topP' | 'minP' | 'logprobs' |
  'topLogprobs' | 'filterOrder' | 'logprobsMode' | 'stream'
>;

/** Validates the ROW_KEYS options of a call of `batch` rows on `device`. */
export function buildRowSpec(batch: number, device: Device, opts: SampleOptions): RowSpec {
  const temperature = perRowFloat(
    'temperature', opts.temperature, batch, 1, (x) => Number.isFinite(x) && x >= 0, 'a finite number >= 0',
  );
  const numSamples = opts.numSamples ?? 1;
  if (typeof numSamples !== 'number') throw typeError('numSamples', `an integer in [1, ${native.maxSamples}]`, numSamples);
  if (!Number.isInteger(numSamples) || numSamples < 1 || numSamples > native.maxSamples) {
    throw rangeError('numSamples', `an integer in [1, ${native.maxSamples}]`, numSamples);
  }
  if (batch * numSamples > 2 ** 31 - 1) {
    throw rangeError('numSamples', `batch * numSamples below 2^31 (batch is ${batch})`, numSamples);
  }
  const seed = perRowU64('seed', opts.seed, batch, device);
  const offset = perRowU64('offset', opts.offset, batch, device);
  const spec: RowSpec = {
    numSamples,
    temperature,
    seed: seed.rows instanceof Tensor ? seed.rows.handle('seed') : seed.rows,
    offset: offset.rows instanceof Tensor ? offset.rows.handle('offset') : offset.rows,
    perRowSeed: seed.perRow,
    logprobs: false,
    topLogprobs: 0,
  };
  if (opts.topK !== undefined) spec.topK = perRowInt('topK', opts.topK, batch, 2 ** 31 - 1);
  if (opts.topP !== undefined) {
    spec.topP = perRowFloat('topP', opts.topP, batch, 1, (x) => x > 0 && x <= 1, 'a number in (0, 1]');
  }
  if (opts.minP !== undefined) {
    spec.minP = perRowFloat('minP', opts.minP, batch, 0, (x) => x >= 0 && x < 1, 'a number in [0, 1)');
  }
  if (opts.logprobs !== undefined) {
    if (typeof opts.logprobs !== 'boolean') throw typeError('logprobs', 'a boolean', opts.logprobs);
    spec.logprobs = opts.logprobs;
  }
  if (opts.topLogprobs !== undefined) spec.topLogprobs = checkTopLogprobs(opts.topLogprobs);
  if (opts.filterOrder !== undefined) spec.filterOrder = checkFilterOrder(opts.filterOrder);
  if (opts.logprobsMode !== undefined) spec.logprobsMode = checkLogprobsMode(opts.logprobsMode);
  if (opts.stream !== undefined) {
    checkStream('stream', opts.stream);
    if (device.kind !== 'cuda') {
      throw new TypeError(`stream: a CUDA stream needs tensors on a 'cuda' device, got tensors on ${device}`);
    }
    spec.stream = opts.stream;
  }
  return spec;
}

/** Validates (H, W, options) into the native spec. `reference` enables the `method` option. */
export function buildSpec(
  H: unknown, W: unknown, options: unknown, sampler: 'fused' | 'reference', extraKeys: readonly string[] = [],
): { spec: NativeSpec; operands: Operands; numSamples: number; deviceLists: string[] } {
  const o = checkOperands(H, W);
  if (options === undefined) options = {};
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw typeError('options', 'an object', options);
  }
  checkKnownKeys('options', options, [...(sampler === 'reference' ? REFERENCE_KEYS : SAMPLE_KEYS), ...extraKeys]);
  const opts = options as ReferenceOptions;
  const { batch, vocab } = o;
  const rows = buildRowSpec(batch, o.device, opts);
  // a shard's lists in global ids (ShardOptions.listIds) name tokens of the whole vocabulary
  const shard = opts as { listIds?: unknown; vocabSize?: unknown };
  const listVocab = extraKeys.includes('listIds') && shard.listIds === 'global' && typeof shard.vocabSize === 'number'
    ? shard.vocabSize : vocab;

  let kind: SamplerCode = 0;
  if (sampler === 'reference') {
    const method = opts.method ?? 'inverse-cdf';
    if (method !== 'inverse-cdf' && method !== 'gumbel') throw typeError('method', "'inverse-cdf' or 'gumbel'", method);
    kind = method === 'gumbel' ? 1 : 2;
  }

  const spec: NativeSpec = {
    kind,
    device: o.device.kind === 'cuda' ? 1 : 0,
    ordinal: o.device.ordinal,
    hidden: (H as Tensor).handle('H'),
    weight: (W as Tensor).handle('W'),
    dtype: dtypeCode(o.dtype),
    batch,
    vocab,
    dim: o.dim,
    softcap: 0,
    ...rows,
  };

  if (opts.bias !== undefined) {
    const bias = checkTensor('bias', opts.bias);
    if (bias.dtype !== o.dtype) throw typeError('bias', `dtype '${o.dtype}' (the dtype of W)`, raw(`'${bias.dtype}'`));
    if (!bias.device.sameAs(o.device)) throw typeError('bias', `a tensor on ${o.device}`, raw(`${bias}`));
    if (bias.size !== vocab || bias.shape.length !== 1) throw rangeError('bias', `shape [${vocab}]`, shapeText(bias));
    spec.bias = bias.handle('bias');
  }
  if (opts.softcap !== undefined) spec.softcap = checkSoftcap(opts.softcap);
  if (opts.allowedTokens !== undefined) {
    const words = batch * Math.ceil(vocab / 32);
    const a = opts.allowedTokens;
    if (isTyped(a, 'Uint32Array')) {
      if (a.length !== words) {
        throw rangeError('allowedTokens', `a Uint32Array of ${words} words (B * ceil(V / 32))`, a);
      }
      spec.allowed = a.slice();
    } else if (looksLikeTensor(a)) {
      const t = checkTensor('allowedTokens', a);
      const expected = `an i32 tensor of ${words} words (B * ceil(V / 32))`;
      if (t.dtype !== 'i32') throw typeError('allowedTokens', expected, raw(`${t}`));
      if (t.size !== words) throw rangeError('allowedTokens', expected, raw(`${t}`));
      if (!t.device.sameAs(o.device)) throw typeError('allowedTokens', `a tensor on ${o.device}`, raw(`${t}`));
      spec.allowed = t.handle('allowedTokens');
    } else {
      throw typeError('allowedTokens', `a Uint32Array of ${words} words or an i32 tensor`, a);
    }
  }
  const deviceLists: string[] = [];
  if (tensorList(opts.logitBias)) {
    spec.biasList = checkTensorList('logitBias', opts.logitBias, batch, o.device, { values: 'f32' });
    deviceLists.push('logitBias');
  } else if (opts.logitBias !== undefined) {
    const c = checkLogitBias(opts.logitBias, batch, listVocab);
    spec.biasOffsets = c.offsets;
    spec.biasTokens = c.tokens;
    spec.biasValues = c.values;
  }
  if (tensorList(opts.bannedTokens)) {
    spec.bannedList = checkTensorList('bannedTokens', opts.bannedTokens, batch, o.device, {});
    deviceLists.push('bannedTokens');
  } else if (opts.bannedTokens !== undefined) {
    const c = checkBannedTokens(opts.bannedTokens, batch, listVocab);
    spec.bannedOffsets = c.offsets;
    spec.bannedTokens = c.tokens;
  }
  if (tensorList(opts.penaltyTokens)) {
    spec.penaltyList = checkTensorList('penaltyTokens', opts.penaltyTokens, batch, o.device, { outputCounts: 'i32', inPrompt: 'i32' });
    deviceLists.push('penaltyTokens');
    penaltyValues(spec, opts, batch);
  } else if (opts.penaltyTokens !== undefined) {
    const c = checkPenaltyTokens(opts.penaltyTokens, batch, listVocab);
    spec.penaltyOffsets = c.offsets;
    spec.penaltyTokens = c.tokens;
    spec.penaltyCounts = c.counts;
    spec.penaltyInPrompt = c.inPrompt;
    penaltyValues(spec, opts, batch);
  } else {
    for (const k of ['repetitionPenalty', 'frequencyPenalty', 'presencePenalty'] as const) {
      if (opts[k] !== undefined) throw new TypeError(`${k}: needs penaltyTokens (the tokens it applies to, with their counts)`);
    }
  }
  return { spec, operands: o, numSamples: rows.numSamples, deviceLists };
}

export { describe };
