// Non-finite inputs (issue 6, "Reliability"; SEMANTICS §2.3) on every available device, every
// float dtype and every sampler: NaN / ±Inf in H, in W and in the bias.
//   - a NaN logit is never drawn, a −Inf logit never;
//   - when a row has +Inf logits they share all of the mass uniformly (chi-square over them) and
//     top-k / top-p / min-p are not applied; temperature 0 picks the smallest +Inf index;
//   - softcap comes first (§2.1): it maps ±Inf to ±c, so those tokens become ordinary again;
//   - a row left with only NaN / −Inf rejects with an error naming the row (`row 2: ...`), and the
//     other rows of that batch, computed without it, are unaffected (per-row seeds make a row's
//     draw independent of its index).
//
// How the non-finite logits are made: H[b, 0] = s_b and W[v, 0] = +Inf for the tokens of a set S,
// all other entries small integers (exact products). Then logit[b, v ∈ S] is +Inf for s_b > 0,
// −Inf for s_b < 0 and NaN for s_b = 0 (0 · Inf), per row, from one W.

import type { SampleOptions, SampleResult, Tensor } from '../lib/index';
import {
  FLOAT_DTYPES,
  SAMPLERS,
  type FDType,
  describeDevices,
  draw,
  failure,
  goodnessOfFit,
  keptDistribution,
  makeTensor,
  rowCounts,
  scaled,
} from './helpers';

const V = 97; // awkward: not a multiple of 4, 32 or a tile
const D = 6;
const S = scaled(20000, 65536); // samples per row for the chi-square tests

/** Small-integer H and W (products exact in every dtype), deterministic. */
function baseOperands(B: number): { h: Float64Array; w: Float64Array } {
  const h = new Float64Array(B * D);
  const w = new Float64Array(V * D);
  for (let b = 0; b < B; b++) for (let d = 1; d < D; d++) h[b * D + d] = ((b * 7 + d * 3) % 5) - 2; // -2..2
  for (let v = 0; v < V; v++) for (let d = 1; d < D; d++) w[v * D + d] = ((v * 13 + d * 5) % 7) / 4 - 0.75; // multiples of 1/4
  return { h, w };
}

/** logits in float64, as the library must compute them (exact: small dyadic products). */
function logitsOf(h: Float64Array, w: Float64Array, B: number, bias?: Float64Array): Float64Array[] {
  const rows: Float64Array[] = [];
  for (let b = 0; b < B; b++) {
    const l = new Float64Array(V);
    for (let v = 0; v < V; v++) {
      let acc = 0;
      for (let d = 0; d < D; d++) acc += h[b * D + d] * w[v * D + d];
      l[v] = bias ? acc + bias[v] : acc;
    }
    rows.push(l);
  }
  return rows;
}

interface Case {
  H: Tensor;
  W: Tensor;
  bias?: Tensor;
  logits: Float64Array[];
  dispose(): void;
}

function makeCase(
  dev: () => import('../lib/index').Device,
  dtype: FDType,
  h: Float64Array,
  w: Float64Array,
  B: number,
  bias?: Float64Array,
): Case {
  const d = dev();
  const H = makeTensor(d, dtype, h, [B, D]);
  const W = makeTensor(d, dtype, w, [V, D]);
  const b = bias ? makeTensor(d, dtype, bias, [V]) : undefined;
  return {
    H,
    W,
    bias: b,
    logits: logitsOf(h, w, B, bias),
    dispose() {
      H.dispose();
      W.dispose();
      b?.dispose();
    },
  };
}

const INF_SET = [0, 3, 31, 32, 50, 96]; // word boundaries and both ends
const NAN_SET = [1, 2, 33, 64, 95];

function expectNever(r: SampleResult, B: number, n: number, banned: (b: number, v: number) => boolean, what: string): void {
  const counts = rowCounts(r.tokens, B, n, V);
  for (let b = 0; b < B; b++) {
    for (let v = 0; v < V; v++) {
      if (counts[b][v] > 0 && banned(b, v)) throw new Error(`row ${b}: drew token ${v} (${what}) ${counts[b][v]} times`);
    }
  }
}

