// Filters with one sample per row (issue 16): on compute capability 9.0 the fused path decides these
// rows in the GEMM's one pass over W (tile summaries and candidates gathered by the split kernel's
// epilogue, then a per-row decision, then the extra pass for the rows it cannot decide). Each test
// pools one sample from each of B identical rows with per-row seeds, over several offsets, and
// checks the pooled counts against the float64 model (chi-square, ALPHA), the logprobs against
// float64, the rows forced through the extra pass, and the independence of a row's token from its
// batch slot.

import type { Device, SampleOptions, Tensor } from '../lib/index';
import { sampleFused, sampleReference } from '../lib/index';
import {
  countToken,
  type FilterSpec,
  agreement,
  describeDevices,
  differences,
  dominantLogits,
  flatLogits,
  gaussianLogits,
  goodnessOfFit,
  keptDistribution,
  makeMask,
  makeTensor,
  mixedRowOptions,
  plantLogits,
  pooledCounts,
  rowOptions,
  safeTopP,
  scaled,
  zipfLogits,
} from './helpers';

/** 99 rows over V = 1000: rows with b % 5 < 2 have +Inf logits on INF_TOKENS, the others NaN there
 *  (0 * Inf); the finite logits follow three shapes (zipf, flat, dominant). */
const INF_TOKENS = [3, 141, 142, 500, 998];
function infRows(device: Device): { H: Tensor; W: Tensor } {
  const V = 1000;
  const D = 8;
  const h = new Float64Array(99 * D);
  const w = new Float64Array(V * D);
  const shapes = [zipfLogits(V, 1.1, 8), flatLogits(V, 9, 3), dominantLogits(V, 10, 9)];
  for (let v = 0; v < V; v++) {
    for (let u = 0; u < 3; u++) w[v * D + u] = shapes[u][v];
    w[v * D + 3] = INF_TOKENS.includes(v) ? Infinity : 0;
  }
  for (let b = 0; b < 99; b++) {
    h[b * D + (b % 3)] = 1;
    if (b % 5 < 2) h[b * D + 3] = 1;
  }
  return { H: makeTensor(device, 'bf16', h, [99, D]), W: makeTensor(device, 'bf16', w, [V, D]) };
}

