// The bench's two logits modes (`--logits gaussian|model`), as host matrices H and W whose product
// H · Wᵀ has the wanted structure, and the float64 statistics that define the model-like mode
// (bench/TUNING.md, "Logits modes"; checked by test/bench-inputs.test.ts and
// `node dist/bench/logits-stats.js`).
//
// gaussian: every entry of H and W uniform, scaled so that each logit has std `--logit-std`.
// model:    the first K columns of H and W are "topic" coordinates, the other D − K the bulk.
//   - bulk: H uniform std 1, W uniform std BULK_STD / √(D − K): a Gaussian bulk of std 2 per row
//     whatever D is (the sum of D − K products, scaled by construction).
//   - topics: K = min(256, ⌊D / 2⌋, ⌊V / 128⌋). Topic c owns 1–63 hot tokens (seeded, distinct over
//     all topics); a hot token's W row is 0 except W[v, c] = its offset (the top one of a topic in
//     [17, 20], the others in [12, top]). Row b of H has H[b, c(b)] = 1 with c(b) = b mod K, so its
//     hot tokens sit 12–20 logits above its bulk, and every other row sees them at logit 0.
//   - flat rows: every 20th row (b mod 20 = 19, 5 %) has no topic and half the bulk scale (std 1):
//     a high-entropy row whose top-p 0.9 nucleus is tens of thousands of tokens.
// The topic plan comes from mulberry32(seed) with integer-exact arithmetic only, so that
// bench/baselines/torch_baselines.py (`--logits model --logits-seed S`) rebuilds the same plan
// (test/bench-inputs.test.ts compares them when python3 is present).

import { decodeBF16, decodeF16, encodeBF16, encodeF16 } from '../lib/dtype';
import type { FloatDType } from '../lib/dtype';
import { LOGITS_MODES } from './args';
import type { BenchDType, LogitsMode } from './args';
import { hostMatrix, mulberry32 } from './inputs';

export { LOGITS_MODES };
export type { LogitsMode };

/** The constants of the model-like mode; its measured numbers are in bench/TUNING.md. */
export const MODEL_LOGITS = {
  /** Std of the Gaussian bulk of a row with a topic. */
  bulkStd: 2,
  /** Flat rows scale their bulk by this (std 1). */
  flatBulkScale: 0.5,
  /** Row b is flat when b % flatEvery === flatEvery - 1. */
  flatEvery: 20,
  /** Hot logits lie in [hotMin, hotMax]; the largest of a topic in [topMin, hotMax]. */
  hotMin: 12,
  topMin: 17,
  hotMax: 20,
  /** A topic has 2^j + ⌊r · 2^j⌋ hot tokens, j uniform in 0..hotLog2 − 1: 1 to 63, about log-uniform. */
  hotLog2: 6,
  maxTopics: 256,
  /** The seed of the topic plan (hot tokens and offsets). */
  seed: 7,
} as const;

/** Largest number of hot tokens one topic can have. */
export const MAX_HOT_PER_TOPIC = 2 ** MODEL_LOGITS.hotLog2 - 1;

export interface ModelLogitsPlan {
  vocab: number;
  hidden: number;
  /** Topic coordinates: columns 0..topics-1 of H and W. */
  topics: number;
  /** Columns topics..hidden-1: the bulk. */
  bulkDims: number;
  /** Per topic: its hot tokens, the largest offset first. */
  hot: { tokens: number[]; offsets: number[] }[];
}

/** Why a shape cannot carry the model-like mode, or null. */
export function modelLogitsUnsupported(vocab: number, hidden: number): string | null {
  if (hidden < 2) return `--logits model needs a hidden size D >= 2, got ${hidden}`;
  if (vocab < 2 * (MAX_HOT_PER_TOPIC + 1)) {
    return `--logits model needs a vocabulary V >= ${2 * (MAX_HOT_PER_TOPIC + 1)}, got ${vocab}`;
  }
  return null;
}

/** The number of topic coordinates of a V × D shape. */
export function topicCount(vocab: number, hidden: number): number {
  return Math.max(1, Math.min(MODEL_LOGITS.maxTopics, Math.floor(hidden / 2), Math.floor(vocab / (2 * (MAX_HOT_PER_TOPIC + 1)))));
}

