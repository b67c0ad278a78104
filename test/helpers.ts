// Shared helpers of the test suites: statistics (chi-square, normal quantiles), an independent
// float64 model of docs/SEMANTICS.md (filters, kept distribution, the noise), dtype rounding written
// from scratch (so the library's own encoders are tested, not trusted), builders of tensors whose
// logits are planted exactly, and the device parameterization.
//
// Nothing here calls into the library except the builders and `deviceCases` / `describeDevices`.

import { spawn, spawnSync } from 'child_process';
import fc from 'fast-check';
import * as path from 'path';
import {
  open,
  gpuStatus,
  nccl,
  sampleFused,
  sampleReference,
  type Device,
  type Tensor,
  type SampleOptions,
  type SampleResult,
} from '../lib/index';

export type FDType = 'f32' | 'f16' | 'bf16';
export const FLOAT_DTYPES: FDType[] = ['f32', 'f16', 'bf16'];

// ------------------------------------------------------------------------------------------------
// Deterministic randomness for building inputs (never for the draws under test).
// ------------------------------------------------------------------------------------------------

/** mulberry32 (bench/inputs.ts): a small, fast, seeded 32-bit generator; floats in [0, 1). */
import { mulberry32 as rng } from '../bench/inputs';
export { rng };

export function shuffle<T>(a: T[], r: () => number): T[] {
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

// ------------------------------------------------------------------------------------------------
// Statistics
// ------------------------------------------------------------------------------------------------

/** ln Γ(x), Lanczos (g = 7, n = 9), |error| < 1e-13 for x > 0. */
export function lnGamma(x: number): number {
  const c = [
    0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
    -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
    1.5056327351493116e-7,
  ];
  if (x < 0.5) return Math.log(Math.PI / Math.abs(Math.sin(Math.PI * x))) - lnGamma(1 - x);
  x -= 1;
  let a = c[0];
  const t = x + 7.5;
  for (let i = 1; i < 9; i++) a += c[i] / (x + i);
  return 0.5 * Math.log(2 * Math.PI) + (x + 0.5) * Math.log(t) - t + Math.log(a);
}

/** Regularized upper incomplete gamma Q(a, x) = Γ(a, x) / Γ(a): series for x < a + 1, else a
 *  continued fraction (modified Lentz). */
export function gammaQ(a: number, x: number): number {
  if (x < 0 || a <= 0) throw new RangeError(`gammaQ(${a}, ${x})`);
  if (x === 0) return 1;
  const lnPrefix = -x + a * Math.log(x) - lnGamma(a);
  if (x < a + 1) {
    let sum = 1 / a;
    let term = sum;
    for (let n = 1; n < 100000; n++) {
      term *= x / (a + n);
      sum += term;
      if (Math.abs(term) < Math.abs(sum) * 1e-16) break;
    }
    return Math.max(0, 1 - sum * Math.exp(lnPrefix));
  }
  const tiny = 1e-300;
  let b = x + 1 - a;
  let c = 1 / tiny;
  let d = 1 / b;
  let h = d;
  for (let i = 1; i < 100000; i++) {
    const an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (Math.abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    const delta = d * c;
    h *= delta;
    if (Math.abs(delta - 1) < 1e-16) break;
  }
  return Math.exp(lnPrefix) * h;
}

/** P(χ²_df ≥ stat). */
export function chiSquareSurvival(stat: number, df: number): number {
  return gammaQ(df / 2, stat / 2);
}

/** erfc, W. J. Cody-grade via the Numerical Recipes Chebyshev fit (relative error < 1.2e-7),
 *  enough for thresholds. */
export function erfc(x: number): number {
  const z = Math.abs(x);
  const t = 1 / (1 + 0.5 * z);
  const r =
    t *
    Math.exp(
      -z * z -
        1.26551223 +
        t *
          (1.00002368 +
            t *
              (0.37409196 +
                t *
                  (0.09678418 +
                    t *
                      (-0.18628806 +
                        t *
                          (0.27886807 +
                            t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))),
    );
  return x >= 0 ? r : 2 - r;
}

/** Two-sided normal tail P(|Z| ≥ z). */
export function normalTwoSided(z: number): number {
  return erfc(Math.abs(z) / Math.SQRT2);
}

/** z such that P(|Z| ≥ z) = p (bisection). */
export function normalQuantileTwoSided(p: number): number {
  let lo = 0;
  let hi = 40;
  for (let i = 0; i < 200; i++) {
    const mid = (lo + hi) / 2;
    if (normalTwoSided(mid) > p) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}

/** Rejection threshold of every distribution test in the suites. */
export const ALPHA = 1e-4;

export interface GoodnessOfFit {
  n: number;
  stat: number;
  df: number;
  pValue: number;          // chi-square survival of the pooled table
  zMax: number;            // largest |z| over the large cells (expected count ≥ 25)
  zCells: number;          // how many cells the z test looked at
  zThreshold: number;      // Bonferroni threshold: P(max |z| ≥ zThreshold) ≈ ALPHA under H0
  impossible: number;      // samples that landed on a probability-0 token
  worstCell: number;
  ok: boolean;
  summary: string;
}

/** Two-sided tail of a Poisson(mean) count at o: twice the smaller of P(X <= o) and P(X >= o), at most 1. */
export function poissonTwoSided(o: number, mean: number): number {
  let pmf = Math.exp(-mean);
  let below = 0; // P(X < o)
  for (let k = 0; k < o; k++) {
    below += pmf;
    pmf *= mean / (k + 1);
  }
  const atMost = below + pmf;
  return Math.min(1, 2 * Math.min(atMost, Math.max(0, 1 - below)));
}

/**
 * Chi-square goodness of fit of `observed` counts against `probs` (need not be normalized),
 * pooling every cell with an expected count < 5 into one cell (merged with the smallest cell if
 * the pool itself stays < 5, or, when only one cell is left to join, tested by its Poisson tail).
 * Plus a targeted test of the large cells: a bias of the top tokens is
 * diluted in an omnibus statistic with many degrees of freedom, so each cell with expected ≥ 25
 * also gets a z test, Bonferroni-corrected to the same ALPHA. Any sample on a probability-0 token
 * fails outright.
 */
export function goodnessOfFit(observed: ArrayLike<number>, probs: ArrayLike<number>): GoodnessOfFit {
  let n = 0;
  let total = 0;
  for (let i = 0; i < observed.length; i++) n += observed[i];
  for (let i = 0; i < probs.length; i++) total += probs[i];
  let impossible = 0;
  const cells: { o: number; e: number; p: number; idx: number }[] = [];
  let poolO = 0;
  let poolE = 0;
  for (let i = 0; i < probs.length; i++) {
    const p = probs[i] / total;
    const o = observed[i] ?? 0;
    if (p === 0) {
      impossible += o;
      continue;
    }
    const e = n * p;
    if (e < 5) {
      poolO += o;
      poolE += e;
    } else cells.push({ o, e, p, idx: i });
  }
  // A pool of < 5 expected with one cell to join: merged, the two would leave no degree of freedom
  // and pass whatever was drawn, so the pool's count is held to its Poisson law instead.
  let poolPValue: number | undefined;
  if (poolE > 0) {
    if (poolE >= 5 || cells.length === 0) cells.push({ o: poolO, e: poolE, p: poolE / n, idx: -1 });
    else if (cells.length === 1) poolPValue = poissonTwoSided(poolO, poolE);
    else {
      cells.sort((a, b) => a.e - b.e);
      cells[0] = { o: cells[0].o + poolO, e: cells[0].e + poolE, p: (cells[0].e + poolE) / n, idx: -1 };
    }
  }
  let stat = 0;
  for (const c of cells) stat += ((c.o - c.e) * (c.o - c.e)) / c.e;
  const df = poolPValue !== undefined ? 1 : cells.length - 1;
  const pValue = poolPValue ?? (df >= 1 ? chiSquareSurvival(stat, df) : 1);
  let zMax = 0;
  let worstCell = -1;
  let zCells = 0;
  for (const c of cells) {
    // (with a Poisson-tested pool the one cell's deviation is the pool's, judged there)
    if (c.e < 25 || c.idx < 0 || c.p >= 1 || poolPValue !== undefined) continue;
    zCells++;
    const z = Math.abs(c.o - c.e) / Math.sqrt(c.e * (1 - c.p));
    if (z > zMax) {
      zMax = z;
      worstCell = c.idx;
    }
  }
  const zThreshold = normalQuantileTwoSided(ALPHA / Math.max(1, zCells));
  const ok = impossible === 0 && pValue >= ALPHA && zMax < zThreshold;
  const summary =
    `n=${n} chi2=${stat.toFixed(1)} df=${df} p=${pValue.toExponential(2)} ` +
    `zMax=${zMax.toFixed(2)} (token ${worstCell}, threshold ${zThreshold.toFixed(2)} over ${zCells} cells) ` +
    `impossible=${impossible}`;
  return { n, stat, df, pValue, zMax, zCells, zThreshold, impossible, worstCell, ok, summary };
}

/** Per-row token histograms of a [B, S] token array; throws on a token outside [0, V). */
export function rowCounts(tokens: ArrayLike<number>, B: number, S: number, V: number): Float64Array[] {
  if (tokens.length !== B * S) throw new Error(`tokens.length ${tokens.length} != ${B} * ${S}`);
  const out: Float64Array[] = [];
  for (let b = 0; b < B; b++) {
    const c = new Float64Array(V);
    for (let j = 0; j < S; j++) {
      const t = tokens[b * S + j];
      if (!(Number.isInteger(t) && t >= 0 && t < V)) throw new Error(`row ${b} sample ${j}: token ${t} outside [0, ${V})`);
      c[t]++;
    }
    out.push(c);
  }
  return out;
}

export function addInto(acc: Float64Array, x: ArrayLike<number>): Float64Array {
  for (let i = 0; i < acc.length; i++) acc[i] += x[i];
  return acc;
}

/**
 * Adds one draw of token t to counts; throws on a token outside [0, counts.length), which a typed
 * array's `counts[t] += 1` would drop silently and a goodness-of-fit would then never see.
 */
export function countToken(counts: Float64Array, t: number): void {
  if (!Number.isInteger(t) || t < 0 || t >= counts.length) {
    throw new Error(`token ${t} outside [0, ${counts.length})`);
  }
  counts[t] += 1;
}

/** countToken for each token of a draw. */
export function countTokens(counts: Float64Array, tokens: ArrayLike<number>): Float64Array {
  for (let i = 0; i < tokens.length; i++) countToken(counts, tokens[i]);
  return counts;
}

/**
 * Adds a call's [B, S] draws to per-row counts (B = counts.length; a token outside [0, V) throws)
 * and returns, where `kept` is given, the largest |logprob − kept[b].logprob[token]| among them.
 */
export function addRowDraws(
  counts: Float64Array[],
  res: { tokens: ArrayLike<number>; logprobs?: ArrayLike<number> },
  S: number,
  kept?: Kept[],
): number {
  if (res.tokens.length !== counts.length * S) throw new Error(`tokens.length ${res.tokens.length} != ${counts.length} * ${S}`);
  let worst = 0;
  counts.forEach((c, b) => {
    for (let i = b * S; i < (b + 1) * S; i++) {
      countToken(c, res.tokens[i]);
      if (kept) worst = Math.max(worst, Math.abs(res.logprobs![i] - kept[b].logprob[res.tokens[i]]));
    }
  });
  return worst;
}

/** Each row's goodness of fit to its own probabilities: `row b: summary` for each row that fails. */
export function rowFitFailures(counts: Float64Array[], probs: ArrayLike<number>[]): string[] {
  const failures: string[] = [];
  counts.forEach((c, b) => {
    const gof = goodnessOfFit(c, probs[b]);
    if (!gof.ok) failures.push(`row ${b}: ${gof.summary}`);
  });
  return failures;
}

/** Draws n tokens from probs in JS (float64 inverse cdf with mulberry32): the negative controls. */
export function jsSample(probs: ArrayLike<number>, n: number, seed: number): Float64Array {
  const r = rng(seed);
  const cdf = new Float64Array(probs.length);
  let acc = 0;
  for (let i = 0; i < probs.length; i++) cdf[i] = acc += probs[i];
  const counts = new Float64Array(probs.length);
  for (let k = 0; k < n; k++) {
    // two draws for 53 bits
    const u = (r() + r() / 4294967296) * acc;
    let lo = 0;
    let hi = cdf.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid] > u) hi = mid;
      else lo = mid + 1;
    }
    counts[lo]++;
  }
  return counts;
}

// ------------------------------------------------------------------------------------------------
// dtype rounding, written independently of lib/dtype.ts
// ------------------------------------------------------------------------------------------------

const f32buf = new Float32Array(1);
const u32buf = new Uint32Array(f32buf.buffer);

export function f32Bits(x: number): number {
  f32buf[0] = x;
  return u32buf[0];
}
export function bitsF32(b: number): number {
  u32buf[0] = b >>> 0;
  return f32buf[0];
}

function roundHalfEven(y: number): number {
  const f = Math.floor(y);
  const d = y - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

/** bf16 bits of float32(x), round to nearest even; NaN -> a quiet NaN with the sign kept. */
export function toBF16Bits(x: number): number {
  const b = f32Bits(x);
  if ((b & 0x7f800000) === 0x7f800000 && (b & 0x7fffff) !== 0) return ((b >>> 16) | 0x40) & 0xffff;
  const lsb = (b >>> 16) & 1;
  return ((b + 0x7fff + lsb) >>> 16) & 0xffff;
}
export function fromBF16Bits(h: number): number {
  return bitsF32((h & 0xffff) << 16);
}

/** f16 bits of float32(x), round to nearest even, overflow to Inf, subnormals kept. */
export function toF16Bits(x0: number): number {
  const x = Math.fround(x0);
  if (Number.isNaN(x)) return 0x7e00;
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  if (a === Infinity || a >= 65520) return sign | 0x7c00;
  if (a < 2 ** -14) return sign | roundHalfEven(a * 2 ** 24); // 1024 becomes the smallest normal
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  if (2 ** (e + 1) <= a) e++;
  let q = roundHalfEven((a / 2 ** e - 1) * 1024);
  if (q === 1024) {
    q = 0;
    e++;
  }
  if (e > 15) return sign | 0x7c00;
  return sign | ((e + 15) << 10) | q;
}
export function fromF16Bits(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 31) return m ? NaN : sign * Infinity;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}

/** The value x takes once stored in `dtype`. */
export function roundTo(dtype: FDType, x: number): number {
  if (dtype === 'f32') return Math.fround(x);
  if (dtype === 'bf16') return fromBF16Bits(toBF16Bits(x));
  return fromF16Bits(toF16Bits(x));
}

/** Raw storage of `values` in `dtype`: Float32Array for f32, Uint16Array of bits otherwise. */
export function rawOf(dtype: FDType, values: ArrayLike<number>): Float32Array | Uint16Array {
  if (dtype === 'f32') return Float32Array.from(values as ArrayLike<number>);
  const out = new Uint16Array(values.length);
  const enc = dtype === 'bf16' ? toBF16Bits : toF16Bits;
  for (let i = 0; i < values.length; i++) out[i] = enc(values[i]);
  return out;
}

export function makeTensor(dev: Device, dtype: FDType, values: ArrayLike<number>, shape: number[]): Tensor {
  return dev.tensor(rawOf(dtype, values), shape, dtype);
}

// ------------------------------------------------------------------------------------------------
// Planted logits
// ------------------------------------------------------------------------------------------------

export interface Planted {
  H: Tensor;
  W: Tensor;
  bias?: Tensor;
  /** logits[b][v] exactly as the library must compute them (fp32 values, as float64 numbers). */
  logits: Float64Array[];
  /** W's values [V, D] (rounded to the dtype), e.g. to cut vocabulary shards from. */
  w: Float64Array;
  B: number;
  V: number;
  D: number;
  dispose(): void;
}

/**
 * Builds H [B, D] and W [V, D] (and bias [V]) so that H · Wᵀ (+ bias) is exactly `rows[b]`
 * (rounded to the dtype): every distinct row array gets a column d of W carrying its logits, H's
 * row b is the one-hot e_d, and the other columns of W are filled with junk (nonzero values that
 * are multiplied by exact zeros, so a GEMM that reads the wrong column is caught). With
 * `biasLogits`, the bias [V] is added (the fp32 sum w + bias is what the library computes).
 * With `via: 'bias'`, H is all zeros, W is junk and the bias carries the logits (all rows equal:
 * rows must then all be the same array).
 */
export function plantLogits(
  dev: Device,
  dtype: FDType,
  rows: ArrayLike<number>[],
  opts: { D?: number; biasLogits?: ArrayLike<number>; via?: 'weights' | 'bias'; junkSeed?: number } = {},
): Planted {
  const B = rows.length;
  const V = rows[0].length;
  const r = rng(opts.junkSeed ?? 12345);
  const distinct: ArrayLike<number>[] = [];
  const col: number[] = [];
  for (const row of rows) {
    if (row.length !== V) throw new Error('rows of different lengths');
    let i = distinct.indexOf(row);
    if (i < 0) {
      i = distinct.length;
      distinct.push(row);
    }
    col.push(i);
  }
  const via = opts.via ?? 'weights';
  const D = opts.D ?? Math.max(8, via === 'bias' ? 8 : distinct.length);
  if (via === 'weights' && D < distinct.length) throw new Error(`D ${D} < ${distinct.length} distinct rows`);
  if (via === 'bias' && distinct.length !== 1) throw new Error("via 'bias' needs identical rows");
  const w = new Float64Array(V * D);
  for (let i = 0; i < w.length; i++) w[i] = roundTo(dtype, (r() - 0.5) * 8); // junk
  const h = new Float64Array(B * D);
  let biasVals: Float64Array | undefined;
  if (via === 'weights') {
    for (let u = 0; u < distinct.length; u++) for (let v = 0; v < V; v++) w[v * D + u] = roundTo(dtype, distinct[u][v]);
    for (let b = 0; b < B; b++) h[b * D + col[b]] = 1;
    if (opts.biasLogits) biasVals = Float64Array.from(opts.biasLogits, (x) => roundTo(dtype, x));
  } else {
    biasVals = Float64Array.from(distinct[0], (x) => roundTo(dtype, x));
  }
  const logits: Float64Array[] = [];
  for (let b = 0; b < B; b++) {
    const l = new Float64Array(V);
    for (let v = 0; v < V; v++) {
      const base = via === 'weights' ? w[v * D + col[b]] : 0;
      l[v] = biasVals ? Math.fround(base + biasVals[v]) : base;
    }
    logits.push(l);
  }
  const H = makeTensor(dev, dtype, h, [B, D]);
  const W = makeTensor(dev, dtype, w, [V, D]);
  const bias = biasVals ? makeTensor(dev, dtype, biasVals, [V]) : undefined;
  return {
    H,
    W,
    bias,
    logits,
    w,
    B,
    V,
    D,
    dispose() {
      H.dispose();
      W.dispose();
      bias?.dispose();
    },
  };
}

/** Zipf-peaked logits: rank r (1-based) gets -s·ln r, ranks scattered over the vocabulary. */
export function zipfLogits(V: number, s: number, seed: number): Float64Array {
  const perm = shuffle(Array.from({ length: V }, (_, i) => i), rng(seed));
  const l = new Float64Array(V);
  for (let r = 0; r < V; r++) l[perm[r]] = -s * Math.log(r + 1);
  return l;
}
/** A standard normal from a seeded generator (Box-Muller). */
export function normal(r: () => number): number {
  const u = Math.max(r(), 1e-12);
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * r());
}
/** Gaussian logits with standard deviation `std`. */
export function gaussianLogits(V: number, seed: number, std: number): Float64Array {
  const r = rng(seed);
  return Float64Array.from({ length: V }, () => std * normal(r));
}
/** Nearly flat logits: uniform in [0, spread). */
export function flatLogits(V: number, seed: number, spread = 0.5): Float64Array {
  const r = rng(seed);
  return Float64Array.from({ length: V }, () => r() * spread);
}
/** One dominant token (logit `top`, at a pseudo-random index) over logits in [-2, 0). */
export function dominantLogits(V: number, seed: number, top = 6): Float64Array {
  const r = rng(seed);
  const l = Float64Array.from({ length: V }, () => -2 * r());
  l[Math.floor(r() * V)] = top;
  return l;
}

// ------------------------------------------------------------------------------------------------
// float64 model of docs/SEMANTICS.md §2 (the kept distribution)
// ------------------------------------------------------------------------------------------------

export interface FilterSpec {
  temperature?: number; // default 1; 0 = greedy
  topK?: number;
  topP?: number;
  minP?: number;
  softcap?: number;
  /** allowed(v): bit set in the row's mask */
  allowed?: (v: number) => boolean;
}

/** Per-row seeds 1000 + b and the filter options of `spec`, broadcast to every row. */
export function rowOptions(B: number, spec: FilterSpec, offset: number): SampleOptions {
  const o: SampleOptions = {
    seed: BigUint64Array.from({ length: B }, (_, b) => BigInt(1000 + b)),
    offset,
    temperature: spec.temperature ?? 1,
  };
  if (spec.topK !== undefined) o.topK = spec.topK;
  if (spec.topP !== undefined) o.topP = spec.topP;
  if (spec.minP !== undefined) o.minP = spec.minP;
  return o;
}

/** Counts of one sample per row of p's rows (rowOptions per call), pooled over rows and `calls` offsets. */
export async function pooledCounts(p: Planted, spec: FilterSpec, calls: number, extra: SampleOptions = {}) {
  const counts = new Float64Array(p.V);
  let fallbackRows = 0;
  for (let c = 0; c < calls; c++) {
    const res = await sampleFused(p.H, p.W, { ...rowOptions(p.B, spec, c), ...extra });
    fallbackRows += res.fallbackRows ?? 0;
    countTokens(counts, res.tokens);
  }
  return { counts, fallbackRows };
}

/**
 * Per-row options cycling through `specs` (row b takes specs[b % specs.length]): temperature,
 * topK, topP and minP as arrays, and per-row seeds seedBase + b.
 */
export function mixedRowOptions(specs: FilterSpec[], B: number, offset: number, seedBase: number): SampleOptions {
  const temperature = new Float32Array(B);
  const topK = new Int32Array(B);
  const topP = new Float32Array(B).fill(1);
  const minP = new Float32Array(B);
  for (let b = 0; b < B; b++) {
    const s = specs[b % specs.length];
    temperature[b] = s.temperature ?? 1;
    topK[b] = s.topK ?? 0;
    topP[b] = s.topP ?? 1;
    minP[b] = s.minP ?? 0;
  }
  const seed = BigUint64Array.from({ length: B }, (_, b) => BigInt(seedBase + b));
  return { seed, offset, temperature, topK, topP, minP };
}

export interface Kept {
  probs: Float64Array;          // normalized, 0 outside the kept set
  logprob: Float64Array;        // log p (−Infinity outside)
  order: number[];              // kept tokens by (probability desc, index asc)
  keptCount: number;
  /** distance of the top-p target from the nearest prefix mass (how robust the nucleus is to
   *  rounding); Infinity when top-p is off */
  topPMargin: number;
  /** distance (in logit/T units) of the min-p threshold from the nearest logit; Infinity when off */
  minPMargin: number;
  empty: boolean;
}

export function applySoftcap(l: number, c: number): number {
  // the library: c * tanhf(logit / c) in fp32
  return Math.fround(c * Math.fround(Math.tanh(Math.fround(l / c))));
}

export function keptDistribution(logits0: ArrayLike<number>, f: FilterSpec = {}): Kept {
  const V = logits0.length;
  const T = f.temperature ?? 1;
  const logits = Float64Array.from(logits0);
  if (f.softcap && f.softcap > 0) for (let v = 0; v < V; v++) logits[v] = applySoftcap(logits[v], f.softcap);
  const alive: number[] = [];
  for (let v = 0; v < V; v++) {
    if (f.allowed && !f.allowed(v)) continue;
    const l = logits[v];
    if (Number.isNaN(l) || l === -Infinity) continue;
    alive.push(v);
  }
  const probs = new Float64Array(V);
  const logprob = new Float64Array(V).fill(-Infinity);
  const result = (order: number[], topPMargin = Infinity, minPMargin = Infinity): Kept => ({
    probs,
    logprob,
    order,
    keptCount: order.length,
    topPMargin,
    minPMargin,
    empty: order.length === 0,
  });
  if (alive.length === 0) return result([]);
  const inf = alive.filter((v) => logits[v] === Infinity);
  if (inf.length > 0) {
    if (T === 0) {
      probs[inf[0]] = 1;
      logprob[inf[0]] = 0;
      return result([inf[0]]);
    }
    for (const v of inf) {
      probs[v] = 1 / inf.length;
      logprob[v] = -Math.log(inf.length);
    }
    return result(inf);
  }
  // (logit desc, index asc)
  const order = alive.slice().sort((a, b) => logits[b] - logits[a] || a - b);
  if (T === 0) {
    probs[order[0]] = 1;
    logprob[order[0]] = 0;
    return result([order[0]]);
  }
  let kept = order;
  if (f.topK && f.topK > 0) kept = kept.slice(0, f.topK);
  const s = kept.map((v) => logits[v] / T);
  const lse = (xs: number[]) => {
    let m = -Infinity;
    for (const x of xs) if (x > m) m = x; // a loop: Math.max with V = 263000 spread arguments overflows the stack
    let acc = 0;
    for (const x of xs) acc += Math.exp(x - m);
    return m + Math.log(acc);
  };
  let topPMargin = Infinity;
  if (f.topP !== undefined && f.topP < 1) {
    const z = lse(s);
    let cum = 0;
    let n = kept.length;
    for (let i = 0; i < kept.length; i++) {
      const before = cum;
      cum += Math.exp(s[i] - z);
      if (cum >= f.topP) {
        n = i + 1;
        topPMargin = Math.min(f.topP - before, cum - f.topP);
        break;
      }
    }
    kept = kept.slice(0, n);
  }
  let minPMargin = Infinity;
  if (f.minP !== undefined && f.minP > 0) {
    const thr = logits[order[0]] / T + Math.log(f.minP);
    const n = kept.filter((v) => logits[v] / T >= thr).length;
    for (const v of order) minPMargin = Math.min(minPMargin, Math.abs(logits[v] / T - thr));
    kept = kept.slice(0, n);
  }
  const ks = kept.map((v) => logits[v] / T);
  const z = lse(ks);
  kept.forEach((v, i) => {
    logprob[v] = ks[i] - z;
    probs[v] = Math.exp(ks[i] - z);
  });
  return result(kept, topPMargin, minPMargin);
}

/** A top-p value halfway between the prefix masses around p0 (so fp32 vs float64 rounding of the
 *  cumulative sum cannot move the boundary). */
export function safeTopP(logits: ArrayLike<number>, f: FilterSpec, p0: number): number {
  const k = keptDistribution(logits, { ...f, topP: undefined, minP: undefined });
  let cum = 0;
  for (const v of k.order) {
    const before = cum;
    cum += k.probs[v];
    if (cum >= p0) return Math.fround((before + cum) / 2);
  }
  return 1;
}

/** Bitmask [B * ceil(V/32)] from per-row predicates. */
export function makeMask(B: number, V: number, allowed: (b: number, v: number) => boolean): Uint32Array {
  const words = Math.ceil(V / 32);
  const m = new Uint32Array(B * words);
  for (let b = 0; b < B; b++) for (let v = 0; v < V; v++) if (allowed(b, v)) m[b * words + (v >>> 5)] |= 1 << (v & 31);
  return m;
}
export function maskAllows(mask: Uint32Array, V: number, b: number): (v: number) => boolean {
  const words = Math.ceil(V / 32);
  return (v) => ((mask[b * words + (v >>> 5)] >>> (v & 31)) & 1) === 1;
}

// ------------------------------------------------------------------------------------------------
// An independent JS model of the noise (docs/SEMANTICS.md §3)
// ------------------------------------------------------------------------------------------------

/** High 32 bits of the 64-bit product of two uint32 (16-bit limbs, exact in doubles). */
function mulhi(a: number, b: number): number {
  const aL = a & 0xffff;
  const aH = a >>> 16;
  const bL = b & 0xffff;
  const bH = b >>> 16;
  const lh = aL * bH;
  const hl = aH * bL;
  const mid = ((aL * bL) >>> 16) + (lh & 0xffff) + (hl & 0xffff);
  return (aH * bH + (lh >>> 16) + (hl >>> 16) + Math.floor(mid / 65536)) >>> 0;
}

/** Philox4x32-10, written from the paper's description (not from lib/). */
export function philoxRef(c: number[], k: number[]): number[] {
  let [c0, c1, c2, c3] = c.map((x) => x >>> 0);
  let [k0, k1] = k.map((x) => x >>> 0);
  for (let r = 0; r < 10; r++) {
    const hi0 = mulhi(0xd2511f53, c0);
    const lo0 = Math.imul(0xd2511f53, c0) >>> 0;
    const hi1 = mulhi(0xcd9e8d57, c2);
    const lo1 = Math.imul(0xcd9e8d57, c2) >>> 0;
    const n0 = (hi1 ^ c1 ^ k0) >>> 0;
    const n2 = (hi0 ^ c3 ^ k1) >>> 0;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 = (k0 + 0x9e3779b9) >>> 0;
    k1 = (k1 + 0xbb67ae85) >>> 0;
  }
  return [c0, c1, c2, c3];
}

/** u = min((x + 0.5)·2^-32, 1 − 2^-24) exactly as the float32 expression of SEMANTICS §3. */
export function uniformOf(x: number): number {
  const xf = Math.fround(x);
  return Math.min(Math.fround(xf * 2 ** -32 + 2 ** -33), 1 - 2 ** -24);
}
/** g = −log(−log1p(−u)) with float32 rounding after each step (log1pf/logf modelled by the
 *  correctly rounded float64 result; a 1-ulp difference from the native math is possible). */
export function gumbelOf(x: number): number {
  const u = uniformOf(x);
  const e = Math.fround(-Math.log1p(-u));
  return Math.fround(-Math.log(e));
}

const M32 = 0xffffffffn;
export function splitU64(x: bigint): [number, number] {
  return [Number(x & M32), Number((x >> 32n) & M32)];
}

/** The Gumbel noise of (seed, offset, stream, sample, v). */
export function noiseRef(seed: bigint, offset: bigint, stream: number, sample: number, v: number): number {
  const [k0, k1] = splitU64(seed);
  const [o0, o1] = splitU64(offset);
  const x = philoxRef([v >>> 2, ((stream << 16) | sample) >>> 0, o0, o1], [k0, k1])[v & 3];
  return gumbelOf(x);
}

/** The token the Gumbel samplers draw for one (row, sample), in JS. */
export function gumbelTokenRef(
  logits: ArrayLike<number>,
  T: number,
  seed: bigint,
  offset: bigint,
  stream: number,
  sample: number,
): number {
  let best = -1;
  let bestScore = -Infinity;
  const invT = Math.fround(1 / T);
  for (let v = 0; v < logits.length; v++) {
    const s = Math.fround(logits[v] * invT + noiseRef(seed, offset, stream, sample, v));
    if (s > bestScore) {
      bestScore = s;
      best = v;
    }
  }
  return best;
}

/** The token the inverse-cdf reference draws for one (row, sample), in JS (T > 0, no filters). */
export function inverseCdfTokenRef(
  logits: ArrayLike<number>,
  T: number,
  seed: bigint,
  offset: bigint,
  stream: number,
  sample: number,
): number {
  const [k0, k1] = splitU64(seed);
  const [o0, o1] = splitU64(offset);
  const x = philoxRef([sample, stream, o0, o1], [k0, k1])[0];
  const u = (x + 0.5) * 2 ** -32;
  let m = -Infinity;
  for (let v = 0; v < logits.length; v++) m = Math.max(m, logits[v] / T);
  const cum = new Float64Array(logits.length);
  let acc = 0;
  for (let v = 0; v < logits.length; v++) cum[v] = acc += Math.exp(logits[v] / T - m);
  const target = u * acc;
  for (let v = 0; v < logits.length; v++) if (cum[v] > target) return v;
  return logits.length - 1;
}

// ------------------------------------------------------------------------------------------------
// Samplers and devices
// ------------------------------------------------------------------------------------------------

export type SamplerName = 'fused' | 'reference-inverse-cdf' | 'reference-gumbel';
export const SAMPLERS: SamplerName[] = ['fused', 'reference-inverse-cdf', 'reference-gumbel'];

export function draw(name: SamplerName, H: Tensor, W: Tensor, opts: SampleOptions = {}): Promise<SampleResult> {
  if (name === 'fused') return sampleFused(H, W, opts);
  return sampleReference(H, W, { ...opts, method: name === 'reference-gumbel' ? 'gumbel' : 'inverse-cdf' });
}

/** Fraction of equal entries. */
export function agreement(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`lengths ${a.length} != ${b.length}`);
  let same = 0;
  for (let i = 0; i < a.length; i++) if (a[i] === b[i]) same++;
  return same / a.length;
}

