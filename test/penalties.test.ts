// Logit bias, banned tokens and the repetition / frequency / presence penalties (issue 20,
// SEMANTICS §2 steps 2a-2d) on every device: chi-square of each alone and combined with filters
// against a float64 model (fp32 rounding of each step mirrored), on the GPU also one sample per row
// (the one-pass epilogue) and rows sent through the extra pass; fused = reference (gumbel) at V =
// 128256 with 512 listed tokens a row; penalties that flip the argmax; the argument errors.

import { open, sampleFused, sampleReference, type Device, type SampleOptions, type Tensor } from '../lib/index';
import { native } from '../lib/native';
import { buildSpec } from '../lib/options';
import {
  countTokens,
  MAX_S,
  addRowDraws,
  mixedRowOptions,
  rowFitFailures,
  agreement,
  describeDevices,
  dominantLogits,
  draw,
  failure,
  flatLogits,
  gaussianLogits,
  goodnessOfFit,
  keptDistribution,
  plantLogits,
  pooledCounts,
  rowCounts,
  rng,
  rowOptions,
  scaled,
  topTokens,
  zipfLogits,
  adjusted,
  applySoftcap,
  listedOptions,
  makeMask,
  makeTensor,
  type FilterSpec,
  type HostListOptions,
  type Listed,
  type SamplerName,
} from './helpers';

const cpu = open('cpu');

/** fused == reference(gumbel) at offsets 0-3 of `optionsAt`: >= 99.9 % of tokens each call, and
 *  every row's logprob within 1e-4 (the options ask for logprobs). Returns the rows of those calls
 *  that went through the extra pass. */
async function fusedMatchesGumbel(H: Tensor, W: Tensor, B: number, optionsAt: (offset: number) => SampleOptions): Promise<number> {
  let fallbackRows = 0;
  for (let c = 0; c < 4; c++) {
    const o = optionsAt(c);
    const f = await sampleFused(H, W, o);
    const g = await sampleReference(H, W, { ...o, method: 'gumbel' });
    fallbackRows += f.fallbackRows ?? 0;
    expect(agreement(f.tokens, g.tokens)).toBeGreaterThanOrEqual(0.999);
    for (let b = 0; b < B; b++) expect(Math.abs(f.logprobs![b] - g.logprobs![b])).toBeLessThan(1e-4);
  }
  return fallbackRows;
}

/** Row b's lists repeated for `copies` rows (row i gets rows[i % rows.length]). */
function repeatRows(rows: Listed[], copies: number): Listed[] {
  return Array.from({ length: copies }, (_, i) => rows[i % rows.length]);
}

