// Property-based tests (issue 6, "Reliability"): random shapes (B 1..8, V 1..300, D 1..24), dtypes
// and option combinations (issue 20's lists, penalties, filter order and raw logprobs among them),
// on every available device. For every generated case:
//   - sampleFused and sampleReference({method: 'gumbel'}) both resolve (finite inputs and at least
//     one allowed token per row: there is always a token to draw);
//   - every token is in [0, V), allowed by allowedTokens and not banned; greedy rows repeat one token;
//   - logprobs (and topLogprobs) are finite and <= 0, topLogprobs in non-increasing order without
//     repeats, padded with -1 / -Infinity; greedy rows have logprob 0 (processed logprobs; raw ones
//     are the softcapped logits' softmax, mask and bans included);
//   - over the whole run, fused and reference agree token for token on >= 99.9% of the tokens
//     (SEMANTICS §3: they draw with the same noise; only perturbed scores tied within fp32
//     rounding of the logits may differ; on the CPU they are expected to be identical).
//
// Deterministic: a fixed fast-check seed; the tensors are filled from a seeded generator whose
// seed fast-check draws. numRuns: FLASHSAMPLE_FUZZ_CPU_RUNS (default 500, ~10 s on 2 cores) and
// FLASHSAMPLE_FUZZ_RUNS for CUDA (default 2000). FLASHSAMPLE_FUZZ_SEED picks another seed.

import fc from 'fast-check';
import {
  open,
  sampleFused,
  sampleReference,
  type Device,
  type SampleOptions,
  type SampleResult,
  type Tensor,
} from '../lib/index';
import { FLOAT_DTYPES, type FDType, csrRows, cudaStatus, makeTensor, maskAllows, normal, randomIdRows, rng } from './helpers';

const FUZZ_SEED = Number(process.env.FLASHSAMPLE_FUZZ_SEED ?? '20250606');
const CPU_RUNS = Number(process.env.FLASHSAMPLE_FUZZ_CPU_RUNS ?? '500');
const CUDA_RUNS = Number(process.env.FLASHSAMPLE_FUZZ_RUNS ?? '2000');
const MIN_AGREEMENT = 0.999;

type Choice<T extends string> = T;
interface FuzzCase {
  B: number;
  V: number;
  D: number;
  dtype: FDType;
  /** spread of the entries of H and W: small = flat distributions, large = peaked */
  scale: number;
  dataSeed: number;
  optSeed: number;
  temperature: Choice<'default' | 'one' | 'scalar' | 'zero' | 'perRow'>;
  seed: Choice<'none' | 'number' | 'bigint' | 'perRow' | 'tensor'>;
  offset: Choice<'none' | 'number' | 'bigint' | 'perRow' | 'tensor'>;
  numSamples: number;
  bias: boolean;
  topK: Choice<'off' | 'scalar' | 'perRow'>;
  topP: Choice<'off' | 'scalar' | 'perRow'>;
  minP: Choice<'off' | 'scalar' | 'perRow'>;
  softcap: Choice<'off' | 'on'>;
  allowed: Choice<'off' | 'sparse' | 'dense' | 'tensor'>;
  logprobs: boolean;
  topLogprobs: number;
  logprobsMode: Choice<'default' | 'processed' | 'raw'>;
  filterOrder: Choice<'default' | 'hf' | 'vllm'>;
  logitBias: boolean;
  banned: boolean;
  penalties: Choice<'off' | 'scalar' | 'perRow'>;
  /** the three lists as host arrays or as tensors on the device (checked there) */
  listForm: Choice<'host' | 'tensor'>;
}