/** The first four indices where two token arrays differ, as "[i] x != y". */
export function differences(x: ArrayLike<number>, y: ArrayLike<number>): string[] {
  const out: string[] = [];
  for (let i = 0; i < x.length && out.length < 4; i++) if (x[i] !== y[i]) out.push(`[${i}] ${x[i]} != ${y[i]}`);
  return out;
}

export interface DeviceCase {
  name: 'cpu' | 'cuda';
  usable: boolean;
  reason: string;
}

/** Runs node with these arguments in a process of its own with this environment (variables read
 *  at load: escape hatches, ISA caps; undefined unsets one) and returns the JSON of its last line
 *  of output. */
export function runJsonNode(args: string[], env: Record<string, string | undefined>, timeoutMs = 120000): unknown {
  const childEnv = { ...process.env, ...env };
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete childEnv[k];
  const r = spawnSync(process.execPath, args, { env: childEnv, encoding: 'utf8', timeout: timeoutMs });
  const line = (r.stdout ?? '').trim().split('\n').pop() ?? '';
  try {
    return JSON.parse(line);
  } catch {
    throw new Error(`node ${args[0]} exited with ${r.signal ?? r.status} and no result: ${r.stderr}`);
  }
}

/** runJsonNode of a script in test/. */
export function runJsonChild(script: string, env: Record<string, string | undefined>, timeoutMs = 120000): unknown {
  return runJsonNode([path.join(__dirname, script)], env, timeoutMs);
}