describeDevices((devName, dev) => {
  for (const V of [111, 1000]) {
    // Three rows: the top tokens of each are the ones listed, so every step moves real mass.
    const logits = [zipfLogits(V, 1.0, 31), flatLogits(V, 32, 3), zipfLogits(V, 0.7, 33)];
    const tops = logits.map((l) => topTokens(l, 12));
    const cases: { name: string; rows: Listed[]; filters?: FilterSpec[] }[] = [
      { name: 'logit bias', rows: tops.map((t) => ({ bias: [[t[0], -1.5], [t[3], 2.25], [t[7], 0.5]] })) },
      { name: 'banned tokens', rows: tops.map((t) => ({ banned: [t[0], t[2], t[2]] })) },
      {
        name: 'repetition penalty',
        rows: tops.map((t) => ({ penalized: [[t[0], 1, false], [t[1], 0, true], [t[5], 0, false]], repetition: 1.6 })),
      },
      {
        name: 'frequency and presence penalties',
        rows: tops.map((t) => ({ penalized: [[t[0], 3, false], [t[1], 1, true], [t[4], 0, true]], frequency: 0.4, presence: 0.7 })),
      },
      {
        name: 'all of them with top-k / top-p / min-p and temperature',
        rows: tops.map((t, b) => ({
          bias: [[t[1], 1.0], [t[9], 3.0]],
          banned: b === 1 ? [t[0]] : [],
          penalized: [[t[0], 2, true], [t[2], 0, true], [t[9], 1, false]],
          repetition: 1.3,
          frequency: 0.25,
          presence: -0.5,
        })),
        filters: [{ temperature: 0.8, topK: 20 }, { temperature: 1.2, topP: 0.9 }, { temperature: 0.7, minP: 0.02 }],
      },
    ];
    for (const c of cases) {
      for (const sampler of ['fused', 'reference-inverse-cdf'] as SamplerName[]) {
        test(`V ${V}, B 3, ${c.name}, ${sampler}: chi-square against float64`, async () => {
          const p = plantLogits(dev(), 'f32', logits, { D: 8 });
          const f = c.filters ?? [{}, {}, {}];
          const o: SampleOptions = {
            ...listedOptions(c.rows),
            seed: 41n,
            numSamples: MAX_S,
            temperature: Float32Array.from(f, (x) => x.temperature ?? 1),
          };
          if (f.some((x) => x.topK)) o.topK = Int32Array.from(f, (x) => x.topK ?? 0);
          if (f.some((x) => x.topP)) o.topP = Float32Array.from(f, (x) => x.topP ?? 1);
          if (f.some((x) => x.minP)) o.minP = Float32Array.from(f, (x) => x.minP ?? 0);
          const res = await draw(sampler, p.H, p.W, o);
          const counts = rowCounts(res.tokens, 3, MAX_S, V);
          for (let b = 0; b < 3; b++) {
            const kept = keptDistribution(adjusted(p.logits[b], c.rows[b]), f[b]);
            const fit = goodnessOfFit(counts[b], kept.probs);
            expect(`row ${b}: ${fit.summary}`).toBe(fit.ok ? `row ${b}: ${fit.summary}` : 'a good fit');
            // The negative control: the same counts reject the distribution without the lists.
            expect(goodnessOfFit(counts[b], keptDistribution(p.logits[b], f[b]).probs).ok).toBe(false);
          }
          p.dispose();
        });
      }
    }
  }

  // Each list alone with the power to see a 1 % bias: steep rows (Zipf 1.5, T 0.6) whose top token
  // keeps p 0.37–0.88 after its row's list, 65536 samples × 4 offsets (262 K draws a row: a 1 % bias
  // is 4.0–14 sd), each rejecting the law without its list.
  for (const V of [111, 1000]) {
    test(`V ${V}, fused: each list alone, 262 K draws a row against float64`, async () => {
      const steep = zipfLogits(V, 1.5, 31);
      const t = topTokens(steep, 8);
      const p = plantLogits(dev(), 'f32', [steep, steep, steep], { D: 8 });
      try {
        const calls: Listed[][] = [
          [{ bias: [[t[0], -0.7], [t[2], 0.8]] }, { banned: [t[1], t[3]] }, { penalized: [[t[0], 1, false], [t[1], 0, true]], repetition: 1.3 }],
          [{ penalized: [[t[1], 2, false]], frequency: 0.3 }, { penalized: [[t[2], 1, true]], presence: 0.6 }, { penalized: [[t[1], 1, false], [t[3], 0, true]], frequency: 0.2, presence: 0.4 }],
        ];
        for (const rows of calls) {
          const counts = rows.map(() => new Float64Array(V));
          for (let offset = 0; offset < 4; offset++) {
            const res = await sampleFused(p.H, p.W, { ...listedOptions(rows), temperature: 0.6, seed: 43n, offset: BigInt(offset), numSamples: MAX_S });
            addRowDraws(counts, res, MAX_S);
          }
          const want = rows.map((row, b) => keptDistribution(adjusted(p.logits[b], row), { temperature: 0.6 }).probs);
          expect({ rows, failures: rowFitFailures(counts, want) }).toEqual({ rows, failures: [] });
          for (let b = 0; b < 3; b++) {
            expect({ list: rows[b], control: goodnessOfFit(counts[b], keptDistribution(p.logits[b], { temperature: 0.6 }).probs).ok }).toEqual({ list: rows[b], control: false });
          }
        }
      } finally {
        p.dispose();
      }
    });
  }

  test('fused draws the Gumbel reference\'s tokens with every list given', async () => {
    const V = 1000;
    const logits = [zipfLogits(V, 1, 51), zipfLogits(V, 1, 52), flatLogits(V, 53, 2)];
    const tops = logits.map((l) => topTokens(l, 8));
    const rows: Listed[] = tops.map((t) => ({
      bias: [[t[2], 2]], banned: [t[0]], penalized: [[t[1], 2, true], [t[3], 0, true]], repetition: 1.2, frequency: 0.3, presence: 0.3,
    }));
    const p = plantLogits(dev(), 'bf16', logits, { D: 16 });
    const o = { ...listedOptions(rows), seed: 5n, numSamples: 4096, topP: 0.95 };
    const a = await sampleFused(p.H, p.W, o);
    const g = await draw('reference-gumbel', p.H, p.W, o);
    expect(agreement(a.tokens, g.tokens)).toBeGreaterThanOrEqual(0.999);
    p.dispose();
  });

  test('each of them flips the argmax', async () => {
    const V = 111;
    const l = zipfLogits(V, 1, 61).map((x) => x + 5); // positive: the repetition penalty divides
    const [first, second] = topTokens(l, 2);
    const p = plantLogits(dev(), 'f32', [l], { D: 8 });
    const greedy = async (o: SampleOptions) => (await sampleFused(p.H, p.W, { ...o, temperature: 0 })).tokens[0];
    expect(await greedy({})).toBe(first);
    const one = (x: Listed) => listedOptions([x]);
    expect(await greedy(one({ bias: [[first, -10]] }))).toBe(second);
    expect(await greedy(one({ bias: [[V - 1, 100]] }))).toBe(V - 1);
    expect(await greedy(one({ banned: [first] }))).toBe(second);
    expect(await greedy(one({ penalized: [[first, 0, true]], repetition: 1e6 }))).toBe(second);
    expect(await greedy(one({ penalized: [[first, 0, true]], repetition: 0.5 }))).toBe(first);
    expect(await greedy(one({ penalized: [[first, 2, false]], frequency: 1 }))).toBe(second);
    expect(await greedy(one({ penalized: [[first, 1, false]], presence: 1 }))).toBe(second);
    // listed but not counted: no frequency or presence penalty
    expect(await greedy(one({ penalized: [[first, 0, false]], frequency: 5, presence: 5 }))).toBe(first);
    p.dispose();
    // negative logits: the repetition penalty multiplies (rank 1 at -5, rank 2 at -5 - ln 2)
    const q = plantLogits(dev(), 'f32', [zipfLogits(V, 1, 61).map((x) => x - 5)], { D: 8 });
    const greedyQ = async (o: SampleOptions) => (await sampleFused(q.H, q.W, { ...o, temperature: 0 })).tokens[0];
    expect(await greedyQ({})).toBe(first);
    expect(await greedyQ(one({ penalized: [[first, 1, false]], repetition: 1.5 }))).toBe(second);
    q.dispose();
  });

  // One sample per row: on compute capability 9.0 the lists go through the one-pass epilogue.
  describe('one sample per row', () => {
    test('all of them with filters, 2048 rows x 32 offsets (V=1000, bf16): chi-square against float64', async () => {
      const V = 1000;
      const base = zipfLogits(V, 1.1, 91);
      const t = topTokens(base, 12);
      const row: Listed = {
        bias: [[t[1], 1.0], [t[9], 3.0], [t[11], -0.5]],
        banned: [t[0]],
        penalized: [[t[2], 2, true], [t[3], 0, true], [t[9], 1, false], [t[10], 0, false]],
        repetition: 1.3,
        frequency: 0.25,
        presence: -0.5,
      };
      const B = 2048;
      const calls = scaled(32, 32);
      for (const spec of [{ temperature: 0.7, topK: 8 }, { temperature: 1, minP: 0.05 }, { temperature: 1 }] as FilterSpec[]) {
        const p = plantLogits(dev(), 'bf16', Array.from({ length: B }, () => base), { D: 8 });
        try {
          const lists = listedOptions(repeatRows([row], B));
          const counts = new Float64Array(V);
          for (let c = 0; c < calls; c++) {
            countTokens(counts, (await sampleFused(p.H, p.W, { ...lists, ...rowOptions(B, spec, c) })).tokens);
          }
          const fit = goodnessOfFit(counts, keptDistribution(adjusted(p.logits[0], row), spec).probs);
          expect(`${JSON.stringify(spec)}: ${fit.summary}`).toBe(fit.ok ? `${JSON.stringify(spec)}: ${fit.summary}` : 'a good fit');
          expect(goodnessOfFit(counts, keptDistribution(p.logits[0], spec).probs).ok).toBe(false);
        } finally {
          p.dispose();
        }
      }
    });

    // Lists with a softcap and a mask, and no filter or logprobs: on compute capability 9.0 the plain
    // sampling epilogue on the transformed logits, the listed tokens applied there below 64 rows and
    // left to a kernel of their own from 64 at this D (filters.cu, plain_defers_listed).
    for (const B of [48, 99]) {
      test(`lists, softcap and a mask alone, ${B} rows, ${MAX_S} draws (V=1000, bf16): chi-square against float64`, async () => {
        const V = 1000;
        const cap = 4;
        const base = zipfLogits(V, 1.1, 93);
        const t = topTokens(base, 12);
        const row: Listed = {
          bias: [[t[1], 1.0], [t[9], 3.0], [t[11], -0.5]],
          banned: [t[0], t[4]],
          penalized: [[t[2], 2, true], [t[3], 0, true], [t[9], 1, false], [t[10], 0, false]],
          repetition: 1.3,
          frequency: 0.25,
          presence: -0.5,
        };
        const allowed = (v: number) => v % 5 !== 0 || v === t[9];
        const p = plantLogits(dev(), 'bf16', Array.from({ length: B }, () => base), { D: 8 });
        try {
          const extra: SampleOptions = { ...listedOptions(repeatRows([row], B)), softcap: cap, allowedTokens: makeMask(B, V, (_b, v) => allowed(v)) };
          const counts = new Float64Array(V);
          for (let c = 0; c < scaled(Math.ceil(MAX_S / B)); c++) {
            countTokens(counts, (await sampleFused(p.H, p.W, { ...extra, ...rowOptions(B, { temperature: 0.8 }, c) })).tokens);
          }
          const capped = Float64Array.from(p.logits[0], (l) => applySoftcap(l, cap));
          const want = keptDistribution(adjusted(capped, row), { temperature: 0.8, allowed }).probs;
          const fit = goodnessOfFit(counts, want);
          expect(fit.summary).toBe(fit.ok ? fit.summary : 'a good fit');
          // the negative controls: the lists applied before the softcap, and no softcap
          expect(goodnessOfFit(counts, keptDistribution(adjusted(p.logits[0], row), { temperature: 0.8, allowed, softcap: cap }).probs).ok).toBe(false);
          expect(goodnessOfFit(counts, keptDistribution(adjusted(p.logits[0], row), { temperature: 0.8, allowed }).probs).ok).toBe(false);
        } finally {
          p.dispose();
        }
      });
    }

    // The same route's empty rows: a row whose mask and bans leave no token is an error naming it; a
    // row left one token (the others masked) draws it, whatever the seed.
    for (const B of [5, 70]) {
      test(`lists and a mask alone, ${B} rows: a row left nothing rejects naming it, a row left one token draws it`, async () => {
        const V = 1000;
        const distinct = Array.from({ length: 7 }, (_, i) => zipfLogits(V, 1, 300 + i));
        const p = plantLogits(dev(), 'bf16', Array.from({ length: B }, (_, b) => distinct[b % 7]), { D: 8 });
        try {
          const rows: Listed[] = Array.from({ length: B }, (_, b) => ({ banned: b === 2 ? [3, 7] : b === 3 ? [5, 7] : [5], bias: [[7, 1]] }));
          const mask = (empty: boolean) => makeMask(B, V, (b, v) => (b === 2 && !empty ? true : b === 2 || b === 3 ? v === 3 || v === 7 : true));
          for (const offset of [0, 1, 2]) {
            const ok = await sampleFused(p.H, p.W, { ...listedOptions(rows), allowedTokens: mask(false), seed: 17n, offset });
            expect(ok.tokens[3]).toBe(3);
            for (let b = 0; b < B; b++) expect({ b, banned: rows[b].banned!.includes(ok.tokens[b]) }).toEqual({ b, banned: false });
          }
          const e = await failure(() => sampleFused(p.H, p.W, { ...listedOptions(rows), allowedTokens: mask(true), seed: 17n }));
          expect(e.message).toMatch(/^row 2: /);
        } finally {
          p.dispose();
        }
      });
    }

    test('near-flat rows through the extra pass (top-p 0.99, V=3000, T 4): tokens and logprobs equal reference(gumbel)', async () => {
      const V = 3000;
      const flat = flatLogits(V, 9, 8);
      const t = topTokens(flat, 40);
      const rows = Array.from({ length: 64 }, (_, b): Listed => ({
        bias: [[t[b % 40], 2.5]],
        banned: [t[(b + 1) % 40]],
        penalized: [[t[(b + 2) % 40], 3, true], [t[(b + 3) % 40], 0, true]],
        repetition: 1.5,
        frequency: 0.5,
        presence: 0.5,
      }));
      const p = plantLogits(dev(), 'bf16', Array.from({ length: 64 }, () => flat), { D: 8 });
      try {
        const fallbackRows = await fusedMatchesGumbel(p.H, p.W, 64, (c) => ({
          ...listedOptions(rows), ...rowOptions(64, { topP: 0.99, temperature: 4 }, c), logprobs: true,
        }));
        if (devName === 'cuda') expect(fallbackRows).toBeGreaterThan(0);
      } finally {
        p.dispose();
      }
    });
  });

  // Lists alone (no filter, no logprobs, one sample per row): on compute capability 9.0 the plain
  // sampling epilogue on the transformed logits, which from B = 64 leaves the listed tokens to a
  // kernel of their own, and above B = 64 at D >= 4096 (filters.cu, plain_defers_listed: D 4096
  // applies them in the epilogue at B 63 and 64, defers at 65). The tokens are the ones the Gumbel
  // reference draws, whatever the size (B 129 and 131: more than one chunk of batch columns), seeds,
  // temperatures and mask.
  for (const [V, B, D] of [[111, 1, 16], [1000, 3, 16], [1000, 63, 16], [1000, 64, 16], [1000, 131, 16], [128256, 129, 16],
    [1000, 63, 4096], [1000, 64, 4096], [1000, 65, 4096]]) {
    // (on the CPU only the cases of at most ~16 M multiply-adds a call, as before the D 4096 ones)
    (V * B * D < 1.6e7 || devName === 'cuda' ? test : test.skip)(`lists alone, one sample per row (V ${V}, B ${B}, D ${D}, a mask, greedy rows among sampled ones): fused == reference(gumbel)`, async () => {
      // (six distinct logit rows, so D can stay small; the lists, seeds and temperatures differ per row)
      const distinct = Array.from({ length: 6 }, (_, i) => (i % 2 ? zipfLogits(V, 1.0, 70 + i) : dominantLogits(V, 70 + i, 8)));
      const logitRows = Array.from({ length: B }, (_, b) => distinct[b % 6]);
      const r = rng(707 + V);
      const n = Math.min(512, Math.floor(V / 3));
      const rows = logitRows.map((l, b): Listed => {
        const picked = new Set(topTokens(l, 6));
        while (picked.size < n) picked.add(Math.floor(r() * V));
        const ids = [...picked];
        const cut = Math.floor(n / 5);
        return {
          bias: ids.slice(0, cut).map((t, i) => [t, i % 2 ? 2.5 : -1.5] as [number, number]),
          banned: b % 3 === 0 ? [ids[0], ids[cut]] : [],
          penalized: ids.slice(cut + 1).map((t, i) => [t, i % 3, i % 2 === 0] as [number, number, boolean]),
          repetition: 1.4,
          frequency: 0.35,
          presence: 0.25,
        };
      });
      // the mask drops each row's second-best token and every 7th token
      const second = distinct.map((l) => topTokens(l, 2)[1]);
      const mask = makeMask(B, V, (b, v) => v % 7 !== 0 && v !== second[b % 6]);
      const p = plantLogits(dev(), 'bf16', logitRows, { D });
      try {
        const temperature = Float32Array.from({ length: B }, (_, b) => (b % 4 === 3 ? 0 : b % 2 ? 0.7 : 1.3));
        let same = 0;
        for (let c = 0; c < 4; c++) {
          const seed = c % 2 ? BigUint64Array.from({ length: B }, (_, b) => BigInt(77 + 13 * b)) : 901n;
          const o: SampleOptions = { ...listedOptions(rows), seed, offset: c, temperature, allowedTokens: mask };
          const f = await sampleFused(p.H, p.W, o);
          const g = await sampleReference(p.H, p.W, { ...o, method: 'gumbel' });
          same += agreement(f.tokens, g.tokens);
        }
        expect(same / 4).toBeGreaterThanOrEqual(0.999);
        // the negative control: without the lists the draws differ
        const o = { seed: 901n, temperature, allowedTokens: mask };
        const with_ = await sampleFused(p.H, p.W, { ...o, ...listedOptions(rows) });
        const without = await sampleFused(p.H, p.W, o);
        expect(agreement(with_.tokens, without.tokens)).toBeLessThan(B >= 99 ? 0.9 : 1);
      } finally {
        p.dispose();
      }
    });
  }

  // The marks of a row are built in shared memory up to V = 393216 and in global memory above:
  // the same steps either way. One sample per row, pooled over 1024 rows and 32 offsets.
  (devName === 'cuda' ? test : test.skip)('V = 400000 (marks built in global memory), every list with top-k: chi-square against float64', async () => {
    const V = 400000;
    const B = 1024;
    const l = zipfLogits(V, 1.5, 51);
    const t = topTokens(l, 12);
    const row: Listed = {
      // the last word's token rises just above the row's best
      bias: [[t[1], 1.0], [t[9], 3.0], [V - 1, l[t[0]] - l[V - 1] + 0.5]],
      banned: [t[0]],
      penalized: [[t[2], 2, true], [t[3], 0, true], [t[9], 1, false]],
      repetition: 1.3,
      frequency: 0.25,
      presence: -0.5,
    };
    const spec: FilterSpec = { temperature: 0.8, topK: 20 };
    const p = plantLogits(dev(), 'f32', [l], { D: 8 });
    const H = makeTensor(dev(), 'f32', new Float64Array(B * 8).map((_, i) => (i % 8 === 0 ? 1 : 0)), [B, 8]);
    try {
      const counts = new Float64Array(V);
      for (let c = 0; c < 32; c++) {
        const res = await sampleFused(H, p.W, { ...listedOptions(repeatRows([row], B)), ...rowOptions(B, spec, c) });
        countTokens(counts, res.tokens);
      }
      const fit = goodnessOfFit(counts, keptDistribution(adjusted(p.logits[0], row), spec).probs);
      expect(fit.ok ? 'ok' : fit.summary).toBe('ok');
      expect(goodnessOfFit(counts, keptDistribution(p.logits[0], spec).probs).ok).toBe(false);
    } finally {
      H.dispose();
      p.dispose();
    }
  });

  (devName === 'cuda' ? test : test.skip)('V = 128256, B = 33, 512 distinct listed tokens a row under the model-card defaults: fused == reference(gumbel)', async () => {
    const V = 128256;
    const B = 33;
    const logitRows = Array.from({ length: B }, (_, b) => (b % 2 ? zipfLogits(V, 1.0, b) : dominantLogits(V, b, 14)));
    const r = rng(2020);
    const rows = logitRows.map((l, b): Listed => {
      // the row's 8 best tokens and 504 random ones, split between the three lists
      const picked = new Set(topTokens(l, 8));
      while (picked.size < 512) picked.add(Math.floor(r() * V));
      const ids = [...picked];
      return {
        bias: ids.slice(0, 100).map((t, i) => [t, i % 2 ? 1.5 : -2] as [number, number]),
        banned: [ids[0], ...(b % 3 === 0 ? ids.slice(100, 110) : [])], // ids[0]: the row's argmax
        penalized: ids.slice(110).map((t, i) => [t, i % 4, i % 3 === 0] as [number, number, boolean]),
        repetition: 1.2,
        frequency: 0.3,
        presence: 0.4,
      };
    });
    const p = plantLogits(dev(), 'bf16', logitRows, { D: 40 });
    try {
      for (const spec of [{ temperature: 1 }, { temperature: 0.6, topP: 0.9 }, { temperature: 0.6, topK: 20, topP: 0.95 }, { minP: 0.05 }, { temperature: 0 }] as FilterSpec[]) {
        let same = 0;
        for (let c = 0; c < 4; c++) {
          const o: SampleOptions = { ...listedOptions(rows), ...rowOptions(B, spec, c), logprobs: true };
          const f = await sampleFused(p.H, p.W, o);
          const g = await sampleReference(p.H, p.W, { ...o, method: 'gumbel' });
          same += agreement(f.tokens, g.tokens);
          for (let b = 0; b < B; b++) {
            if (f.tokens[b] === g.tokens[b]) expect(Math.abs(f.logprobs![b] - g.logprobs![b])).toBeLessThan(1e-4);
          }
        }
        expect(`${JSON.stringify(spec)}: ${same / 4}`).toBe(same / 4 >= 0.999 ? `${JSON.stringify(spec)}: ${same / 4}` : 'agreement >= 0.999');
      }
      // the negative control: without the lists the draws differ
      const o = rowOptions(B, { temperature: 1 }, 0);
      const with_ = await sampleFused(p.H, p.W, { ...o, ...listedOptions(rows) });
      const without = await sampleFused(p.H, p.W, o);
      expect(agreement(with_.tokens, without.tokens)).toBeLessThan(0.9);
    } finally {
      p.dispose();
    }
  });
});

