// The bench's logits modes (bench/logits.ts): the numbers that define the model-like mode
// (bench/TUNING.md, "Logits modes"), measured in float64 on the bench's own H and W at the real
// vocabulary (V = 128256; D = 48 keeps this fast: the bulk is scaled to std 2 whatever D is, and
// `node dist/bench/logits-stats.js --hidden 512|4096` gives the same numbers), the plan's
// invariants, dtype encodability, and that torch_baselines.py builds the same plan.

import { spawnSync } from 'child_process';
import * as path from 'path';
import { decodeBF16, decodeF16 } from '../lib/dtype';
import { H_COPIES, hostMatrix, rotationPairs } from '../bench/inputs';
import {
  BENCH_H_SEED,
  BENCH_W_SEED,
  MAX_HOT_PER_TOPIC,
  MODEL_LOGITS,
  isFlatRow,
  keptCounts,
  logitsInputs,
  measureLogits,
  modelH,
  modelLogitsPlan,
  modelLogitsUnsupported,
  modelW,
  rowTopic,
  topicCount,
} from '../bench/logits';

const LLAMA3_V = 128256;

/** Bitwise equality of two host matrices (jest's toEqual walks typed arrays slowly). */
function same(a: Float32Array | Uint16Array, b: Float32Array | Uint16Array): boolean {
  return a.constructor === b.constructor && Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

describe('the model-like mode is defined by its numbers (T = 1, top-p 0.9)', () => {
  // 40 rows: rows 19 and 39 are the flat ones (5 %).
  const stats = measureLogits({ mode: 'model', vocab: LLAMA3_V, hidden: 48, rows: 40, probes: [{ name: 'topp0.9', topP: 0.9 }] });
  const nucleus = stats.nucleus;
  const sorted = [...nucleus].sort((a, b) => a - b);

  test('the median row keeps <= 20 tokens', () => {
    expect(stats.probes[0].median).toBeLessThanOrEqual(20);
  });

  test('>= 95 % of rows keep <= 1024 tokens; every row with hot tokens does', () => {
    expect(stats.probes[0].le1024).toBeGreaterThanOrEqual(0.95);
    expect(nucleus.filter((n, b) => !isFlatRow(b) && n > 1024)).toEqual([]);
  });

  test('about 5 % of rows are high-entropy (nucleus > 1024): exactly the flat rows, by thousands', () => {
    expect(stats.flatRows).toBe(2);
    expect(stats.probes[0].gt1024).toBeCloseTo(0.05, 5);
    expect(nucleus.filter((n, b) => isFlatRow(b) && n <= 10_000)).toEqual([]);
    expect(sorted[sorted.length - 3]).toBeLessThan(200); // a wide gap between the two kinds of row
  });

  test('a bulk of std 2 (flat rows 1), hot tokens 12–20 above it', () => {
    expect(stats.bulkStd.topic).toBeGreaterThan(1.9);
    expect(stats.bulkStd.topic).toBeLessThan(2.1);
    expect(stats.bulkStd.flat).toBeGreaterThan(0.9);
    expect(stats.bulkStd.flat).toBeLessThan(1.1);
    expect(stats.topGap!.min).toBeGreaterThanOrEqual(MODEL_LOGITS.topMin - 0.2);
    expect(stats.topGap!.max).toBeLessThanOrEqual(MODEL_LOGITS.hotMax + 0.2);
  });
});

describe('the model-like plan', () => {
  const plan = modelLogitsPlan(LLAMA3_V, 4096);

  test('256 topics for the llama3 shapes; fewer where D or V is small; tiny shapes refused', () => {
    expect(plan.topics).toBe(256);
    expect(topicCount(LLAMA3_V, 512)).toBe(256);
    expect(topicCount(LLAMA3_V, 64)).toBe(32);
    expect(topicCount(1000, 4096)).toBe(7);
    expect(modelLogitsUnsupported(100, 64)).toMatch(/V >= 128/);
    expect(modelLogitsUnsupported(1000, 1)).toMatch(/D >= 2/);
    expect(() => modelLogitsPlan(100, 64)).toThrow(/V >= 128/);
  });

  test('hot tokens are distinct over all topics, 1–63 per topic, offsets in [12, 20] with the top in [17, 20]', () => {
    const seen = new Set<number>();
    const bad: string[] = [];
    plan.hot.forEach(({ tokens, offsets }, c) => {
      if (tokens.length < 1 || tokens.length > MAX_HOT_PER_TOPIC) bad.push(`topic ${c}: ${tokens.length} tokens`);
      if (!(offsets[0] >= MODEL_LOGITS.topMin && offsets[0] < MODEL_LOGITS.hotMax)) bad.push(`topic ${c}: top ${offsets[0]}`);
      for (const x of offsets) if (!(x >= MODEL_LOGITS.hotMin && x <= offsets[0])) bad.push(`topic ${c}: offset ${x}`);
      for (const v of tokens) {
        if (!(Number.isInteger(v) && v >= 0 && v < LLAMA3_V) || seen.has(v)) bad.push(`topic ${c}: token ${v}`);
        seen.add(v);
      }
    });
    expect(bad).toEqual([]);
    expect(seen.size).toBeGreaterThan(256);
  });

  test('deterministic for a seed, different for another; rows 0..K-1 with hot tokens have distinct topics', () => {
    expect(modelLogitsPlan(LLAMA3_V, 4096)).toEqual(plan);
    expect(modelLogitsPlan(LLAMA3_V, 4096, MODEL_LOGITS.seed + 1).hot[0]).not.toEqual(plan.hot[0]);
    const topics = Array.from({ length: 256 }, (_, b) => rowTopic(plan, b)).filter((c) => c !== null);
    expect(new Set(topics).size).toBe(topics.length);
    expect(topics.length).toBe(256 - 12); // rows 19, 39, ..., 239 are flat
  });
});

describe('the bench inputs of both modes', () => {
  const V = 1000;
  const D = 32;

  test('gaussian is the bench as before: hostMatrix W (seed 7) and H (seed 1000 + copy)', () => {
    const g = logitsInputs('gaussian', V, D, 'bf16', 4, BENCH_W_SEED);
    expect(same(g.w, hostMatrix(V, D, 'bf16', 4 / Math.sqrt(D), 7))).toBe(true);
    expect(same(g.h(3, BENCH_H_SEED + 1), hostMatrix(3, D, 'bf16', 1, 1001))).toBe(true);
  });

  test.each(['bf16', 'f16', 'f32'] as const)('model W and H are finite in %s, hot entries within rounding', (dtype) => {
    const plan = modelLogitsPlan(V, D);
    const decode = (x: Float32Array | Uint16Array): Float32Array =>
      x instanceof Float32Array ? x : dtype === 'bf16' ? decodeBF16(x) : decodeF16(x);
    const w = decode(modelW(plan, dtype, BENCH_W_SEED));
    const h = decode(modelH(plan, 40, dtype, BENCH_H_SEED));
    expect(w.every(Number.isFinite)).toBe(true);
    expect(h.every(Number.isFinite)).toBe(true);
    const rel = dtype === 'f32' ? 1e-6 : dtype === 'f16' ? 1e-3 : 4e-3;
    const bad: string[] = [];
    plan.hot.forEach(({ tokens, offsets }, c) => {
      tokens.forEach((v, i) => {
        const row = w.subarray(v * D, (v + 1) * D);
        if (!(Math.abs(row[c] - offsets[i]) <= rel * offsets[i])) bad.push(`W[${v}, ${c}] = ${row[c]}, planted ${offsets[i]}`);
        if (row.some((x, d) => d !== c && x !== 0)) bad.push(`W[${v}] has more than its topic coordinate`);
      });
    });
    for (let b = 0; b < 40; b++) {
      const c = rowTopic(plan, b);
      const topicPart = h.subarray(b * D, b * D + plan.topics);
      if (topicPart.some((x, i) => x !== (i === c ? 1 : 0))) bad.push(`H[${b}] topic part ${Array.from(topicPart)}`);
    }
    expect(bad).toEqual([]);
  });

  test('timed inputs: at least H_COPIES distinct H, and no two calls in a row on one W', () => {
    for (const w of [1, 2, 3, 5, 7, 8, 9, 30]) {
      const pairs = rotationPairs(w);
      expect(pairs.length).toBeGreaterThanOrEqual(Math.max(H_COPIES, w));
      expect(new Set(pairs).size).toBe(w);  // every copy of W is read
      if (w === 1) continue;
      for (let c = 0; c < pairs.length; c++) expect([c, pairs[c]]).not.toEqual([c, pairs[(c + 1) % pairs.length]]);
    }
    expect(rotationPairs(2)).toEqual([0, 1, 0, 1, 0, 1, 0, 1]);
    expect(rotationPairs(7)).toEqual([0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6]);
  });

  test('rotation copies: one W; each H copy keeps the row topics and draws its own bulk', () => {
    const plan = modelLogitsPlan(V, D);
    const a = modelH(plan, 8, 'bf16', BENCH_H_SEED);
    const b = modelH(plan, 8, 'bf16', BENCH_H_SEED + 1);
    for (let r = 0; r < 8; r++) {
      expect(same(a.subarray(r * D, r * D + plan.topics), b.subarray(r * D, r * D + plan.topics))).toBe(true);
      expect(same(a.subarray(r * D + plan.topics, (r + 1) * D), b.subarray(r * D + plan.topics, (r + 1) * D))).toBe(false);
    }
    expect(same(modelW(plan, 'bf16', BENCH_W_SEED), modelW(plan, 'bf16', BENCH_W_SEED))).toBe(true);
  });

  test('keptCounts follows docs/SEMANTICS.md on a planted row', () => {
    const l = Float64Array.from([0, Math.log(4), Math.log(3), Math.log(2), Math.log(1), -100]);
    // weights 1, 4, 3, 2, 1, ~0 of 11: top-p 0.6 keeps 4 + 3 (7/11 >= 0.6); min-p 0.3 keeps 4, 3, 2.
    expect(keptCounts(l, [{ name: '', topP: 0.6 }, { name: '', minP: 0.3 }, { name: '', topK: 2, topP: 0.9 }, { name: '' }])).toEqual([
      2, 3, 2, 6,
    ]);
  });
});

describe('torch_baselines.py builds the same model-like plan (skipped without python3)', () => {
  const script = path.resolve(__dirname, '..', 'bench', 'baselines', 'torch_baselines.py');
  const probe = spawnSync('python3', ['--version'], { encoding: 'utf8' });
  const maybe = probe.status === 0 ? test : test.skip;

  maybe.each([
    [LLAMA3_V, 4096],
    [1000, 64],
  ])('V %i, D %i', (V, D) => {
    const r = spawnSync(
      'python3',
      [script, '--print-logits-plan', '--shapes', JSON.stringify([{ name: 's', vocab: V, hidden: D }]), '--batches', '64'],
      { encoding: 'utf8', maxBuffer: 64 << 20 },
    );
    expect({ status: r.status, stderr: r.status === 0 ? '' : r.stderr }).toEqual({ status: 0, stderr: '' });
    const py = JSON.parse(r.stdout);
    const plan = modelLogitsPlan(V, D);
    expect({ ...py, rowTopics: undefined }).toEqual({ ...plan, rowTopics: undefined });
    expect(py.rowTopics).toEqual(Array.from({ length: 64 }, (_, b) => rowTopic(plan, b)));
  });
});