export function cudaStatus(): { usable: boolean; reason: string } {
  try {
    const s = gpuStatus();
    return { usable: s.usable, reason: s.reason || 'no reason given' };
  } catch (e) {
    return { usable: false, reason: `gpuStatus() threw: ${(e as Error).message}` };
  }
}

/** Whether the NCCL suites run here (a usable GPU and libnccl loaded), or why not. NVLink
 *  multicast stays off (NCCL_NVLS_ENABLE=0: the GPU machines forbid it). */
export function ncclStatus(): { runs: boolean; skipWhy: string } {
  process.env.NCCL_NVLS_ENABLE = '0';
  const gpu = cudaStatus();
  const status = nccl.status();
  return {
    runs: gpu.usable && status.loaded,
    skipWhy: !gpu.usable ? `no usable GPU: ${gpu.reason}` : `NCCL not loaded: ${status.error}`,
  };
}

/** B rows of CSR lists: row b's token ids are f(b). */
export function csrRows(B: number, f: (b: number) => number[]): { rowOffsets: Int32Array; tokenIds: Int32Array } {
  const rowOffsets = new Int32Array(B + 1);
  const ids: number[] = [];
  for (let b = 0; b < B; b++) {
    ids.push(...f(b));
    rowOffsets[b + 1] = ids.length;
  }
  return { rowOffsets, tokenIds: Int32Array.from(ids) };
}