const caseArb: fc.Arbitrary<FuzzCase> = fc.record({
  B: fc.integer({ min: 1, max: 8 }),
  V: fc.integer({ min: 1, max: 300 }),
  D: fc.integer({ min: 1, max: 24 }),
  dtype: fc.constantFrom(...FLOAT_DTYPES),
  scale: fc.constantFrom(0.05, 0.5, 1, 3, 10),
  dataSeed: fc.integer({ min: 0, max: 0x7fffffff }),
  optSeed: fc.integer({ min: 0, max: 0x7fffffff }),
  temperature: fc.constantFrom('default', 'one', 'scalar', 'zero', 'perRow'),
  seed: fc.constantFrom('none', 'number', 'bigint', 'perRow', 'tensor'),
  offset: fc.constantFrom('none', 'number', 'bigint', 'perRow', 'tensor'),
  numSamples: fc.oneof(fc.constant(1), fc.integer({ min: 1, max: 64 })),
  bias: fc.boolean(),
  topK: fc.constantFrom('off', 'scalar', 'perRow'),
  topP: fc.constantFrom('off', 'scalar', 'perRow'),
  minP: fc.constantFrom('off', 'scalar', 'perRow'),
  softcap: fc.constantFrom('off', 'on'),
  allowed: fc.constantFrom('off', 'sparse', 'dense', 'tensor'),
  logprobs: fc.boolean(),
  topLogprobs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 12 })),
  logprobsMode: fc.constantFrom('default', 'processed', 'raw'),
  filterOrder: fc.constantFrom('default', 'hf', 'vllm'),
  logitBias: fc.boolean(),
  banned: fc.boolean(),
  penalties: fc.constantFrom('off', 'scalar', 'perRow'),
  listForm: fc.constantFrom('host', 'tensor'),
});

interface Built {
  H: Tensor;
  W: Tensor;
  extra: Tensor[];
  options: SampleOptions;
  /** allowed(b, v) */
  allowed: (b: number, v: number) => boolean;
  /** banned(b, v) */
  banned: (b: number, v: number) => boolean;
  /** greedy rows (temperature 0) */
  greedy: boolean[];
  dispose(): void;
}

function u64(r: () => number): bigint {
  return (BigInt(Math.floor(r() * 2 ** 32)) << 32n) | BigInt(Math.floor(r() * 2 ** 32));
}