describeDevices((devName, dev) => {
  // 2048 rows x 32 offsets = 65536 samples a call set: a 1 % relative bias on a token of
  // probability 0.3 is 1.7 sd there, so the specs' chi-square below runs 320 offsets on the GPU
  // (655 K samples, 5.3 sd); the CPU backend, whose calls cost ~50× more, keeps 32.
  const B = 2048;
  const calls = scaled(32, 32);
  const specCalls = devName === 'cuda' ? scaled(320, 320) : calls;

  describe('chi-square against float64, one sample per row', () => {
    // V = 1000 (eight vocabulary tiles of 128 on the GPU) and V = 111 (one partial tile)
    for (const [V, dtype] of [
      [1000, 'bf16'],
      [111, 'f16'],
    ] as const) {
      const base = zipfLogits(V, 1.1, 77);
      const specs: [string, FilterSpec][] = [
        ['top-k 5', { topK: 5, temperature: 1 }],
        ['top-k 50, T 0.5', { topK: 50, temperature: 0.5 }],
        ['top-p', { topP: safeTopP(base, { temperature: 1 }, 0.8), temperature: 1 }],
        ['min-p 0.05, T 1.5', { minP: 0.05, temperature: 1.5 }],
        ['Qwen3 default: T 0.6, top-k 20, top-p 0.95', { temperature: 0.6, topK: 20, topP: safeTopP(base, { temperature: 0.6, topK: 20 }, 0.95) }],
        ['Gemma 3 default: top-k 64, top-p 0.95', { topK: 64, topP: safeTopP(base, { topK: 64 }, 0.95) }],
        ['top-k 5 + min-p 0.2', { topK: 5, minP: 0.2 }],
      ];
      for (const [name, spec] of specs) {
        test(`${name} (V=${V}, ${dtype})`, async () => {
          const p = plantLogits(dev(), dtype, Array.from({ length: B }, () => base), { D: 8 });
          try {
            const { counts } = await pooledCounts(p, spec, specCalls);
            const gof = goodnessOfFit(counts, keptDistribution(p.logits[0], spec).probs);
            expect(gof.ok ? 'ok' : gof.summary).toBe('ok');
          } finally {
            p.dispose();
          }
        });
      }
    }

    test('logprobs only and topLogprobs 5 (V=111, f16): plain draws, logprobs within 1e-4 of float64', async () => {
      const l = zipfLogits(111, 0.9, 5);
      const p = plantLogits(dev(), 'f16', Array.from({ length: B }, () => l), { D: 8 });
      try {
        const counts = new Float64Array(111);
        const kept = keptDistribution(p.logits[0], { temperature: 0.8 });
        for (let c = 0; c < calls; c++) {
          const res = await sampleFused(p.H, p.W, { ...rowOptions(B, { temperature: 0.8 }, c), logprobs: true, topLogprobs: 5 });
          for (let i = 0; i < B; i++) {
            const t = res.tokens[i];
            countToken(counts, t);
            expect(Math.abs(res.logprobs![i] - kept.logprob[t])).toBeLessThan(1e-4);
          }
          for (let r = 0; r < 5; r++) {
            expect(res.topTokens![r]).toBe(kept.order[r]);
            expect(Math.abs(res.topLogprobs![r] - kept.logprob[kept.order[r]])).toBeLessThan(1e-4);
          }
        }
        const gof = goodnessOfFit(counts, kept.probs);
        expect(gof.ok ? 'ok' : gof.summary).toBe('ok');
      } finally {
        p.dispose();
      }
    });
  });

  // The llama3-8b vocabulary: 1024 rows x 16 offsets = 16384 samples a spec. CUDA only: the CPU
  // backend would take minutes for 16 calls of 1024 x 128256 logits.
  (devName === 'cuda' ? describe : describe.skip)('chi-square at V = 128256 (CUDA)', () => {
    const V = 128256;
    const base = zipfLogits(V, 1.1, 91);
    const specs: [string, FilterSpec][] = [
      ['top-k 50', { topK: 50, temperature: 1 }],
      ['top-k 1000', { topK: 1000, temperature: 1 }],
      ['Llama 3 default: T 0.6, top-p', { temperature: 0.6, topP: safeTopP(base, { temperature: 0.6 }, 0.9) }],
      ['min-p 0.02', { minP: 0.02, temperature: 1 }],
    ];
    for (const [name, spec] of specs) {
      test(`${name} (bf16)`, async () => {
        const p = plantLogits(dev(), 'bf16', Array.from({ length: 1024 }, () => base), { D: 8 });
        try {
          const { counts } = await pooledCounts(p, spec, scaled(16, 16));
          const gof = goodnessOfFit(counts, keptDistribution(p.logits[0], spec).probs);
          expect(gof.ok ? 'ok' : gof.summary).toBe('ok');
        } finally {
          p.dispose();
        }
      });
    }
  });

  // A top-k row's first tile in each CTA is bounded below its 16th value (kTopKFirstRank: the 16th
  // largest of the warp's lanes' maxima): a row with more than 16 of its top k in one CTA's first
  // tile (here 64 values 6 above a bulk of std 1 in vocabulary tile 1, the way UTF-8 continuation
  // bytes cluster in a byte-level vocabulary) may take the extra pass on CUDA, and stays exact. 256
  // rows x 64 offsets.
  (devName === 'cuda' ? describe : describe.skip)('top-k with its candidates in one early tile (CUDA)', () => {
    // The 64 values in tile 1 in a run (lanes 0-15 hold them: the first tile's bound, the 16th of
    // the lanes' maxima, is the run's 4th value from the bottom, below top-k 50's 50th: decided from
    // the candidates; top-k 64 may take the extra pass), or dealt one per lane (ranks 0-31 are the
    // lanes' maxima: the bound is the 16th value, above the rest of the top k: the extra pass).
    test.each([
      ['in a run', (r: number) => 128 + 63 - r, [false, null]],
      ['one per lane', (r: number) => 128 + 4 * (r % 32) + Math.floor(r / 32), [true, true]],
    ] as const)('V = 128256, top-k 50 and the Gemma 3 default, the top 64 %s: exact', async (_name, at, fallbacks) => {
      const V = 128256;
      const row = gaussianLogits(V, 17, 1);
      for (let r = 0; r < 64; r++) row[at(r)] = 6 + 0.03 * (63 - r);
      const p = plantLogits(dev(), 'bf16', Array.from({ length: 256 }, () => row), { D: 8 });
      const q = plantLogits(dev(), 'bf16', Array.from({ length: 64 }, () => row), { D: 8 });
      try {
        const specs: FilterSpec[] = [{ topK: 50, temperature: 1 }, { topK: 64, topP: safeTopP(row, { topK: 64 }, 0.95) }];
        for (const [s, spec] of specs.entries()) {
          const { counts, fallbackRows } = await pooledCounts(p, spec, scaled(64, 64));
          if (fallbacks[s] !== null) expect({ spec, fallback: fallbackRows > 0 }).toEqual({ spec, fallback: fallbacks[s] });
          const gof = goodnessOfFit(counts, keptDistribution(p.logits[0], spec).probs);
          expect(gof.ok ? 'ok' : gof.summary).toBe('ok');
          const o = { ...rowOptions(64, spec, 3), logprobs: true };
          const f = await sampleFused(q.H, q.W, o);
          const g = await sampleReference(q.H, q.W, { ...o, method: 'gumbel' });
          expect(Array.from(f.tokens)).toEqual(Array.from(g.tokens));
          for (let i = 0; i < 64; i++) expect(Math.abs(f.logprobs![i] - g.logprobs![i])).toBeLessThan(1e-5);
        }
      } finally {
        p.dispose();
        q.dispose();
      }
    });
  });

  describe('rows the candidates cannot decide', () => {
    test('near-flat rows with top-p 0.99 (V=3000, T 4) go through the extra pass and stay exact', async () => {
      const V = 3000;
      const flat = flatLogits(V, 9, 8);
      const p = plantLogits(dev(), 'bf16', Array.from({ length: 256 }, () => flat), { D: 8 });
      try {
        const spec = { topP: 0.99, temperature: 4 };
        const { counts, fallbackRows } = await pooledCounts(p, spec, scaled(64, 64));
        // the 0.99 nucleus holds ~2900 tokens, more than a top-p row gathers (kTopPRank = 2048)
        if (devName === 'cuda') expect(fallbackRows).toBeGreaterThan(0);
        const gof = goodnessOfFit(counts, keptDistribution(p.logits[0], spec).probs);
        expect(gof.ok ? 'ok' : gof.summary).toBe('ok');
        const res = await sampleFused(p.H, p.W, { ...rowOptions(256, spec, 0), logprobs: true });
        const kept = keptDistribution(p.logits[0], spec);
        for (let i = 0; i < 256; i++) expect(Math.abs(res.logprobs![i] - kept.logprob[res.tokens[i]])).toBeLessThan(1e-4);
      } finally {
        p.dispose();
      }
    });

    test('flat and peaked rows mixed in one batch: each row exact, tokens equal reference(gumbel)', async () => {
      const V = 3000;
      const flat = flatLogits(V, 4, 0.05);
      const peaked = dominantLogits(V, 5, 9);
      const rows = Array.from({ length: 64 }, (_, b) => (b % 3 === 0 ? flat : peaked));
      const p = plantLogits(dev(), 'bf16', rows, { D: 8 });
      try {
        const o = { ...rowOptions(64, { topP: 0.95, temperature: 1 }, 3) };
        const f = await sampleFused(p.H, p.W, o);
        const g = await sampleReference(p.H, p.W, { ...o, method: 'gumbel' });
        expect(agreement(f.tokens, g.tokens)).toBeGreaterThanOrEqual(0.999);
      } finally {
        p.dispose();
      }
    });
  });

  // Many rows through the extra pass at once, each with its own filters: the multi-block decision
  // must make whole_rows_kernel's decision (tokens, logprobs, topLogprobs) row by row.
  (devName === 'cuda' ? describe : describe.skip)('the extra pass decides many rows exactly (CUDA)', () => {
    const specs: FilterSpec[] = [
      { topP: 0.9, temperature: 1 },
      { minP: 0.05, temperature: 0.7 },
      { topK: 3000, temperature: 1.3 },
      { topK: 4000, topP: 0.95, temperature: 1 },
      { topP: 0.8, minP: 0.02, temperature: 0.6 },
      { topK: 50, temperature: 1 },
      { temperature: 0.9 },
    ];
    function mixOptions(B: number, offset: number): SampleOptions {
      return { ...mixedRowOptions(specs, B, offset, 1000), logprobs: true, topLogprobs: 5 };
    }
    /** Tokens, logprobs and topLogprobs of fused against reference(gumbel); the rows the extra pass took. */
    async function compare(p: { H: import('../lib/index').Tensor; W: import('../lib/index').Tensor }, B: number, calls: number) {
      let same = 0;
      let fallbackRows = 0;
      for (let c = 0; c < calls; c++) {
        const o = mixOptions(B, c);
        const f = await sampleFused(p.H, p.W, o);
        const g = await sampleReference(p.H, p.W, { ...o, method: 'gumbel' });
        fallbackRows += f.fallbackRows;
        same += agreement(f.tokens, g.tokens) * B;
        for (let i = 0; i < B; i++) {
          if (f.tokens[i] === g.tokens[i]) expect(Math.abs(f.logprobs![i] - g.logprobs![i])).toBeLessThan(1e-5);
        }
        expect(Array.from(f.topTokens!)).toEqual(Array.from(g.topTokens!));
        for (let i = 0; i < g.topLogprobs!.length; i++) {
          const want = g.topLogprobs![i];
          if (want === -Infinity) expect(f.topLogprobs![i]).toBe(-Infinity);
          else expect(Math.abs(f.topLogprobs![i] - want)).toBeLessThan(1e-5);
        }
      }
      expect(same / (B * calls)).toBeGreaterThanOrEqual(0.999);
      return fallbackRows;
    }

    test('V = 128256: 40 of 99 near-flat rows under a top-k / top-p / min-p mix, topLogprobs 5', async () => {
      const V = 128256;
      const flats = [flatLogits(V, 3, 4), flatLogits(V, 4, 2), flatLogits(V, 5, 6)];
      const others = [zipfLogits(V, 1.0, 6), dominantLogits(V, 7, 14)];
      const rows = Array.from({ length: 99 }, (_, b) => (b % 5 < 2 ? flats[b % 3] : others[b % 2]));
      const p = plantLogits(dev(), 'bf16', rows, { D: 8 });
      try {
        const fallbackRows = await compare(p, 99, 3);
        expect(fallbackRows).toBeGreaterThanOrEqual(3 * 25);
      } finally {
        p.dispose();
      }
    });

    // Top-p rows without a top-k have their raw logits stored by the one-pass epilogue, which the
    // extra pass reads instead of W; the other rows it takes have theirs computed again. The
    // epilogue stores them with a 16-byte store a lane where V is a multiple of 4 and with scalar
    // stores elsewhere, the model's bias included: each way, with a softcap and a mask; then with a
    // +Inf logit (no softcap, which would make it finite) and topLogprobs, which send every row to
    // the extra pass, so that stored and recomputed rows share its groups.
    test.each([
      [3001, true],
      [3000, true],
      [3000, false],
    ])('V = %d, bias %p: stored and recomputed rows in the extra pass, with softcap and mask', async (V, withBias) => {
      const flat = flatLogits(V, 8, 3);
      const withInf = Float64Array.from(flat, (x, v) => (v === 7 ? Infinity : x));
      const bias = withBias ? flatLogits(V, 9, 1) : undefined;
      const allowedTokens = makeMask(24, V, (b, v) => b % 4 !== 2 || v % 5 !== 0);
      for (const [row, extra, least] of [[flat, { softcap: 30 }, 3 * 12], [withInf, { topLogprobs: 3 }, 3 * 24]] as const) {
        const p = plantLogits(dev(), 'bf16', Array.from({ length: 24 }, () => row), { D: 8, biasLogits: bias });
        try {
          let fallbackRows = 0;
          for (let c = 0; c < 3; c++) {
            const o: SampleOptions = {
              seed: BigUint64Array.from({ length: 24 }, (_, b) => BigInt(50 + b)),
              ...(p.bias ? { bias: p.bias } : {}),
              offset: c,
              temperature: 2,
              topP: Float32Array.from({ length: 24 }, (_, b) => (b % 3 === 1 ? 1 : 0.99)),
              allowedTokens,
              logprobs: true,
              ...extra,
            };
            const f = await sampleFused(p.H, p.W, o);
            const g = await sampleReference(p.H, p.W, { ...o, method: 'gumbel' });
            fallbackRows += f.fallbackRows;
            expect({ c, same: agreement(f.tokens, g.tokens) }).toEqual({ c, same: 1 });
            for (let i = 0; i < 24; i++) expect(Math.abs(f.logprobs![i] - g.logprobs![i])).toBeLessThan(1e-5);
            if (f.topTokens) expect(Array.from(f.topTokens)).toEqual(Array.from(g.topTokens!));
          }
          expect(fallbackRows).toBeGreaterThanOrEqual(least);
        } finally {
          p.dispose();
        }
      }
    });

    // `calls` calls (offsets 0, 1, ...) with the options `options(c)`: every token equals
    // reference(gumbel) and, where the options ask for logprobs, every logprob is within 1e-5;
    // returns the rows the calls sent to the extra pass.
    async function exactOverCalls(p: { H: Tensor; W: Tensor }, B: number, options: (c: number) => SampleOptions,
                                  calls = 3) {
      let fallbackRows = 0;
      for (let c = 0; c < calls; c++) {
        const o = options(c);
        const f = await sampleFused(p.H, p.W, o);
        const g = await sampleReference(p.H, p.W, { ...o, method: 'gumbel' });
        fallbackRows += f.fallbackRows;
        expect({ B, c, differences: differences(f.tokens, g.tokens) }).toEqual({ B, c, differences: [] });
        if (o.logprobs) {
          for (let i = 0; i < B; i++) expect(Math.abs(f.logprobs![i] - g.logprobs![i])).toBeLessThan(1e-5);
        }
      }
      return fallbackRows;
    }

    // A top-p row stores its logits on each CTA's first item of the call, later only while it looks
    // wide (the grid's top within 8 temperatures of its θ); the extra pass computes the tiles it did
    // not store. Gaussian rows of std 4 at top-p 0.999 (a nucleus of ~23000 tokens, yet ~9
    // temperatures between the top and the 2048th value) store only their first items; uniform rows
    // (wide) nearly every tile; both end in one extra pass with rows decided from their candidates.
    test('V = 128256: top-p rows stored in part, nearly whole and not at all, in one extra pass', async () => {
      const V = 128256;
      const kinds = [gaussianLogits(V, 21, 4), flatLogits(V, 22, 4), dominantLogits(V, 23, 14)];
      const B = 30;
      const p = plantLogits(dev(), 'bf16', Array.from({ length: B }, (_, b) => kinds[b % 3]), { D: 16 });
      try {
        const fallbackRows = await exactOverCalls(p, B, (c) => ({
          seed: BigUint64Array.from({ length: B }, (_, b) => BigInt(900 + b)),
          offset: c,
          topP: Float32Array.from({ length: B }, (_, b) => (b % 3 === 0 ? 0.999 : 0.9)),
          topK: Int32Array.from({ length: B }, (_, b) => (b % 6 === 1 ? 4000 : 0)),
          logprobs: true,
        }));
        // the gaussian rows and the uniform rows without top-k (the candidates decide top-k 4000)
        expect(fallbackRows).toBeGreaterThanOrEqual(3 * 15);
      } finally {
        p.dispose();
      }
    });

    // A top-p row alone (no top-k, min-p, logprobs or transform; one sample) whose nucleus outgrows
    // the candidates is drawn by the check with no extra pass: of its four best Gumbel candidates
    // over the whole row, in score order, it keeps the first that the nucleus holds; the rows whose
    // four candidates all lie past the cut (or one near it) still take the pass. Four kinds of
    // rows, each flagged on every call, each candidate in the nucleus with probability ~p: Gaussian
    // std 1 at T 0.6 and top-p 0.9 (the model-like mode's flat rows: a ~45 K-token nucleus),
    // uniform [0, 4) at top-p 0.9 (~69 K tokens), Gaussian std 1.5 at top-p 0.5 (~8.6 K tokens) and
    // uniform [0, 1) at top-p 0.2 (~17 K tokens). Over 3 calls of 10 rows a kind, the pass takes
    // ~14 row-calls (30 (0.11^4 + 0.1^4 + 0.5^4 + 0.8^4)), ~45 with the first candidate alone, and
    // the tokens equal reference(gumbel) whichever candidate decides. With logprobs, or a softcap
    // (the stored values are not the drawn ones), no row is checked: every one takes the pass.
    test('V = 128256: flagged top-p rows keep the first of their best candidates the nucleus holds', async () => {
      const V = 128256;
      const B = 40;
      const kinds = [gaussianLogits(V, 31, 1), flatLogits(V, 32, 4), gaussianLogits(V, 33, 1.5), flatLogits(V, 34, 1)];
      const topP = [0.9, 0.9, 0.5, 0.2];
      const p = plantLogits(dev(), 'bf16', Array.from({ length: B }, (_, b) => kinds[b % 4]), { D: 16 });
      try {
        const run = (extra: SampleOptions) => exactOverCalls(p, B, (c) => ({
          seed: BigUint64Array.from({ length: B }, (_, b) => BigInt(1100 + b)),
          offset: c,
          topP: Float32Array.from({ length: B }, (_, b) => topP[b % 4]),
          temperature: Float32Array.from({ length: B }, (_, b) => (b % 4 === 0 ? 0.6 : 1)),
          ...extra,
        }));
        const extraPassRows = await run({});
        expect(extraPassRows).toBeGreaterThan(0);  // four candidates past the cut (mostly top-p 0.2)
        expect(extraPassRows).toBeLessThanOrEqual(26);
        expect(await run({ logprobs: true })).toBeGreaterThanOrEqual(3 * B - 16);
        expect(await run({ softcap: 3 })).toBeGreaterThanOrEqual(3 * B - 16);
      } finally {
        p.dispose();
      }
    });

    // A min-p row alone whose candidates fill more than one batch of the decision (8192 values) is
    // drawn batch by batch as they are gathered (cuda/filters.cu: decide_min_p_streamed), with no bound
    // on its kept set, its batches dealt over 4 blocks (at B = 99 most of them run after the rows'
    // blocks). Gaussian std 1 rows at min-p 0.1 (~2.3 K tokens kept of ~13 K appended), at T 1.3 and
    // min-p 0.15 (~4 K of ~16 K) and at min-p 0.05 (~10 K of ~30 K: four batches, near the row's 32768
    // candidates) are decided so; min-p 0.002 keeps nearly every token, overflows the candidates and
    // takes the extra pass; a Gaussian std 4 row's candidates fit one batch (decide_prefix). (A row of
    // one dominant token over a narrow bulk appends whole tiles until some CTA sees that token, and may
    // overflow and take the pass.) Without logprobs the draw keeps no mass and skips the logarithms of
    // keys whose Philox bits bound them below the best (offer_to_draw_pruned).
    test.each([
      [13, true],
      [40, true],
      [13, false],
      [99, false],
    ])('V = 128256, B = %d, logprobs %s: min-p rows with thousands of kept tokens, drawn as their candidates are gathered', async (B, logprobs) => {
      const V = 128256;
      const kinds = [gaussianLogits(V, 51, 1), gaussianLogits(V, 52, 1), gaussianLogits(V, 53, 4), gaussianLogits(V, 54, 1), gaussianLogits(V, 55, 1)];
      const minP = [0.1, 0.002, 0.1, 0.15, 0.05];
      const p = plantLogits(dev(), 'bf16', Array.from({ length: B }, (_, b) => kinds[b % 5]), { D: 16 });
      const rowsOf = (k: number) => Array.from({ length: B }, (_, b) => b % 5).filter((x) => x === k).length;
      // every kind, or without min-p on the kinds that may take the extra pass (1 and 4)
      const options = (every: boolean) => (c: number): SampleOptions => ({
        seed: BigUint64Array.from({ length: B }, (_, b) => BigInt(1500 + b)),
        offset: c,
        minP: Float32Array.from({ length: B }, (_, b) => (every || (b % 5 !== 1 && b % 5 !== 4) ? minP[b % 5] : 0)),
        temperature: Float32Array.from({ length: B }, (_, b) => (b % 5 === 3 ? 1.3 : 1)),
        logprobs,
      });
      try {
        expect(await exactOverCalls(p, B, options(false))).toBe(0);
        const fallbackRows = await exactOverCalls(p, B, options(true));
        expect(fallbackRows).toBeGreaterThanOrEqual(3 * rowsOf(1));  // the min-p 0.002 rows
        // and of the min-p 0.05 rows at most those that overflowed, not all
        expect(fallbackRows).toBeLessThan(3 * (rowsOf(1) + rowsOf(4)));
      } finally {
        p.dispose();
      }
    });

    // The check's batch bounds (cuda/filters.cu: kCheckWinnersMinBatch 4, kCheckWinnersMaxBatch 256),
    // with every row flagged (Gaussian std 1 at T 0.6 and top-p 0.9: ~45 K-token nuclei, each
    // candidate held ~89 % of the time): below and above them every flagged row takes the extra
    // pass; at them the check decides most rows, and at B = 256 it lists as many rows as its table
    // holds.
    test.each([3, 4, 256, 257])('V = 128256, B = %d, every row flagged: the check within its batch bounds', async (B) => {
      const V = 128256;
      const row = gaussianLogits(V, 41, 1);
      const p = plantLogits(dev(), 'bf16', Array.from({ length: B }, () => row), { D: 16 });
      const calls = B < 100 ? 3 : 1;
      try {
        const fallbackRows = await exactOverCalls(p, B, (c) => ({
          seed: BigUint64Array.from({ length: B }, (_, b) => BigInt(1300 + b)),
          offset: c,
          topP: 0.9,
          temperature: 0.6,
        }), calls);
        const rows = B * calls;
        if (B < 4 || B > 256) expect(fallbackRows).toBe(rows);
        // (all four candidates past the cut: ~1.5e-4 of rows; the winner alone ~0.11)
        else expect({ B, fallbackRows, kept: fallbackRows <= 0.05 * rows }).toEqual({ B, fallbackRows, kept: true });
      } finally {
        p.dispose();
      }
    });

    // Each CTA of the split kernel appends a row's candidates to its own slice of the row's buffer
    // (a 132-SM grid: slices of 184, CTA c taking vocabulary tiles c, c + 132, ...); what overflows
    // a slice goes to the row's spill. Even rows: 8 tiles a CTA apart hold values 10 above a bulk
    // of std 1, and at top-k 1000 that CTA appends all 1024 of them. Odd rows: a bulk of std 1 at
    // min-p 0.05, 200-270 appends a CTA (every value within 3 of the CTA's running max).
    // A top-k above 128 has no bound from a CTA's first tile (128 values): θ comes from the grid's
    // histogram of appends, and the candidates decide the rows with no extra pass.
    test('V = 128256: top-k 129 to 2048 decided from the candidates, tokens as reference(gumbel)', async () => {
      const V = 128256;
      const B = 8;
      const rows = Array.from({ length: B }, (_, b) => (b % 2 === 0 ? gaussianLogits(V, 60 + b, 4) : zipfLogits(V, 1.1, 60 + b)));
      const p = plantLogits(dev(), 'bf16', rows, { D: 16 });
      try {
        const topK = [129, 500, 1000, 2048];
        const fallbackRows = await exactOverCalls(p, B, (c) => ({
          seed: BigUint64Array.from({ length: B }, (_, b) => BigInt(800 + b)),
          offset: c,
          topK: Int32Array.from({ length: B }, (_, b) => topK[b % 4]),
          temperature: 0.9,
          logprobs: true,
        }));
        expect(fallbackRows).toBe(0);
      } finally {
        p.dispose();
      }
    });

    // A top-p row whose appended values cannot hold p of the mass (bounded from the grid's histogram
    // of appends), or in vLLM's order whose min-p set reaches below the candidates, is flagged
    // before its candidates are ranked. Those tests must never flag a row the candidates decide:
    // Gaussian rows of std 4, whose nucleus at these (p, T) is up to ~1200 tokens (float64, 40
    // seeds; the candidates hold at least the 2048 largest), and rows with a dominant token.
    test('V = 128256: top-p rows whose nucleus lies within the candidates are decided in one pass', async () => {
      const V = 128256;
      const B = 12;
      const rows = Array.from({ length: B }, (_, b) => (b % 4 === 3 ? dominantLogits(V, 70 + b, 20) : gaussianLogits(V, 70 + b, 4)));
      const p = plantLogits(dev(), 'bf16', rows, { D: 16 });
      try {
        // (p, T) per row; rows 3, 7 and 11 are the dominant ones
        const topP = [0.9, 0.9, 0.95, 0.99, 0.97, 0.99, 0.8, 0.9, 0.95, 0.9, 0.97, 0.5];
        const temperature = [1, 0.7, 0.9, 1, 0.8, 0.7, 1, 1.2, 0.9, 1, 0.8, 1];
        const options = (c: number, seedBase: number): SampleOptions => ({
          seed: BigUint64Array.from({ length: B }, (_, b) => BigInt(seedBase + b)),
          offset: c,
          topP: Float32Array.from(topP),
          temperature: Float32Array.from(temperature),
          logprobs: true,
        });
        expect(await exactOverCalls(p, B, (c) => options(c, 700))).toBe(0);
        // vLLM's order with a min-p set well inside the candidates (min-p 0.01 / 0.05: ~40-300 tokens)
        const minP = Float32Array.from({ length: B }, (_, b) => (b % 2 === 0 ? 0.01 : 0.05));
        expect(await exactOverCalls(p, B, (c) => ({ ...options(c, 750), minP, filterOrder: 'vllm' }))).toBe(0);
      } finally {
        p.dispose();
      }
    });

    test('V = 128256: rows whose appends overflow CTAs\' slices of the candidates', async () => {
      const V = 128256;
      const clustered = (seed: number): Float64Array => {
        const l = gaussianLogits(V, seed, 1);
        for (let j = 0; j < 8; j++) for (let v = j * 132 * 128; v < (j * 132 + 1) * 128; v++) l[v] += 10;
        return l;
      };
      const B = 6;
      const rows = Array.from({ length: B }, (_, b) => (b % 2 === 0 ? clustered(40 + b) : gaussianLogits(V, 40 + b, 1)));
      const p = plantLogits(dev(), 'bf16', rows, { D: 16 });
      try {
        await exactOverCalls(p, B, (c) => ({
          seed: BigUint64Array.from({ length: B }, (_, b) => BigInt(700 + b)),
          offset: c,
          topK: Int32Array.from({ length: B }, (_, b) => (b % 2 === 0 ? 1000 : 0)),
          minP: Float32Array.from({ length: B }, (_, b) => (b % 2 === 0 ? 0 : 0.05)),
          logprobs: true,
        }));
      } finally {
        p.dispose();
      }
    });

    test('V = 1000: 40 of 99 rows with +Inf logits and topLogprobs (the +Inf mode), the rest with NaN there', async () => {
      const { H, W } = infRows(dev());
      try {
        const fallbackRows = await compare({ H, W }, 99, 3);
        expect(fallbackRows).toBeGreaterThanOrEqual(3 * 40);
      } finally {
        H.dispose();
        W.dispose();
      }
    });
  });

  test('fused == reference(gumbel) under the model-card defaults at V = 128256 (B = 33, random-ish rows)', async () => {
    const V = 128256;
    const rows = Array.from({ length: 33 }, (_, b) => (b % 2 ? zipfLogits(V, 1.0, b) : dominantLogits(V, b, 14)));
    const p = plantLogits(dev(), 'bf16', rows, { D: 40 });
    try {
      for (const spec of [
        { temperature: 0.6, topP: 0.9 },
        { temperature: 0.6, topK: 20, topP: 0.95 },
        { topK: 64, topP: 0.95 },
        { minP: 0.05 },
      ] as FilterSpec[]) {
        let same = 0;
        for (let c = 0; c < 4; c++) {
          const o = rowOptions(33, spec, c);
          const f = await sampleFused(p.H, p.W, o);
          const g = await sampleReference(p.H, p.W, { ...o, method: 'gumbel' });
          same += agreement(f.tokens, g.tokens);
        }
        expect(same / 4).toBeGreaterThanOrEqual(0.999);
      }
    } finally {
      p.dispose();
    }
  });

  // Rows that ask for no statistics (no filter, logprobs or topLogprobs) in a call with filters:
  // the epilogue writes no summaries for them and the decision takes the epilogue's winner.
  describe('unfiltered rows in a filtered call, no logprobs, one sample per row', () => {
    test('V = 1000: unfiltered and top-k 5 rows interleaved, each group fits float64', async () => {
      const base = zipfLogits(1000, 1.1, 31);
      const p = plantLogits(dev(), 'bf16', Array.from({ length: B }, () => base), { D: 8 });
      try {
        const topK = Int32Array.from({ length: B }, (_, b) => (b % 2 === 0 ? 0 : 5));
        const plain = new Float64Array(1000);
        const top5 = new Float64Array(1000);
        for (let c = 0; c < calls; c++) {
          const res = await sampleFused(p.H, p.W, { ...rowOptions(B, { temperature: 1 }, c), topK });
          for (let b = 0; b < B; b++) countToken(b % 2 === 0 ? plain : top5, res.tokens[b]);
        }
        for (const [counts, spec] of [[plain, {}], [top5, { topK: 5 }]] as [Float64Array, FilterSpec][]) {
          const gof = goodnessOfFit(counts, keptDistribution(p.logits[0], spec).probs);
          expect({ spec, fit: gof.ok ? 'ok' : gof.summary }).toEqual({ spec, fit: 'ok' });
        }
      } finally {
        p.dispose();
      }
    });

    for (const V of [111, 1000]) {
      test(`V = ${V}: greedy, masked and filtered rows around them, token for token as reference(gumbel)`, async () => {
        const shapes = [zipfLogits(V, 1.1, 3), flatLogits(V, 4, 2), dominantLogits(V, 5, 6)];
        const rows = Array.from({ length: 99 }, (_, b) => shapes[b % 3]);
        const p = plantLogits(dev(), 'bf16', rows, { D: 8 });
        try {
          const o: SampleOptions = {
            topK: Int32Array.from({ length: 99 }, (_, b) => (b % 4 === 3 ? 7 : 0)),
            minP: Float32Array.from({ length: 99 }, (_, b) => (b % 5 === 2 ? 0.1 : 0)),
            softcap: 3,
            allowedTokens: makeMask(99, V, (b, v) => b % 4 !== 1 || v % 3 !== 0),
          };
          const temperature = Float32Array.from({ length: 99 }, (_, b) => (b % 11 === 4 ? 0 : 0.9));
          for (let c = 0; c < 8; c++) {
            const call = { ...rowOptions(99, {}, c), ...o, temperature };
            const f = await sampleFused(p.H, p.W, call);
            const ref = await sampleReference(p.H, p.W, { ...call, method: 'gumbel' });
            expect({ c, same: agreement(f.tokens, ref.tokens) }).toEqual({ c, same: 1 });
            for (let b = 1; b < 99; b += 4) expect(f.tokens[b] % 3).not.toBe(0);
          }
        } finally {
          p.dispose();
        }
      });
    }
  });

  // A row with a filter is drawn by the per-row decision over its kept prefix, not by the epilogue
  // (which offers such rows only their +Inf values): the two cases where that prefix is the whole
  // row must still draw exactly what plain sampling and reference(gumbel) draw.
  describe('filtered rows that keep every value, one sample per row', () => {
    for (const V of [111, 1000]) {
      test(`V = ${V}: topK >= the valid count draws plain sampling's token, row for row`, async () => {
        const shapes = Array.from({ length: 7 }, (_, i) => (i % 3 === 0 ? flatLogits(V, i, 2) : zipfLogits(V, 1.1, i)));
        const rows = Array.from({ length: 99 }, (_, b) => shapes[b % 7]);
        const p = plantLogits(dev(), 'bf16', rows, { D: 8 });
        try {
          let compared = 0;
          for (let c = 0; c < 8; c++) {
            const o = { ...rowOptions(99, { temperature: 0.8 }, c), logprobs: true };
            const plain = await sampleFused(p.H, p.W, o);
            for (const topK of [V, V + 5]) {
              const f = await sampleFused(p.H, p.W, { ...o, topK });
              expect({ topK, c, same: agreement(f.tokens, plain.tokens) }).toEqual({ topK, c, same: 1 });
              for (let b = 0; b < 99; b++) expect(Math.abs(f.logprobs![b] - plain.logprobs![b])).toBeLessThan(1e-5);
              compared += 99;
            }
            // every valid value kept under a mask: topK above the allowed count
            const allowedTokens = makeMask(99, V, (_b, v) => v % 2 === 0);
            const masked = await sampleFused(p.H, p.W, { ...o, topK: V, allowedTokens });
            const ref = await sampleReference(p.H, p.W, { ...o, topK: V, allowedTokens, method: 'gumbel' });
            expect(agreement(masked.tokens, ref.tokens)).toBe(1);
            for (const t of masked.tokens) expect(t % 2).toBe(0);
            // the row's valid count (every other value masked, and past V = 111 the last tile's end)
            // is what makes the kept prefix whole at V = 1000 (top-k above 128: the histogram's bound,
            // which stays at -Inf): no extra pass. At V = 111 the one tile bounds θ at its 16th lane
            // maximum (kTopKFirstRank), and the valid values below it are not appended: every row
            // takes the extra pass. Either way the logprobs are the whole row's.
            if (devName === 'cuda') expect({ c, fallback: masked.fallbackRows }).toEqual({ c, fallback: V === 111 ? 99 : 0 });
            for (let b = 0; b < 99; b++) expect(Math.abs(masked.logprobs![b] - ref.logprobs![b])).toBeLessThan(1e-5);
          }
          expect(compared).toBe(8 * 2 * 99);
        } finally {
          p.dispose();
        }
      });
    }

    test('V = 1000: rows with +Inf logits under top-k / top-p / min-p draw a +Inf token as reference(gumbel)', async () => {
      const V = 1000;
      const infTokens = INF_TOKENS;
      const { H, W } = infRows(dev());
      const counts = new Float64Array(V);
      try {
        for (const spec of [{ topK: 2 }, { topP: 0.3 }, { minP: 0.5 }, { topK: 50, topP: 0.9, minP: 0.05 }] as FilterSpec[]) {
          for (let c = 0; c < 8; c++) {
            const o = { ...rowOptions(99, { ...spec, temperature: 0.9 }, c), logprobs: true };
            const f = await sampleFused(H, W, o);
            const g = await sampleReference(H, W, { ...o, method: 'gumbel' });
            expect({ spec, c, same: agreement(f.tokens, g.tokens) }).toEqual({ spec, c, same: 1 });
            for (let b = 0; b < 99; b++) {
              if (b % 5 >= 2) continue;
              expect(infTokens).toContain(f.tokens[b]);
              expect(Math.abs(f.logprobs![b] + Math.log(infTokens.length))).toBeLessThan(1e-5);
              countToken(counts, f.tokens[b]);
            }
          }
        }
        // 40 rows x 32 calls over the five +Inf tokens: uniform
        const probs = new Float64Array(V);
        for (const v of infTokens) probs[v] = 1;
        expect(goodnessOfFit(counts, probs).ok).toBe(true);
      } finally {
        H.dispose();
        W.dispose();
      }
    });
  });

  // B = 300 runs three chunks of 100 batch columns on compute capability 9.0, B = 2 one chunk: a
  // row's token must not depend on the chunk, column or CTAs that served it.
  test("a row's token does not depend on its batch slot or the batch size (per-row seeds)", async () => {
    const V = 1000;
    const B = 300;
    const shapes = Array.from({ length: 7 }, (_, i) => zipfLogits(V, 1.2, i));
    const rows = Array.from({ length: B }, (_, b) => shapes[b % 7]);
    const picked = [42, 299];
    const p = plantLogits(dev(), 'bf16', rows, { D: 8 });
    const alone = plantLogits(dev(), 'bf16', picked.map((b) => rows[b]), { D: 8 });
    try {
      const spec = { topK: 20, topP: 0.9, temperature: 0.7 };
      const all = await sampleFused(p.H, p.W, { ...rowOptions(B, spec, 5), logprobs: true });
      const few = await sampleFused(alone.H, alone.W, {
        ...rowOptions(picked.length, spec, 5),
        seed: BigUint64Array.from(picked, (b) => BigInt(1000 + b)),
        logprobs: true,
      });
      picked.forEach((b, i) => {
        expect([b, few.tokens[i]]).toEqual([b, all.tokens[b]]);
        expect(Math.abs(few.logprobs![i] - all.logprobs![b])).toBeLessThan(1e-6);
      });
    } finally {
      p.dispose();
      alone.dispose();
    }
  });
});