// vLLM's filter order: min-p first, then top-k, then top-p over the min-p survivors' mass. The
// margin is top-p's distance from the kept set's prefix masses on either side of its cut (Infinity
// without top-p), as keptDistribution's.
function vllmKept(
  logits: ArrayLike<number>,
  f: { temperature: number; topK?: number; topP?: number; minP?: number },
): { probs: Float64Array; topPMargin: number } {
  const V = logits.length;
  const order = Array.from({ length: V }, (_, v) => v)
    .filter((v) => Number.isFinite(logits[v]))
    .sort((a, b) => logits[b] - logits[a] || a - b);
  const m = logits[order[0]];
  const w = (v: number) => Math.exp((logits[v] - m) / f.temperature);
  let kept = order;
  if (f.minP) kept = kept.filter((v, i) => i === 0 || w(v) >= f.minP!);
  if (f.topK) kept = kept.slice(0, f.topK);
  let topPMargin = Infinity;
  if (f.topP !== undefined && f.topP < 1) {
    const total = kept.reduce((a, v) => a + w(v), 0);
    let cumulative = 0;
    let n = 0;
    while (n < kept.length) {
      const before = cumulative;
      cumulative += w(kept[n++]) / total;
      if (cumulative >= f.topP) {
        topPMargin = Math.min(f.topP - before, cumulative - f.topP);
        break;
      }
    }
    kept = kept.slice(0, n);
  }
  const probs = new Float64Array(V);
  const z = kept.reduce((a, v) => a + w(v), 0);
  for (const v of kept) probs[v] = w(v) / z;
  return { probs, topPMargin };
}