/** Builds the tensors and the options of one case (deterministic in the case). */
function build(dev: Device, c: FuzzCase): Built {
  const { B, V, D, dtype } = c;
  const rd = rng(c.dataSeed);
  const ro = rng(c.optSeed);
  const gauss = () => normal(rd);
  const h = Float32Array.from({ length: B * D }, () => gauss() * Math.sqrt(c.scale));
  const w = Float32Array.from({ length: V * D }, () => gauss() * Math.sqrt(c.scale));
  const H = makeTensor(dev, dtype, h, [B, D]);
  const W = makeTensor(dev, dtype, w, [V, D]);
  const extra: Tensor[] = [];
  const options: SampleOptions = { numSamples: c.numSamples };
  const greedy = new Array<boolean>(B).fill(false);

  switch (c.temperature) {
    case 'default':
      break;
    case 'one':
      options.temperature = 1;
      break;
    case 'scalar':
      options.temperature = Math.fround(0.05 + ro() * 3);
      break;
    case 'zero':
      options.temperature = 0;
      greedy.fill(true);
      break;
    case 'perRow': {
      const t = Float32Array.from({ length: B }, () => (ro() < 0.3 ? 0 : 0.05 + ro() * 3));
      t.forEach((x, b) => (greedy[b] = x === 0));
      options.temperature = t;
      break;
    }
  }
  const perRowU64 = (kind: FuzzCase['seed'], name: 'seed' | 'offset') => {
    switch (kind) {
      case 'none':
        return;
      case 'number':
        options[name] = Math.floor(ro() * 2 ** 53);
        return;
      case 'bigint':
        options[name] = u64(ro);
        return;
      case 'perRow':
        options[name] = BigUint64Array.from({ length: B }, () => u64(ro));
        return;
      case 'tensor': {
        const t = dev.tensor(BigUint64Array.from({ length: B }, () => u64(ro)), [B], 'u64');
        extra.push(t);
        options[name] = t;
        return;
      }
    }
  };
  perRowU64(c.seed, 'seed');
  perRowU64(c.offset, 'offset');
  if (c.bias) {
    const bias = makeTensor(dev, dtype, Float32Array.from({ length: V }, () => gauss() * c.scale), [V]);
    extra.push(bias);
    options.bias = bias;
  }
  const kOf = () => (ro() < 0.2 ? 0 : 1 + Math.floor(ro() * (V + 4))); // 0 = off; > V keeps all
  const pOf = () => (ro() < 0.2 ? 1 : Math.fround(0.02 + ro() * 0.98));
  const mOf = () => (ro() < 0.2 ? 0 : Math.fround(ro() * 0.95));
  if (c.topK === 'scalar') options.topK = kOf();
  if (c.topK === 'perRow') options.topK = Int32Array.from({ length: B }, kOf);
  if (c.topP === 'scalar') options.topP = pOf();
  if (c.topP === 'perRow') options.topP = Float32Array.from({ length: B }, pOf);
  if (c.minP === 'scalar') options.minP = mOf();
  if (c.minP === 'perRow') options.minP = Float32Array.from({ length: B }, mOf);
  if (c.softcap === 'on') options.softcap = Math.fround(0.5 + ro() * 30);

  let allowed = (_b: number, _v: number) => true;
  // A token of each row that the mask allows and no ban removes: every row has one to draw.
  const keep = new Int32Array(B).fill(-1);
  if (c.allowed !== 'off') {
    const words = Math.ceil(V / 32);
    const mask = new Uint32Array(B * words);
    const density = c.allowed === 'sparse' ? 0.05 : 0.7;
    for (let b = 0; b < B; b++) {
      for (let v = 0; v < V; v++) if (ro() < density) mask[b * words + (v >>> 5)] |= 1 << (v & 31);
      const must = Math.floor(ro() * V); // at least one allowed token per row
      mask[b * words + (must >>> 5)] |= 1 << (must & 31);
      keep[b] = must;
    }
    if (c.allowed === 'tensor') {
      const t = dev.tensor(new Int32Array(mask.buffer), [mask.length], 'i32');
      extra.push(t);
      options.allowedTokens = t;
    } else {
      options.allowedTokens = mask;
    }
    allowed = (b, v) => maskAllows(mask, V, b)(v);
  }
  if (c.logprobs) options.logprobs = true;
  if (c.topLogprobs > 0) options.topLogprobs = c.topLogprobs;
  if (c.logprobsMode !== 'default') options.logprobsMode = c.logprobsMode;
  if (c.filterOrder !== 'default') options.filterOrder = c.filterOrder;

  // Up to `most` distinct ids a row (CSR), never the row's kept token when `spare` says so.
  const csr = (most: number, spare: boolean) => {
    if (spare) for (let b = 0; b < B; b++) if (keep[b] < 0) keep[b] = Math.floor(ro() * V);
    const rows = randomIdRows(ro, B, V, most, spare ? keep : undefined);
    const { rowOffsets, tokenIds } = csrRows(B, (b) => rows[b]);
    return { offsets: rowOffsets, ids: tokenIds };
  };
  const i32 = (a: Int32Array) => {
    const t = dev.tensor(a, [a.length], 'i32');
    extra.push(t);
    return t;
  };
  const f32 = (a: Float32Array) => {
    const t = dev.tensor(a, [a.length], 'f32');
    extra.push(t);
    return t;
  };
  const asTensors = c.listForm === 'tensor';
  if (c.logitBias) {
    const { offsets, ids } = csr(12, false);
    const values = Float32Array.from(ids, () => gauss() * 2 * Math.max(1, c.scale));
    options.logitBias = asTensors
      ? { rowOffsets: i32(offsets), tokenIds: i32(ids), values: f32(values) }
      : { rowOffsets: offsets, tokenIds: ids, values };
  }
  let bannedSet: Set<number>[] | null = null;
  if (c.banned) {
    const { offsets, ids } = csr(Math.max(1, V >> 2), true);
    bannedSet = Array.from({ length: B }, (_, b) => new Set(ids.subarray(offsets[b], offsets[b + 1])));
    options.bannedTokens = asTensors ? { rowOffsets: i32(offsets), tokenIds: i32(ids) } : { rowOffsets: offsets, tokenIds: ids };
  }
  if (c.penalties !== 'off') {
    const { offsets, ids } = csr(16, false);
    const counts = Int32Array.from(ids, () => (ro() < 0.3 ? 0 : 1 + Math.floor(ro() * 5)));
    const inPrompt = Uint8Array.from(ids, () => (ro() < 0.5 ? 1 : 0));
    options.penaltyTokens = asTensors
      ? { rowOffsets: i32(offsets), tokenIds: i32(ids), outputCounts: i32(counts), inPrompt: i32(Int32Array.from(inPrompt)) }
      : { rowOffsets: offsets, tokenIds: ids, outputCounts: counts, inPrompt };
    const value = (lo: number, hi: number) => Math.fround(lo + ro() * (hi - lo));
    const perRow = (lo: number, hi: number) => Float32Array.from({ length: B }, () => value(lo, hi));
    const pick = (lo: number, hi: number) => (c.penalties === 'scalar' ? value(lo, hi) : perRow(lo, hi));
    if (ro() < 0.7) options.repetitionPenalty = pick(0.5, 2);
    if (ro() < 0.7) options.frequencyPenalty = pick(-1, 2);
    if (ro() < 0.7) options.presencePenalty = pick(-1, 2);
  }
  return {
    H,
    W,
    extra,
    options,
    allowed,
    banned: (b, v) => bannedSet !== null && bannedSet[b].has(v),
    greedy,
    dispose() {
      H.dispose();
      W.dispose();
      for (const t of extra) t.dispose();
    },
  };
}