/** B rows of up to `most` distinct random token ids in [0, V) each; never row b's keep[b] when
 *  `keep` is given (a token the row must still be able to draw). */
export function randomIdRows(r: () => number, B: number, V: number, most: number, keep?: ArrayLike<number>): number[][] {
  return Array.from({ length: B }, (_, b) => {
    const seen = new Set<number>();
    for (let i = Math.floor(r() * (Math.min(most, V) + 1)); i > 0; i--) {
      const t = Math.floor(r() * V);
      if (keep === undefined || t !== keep[b]) seen.add(t);
    }
    return [...seen];
  });
}

/** A shard's allowedTokens: bit (v - offset) of its own words, per row, from the [B, V] mask. */
export function shardMask(mask: Uint32Array, B: number, V: number, offset: number, size: number): Uint32Array {
  const words = Math.ceil(size / 32);
  const m = new Uint32Array(B * words);
  for (let b = 0; b < B; b++) {
    for (let v = 0; v < size; v++) {
      const g = offset + v;
      if ((mask[b * Math.ceil(V / 32) + (g >>> 5)] >>> (g & 31)) & 1) m[b * words + (v >>> 5)] |= 1 << (v & 31);
    }
  }
  return m;
}

/** a and b defined, of one length, each value equal or within tol · max(1, |b|). */
export function expectClose(a: Float32Array | undefined, b: Float32Array | undefined, tol: number): void {
  expect(a).toBeDefined();
  expect(b).toBeDefined();
  expect(a!.length).toBe(b!.length);
  for (let i = 0; i < a!.length; i++) {
    if (a![i] === b![i]) continue;  // both -Infinity where fewer are kept
    expect(Math.abs(a![i] - b![i])).toBeLessThanOrEqual(tol * Math.max(1, Math.abs(b![i])));
  }
}