/** Total variation distance of two distributions. */
function tvDistance(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0;
  for (let v = 0; v < a.length; v++) d += Math.abs(a[v] - b[v]);
  return d / 2;
}

// The reduction the CUDA decisions use (SEMANTICS §2, step 7): vLLM's order equals Hugging Face's
// with top-k min(k, |S|) (|S| with top-k off), S the min-p survivors. Checked on random rows, ties
// included, in float64; a case whose top-p or min-p boundary lies within 1e-9 of a prefix mass is
// rounding-sensitive in either model and is only counted.
test("vLLM's order is Hugging Face's with top-k min(k, |min-p set|): 3000 random rows", () => {
  const r = rng(4242);
  let compared = 0;
  let boundary = 0;
  for (let c = 0; c < 3000; c++) {
    const V = 2 + Math.floor(r() * 300);
    const kind = c % 3;
    const logits = Float64Array.from({ length: V }, (_, v) =>
      kind === 0 ? Math.round(r() * 24) / 4 : kind === 1 ? -1.3 * Math.log(1 + ((v * 7919) % V)) : 6 * r(),
    );
    const f = {
      temperature: [0.5, 1, 1.7][c % 3 === 2 ? 2 : Math.floor(r() * 3)],
      topK: r() < 0.5 ? 0 : 1 + Math.floor(r() * V),
      topP: r() < 0.2 ? 1 : 0.05 + 0.95 * r(),
      minP: 0.01 + 0.6 * r(),
    };
    const m = Math.max(...logits);
    const survivors = Array.from(logits).filter((l) => Math.exp((l - m) / f.temperature) >= f.minP).length;
    const k = f.topK > 0 ? Math.min(f.topK, survivors) : survivors;
    const hf = keptDistribution(logits, { temperature: f.temperature, topK: k, topP: f.topP, minP: f.minP });
    const want = vllmKept(logits, { ...f, topK: f.topK || undefined }).probs;
    if (hf.topPMargin < 1e-9 || hf.minPMargin < 1e-9) {
      boundary++;
      continue;
    }
    compared++;
    for (let v = 0; v < V; v++) {
      if (Math.abs(hf.probs[v] - want[v]) > 1e-12) {
        throw new Error(`case ${c}: V ${V} ${JSON.stringify(f)}: token ${v} ${hf.probs[v]} against ${want[v]}`);
      }
    }
  }
  expect(compared).toBeGreaterThan(2500);
  expect(boundary).toBeLessThan(500);
});

