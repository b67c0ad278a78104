// Filters with several samples per row (issue 16). On compute capability 9.0 a call with filters
// and numSamples > 1 takes the GEMM's one pass over W: a filtered row's samples are drawn by the
// per-row decision from its kept prefix, each under its own noise stream; rows that keep every
// token (no filter on the row) and rows the candidates cannot decide are drawn by the extra pass.
// Each test checks the tokens against reference(gumbel) (>= 99.9 %), sample 0 against the
// numSamples 1 call's token, logprobs and topLogprobs against the reference, and the pooled samples
// against float64 (chi-square).

import type { SampleOptions, SampleResult, Tensor } from '../lib/index';
import { sampleFused, sampleReference } from '../lib/index';
import {
  type FilterSpec,
  addInto,
  agreement,
  describeDevices,
  differences,
  dominantLogits,
  flatLogits,
  goodnessOfFit,
  keptDistribution,
  makeMask,
  mixedRowOptions,
  plantLogits,
  rowCounts,
  rowOptions,
  scaled,
  zipfLogits,
} from './helpers';

// A top-k, top-p, min-p mix with greedy and unfiltered rows (the extra pass's, with several samples).
const SPECS: FilterSpec[] = [
  { topP: 0.9, temperature: 1 },
  { minP: 0.05, temperature: 0.7 },
  { topK: 50, temperature: 1 },
  { topK: 20, topP: 0.95, temperature: 0.6 },
  { temperature: 0.9 },
  { topP: 0.8, minP: 0.02, temperature: 0.6 },
  { topK: 5, temperature: 0 },
  { topK: 3000, temperature: 1.3 },
];

function mixOptions(B: number, offset: number, S: number, extra: SampleOptions = {}): SampleOptions {
  return { ...mixedRowOptions(SPECS, B, offset, 2000), numSamples: S, ...extra };
}

/** Sample 0 of each row. */
function firstSamples(r: SampleResult, B: number, S: number): Int32Array {
  return Int32Array.from({ length: B }, (_, b) => r.tokens[b * S]);
}