/** A row's tokens as the host keeps them: token -> [count in the output, in the prompt], in slot order. */
export type HostTable = Map<number, [number, boolean]>;

/** The device table of rows [0, B) as host tables (free slots left out, slot order kept). */
export function readTables(table: { tokenIds: Int32Array; outputCounts: Int32Array; inPrompt: Uint8Array }, B: number, cap: number): HostTable[] {
  return Array.from({ length: B }, (_, b) => {
    const t: HostTable = new Map();
    for (let i = b * cap; i < (b + 1) * cap; i++) {
      if (table.tokenIds[i] >= 0) t.set(table.tokenIds[i], [table.outputCounts[i], table.inPrompt[i] === 1]);
    }
    return t;
  });
}

/** A fuzz suite's property on one device: fast-check over `cases` from a fixed seed, a failure
 *  naming the device and the case. */
export async function checkCasesOn<T>(
  device: string, cases: fc.Arbitrary<T>, run: (c: T) => Promise<void>, seed: number, numRuns: number,
): Promise<void> {
  await fc.assert(
    fc.asyncProperty(cases, async (c) => {
      try {
        await run(c);
      } catch (e) {
        throw new Error(`${device}: ${(e as Error).message}\ncase: ${JSON.stringify(c)}`);
      }
    }),
    { seed, numRuns, endOnFailure: true },
  );
}