describeDevices((_device, dev) => {
  for (const dtype of FLOAT_DTYPES) {
    describe(dtype, () => {
      for (const sampler of SAMPLERS) {
        describe(sampler, () => {
          test('NaN in W: those tokens are never drawn; the rest keep their distribution', async () => {
            const B = 3;
            const { h, w } = baseOperands(B);
            for (const v of NAN_SET) w[v * D + 2] = NaN; // one NaN element poisons the whole logit
            const c = makeCase(dev, dtype, h, w, B);
            try {
              const r = await draw(sampler, c.H, c.W, { seed: 11, numSamples: S });
              const counts = rowCounts(r.tokens, B, S, V);
              for (let b = 0; b < B; b++) {
                const k = keptDistribution(c.logits[b]);
                const gof = goodnessOfFit(counts[b], k.probs);
                expect({ row: b, summary: gof.summary, ok: gof.ok }).toEqual({ row: b, summary: gof.summary, ok: true });
                for (const v of NAN_SET) expect(counts[b][v]).toBe(0);
              }
            } finally {
              c.dispose();
            }
          });

          test('NaN and −Inf in the bias are never drawn; NaN in H poisons only its row (error names it)', async () => {
            const B = 4;
            const { h, w } = baseOperands(B);
            const bias = new Float64Array(V);
            for (const v of NAN_SET) bias[v] = NaN;
            bias[10] = -Infinity;
            bias[70] = -Infinity;
            const good = makeCase(dev, dtype, h, w, B, bias);
            try {
              const r = await draw(sampler, good.H, good.W, { seed: 5, numSamples: 4000, bias: good.bias });
              expectNever(r, B, 4000, (_b, v) => NAN_SET.includes(v) || v === 10 || v === 70, 'NaN or -Inf bias');
            } finally {
              good.dispose();
            }
            const h2 = h.slice();
            h2[2 * D + 3] = NaN; // row 2: every logit NaN
            const bad = makeCase(dev, dtype, h2, w, B, bias);
            try {
              const e = await failure(() => draw(sampler, bad.H, bad.W, { seed: 5, bias: bad.bias }));
              expect(e.message).toMatch(/^row 2: /);
            } finally {
              bad.dispose();
            }
          });

          test('+Inf logits share the mass uniformly (chi-square) and top-k / top-p / min-p are not applied', async () => {
            // rows: s = +1 (+Inf on INF_SET), +2 (same), s = −1 (−Inf on INF_SET: never drawn),
            // s = +0.5 with a +Inf bias entry too (INF_SET ∪ {77})
            const B = 4;
            const { h, w } = baseOperands(B);
            const signs = [1, 2, -1, 0.5];
            signs.forEach((s, b) => (h[b * D] = s));
            for (const v of INF_SET) w[v * D] = Infinity;
            const bias = new Float64Array(V);
            bias[77] = Infinity; // +Inf for every row: row 2 gets a single +Inf token
            const c = makeCase(dev, dtype, h, w, B, bias);
            const filters: SampleOptions[] = [{}, { topK: 1 }, { topP: 0.05 }, { minP: 0.9 }, { topK: 2, topP: 0.3, minP: 0.5 }];
            try {
              for (const f of filters) {
                const opts: SampleOptions = { ...f, seed: 1234, numSamples: S, bias: c.bias, logprobs: true, topLogprobs: 8 };
                const r = await draw(sampler, c.H, c.W, opts);
                const counts = rowCounts(r.tokens, B, S, V);
                for (let b = 0; b < B; b++) {
                  const infTokens = b === 2 ? [77] : [...INF_SET, 77];
                  const probs = new Float64Array(V);
                  for (const v of infTokens) probs[v] = 1;
                  const gof = goodnessOfFit(counts[b], probs);
                  expect({ filters: f, row: b, summary: gof.summary, ok: gof.ok }).toEqual({
                    filters: f, row: b, summary: gof.summary, ok: true,
                  });
                  // log p = −ln(number of +Inf tokens)
                  const want = -Math.log(infTokens.length);
                  for (let j = 0; j < S; j += 997) expect(Math.abs(r.logprobs![b * S + j] - want)).toBeLessThan(1e-5);
                  // topLogprobs: the +Inf tokens in index order, then -1 / -Infinity
                  const top = Array.from(r.topTokens!.slice(b * 8, b * 8 + 8));
                  const expected = [...infTokens.slice().sort((a, z) => a - z), -1, -1, -1, -1, -1, -1, -1, -1].slice(0, 8);
                  expect({ filters: f, row: b, top }).toEqual({ filters: f, row: b, top: expected });
                }
              }
            } finally {
              c.dispose();
            }
          });

          test('+Inf with temperature 0 (per-row): the smallest +Inf index; greedy elsewhere', async () => {
            const B = 3;
            const { h, w } = baseOperands(B);
            h[0] = 1; // row 0: +Inf on INF_SET
            h[D] = -1; // row 1: −Inf on INF_SET
            h[2 * D] = 1; // row 2: +Inf on INF_SET, temperature 1
            for (const v of INF_SET) w[v * D] = Infinity;
            const c = makeCase(dev, dtype, h, w, B);
            try {
              const r = await draw(sampler, c.H, c.W, {
                seed: 9, numSamples: 64, temperature: Float32Array.from([0, 0, 1]), logprobs: true,
              });
              const row = (b: number) => Array.from(r.tokens.slice(b * 64, b * 64 + 64));
              expect(new Set(row(0))).toEqual(new Set([INF_SET[0]]));
              const finite = c.logits[1].map((x) => (Number.isFinite(x) ? x : -Infinity));
              let arg = 0;
              for (let v = 1; v < V; v++) if (finite[v] > finite[arg]) arg = v;
              expect(new Set(row(1))).toEqual(new Set([arg]));
              for (const t of row(2)) expect(INF_SET).toContain(t);
              for (let j = 0; j < 128; j++) expect(r.logprobs![j]).toBe(0);
            } finally {
              c.dispose();
            }
          });

          test('softcap maps ±Inf to ±c first: an all −Inf row samples uniformly instead of failing', async () => {
            const B = 2;
            const { h, w } = baseOperands(B);
            h[0] = -1; // row 0: −Inf everywhere (W[:, 0] = +Inf for every token)
            h[D] = 1; // row 1: +Inf everywhere
            for (let v = 0; v < V; v++) w[v * D] = Infinity;
            const c = makeCase(dev, dtype, h, w, B);
            try {
              // without softcap: row 0 has no token → error naming row 0
              const e = await failure(() => draw(sampler, c.H, c.W, { seed: 3 }));
              expect(e.message).toMatch(/^row 0: /);
              // with softcap 4: every logit of row 0 is −4, of row 1 +4: both uniform over V,
              // and topK now applies (the capped logits are finite): topK 5 keeps tokens 0..4
              const n = S;
              const r = await draw(sampler, c.H, c.W, { seed: 3, numSamples: n, softcap: 4 });
              const counts = rowCounts(r.tokens, B, n, V);
              for (let b = 0; b < B; b++) {
                const gof = goodnessOfFit(counts[b], new Float64Array(V).fill(1));
                expect({ row: b, summary: gof.summary, ok: gof.ok }).toEqual({ row: b, summary: gof.summary, ok: true });
              }
              const k = await draw(sampler, c.H, c.W, { seed: 3, numSamples: 2000, softcap: 4, topK: 5 });
              for (const t of k.tokens) expect(t).toBeLessThan(5);
            } finally {
              c.dispose();
            }
          });

          test('a row with only NaN / −Inf rejects naming the row; the other rows are unaffected', async () => {
            // Row 2 gets H[2, 1] = −Inf and W[:, 1] > 0: every logit of row 2 is −Inf, the other
            // rows stay finite (their H[b, 1] is finite).
            const B = 5;
            const { h, w } = baseOperands(B);
            const hRow = h.slice();
            hRow[2 * D + 1] = -Infinity;
            const wPos = w.slice();
            for (let v = 0; v < V; v++) wPos[v * D + 1] = 1 + (v % 3);
            const seeds = BigUint64Array.from([101n, 202n, 303n, 404n, 505n]);
            const bad = makeCase(dev, dtype, hRow, wPos, B);
            const opts: SampleOptions = { seed: seeds, numSamples: 256, logprobs: true };
            try {
              for (const b of [0, 1, 3, 4]) for (let v = 0; v < V; v++) expect(Number.isFinite(bad.logits[b][v])).toBe(true);
              for (let v = 0; v < V; v++) expect(bad.logits[2][v]).toBe(-Infinity);
              const e = await failure(() => draw(sampler, bad.H, bad.W, opts));
              expect(e.message).toMatch(/^row 2: /);

              // Two bad rows: the error names one of them.
              const h3 = hRow.slice();
              h3[4 * D + 2] = NaN;
              const two = makeCase(dev, dtype, h3, wPos, B);
              try {
                const e2 = await failure(() => draw(sampler, two.H, two.W, opts));
                expect(e2.message).toMatch(/^row [24]: /);
              } finally {
                two.dispose();
              }

              // The batch without row 2 (per-row seeds: a row's draw does not depend on its index)
              const keep = [0, 1, 3, 4];
              const hKeep = new Float64Array(keep.length * D);
              keep.forEach((b, i) => hKeep.set(hRow.subarray(b * D, b * D + D), i * D));
              const without = makeCase(dev, dtype, hKeep, wPos, keep.length);
              // ... and the batch with row 2 replaced by a finite row
              const hFixed = hRow.slice();
              hFixed[2 * D + 1] = 0;
              const fixed = makeCase(dev, dtype, hFixed, wPos, B);
              try {
                const rw = await draw(sampler, without.H, without.W, {
                  ...opts, seed: BigUint64Array.from(keep, (b) => seeds[b]),
                });
                const rf = await draw(sampler, fixed.H, fixed.W, opts);
                keep.forEach((b, i) => {
                  expect(Array.from(rw.tokens.slice(i * 256, i * 256 + 256))).toEqual(Array.from(rf.tokens.slice(b * 256, b * 256 + 256)));
                  const lw = Array.from(rw.logprobs!.slice(i * 256, i * 256 + 256));
                  for (const x of lw) {
                    expect(Number.isFinite(x)).toBe(true);
                    expect(x).toBeLessThanOrEqual(0);
                  }
                });
                // and each row alone gives the same tokens again
                for (const [i, b] of keep.entries()) {
                  const one = makeCase(dev, dtype, hRow.slice(b * D, b * D + D), wPos, 1);
                  try {
                    const r1 = await draw(sampler, one.H, one.W, { ...opts, seed: BigUint64Array.from([seeds[b]]) });
                    expect(Array.from(r1.tokens)).toEqual(Array.from(rw.tokens.slice(i * 256, i * 256 + 256)));
                  } finally {
                    one.dispose();
                  }
                }
              } finally {
                without.dispose();
                fixed.dispose();
              }
            } finally {
              bad.dispose();
            }
          });
        });
      }

      test('fused and reference(gumbel) draw the same tokens with NaN / ±Inf present', async () => {
        const B = 4;
        const { h, w } = baseOperands(B);
        [1, 0, -1, 2].forEach((s, b) => (h[b * D] = s)); // +Inf, NaN, −Inf, +Inf on INF_SET
        for (const v of INF_SET) w[v * D] = Infinity;
        for (const v of NAN_SET) w[v * D + 3] = NaN;
        const c = makeCase(dev, dtype, h, w, B);
        try {
          const opts: SampleOptions = { seed: 77n, numSamples: 512, topK: 7, topP: 0.8 };
          const [a, b] = await Promise.all([draw('fused', c.H, c.W, opts), draw('reference-gumbel', c.H, c.W, opts)]);
          expect(Array.from(a.tokens)).toEqual(Array.from(b.tokens));
          expectNever(a, B, 512, (row, v) => Number.isNaN(c.logits[row][v]) || c.logits[row][v] === -Infinity, 'NaN or -Inf logit');
        } finally {
          c.dispose();
        }
      });
    });
  }
});