/** The seeded topic plan: which tokens are hot for which topic, at which logit. */
export function modelLogitsPlan(vocab: number, hidden: number, seed: number = MODEL_LOGITS.seed): ModelLogitsPlan {
  const why = modelLogitsUnsupported(vocab, hidden);
  if (why) throw new RangeError(why);
  const topics = topicCount(vocab, hidden);
  const rand = mulberry32(seed);
  const used = new Set<number>();
  const hot: ModelLogitsPlan['hot'] = [];
  const { hotMin, topMin, hotMax, hotLog2 } = MODEL_LOGITS;
  for (let c = 0; c < topics; c++) {
    const span = 2 ** Math.floor(rand() * hotLog2);
    const n = span + Math.floor(rand() * span);
    const top = topMin + (hotMax - topMin) * rand();
    const tokens: number[] = [];
    const offsets: number[] = [];
    for (let i = 0; i < n; i++) {
      let v: number;
      do v = Math.floor(rand() * vocab);
      while (used.has(v));
      used.add(v);
      tokens.push(v);
      // Drawn nearer the top than uniform (r² is small more often): the nucleus holds several.
      const r = rand();
      offsets.push(i === 0 ? top : top - (top - hotMin) * r * r);
    }
    hot.push({ tokens, offsets });
  }
  return { vocab, hidden, topics, bulkDims: hidden - topics, hot };
}

export function isFlatRow(row: number): boolean {
  return row % MODEL_LOGITS.flatEvery === MODEL_LOGITS.flatEvery - 1;
}

/** The topic of row b, or null for a flat row. */
export function rowTopic(plan: ModelLogitsPlan, row: number): number | null {
  return isFlatRow(row) ? null : row % plan.topics;
}

function encodeOne(x: number, dtype: BenchDType): number {
  const f = Float32Array.of(x);
  return dtype === 'f32' ? f[0] : dtype === 'bf16' ? encodeBF16(f)[0] : encodeF16(f)[0];
}

/** W [V, D] of the model-like mode, in the dtype's host representation. */
export function modelW(plan: ModelLogitsPlan, dtype: BenchDType, seed: number): Float32Array | Uint16Array {
  const { vocab: V, hidden: D, topics: K } = plan;
  const w = hostMatrix(V, D, dtype, MODEL_LOGITS.bulkStd / Math.sqrt(plan.bulkDims), seed);
  // 0 encodes as 0 in every dtype.
  for (let v = 0; v < V; v++) w.fill(0, v * D, v * D + K);
  plan.hot.forEach(({ tokens, offsets }, c) => {
    tokens.forEach((v, i) => {
      w.fill(0, v * D, (v + 1) * D);
      w[v * D + c] = encodeOne(offsets[i], dtype);
    });
  });
  return w;
}

/** H [B, D] of the model-like mode: a bulk of std 1 (0.5 on flat rows) and the row's topic. */
export function modelH(plan: ModelLogitsPlan, batch: number, dtype: BenchDType, seed: number): Float32Array | Uint16Array {
  const { hidden: D, topics: K } = plan;
  const h = hostMatrix(batch, D, dtype, 1, seed);
  const one = encodeOne(1, dtype);
  const decoded = decodeHost(h, dtype);
  for (let b = 0; b < batch; b++) {
    h.fill(0, b * D, b * D + K);
    const c = rowTopic(plan, b);
    if (c !== null) {
      h[b * D + c] = one;
    } else {
      // Halving is exact in every dtype (no subnormals at this scale).
      for (let d = b * D + K; d < (b + 1) * D; d++) h[d] = encodeOne(decoded[d] * MODEL_LOGITS.flatBulkScale, dtype);
    }
  }
  return h;
}

/** The host matrices of a mode: W [V, D] and a maker of H [B, D] for one rotation copy. */
export interface LogitsInputs {
  mode: LogitsMode;
  plan: ModelLogitsPlan | null;
  w: Float32Array | Uint16Array;
  h: (batch: number, seed: number) => Float32Array | Uint16Array;
}

export function logitsInputs(
  mode: LogitsMode,
  vocab: number,
  hidden: number,
  dtype: BenchDType,
  logitStd: number,
  wSeed: number,
): LogitsInputs {
  if (mode === 'gaussian') {
    return {
      mode,
      plan: null,
      w: hostMatrix(vocab, hidden, dtype, logitStd / Math.sqrt(hidden), wSeed),
      h: (batch, seed) => hostMatrix(batch, hidden, dtype, 1, seed),
    };
  }
  const plan = modelLogitsPlan(vocab, hidden);
  return { mode, plan, w: modelW(plan, dtype, wSeed), h: (batch, seed) => modelH(plan, batch, dtype, seed) };
}