export function deviceCases(): DeviceCase[] {
  const s = cudaStatus();
  return [
    { name: 'cpu', usable: true, reason: '' },
    { name: 'cuda', usable: s.usable, reason: s.reason },
  ];
}

/**
 * Runs `body` once per device: always 'cpu'; 'cuda' when gpuStatus().usable, else the same tests
 * registered as skipped under a describe whose name carries the reason.
 */
export function describeDevices(body: (name: 'cpu' | 'cuda', dev: () => Device) => void): void {
  for (const c of deviceCases()) {
    let dev: Device | undefined;
    const get = () => {
      if (!dev) dev = open(c.name);
      return dev;
    };
    if (c.usable) describe(c.name, () => body(c.name, get));
    else describe.skip(`${c.name} — skipped: ${c.reason}`, () => body(c.name, get));
  }
}

/** Scales the big sample counts (FS_TEST_SCALE=4 for a release run; default 1). */
/** The most samples per row the API takes (numSamples); the distribution suites' cap. */
export const MAX_S = 65536;

export const SCALE = Number(process.env.FS_TEST_SCALE ?? '1') || 1;
export function scaled(n: number, max = Infinity): number {
  return Math.min(max, Math.max(1, Math.round(n * SCALE)));
}

/** Expectation helper for "rejects or throws": sync throws and rejected promises both count. */
export async function failure(fn: () => unknown): Promise<Error> {
  try {
    await fn();
  } catch (e) {
    return e as Error;
  }
  throw new Error('expected a failure, but the call succeeded');
}