describeDevices((devName, dev) => {
  describe("filterOrder 'vllm' (min-p first)", () => {
    // Rows whose min-p set ends inside the top-p nucleus, so that the two orders keep different sets.
    const rowsOf = (V: number) => [flatLogits(V, 71, 4), zipfLogits(V, 0.6, 72), flatLogits(V, 73, 6)];
    const filters = [
      { temperature: 1, topP: 0.8, minP: 0.3 },
      { temperature: 0.9, topK: 200, topP: 0.7, minP: 0.05 },
      { temperature: 1.1, topP: 0.6, minP: 0.2 },
    ];
    for (const V of [111, 1000]) {
      for (const sampler of ['fused', 'reference-inverse-cdf'] as SamplerName[]) {
        test(`V ${V}, B 3, ${sampler}: chi-square against float64; 'hf' keeps another set`, async () => {
          const f = filters;
          const p = plantLogits(dev(), 'f32', rowsOf(V), { D: 8 });
          try {
            const o: SampleOptions = {
              seed: 81n,
              numSamples: MAX_S,
              filterOrder: 'vllm',
              temperature: Float32Array.from(f, (x) => x.temperature),
              topK: Int32Array.from(f, (x) => x.topK ?? 0),
              topP: Float32Array.from(f, (x) => x.topP),
              minP: Float32Array.from(f, (x) => x.minP),
            };
            const counts = rowCounts((await draw(sampler, p.H, p.W, o)).tokens, 3, MAX_S, V);
            let controls = 0;
            for (let b = 0; b < 3; b++) {
              const want = vllmKept(p.logits[b], f[b]).probs;
              const fit = goodnessOfFit(counts[b], want);
              expect(`row ${b}: ${fit.summary}`).toBe(fit.ok ? `row ${b}: ${fit.summary}` : 'a good fit');
              // The negative control, where the orders keep sets that differ by more than 5 %.
              const hfProbs = keptDistribution(p.logits[b], f[b]).probs;
              if (tvDistance(want, hfProbs) > 0.05) {
                expect(goodnessOfFit(counts[b], hfProbs).ok).toBe(false);
                controls++;
              }
            }
            expect(controls).toBeGreaterThan(0);
            // 'hf' is the default.
            const hf = await draw(sampler, p.H, p.W, { ...o, filterOrder: 'hf', numSamples: 256 });
            const dflt = await draw(sampler, p.H, p.W, { ...o, filterOrder: undefined, numSamples: 256 });
            expect(Array.from(hf.tokens)).toEqual(Array.from(dflt.tokens));
          } finally {
            p.dispose();
          }
        });
      }
    }

    // The power test of the order and of min-p alone: rows whose top token keeps p 0.60–0.64, 65536
    // samples × 4 offsets a row (262 K draws: a 1 % bias on the top token is 6.3–6.8 sd).
    for (const V of [111, 1000]) {
      test(`V ${V}, B 3, fused: min-p + top-p in vLLM's order and min-p alone, 262 K draws a row against float64`, async () => {
        const steep = zipfLogits(V, 1.2, 72);
        const f = [
          { temperature: 0.8, topP: 0.8, minP: 0.02 },
          { temperature: 0.7, minP: 0.1 },
          { temperature: 0.6, topP: 0.9, minP: 0.05 },
        ];
        const p = plantLogits(dev(), 'f32', [steep, steep, zipfLogits(V, 1.0, 72)], { D: 8 });
        try {
          const kept = f.map((x, b) => vllmKept(p.logits[b], x));
          const want = kept.map((k) => k.probs);
          // Far from a mass boundary: top-p's cut 1e-3 or more from the min-p set's prefix masses.
          kept.forEach((k, b) => expect({ b, near: k.topPMargin < 1e-3 }).toEqual({ b, near: false }));
          const counts = f.map(() => new Float64Array(V));
          for (let offset = 0; offset < 4; offset++) {
            const options = { ...mixedRowOptions(f, 3, offset, 83), numSamples: MAX_S, filterOrder: 'vllm' as const };
            addRowDraws(counts, await sampleFused(p.H, p.W, options), MAX_S);
          }
          expect(rowFitFailures(counts, want)).toEqual([]);
          let controls = 0;
          for (let b = 0; b < 3; b++) {
            const hfProbs = keptDistribution(p.logits[b], f[b]).probs;
            if (tvDistance(want[b], hfProbs) > 0.05) {
              expect(goodnessOfFit(counts[b], hfProbs).ok).toBe(false);
              controls++;
            }
          }
          expect(controls).toBeGreaterThan(0);
        } finally {
          p.dispose();
        }
      });
    }

    // One sample per row: on compute capability 9.0 the one-pass decision (a zipf row whose min-p set
    // lies in the gathered prefix) and the extra pass (a flat row whose min-p set reaches past it).
    test('one sample per row, 2048 rows x 32 offsets (V 1000, bf16): chi-square against float64', async () => {
      const V = 1000;
      const B = 2048;
      const calls = scaled(32, 32);
      const cases = [
        { base: zipfLogits(V, 0.6, 72), spec: { temperature: 0.9, topK: 200, topP: 0.7, minP: 0.05 } },
        { base: zipfLogits(V, 0.6, 74), spec: { temperature: 0.9, topP: 0.7, minP: 0.05 } },
        { base: flatLogits(V, 71, 4), spec: { temperature: 1, topP: 0.8, minP: 0.3 } },
      ];
      for (const { base, spec } of cases) {
        const p = plantLogits(dev(), 'bf16', Array.from({ length: B }, () => base), { D: 8 });
        try {
          const counts = new Float64Array(V);
          for (let c = 0; c < calls; c++) {
            countTokens(counts, (await sampleFused(p.H, p.W, { ...rowOptions(B, spec, c), filterOrder: 'vllm' })).tokens);
          }
          const want = vllmKept(p.logits[0], spec).probs;
          const fit = goodnessOfFit(counts, want);
          expect(`${JSON.stringify(spec)}: ${fit.summary}`).toBe(fit.ok ? `${JSON.stringify(spec)}: ${fit.summary}` : 'a good fit');
          const hfProbs = keptDistribution(p.logits[0], spec).probs;
          expect(tvDistance(want, hfProbs)).toBeGreaterThan(0.05);
          expect(goodnessOfFit(counts, hfProbs).ok).toBe(false);
        } finally {
          p.dispose();
        }
      }
    });

    // A row whose gathered prefix is a cluster of hot tokens that all pass min-p, far above the bulk:
    // the prefix's level (near max + T ln((1 - p) Z / V)) bounds every value left out, so the min-p
    // set is complete and the one-pass decision decides the row; the extra pass is not needed.
    test('hot clusters whose min-p set fits the gathered prefix: chi-square against float64, no extra pass', async () => {
      const V = 1000;
      const B = 2048;
      const calls = scaled(32, 32);
      const spec = { temperature: 0.6, topP: 0.9, minP: 0.05 };
      const base = dominantLogits(V, 76, 0);
      const hot = [20, 19.6, 19.3, 19, 18.5];  // weights 1, 0.51, 0.31, 0.19, 0.08 at T 0.6: all pass min-p
      hot.forEach((l, i) => (base[17 + 181 * i] = l));
      const p = plantLogits(dev(), 'bf16', Array.from({ length: B }, () => base), { D: 8 });
      try {
        const { counts, fallbackRows } = await pooledCounts(p, spec, calls, { filterOrder: 'vllm' });
        const want = vllmKept(p.logits[0], spec).probs;
        expect(want.filter((x) => x > 0).length).toBe(4);  // top-p 0.9 of the min-p set's mass
        const fit = goodnessOfFit(counts, want);
        expect(fit.summary).toBe(fit.ok ? fit.summary : 'a good fit');
        expect(fallbackRows).toBe(0);
      } finally {
        p.dispose();
      }
    });

    test('near-flat rows through the extra pass (V 3000, T 4, top-p 0.99, min-p 0.05): tokens and logprobs equal reference(gumbel)', async () => {
      const V = 3000;
      const B = 64;
      const p = plantLogits(dev(), 'bf16', Array.from({ length: B }, (_, b) => flatLogits(V, 100 + b, 8)), { D: 64 });
      try {
        const fallbackRows = await fusedMatchesGumbel(p.H, p.W, B, (c) => ({
          ...rowOptions(B, { topP: 0.99, minP: 0.05, temperature: 4 }, c), logprobs: true, filterOrder: 'vllm',
        }));
        if (devName === 'cuda') expect(fallbackRows).toBeGreaterThan(0);
      } finally {
        p.dispose();
      }
    });

    // A min-p set of 2479 tokens, wider than the 2048 values top-p gathers at least: on compute
    // capability 9.0 the rows whose gathered prefix leaves survivors out go to the extra pass, which
    // counts |S| in the buckets around ln(min_p).
    test('min-p sets wider than top-p gathers (V 3000, B 1024, top-p 0.9, min-p 0.037): chi-square against float64', async () => {
      const V = 3000;
      const B = 1024;
      const calls = scaled(32, 32);
      const spec = { temperature: 1, topP: 0.9, minP: 0.037 };
      const base = flatLogits(V, 91, 4);
      const p = plantLogits(dev(), 'bf16', Array.from({ length: B }, () => base), { D: 8 });
      try {
        const want = vllmKept(p.logits[0], spec).probs;
        const survivors = p.logits[0].filter((l) => Math.exp(l - Math.max(...p.logits[0])) >= spec.minP).length;
        expect(survivors).toBeGreaterThan(2048);
        const { counts } = await pooledCounts(p, spec, calls, { filterOrder: 'vllm' });
        const fit = goodnessOfFit(counts, want);
        expect(fit.summary).toBe(fit.ok ? fit.summary : 'a good fit');
        // The negative control: Hugging Face's order keeps ~100 tokens more (1.9 % of the mass),
        // which 32 calls' samples reject; the sanitizer runs' quarter of them (FS_TEST_SCALE 0.25)
        // cannot tell it from noise, so it is asserted at the full count only.
        const hfProbs = keptDistribution(p.logits[0], spec).probs;
        expect(tvDistance(want, hfProbs)).toBeGreaterThan(0.015);
        if (calls >= 32) expect(goodnessOfFit(counts, hfProbs).ok).toBe(false);
      } finally {
        p.dispose();
      }
    });

    (devName === 'cuda' ? test : test.skip)('V = 128256, B = 16, Gaussian rows, min-p 1e-6 (tens of thousands survive): fused == reference(gumbel)', async () => {
      const V = 128256;
      const B = 16;
      const p = plantLogits(dev(), 'bf16', Array.from({ length: B }, (_, b) => gaussianLogits(V, 200 + b, 4)), { D: 64 });
      try {
        // top-k off, within the survivors, and above them; the rows go to the extra pass (top-k
        // 1500 as well: it takes the cuts of Hugging Face's order there)
        for (const topK of [0, 1500, 30000]) {
          const fallbackRows = await fusedMatchesGumbel(p.H, p.W, B, (c) => ({
            ...rowOptions(B, { topK, topP: 0.9, minP: 1e-6, temperature: 1 }, c), logprobs: true, filterOrder: 'vllm',
          }));
          if (topK !== 1500) expect(`topK ${topK}: ${fallbackRows}`).toBe(`topK ${topK}: ${4 * B}`);
        }
        // three samples a row and topLogprobs 5: the largest keys come first among the buckets the
        // blocks gathered, whatever else they gathered
        const o: SampleOptions = {
          ...rowOptions(B, { topP: 0.9, minP: 1e-6, temperature: 1 }, 7), numSamples: 3, logprobs: true, topLogprobs: 5, filterOrder: 'vllm',
        };
        const f = await sampleFused(p.H, p.W, o);
        const g = await sampleReference(p.H, p.W, { ...o, method: 'gumbel' });
        expect(Array.from(f.tokens)).toEqual(Array.from(g.tokens));
        expect(Array.from(f.topTokens!)).toEqual(Array.from(g.topTokens!));
        for (let i = 0; i < B * 3; i++) expect(Math.abs(f.logprobs![i] - g.logprobs![i])).toBeLessThan(1e-4);
        for (let i = 0; i < B * 5; i++) expect(Math.abs(f.topLogprobs![i] - g.topLogprobs![i])).toBeLessThan(1e-4);
      } finally {
        p.dispose();
      }
    });

    (devName === 'cuda' ? test : test.skip)('V = 128256, B = 33, model-like rows: fused == reference(gumbel) with both orders', async () => {
      const V = 128256;
      const B = 33;
      const p = plantLogits(dev(), 'bf16', Array.from({ length: B }, (_, b) => (b % 2 ? zipfLogits(V, 1.0, b) : dominantLogits(V, b, 6))), { D: 40 });
      try {
        for (const filterOrder of ['vllm', 'hf'] as const) {
          let same = 0;
          for (let c = 0; c < 4; c++) {
            const o: SampleOptions = { ...rowOptions(B, { temperature: 0.8, topP: 0.9, minP: 0.1 }, c), logprobs: true, filterOrder };
            const f = await sampleFused(p.H, p.W, o);
            const g = await sampleReference(p.H, p.W, { ...o, method: 'gumbel' });
            same += agreement(f.tokens, g.tokens);
            for (let b = 0; b < B; b++) {
              if (f.tokens[b] === g.tokens[b]) expect(Math.abs(f.logprobs![b] - g.logprobs![b])).toBeLessThan(1e-4);
            }
          }
          expect(`${filterOrder}: ${same / 4}`).toBe(same / 4 >= 0.999 ? `${filterOrder}: ${same / 4}` : 'agreement >= 0.999');
        }
      } finally {
        p.dispose();
      }
    });
  });
});