interface TypedKinds {
  Int32Array: Int32Array;
  Float32Array: Float32Array;
}

/** Typed-array kind check that works across realms (jest runs the suite in a vm context: arrays
 *  made by the addon have the main realm's constructors, so instanceof would say no). A type
 *  guard, so that checkResult reads the optional arrays it has checked without `!`. */
function isTyped<K extends keyof TypedKinds>(x: unknown, kind: K): x is TypedKinds[K] {
  return Object.prototype.toString.call(x) === `[object ${kind}]`;
}

/** An option's value for a failure's message: arrays as their elements, the lists field by field,
 *  tensors as their description (their contents are reproduced from the case's seeds). */
function describeValue(v: unknown): unknown {
  if (typeof v === 'bigint') return `${v}n`;
  if (ArrayBuffer.isView(v)) return Array.from(v as unknown as ArrayLike<unknown>, String).join(',');
  if (v !== null && typeof v === 'object' && Object.getPrototypeOf(v) === Object.prototype) {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, describeValue(x)]));
  }
  if (typeof v === 'object') return String(v);
  return v;
}

function describeCase(c: FuzzCase, o: SampleOptions): string {
  const opt: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) opt[k] = describeValue(v);
  return JSON.stringify({ case: c, options: opt });
}

/** The invariants that hold for one sampler's result, whatever the other sampler says. */
function checkResult(name: string, r: SampleResult, c: FuzzCase, built: Built): void {
  const { B, V, numSamples: S } = c;
  function fail(msg: string): never {
    throw new Error(`${name}: ${msg}`);
  }
  if (!isTyped(r.tokens, 'Int32Array') || r.tokens.length !== B * S) fail(`tokens: length ${r.tokens?.length}, expected ${B * S}`);
  for (let b = 0; b < B; b++) {
    for (let j = 0; j < S; j++) {
      const t = r.tokens[b * S + j];
      if (!(t >= 0 && t < V)) fail(`row ${b} sample ${j}: token ${t} outside [0, ${V})`);
      if (!built.allowed(b, t)) fail(`row ${b} sample ${j}: token ${t} is masked out by allowedTokens`);
      if (built.banned(b, t)) fail(`row ${b} sample ${j}: token ${t} is banned by bannedTokens`);
      if (built.greedy[b] && t !== r.tokens[b * S]) fail(`row ${b}: greedy row drew ${r.tokens[b * S]} and ${t}`);
    }
  }
  // Raw logprobs are of the softcapped logits before the mask, the lists and the filters: a greedy
  // row's token has its softmax share, and a row's top tokens may be ones it could not draw.
  const raw = c.logprobsMode === 'raw';
  if (c.logprobs) {
    if (!isTyped(r.logprobs, 'Float32Array') || r.logprobs.length !== B * S) fail(`logprobs: length ${r.logprobs?.length}`);
    for (let i = 0; i < B * S; i++) {
      const lp = r.logprobs[i];
      if (!Number.isFinite(lp) || lp > 0) fail(`logprobs[${i}] = ${lp}: expected finite and <= 0`);
      if (!raw && built.greedy[Math.floor(i / S)] && lp !== 0) fail(`logprobs[${i}] = ${lp} on a greedy row: expected 0`);
    }
  } else if (r.logprobs !== undefined) fail('logprobs returned without logprobs: true');
  const n = c.topLogprobs;
  if (n > 0) {
    if (!isTyped(r.topTokens, 'Int32Array') || r.topTokens.length !== B * n) fail(`topTokens: length ${r.topTokens?.length}`);
    if (!isTyped(r.topLogprobs, 'Float32Array') || r.topLogprobs.length !== B * n) fail(`topLogprobs: length ${r.topLogprobs?.length}`);
    for (let b = 0; b < B; b++) {
      let ended = false;
      for (let i = 0; i < n; i++) {
        const t = r.topTokens[b * n + i];
        const lp = r.topLogprobs[b * n + i];
        if (t === -1) {
          if (lp !== -Infinity) fail(`row ${b} top ${i}: token -1 with logprob ${lp}`);
          if (i === 0) fail(`row ${b}: topTokens starts with -1 (the row has a kept token)`);
          ended = true;
          continue;
        }
        if (ended) fail(`row ${b} top ${i}: token ${t} after a -1`);
        if (!(t >= 0 && t < V)) fail(`row ${b} top ${i}: token ${t} outside [0, ${V})`);
        if (!raw && !built.allowed(b, t)) fail(`row ${b} top ${i}: token ${t} is masked out`);
        if (!raw && built.banned(b, t)) fail(`row ${b} top ${i}: token ${t} is banned`);
        if (!Number.isFinite(lp) || lp > 0) fail(`row ${b} top ${i}: logprob ${lp}, expected finite and <= 0`);
        if (i > 0 && r.topTokens[b * n + i - 1] >= 0) {
          const prev = r.topLogprobs[b * n + i - 1];
          const prevT = r.topTokens[b * n + i - 1];
          // Ranked by logit (index ascending on equal logits); distinct logits may still round to
          // the same fp32 log-probability, so equal values in either index order are fine.
          if (lp > prev) {
            const row = (a: ArrayLike<number>) => Array.from(a).slice(b * n, b * n + n).join(', ');
            fail(`row ${b} top ${i}: order (logprob desc, index asc) broken: tokens [${row(r.topTokens)}] logprobs [${row(r.topLogprobs)}]`);
          }
          if (t === prevT) fail(`row ${b} top ${i}: token ${t} repeated`);
        }
      }
    }
  }
  if (!Number.isInteger(r.fallbackRows) || r.fallbackRows < 0 || r.fallbackRows > B) fail(`fallbackRows ${r.fallbackRows}`);
}