/** The typed-array kind of x, independent of the realm (the addon's arrays come from Node's main
 *  realm, jest's test code runs in a vm context: `instanceof Int32Array` is false across them). */
export function typedKind(x: unknown): string {
  return Object.prototype.toString.call(x).slice(8, -1);
}

// ------------------------------------------------------------------------------------------------
// Tensor-parallel ranks in their own processes (test/tp-rank.js)
// ------------------------------------------------------------------------------------------------

export interface RankOutput {
  tokens?: number[];
  logprobs?: number[];
  error?: string;
}

/** Runs `ranks` processes of test/tp-rank.js; resolves with each rank's JSON line (or its exit). */
export function runRanks(ranks: number, testCase: object, limitMs: number): Promise<RankOutput[]> {
  const id = Buffer.from(nccl.createUniqueId()).toString('hex');
  const script = path.join(__dirname, 'tp-rank.js');
  return Promise.all(
    Array.from({ length: ranks }, (_, rank) =>
      new Promise<RankOutput>((resolve) => {
        const child = spawn(process.execPath, [script], {
          env: { ...process.env, TP_ID: id, TP_RANKS: String(ranks), TP_RANK: String(rank), TP_CASE: JSON.stringify(testCase) },
        });
        let out = '';
        child.stdout.on('data', (d) => (out += d));
        const timer = setTimeout(() => child.kill('SIGKILL'), limitMs);
        child.on('exit', (code, signal) => {
          clearTimeout(timer);
          const line = out.trim().split('\n').pop() ?? '';
          try {
            resolve(JSON.parse(line) as RankOutput);
          } catch {
            resolve({ error: `exited with ${signal ?? code} and no result` });
          }
        });
      }),
    ),
  );
}