export function decodeHost(x: Float32Array | Uint16Array, dtype: FloatDType): Float32Array {
  if (x instanceof Float32Array) return x;
  return dtype === 'bf16' ? decodeBF16(x) : decodeF16(x);
}

// ------------------------------------------------------------------------------------------------
// Statistics of a mode, in float64 (docs/SEMANTICS.md §2, steps 4–7).
// ------------------------------------------------------------------------------------------------

/** One filter setting whose kept-set size is measured. */
export interface KeptProbe {
  name: string;
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
}

/** T = 1 top-p 0.9 defines the mode; the rest describe it (the three model-card defaults, min-p). */
export const KEPT_PROBES: readonly KeptProbe[] = [
  { name: 'topp0.9 (T 1)', topP: 0.9 },
  { name: 'llama3 (T 0.6, topP 0.9)', temperature: 0.6, topP: 0.9 },
  { name: 'qwen3 (T 0.6, topK 20, topP 0.95)', temperature: 0.6, topK: 20, topP: 0.95 },
  { name: 'gemma3 (topK 64, topP 0.95)', topK: 64, topP: 0.95 },
  { name: 'minp0.05 (T 1)', minP: 0.05 },
];

/**
 * How many tokens the filters keep on one row of logits (no mask, no softcap), for each probe.
 * The kept sets are prefixes of the (logit descending) order, so one sort serves every probe.
 */
export function keptCounts(logits: Float64Array, probes: readonly KeptProbe[]): number[] {
  const V = logits.length;
  const sorted = Float64Array.from(logits).sort(); // ascending: the filters read it from the end
  const m = sorted[V - 1];
  const w = new Float64Array(V);
  return probes.map((probe) => {
    const T = probe.temperature ?? 1;
    for (let i = 0; i < V; i++) w[i] = Math.exp((sorted[i] - m) / T);
    const k = Math.min(V, probe.topK ?? V);
    let kept = k;
    if (probe.topP !== undefined && probe.topP < 1) {
      let total = 0;
      for (let i = V - k; i < V; i++) total += w[i];
      let sum = 0;
      for (let i = V - 1; i >= V - k; i--) {
        sum += w[i];
        if (sum >= probe.topP * total) {
          kept = V - i;
          break;
        }
      }
    }
    if (probe.minP !== undefined && probe.minP > 0) {
      let n = 0;
      for (let i = V - 1; i >= 0 && w[i] >= probe.minP; i--) n++;
      kept = Math.min(kept, n);
    }
    return kept;
  });
}

export interface KeptSummary {
  name: string;
  p10: number;
  median: number;
  p90: number;
  p95: number;
  max: number;
  /** Fractions of rows. */
  le20: number;
  le1024: number;
  gt1024: number;
  /** Model mode: the largest count of a row with hot tokens, the smallest of a flat row. */
  topicMax: number | null;
  flatMin: number | null;
}

export interface LogitsStats {
  mode: LogitsMode;
  vocab: number;
  hidden: number;
  rows: number;
  dtype: BenchDType;
  topics: number | null;
  flatRows: number;
  /** Median over rows of each row's logit std (the bulk dominates it), rows with a topic / flat rows. */
  bulkStd: { topic: number | null; flat: number | null };
  /** Over rows with a topic: the largest logit minus the row mean, min and max. */
  topGap: { min: number; max: number } | null;
  probes: KeptSummary[];
  /** Per row, the T = 1 top-p 0.9 kept count (the defining probe). */
  nucleus: number[];
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.round(q * (sorted.length - 1))))];
}

function summarizeKept(name: string, counts: number[], flat?: boolean[]): KeptSummary {
  const s = [...counts].sort((a, b) => a - b);
  const topic = flat ? counts.filter((_, i) => !flat[i]) : [];
  const flats = flat ? counts.filter((_, i) => flat[i]) : [];
  const n = s.length;
  return {
    name,
    p10: quantile(s, 0.1),
    median: n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2,
    p90: quantile(s, 0.9),
    p95: quantile(s, 0.95),
    max: s[n - 1],
    le20: s.filter((x) => x <= 20).length / n,
    le1024: s.filter((x) => x <= 1024).length / n,
    gt1024: s.filter((x) => x > 1024).length / n,
    topicMax: topic.length ? Math.max(...topic) : null,
    flatMin: flats.length ? Math.min(...flats) : null,
  };
}