interface Tally {
  cases: number;
  tokens: number;
  mismatched: number;
  topTokens: number;
  topMismatched: number;
  logprobDiffMax: number;
  logprobsCompared: number;
  examples: string[];
}

function fuzzDevice(name: 'cpu' | 'cuda', runs: number): void {
  const tally: Tally = { cases: 0, tokens: 0, mismatched: 0, topTokens: 0, topMismatched: 0, logprobDiffMax: 0, logprobsCompared: 0, examples: [] };
  let dev: Device;
  beforeAll(() => {
    dev = open(name);
  });

  test(`${runs} random cases: both samplers resolve, tokens in range and allowed, logprobs finite <= 0`, async () => {
    await fc.assert(
      fc.asyncProperty(caseArb, async (c) => {
        const built = build(dev, c);
        try {
          let fused: SampleResult;
          let ref: SampleResult;
          try {
            [fused, ref] = await Promise.all([
              sampleFused(built.H, built.W, built.options),
              sampleReference(built.H, built.W, { ...built.options, method: 'gumbel' }),
            ]);
          } catch (e) {
            throw new Error(`a sampler rejected: ${(e as Error).message}\n${describeCase(c, built.options)}`);
          }
          try {
            checkResult('sampleFused', fused, c, built);
            checkResult("sampleReference('gumbel')", ref, c, built);
          } catch (e) {
            throw new Error(`${(e as Error).message}\n${describeCase(c, built.options)}`);
          }
          tally.cases++;
          let bad = 0;
          for (let i = 0; i < fused.tokens.length; i++) {
            if (fused.tokens[i] !== ref.tokens[i]) {
              bad++;
            } else if (c.logprobs) {
              const d = Math.abs(fused.logprobs![i] - ref.logprobs![i]);
              tally.logprobDiffMax = Math.max(tally.logprobDiffMax, d / (1 + Math.abs(ref.logprobs![i])));
              tally.logprobsCompared++;
            }
          }
          tally.tokens += fused.tokens.length;
          tally.mismatched += bad;
          if (c.topLogprobs > 0) {
            for (let i = 0; i < fused.topTokens!.length; i++) if (fused.topTokens![i] !== ref.topTokens![i]) tally.topMismatched++;
            tally.topTokens += fused.topTokens!.length;
          }
          if (bad > 0 && tally.examples.length < 5) {
            tally.examples.push(`${bad}/${fused.tokens.length} differ: ${describeCase(c, built.options)}`);
          }
        } finally {
          built.dispose();
        }
      }),
      { seed: FUZZ_SEED, numRuns: runs, endOnFailure: false },
    );
  });

  test(`fused and reference('gumbel') agree on >= ${MIN_AGREEMENT * 100}% of the tokens over the run`, () => {
    expect(tally.cases).toBeGreaterThan(0);
    const agree = 1 - tally.mismatched / tally.tokens;
    const topAgree = tally.topTokens ? 1 - tally.topMismatched / tally.topTokens : 1;
    // eslint-disable-next-line no-console
    console.log(
      `fuzz ${name}: ${tally.cases} cases, ${tally.tokens} tokens, ${tally.mismatched} differ ` +
        `(agreement ${(agree * 100).toFixed(4)}%); topTokens ${tally.topTokens}, ${tally.topMismatched} differ; ` +
        `max relative logprob difference where tokens agree ${tally.logprobDiffMax.toExponential(2)}` +
        (tally.examples.length ? `\nexamples:\n${tally.examples.join('\n')}` : ''),
    );
    expect(agree).toBeGreaterThanOrEqual(MIN_AGREEMENT);
    expect(topAgree).toBeGreaterThanOrEqual(MIN_AGREEMENT);
  });

  test('logprobs of fused and reference agree where the tokens agree (relative 1e-3)', () => {
    // The run above fills the tally; without it (a -t filter, zero cases) there is nothing to pass.
    expect(tally.logprobsCompared).toBeGreaterThan(0);
    expect(tally.logprobDiffMax).toBeLessThanOrEqual(1e-3);
  });
}

describe('fuzz', () => {
  describe('cpu', () => fuzzDevice('cpu', CPU_RUNS));
  const s = cudaStatus();
  if (s.usable) describe('cuda', () => fuzzDevice('cuda', CUDA_RUNS));
  else describe.skip(`cuda — skipped: ${s.reason}`, () => fuzzDevice('cuda', CUDA_RUNS));
});