describeDevices((devName, dev) => {
  describe('numSamples > 1 with filters: each sample is reference(gumbel)\'s', () => {
    async function compare(
      p: { H: Tensor; W: Tensor },
      B: number,
      S: number,
      calls: number,
      extra: SampleOptions,
      options: (B: number, offset: number, S: number, extra: SampleOptions) => SampleOptions = mixOptions,
    ) {
      let fallbackRows = 0;
      for (let c = 0; c < calls; c++) {
        const o = options(B, c, S, extra);
        const f = await sampleFused(p.H, p.W, o);
        const g = await sampleReference(p.H, p.W, { ...o, method: 'gumbel' });
        const one = await sampleFused(p.H, p.W, { ...o, numSamples: 1 });
        fallbackRows += f.fallbackRows;
        expect(f.tokens.length).toBe(B * S);
        expect({ c, vsReference: agreement(f.tokens, g.tokens) >= 0.999 || differences(f.tokens, g.tokens) })
          .toEqual({ c, vsReference: true });
        const first = firstSamples(f, B, S);
        expect({ c, vsOneSample: agreement(first, one.tokens) >= 0.999 || differences(first, one.tokens) })
          .toEqual({ c, vsOneSample: true });
        if (o.logprobs) {
          let worst = 0;
          for (let i = 0; i < B * S; i++)
            if (f.tokens[i] === g.tokens[i]) worst = Math.max(worst, Math.abs(f.logprobs![i] - g.logprobs![i]));
          expect(worst).toBeLessThan(1e-5);
          for (let b = 0; b < B; b++) {
            if (first[b] !== one.tokens[b]) continue;
            expect(Math.abs(f.logprobs![b * S] - one.logprobs![b])).toBeLessThan(1e-5);
          }
        }
        if (o.topLogprobs) expect(Array.from(f.topTokens!)).toEqual(Array.from(g.topTokens!));
      }
      return fallbackRows;
    }

    for (const [B, S] of [
      [1, 4],
      [3, 2],
      [20, 3],
      [99, 4],
      [130, 2],
    ] as const) {
      test(`V = 1000, B = ${B}, numSamples ${S}: the mix with greedy and unfiltered rows, logprobs`, async () => {
        const shapes = [zipfLogits(1000, 1.1, 5), flatLogits(1000, 3, 2), dominantLogits(1000, 4, 11)];
        const p = plantLogits(dev(), 'bf16', Array.from({ length: B }, (_, b) => shapes[b % 3]), { D: 64 });
        try {
          await compare(p, B, S, 3, { logprobs: true });
        } finally {
          p.dispose();
        }
      });
    }

    test('V = 128256, B = 99, numSamples 3: near-flat rows through the extra pass, topLogprobs 5', async () => {
      const V = 128256;
      const flats = [flatLogits(V, 3, 4), flatLogits(V, 4, 2)];
      const others = [zipfLogits(V, 1.0, 6), dominantLogits(V, 7, 14)];
      const rows = Array.from({ length: 99 }, (_, b) => (b % 5 < 2 ? flats[b % 2] : others[b % 2]));
      const p = plantLogits(dev(), 'bf16', rows, { D: 8 });
      try {
        const fallbackRows = await compare(p, 99, 3, scaled(2, 2), { logprobs: true, topLogprobs: 5 });
        // the unfiltered rows (one in eight) and the flat top-p / min-p rows need the whole row
        if (devName === 'cuda') expect(fallbackRows).toBeGreaterThanOrEqual(12);
      } finally {
        p.dispose();
      }
    });

    // Above the CPU's 1024 candidates a top-p or min-p row also keeps its running winners (its kept
    // set may prove to be the whole row); where the filters cut, the draw must come from the kept
    // candidates instead. Zipf rows of s = 2 put top-p 0.9's and min-p 0.05's cuts a few tokens in,
    // leaving ~10 % of the mass outside: a winner over the whole row would differ that often.
    test('V = 2000, B = 8, numSamples 4: nuclei within the candidates, winners over more tokens', async () => {
      const rows = Array.from({ length: 8 }, (_, b) => zipfLogits(2000, 2, 40 + b));
      const p = plantLogits(dev(), 'bf16', rows, { D: 16 });
      try {
        await compare(p, 8, 4, 2, { logprobs: true });
      } finally {
        p.dispose();
      }
    });

    // No filter in the call: every sampled row's samples need its whole row (the extra pass, from the
    // logits every row stores), or the chunked path (topLogprobs at B > 128).
    const unfiltered = (B: number, offset: number, S: number, extra: SampleOptions): SampleOptions => ({
      seed: BigUint64Array.from({ length: B }, (_, b) => BigInt(3000 + b)),
      offset,
      temperature: Float32Array.from({ length: B }, (_, b) => (b % 5 === 2 ? 0 : 0.6 + 0.2 * (b % 3))),
      numSamples: S,
      ...extra,
    });
    for (const [B, V, S, extra] of [
      [3, 1000, 4, { logprobs: true }],
      [40, 1000, 3, { logprobs: true, topLogprobs: 4 }],
      [130, 1000, 2, { logprobs: true, topLogprobs: 2 }],
      [20, 128256, 2, { logprobs: true, logprobsMode: 'raw' }],
    ] as const) {
      test(`no filters, V = ${V}, B = ${B}, numSamples ${S}: ${Object.keys(extra).join(', ')}, a mask`, async () => {
        const shapes = [zipfLogits(V, 1.1, 7), flatLogits(V, 3, 5), dominantLogits(V, 4, 12)];
        const p = plantLogits(dev(), 'bf16', Array.from({ length: B }, (_, b) => shapes[b % 3]), { D: 64 });
        try {
          const allowedTokens = makeMask(B, V, (b, v) => b % 4 !== 1 || v % 3 !== 0);
          const fallbackRows = await compare(p, B, S, 2, { ...extra, allowedTokens }, unfiltered);
          if (devName === 'cuda' && !('topLogprobs' in extra && B > 128)) expect(fallbackRows).toBeGreaterThan(0);
        } finally {
          p.dispose();
        }
      });
    }

    test('V = 111 (f16), B = 3, numSamples 5, raw logprobs: logprobs of the raw distribution', async () => {
      const rows = [zipfLogits(111, 1.2, 1), flatLogits(111, 2, 1), dominantLogits(111, 3, 6)];
      const p = plantLogits(dev(), 'f16', rows, { D: 16 });
      try {
        await compare(p, 3, 5, 3, { logprobs: true, logprobsMode: 'raw', topLogprobs: 3 });
      } finally {
        p.dispose();
      }
    });
  });

  // 256 identical rows × 16 samples × 256 offsets on the GPU (1 M draws), × 128 on the CPU (524 K):
  // the top token's probability under T 0.8, top-k 50, top-p 0.95 of a Zipf(1.1) row is ~0.35, so a
  // 1 % relative bias is 7 sd on the GPU and 5 on the CPU.
  test('chi-square vs float64: numSamples 16, 256 rows of V = 1000 under top-k 50 + top-p 0.95 at T 0.8', async () => {
    const V = 1000;
    const l = zipfLogits(V, 1.1, 23);
    const p = plantLogits(dev(), 'bf16', Array.from({ length: 256 }, () => l), { D: 64 });
    const spec: FilterSpec = { temperature: 0.8, topK: 50, topP: 0.95 };
    try {
      const pooled = new Float64Array(V);
      const calls = scaled(devName === 'cuda' ? 256 : 128, 1024);
      for (let c = 0; c < calls; c++) {
        const res = await sampleFused(p.H, p.W, { ...rowOptions(256, spec, c), numSamples: 16 });
        for (const counts of rowCounts(res.tokens, 256, 16, V)) addInto(pooled, counts);
      }
      const gof = goodnessOfFit(pooled, keptDistribution(p.logits[0], spec).probs);
      expect(gof.ok ? 'ok' : gof.summary).toBe('ok');
    } finally {
      p.dispose();
    }
  });
});