/**
 * The float64 logits of rows `rows` of H (decoded, [B, D]) against W ([V, D] in the dtype's host
 * representation), W decoded in chunks of its rows: one Float64Array(V) per listed row.
 */
export function rowLogits(
  w: Float32Array | Uint16Array,
  h: Float32Array,
  rows: readonly number[],
  V: number,
  D: number,
  dtype: BenchDType,
): Float64Array[] {
  const CHUNK = 256;
  const logits = rows.map(() => new Float64Array(V));
  for (let v0 = 0; v0 < V; v0 += CHUNK) {
    const v1 = Math.min(V, v0 + CHUNK);
    const wc = decodeHost(w.subarray(v0 * D, v1 * D), dtype);
    rows.forEach((b, i) => {
      const out = logits[i];
      const hb = b * D;
      for (let v = v0; v < v1; v++) {
        const wv = (v - v0) * D;
        let s = 0;
        for (let d = 0; d < D; d++) s += h[hb + d] * wc[wv + d];
        out[v] = s;
      }
    });
  }
  return logits;
}

/**
 * Builds the bench's H (rows × D, the first rotation copy's seed) and W (V × D, seed 7) of a mode,
 * exactly as bench/run.ts does, decodes them from the dtype and computes every logit in float64.
 */
export function measureLogits(opts: {
  mode: LogitsMode;
  vocab: number;
  hidden: number;
  rows: number;
  dtype?: BenchDType;
  logitStd?: number;
  probes?: readonly KeptProbe[];
}): LogitsStats {
  const { mode, vocab: V, hidden: D, rows: B } = opts;
  const dtype = opts.dtype ?? 'bf16';
  const probes = opts.probes ?? KEPT_PROBES;
  const inputs = logitsInputs(mode, V, D, dtype, opts.logitStd ?? 4, BENCH_W_SEED);
  const h = decodeHost(inputs.h(B, BENCH_H_SEED), dtype);
  const kept = probes.map(() => [] as number[]);
  const stdTopic: number[] = [];
  const stdFlat: number[] = [];
  let gapMin = Infinity;
  let gapMax = -Infinity;
  let flatRows = 0;
  const flatOf: boolean[] = [];
  // Rows in groups (bounded memory: GROUP × V float64).
  const GROUP = 64;
  for (let b0 = 0; b0 < B; b0 += GROUP) {
    const b1 = Math.min(B, b0 + GROUP);
    const logits = rowLogits(inputs.w, h, Array.from({ length: b1 - b0 }, (_, i) => b0 + i), V, D, dtype);
    for (let b = b0; b < b1; b++) {
      const l = logits[b - b0];
      let sum = 0;
      let sq = 0;
      let max = -Infinity;
      for (let v = 0; v < V; v++) {
        sum += l[v];
        sq += l[v] * l[v];
        if (l[v] > max) max = l[v];
      }
      const mean = sum / V;
      const std = Math.sqrt(Math.max(0, sq / V - mean * mean));
      const flat = inputs.plan !== null && rowTopic(inputs.plan, b) === null;
      flatOf.push(flat);
      if (flat) {
        flatRows++;
        stdFlat.push(std);
      } else {
        stdTopic.push(std);
        if (inputs.plan !== null) {
          gapMin = Math.min(gapMin, max - mean);
          gapMax = Math.max(gapMax, max - mean);
        }
      }
      keptCounts(l, probes).forEach((n, i) => kept[i].push(n));
    }
  }
  const med = (a: number[]): number | null => (a.length ? summarizeKept('', a).median : null);
  return {
    mode,
    vocab: V,
    hidden: D,
    rows: B,
    dtype,
    topics: inputs.plan?.topics ?? null,
    flatRows,
    bulkStd: { topic: med(stdTopic), flat: med(stdFlat) },
    topGap: inputs.plan !== null && Number.isFinite(gapMin) ? { min: gapMin, max: gapMax } : null,
    probes: probes.map((p, i) => summarizeKept(p.name, kept[i], inputs.plan !== null ? flatOf : undefined)),
    nucleus: kept[0],
  };
}

/** The seeds bench/run.ts uses: W once per shape, H per rotation copy c as BENCH_H_SEED + c. */
export const BENCH_W_SEED = 7;
export const BENCH_H_SEED = 1000;