describe('cpu: argument errors', () => {
  test('argument errors name the argument and what was expected', async () => {
    const p = plantLogits(cpu, 'f32', [zipfLogits(111, 1, 1), zipfLogits(111, 1, 2)], { D: 8 });
    const call = (o: SampleOptions) => failure(() => sampleFused(p.H, p.W, o));
    const csr = (offsets: number[], ids: number[]) => ({ rowOffsets: Int32Array.from(offsets), tokenIds: Int32Array.from(ids) });
    const pen = (offsets: number[], ids: number[], counts?: number[]) => ({
      ...csr(offsets, ids), outputCounts: Int32Array.from(counts ?? ids.map(() => 1)), inPrompt: new Uint8Array(ids.length),
    });
    const cases: [SampleOptions, RegExp][] = [
      [{ bannedTokens: csr([0, 1, 2], [5, 111]) }, /^bannedTokens\.tokenIds\[1\]: expected a token id in \[0, 111\) \(row 1\), got 111$/],
      [{ bannedTokens: csr([0, 1, 2], [5, -1]) }, /^bannedTokens\.tokenIds\[1\]: /],
      [{ bannedTokens: csr([0, 2, 1], [5, 6]) }, /^bannedTokens\.rowOffsets\[2\]: expected a value >= rowOffsets\[1\] = 2 \(non-decreasing\), got 1$/],
      [{ bannedTokens: csr([1, 1, 2], [5, 6]) }, /^bannedTokens\.rowOffsets\[0\]: expected 0, got 1$/],
      [{ bannedTokens: csr([0, 1, 3], [5, 6]) }, /^bannedTokens\.rowOffsets\[2\]: expected the length of tokenIds \(2\), got 3$/],
      [{ bannedTokens: csr([0, 1], [5]) }, /^bannedTokens\.rowOffsets: expected an Int32Array of length 3 \(B \+ 1\)/],
      [{ bannedTokens: { rowOffsets: [0, 1, 1], tokenIds: Int32Array.from([5]) } as never }, /^bannedTokens\.rowOffsets: expected an Int32Array/],
      [{ bannedTokens: { ...csr([0, 1, 1], [5]), extra: 1 } as never }, /^bannedTokens: unknown option "extra"/],
      [{ logitBias: { ...csr([0, 2, 2], [5, 5]), values: new Float32Array(2) } }, /^logitBias\.tokenIds\[1\]: expected a token id not listed before in row 0, got 5$/],
      [{ logitBias: { ...csr([0, 1, 1], [5]), values: new Float32Array(2) } }, /^logitBias\.values: expected a Float32Array of length 1 \(one per token id\)/],
      [{ logitBias: { ...csr([0, 1, 1], [5]), values: Float32Array.from([NaN]) } }, /^logitBias\.values\[0\]: expected a finite number, got NaN$/],
      [{ penaltyTokens: pen([0, 1, 1], [5], [-1]) }, /^penaltyTokens\.outputCounts\[0\]: expected a count >= 0, got -1$/],
      [{ penaltyTokens: pen([0, 2, 2], [7, 7]) }, /^penaltyTokens\.tokenIds\[1\]: expected a token id not listed before in row 0/],
      [{ penaltyTokens: pen([0, 1, 1], [5]), repetitionPenalty: 0 }, /^repetitionPenalty: expected a finite number > 0, got 0$/],
      [{ penaltyTokens: pen([0, 1, 1], [5]), frequencyPenalty: Infinity }, /^frequencyPenalty: expected a finite number, got Infinity$/],
      [{ penaltyTokens: pen([0, 1, 1], [5]), presencePenalty: Float32Array.from([0, NaN]) }, /^presencePenalty\[1\]: expected a finite number, got NaN$/],
      [{ presencePenalty: 0.5 }, /^presencePenalty: needs penaltyTokens/],
    ];
    for (const [o, message] of cases) expect((await call(o)).message).toMatch(message);
    // Banned tokens may repeat (a ban is idempotent).
    await expect(sampleFused(p.H, p.W, { bannedTokens: csr([0, 2, 2], [5, 5]) })).resolves.toBeDefined();
    p.dispose();
  });

  test("filterOrder of the wrong kind", async () => {
    const p = plantLogits(cpu, 'f32', [zipfLogits(111, 1, 1)], { D: 8 });
    expect((await failure(() => sampleFused(p.H, p.W, { filterOrder: 'tgi' as never }))).message).toMatch(/^filterOrder: expected 'hf' or 'vllm', got "tgi"$/);
    p.dispose();
  });
});