/** A row's listed tokens and penalties (SEMANTICS §2, steps 2a-2d), as the tests describe them. */
export interface Listed {
  bias?: [number, number][];                       // [token, value]
  banned?: number[];
  penalized?: [number, number, boolean][];         // [token, output count, in prompt]
  repetition?: number;
  frequency?: number;
  presence?: number;
}

/** The logits after steps 2a-2d, each step rounded to float32 as the library computes it. */
export function adjusted(logits: ArrayLike<number>, row: Listed): Float64Array {
  const l = Float64Array.from(logits);
  for (const [t, value] of row.bias ?? []) l[t] = Math.fround(l[t] + Math.fround(value));
  for (const t of row.banned ?? []) l[t] = -Infinity;
  const r = Math.fround(row.repetition ?? 1);
  const f = Math.fround(row.frequency ?? 0);
  const p = Math.fround(row.presence ?? 0);
  for (const [t, count, inPrompt] of row.penalized ?? []) {
    if (r !== 1 && (count > 0 || inPrompt)) l[t] = Math.fround(l[t] > 0 ? l[t] / r : l[t] * r);
    if (count > 0) l[t] = Math.fround(l[t] - Math.fround(f * count + p));
  }
  return l;
}

/** SampleOptions whose lists are host arrays (what listedOptions builds). */
export type HostListOptions = SampleOptions & {
  logitBias?: { rowOffsets: Int32Array; tokenIds: Int32Array; values: Float32Array };
  bannedTokens?: { rowOffsets: Int32Array; tokenIds: Int32Array };
  penaltyTokens?: { rowOffsets: Int32Array; tokenIds: Int32Array; outputCounts: Int32Array; inPrompt: Uint8Array };
};

/** The options for rows of Listed (CSR lists in row order). */
export function listedOptions(rows: Listed[]): HostListOptions {
  const B = rows.length;
  const o: HostListOptions = {};
  const csr = <T>(get: (r: Listed) => T[] | undefined) => {
    const offsets = new Int32Array(B + 1);
    const items: T[] = [];
    rows.forEach((r, b) => {
      items.push(...(get(r) ?? []));
      offsets[b + 1] = items.length;
    });
    return { offsets, items };
  };
  if (rows.some((r) => r.bias)) {
    const { offsets, items } = csr((r) => r.bias);
    o.logitBias = { rowOffsets: offsets, tokenIds: Int32Array.from(items, (x) => x[0]), values: Float32Array.from(items, (x) => x[1]) };
  }
  if (rows.some((r) => r.banned)) {
    const { offsets, items } = csr((r) => r.banned);
    o.bannedTokens = { rowOffsets: offsets, tokenIds: Int32Array.from(items) };
  }
  if (rows.some((r) => r.penalized)) {
    const { offsets, items } = csr((r) => r.penalized);
    o.penaltyTokens = {
      rowOffsets: offsets,
      tokenIds: Int32Array.from(items, (x) => x[0]),
      outputCounts: Int32Array.from(items, (x) => x[1]),
      inPrompt: Uint8Array.from(items, (x) => (x[2] ? 1 : 0)),
    };
    o.repetitionPenalty = Float32Array.from(rows, (r) => r.repetition ?? 1);
    o.frequencyPenalty = Float32Array.from(rows, (r) => r.frequency ?? 0);
    o.presencePenalty = Float32Array.from(rows, (r) => r.presence ?? 0);
  }
  return o;
}

/** The k most probable tokens of a row (ties to the smaller index). */
export function topTokens(l: ArrayLike<number>, k: number): number[] {
  return Array.from(l, (x, v) => [x, v] as const)
    .sort((a, b) => b[0] - a[0] || a[1] - b[1])
    .slice(0, k)
    .map(([, v]) => v);
}