// The lists as tensors on the call's device (issue 20: an engine's device-side lists): the same
// draws as the typed arrays, -1 entries skipped as padding; their contents are checked on the
// device, so an invalid row rejects the call naming the list and the row.
describeDevices((devName, dev) => {
  describe('lists given as tensors', () => {
    const V = 111;
    const rows: Listed[] = [
      { bias: [[3, 2], [40, -1.5]], banned: [7], penalized: [[5, 2, true], [9, 0, true]], repetition: 1.3, frequency: 0.4, presence: 0.2 },
      { banned: [], penalized: [[11, 1, false]], repetition: 1.1 },
      { bias: [[60, 3]], banned: [0, 1], penalized: [] },
    ];
    // the same lists as tensors, with a -1 entry at the end of every row of every list
    const tensorsOf = (d: Device, o: HostListOptions) => {
      const pad = (offsets: Int32Array, cols: ArrayLike<number>[], fill: number[]) => {
        const out: number[][] = cols.map(() => []);
        const offs = [0];
        for (let b = 0; b + 1 < offsets.length; b++) {
          for (let i = offsets[b]; i < offsets[b + 1]; i++) cols.forEach((c, k) => out[k].push(c[i]));
          cols.forEach((_, k) => out[k].push(fill[k]));
          offs.push(out[0].length);
        }
        return { offs: Int32Array.from(offs), cols: out };
      };
      const i32 = (a: ArrayLike<number>) => d.tensor(Int32Array.from(a), [a.length], 'i32');
      const b = pad(o.logitBias!.rowOffsets, [o.logitBias!.tokenIds, o.logitBias!.values], [-1, 0]);
      const n = pad(o.bannedTokens!.rowOffsets, [o.bannedTokens!.tokenIds], [-1]);
      const pt = o.penaltyTokens!;
      const q = pad(pt.rowOffsets, [pt.tokenIds, pt.outputCounts, pt.inPrompt], [-1, 0, 0]);
      return {
        logitBias: { rowOffsets: i32(b.offs), tokenIds: i32(b.cols[0]), values: d.tensor(Float32Array.from(b.cols[1]), [b.cols[1].length], 'f32') },
        bannedTokens: { rowOffsets: i32(n.offs), tokenIds: i32(n.cols[0]) },
        penaltyTokens: { rowOffsets: i32(q.offs), tokenIds: i32(q.cols[0]), outputCounts: i32(q.cols[1]), inPrompt: i32(q.cols[2]) },
      };
    };
    const dispose = (t: ReturnType<typeof tensorsOf>) => {
      for (const list of Object.values(t)) for (const x of Object.values(list)) (x as Tensor).dispose();
    };

    test('draw what the same typed arrays draw', async () => {
      const d = dev();
      const p = plantLogits(d, 'f32', [zipfLogits(V, 0.6, 1), zipfLogits(V, 0.6, 2), zipfLogits(V, 0.6, 3)], { D: 8 });
      const o = listedOptions(rows);
      const t = tensorsOf(d, o);
      for (let offset = 0n; offset < 6n; offset++) {
        const common = { seed: BigUint64Array.from([11n, 12n, 13n]), offset, temperature: 0.9, repetitionPenalty: o.repetitionPenalty, frequencyPenalty: o.frequencyPenalty, presencePenalty: o.presencePenalty };
        const want = await sampleFused(p.H, p.W, { ...common, logitBias: o.logitBias, bannedTokens: o.bannedTokens, penaltyTokens: o.penaltyTokens, logprobs: true });
        const got = await sampleFused(p.H, p.W, { ...common, ...t, logprobs: true });
        expect(Array.from(got.tokens)).toEqual(Array.from(want.tokens));
        got.logprobs!.forEach((x, i) => expect(x).toBeCloseTo(want.logprobs![i], 5));
      }
      dispose(t);
      p.dispose();
    });

    test('an invalid row rejects the call naming the list and the row', async () => {
      const d = dev();
      const p = plantLogits(d, 'f32', [zipfLogits(V, 0.6, 1), zipfLogits(V, 0.6, 2), zipfLogits(V, 0.6, 3)], { D: 8 });
      const i32 = (a: number[]) => d.tensor(Int32Array.from(a), [a.length], 'i32');
      const made: Tensor[] = [];
      const keep = <T extends Tensor>(x: T) => (made.push(x), x);
      const pen = (offsets: number[], ids: number[], counts = ids.map(() => 1)) => ({
        rowOffsets: keep(i32(offsets)), tokenIds: keep(i32(ids)), outputCounts: keep(i32(counts)), inPrompt: keep(i32(ids.map(() => 0))),
      });
      const cases: [SampleOptions, RegExp][] = [
        [{ penaltyTokens: pen([0, 1, 2, 2], [5, V]) }, /^penaltyTokens: row 1 holds a token id outside \[0, V\)/],
        [{ penaltyTokens: pen([0, 2, 2, 2], [5, 5]) }, /^penaltyTokens: row 0 holds/],
        [{ penaltyTokens: pen([0, 0, 1, 1], [5], [-2]) }, /^penaltyTokens: row 1 holds/],
        [{ penaltyTokens: pen([0, 2, 1, 2], [5, 6]) }, /^penaltyTokens: row 1 holds/],
        [{ bannedTokens: { rowOffsets: keep(i32([0, 0, 0, 1])), tokenIds: keep(i32([-5])) } }, /^bannedTokens: row 2 holds/],
        [{ logitBias: { rowOffsets: keep(i32([0, 1, 1, 1])), tokenIds: keep(i32([4])), values: keep(d.tensor(Float32Array.from([NaN]), [1], 'f32')) } }, /^logitBias: row 0 holds/],
      ];
      for (const [o, message] of cases) expect((await failure(() => sampleFused(p.H, p.W, { seed: 1n, ...o }))).message).toMatch(message);
      // a tensor of the wrong dtype or size, or on another device, is refused before any work
      expect((await failure(() => sampleFused(p.H, p.W, { bannedTokens: { rowOffsets: keep(i32([0, 0])), tokenIds: keep(i32([1])) } }))).message)
        .toMatch(/^bannedTokens\.rowOffsets: expected an 'i32' tensor on .* of 4 elements, got Tensor\(i32\[2\]/);
      expect((await failure(() => sampleFused(p.H, p.W, { logitBias: { rowOffsets: keep(i32([0, 0, 0, 1])), tokenIds: keep(i32([1])), values: keep(i32([1])) } }))).message)
        .toMatch(/^logitBias\.values: expected an 'f32' tensor on .* of 1 elements, got Tensor\(i32\[1\]/);
      // after these the library still samples
      await expect(sampleFused(p.H, p.W, { seed: 1n })).resolves.toBeDefined();
      for (const x of made) x.dispose();
      p.dispose();
    });

    // The addon checks a list given as typed arrays even when another list of the call is a tensor
    // (lib/options.ts checks them first: the spec is altered here to reach the addon's own check).
    test('typed-array lists beside a tensor list are still checked by the addon', async () => {
      const d = dev();
      const p = plantLogits(d, 'f32', [zipfLogits(V, 0.6, 1), zipfLogits(V, 0.6, 2), zipfLogits(V, 0.6, 3)], { D: 8 });
      const o = listedOptions(rows);
      const t = tensorsOf(d, o);
      const { spec } = buildSpec(p.H, p.W, { seed: 1n, logitBias: o.logitBias, bannedTokens: t.bannedTokens }, 'fused');
      await expect(native.sample(spec)).resolves.toBeDefined();
      spec.biasOffsets = Int32Array.from(spec.biasOffsets!, (x, i) => (i === 3 ? x + 1 : x));
      expect((await failure(() => native.sample(spec))).message).toMatch(/^logitBias: offsets do not match the entries/);
      dispose(t);
      p.dispose();
    });
  });
});
