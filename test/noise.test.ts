// The noise: Philox4x32-10 known answers, the Gumbel transform, and the native samplers against an
// independent JS model of docs/SEMANTICS.md §3 (counter layout, streams, seeds and offsets).

import { philox4x32_10, gumbelFromBits, open } from '../lib/index';
import {
  philoxRef,
  uniformOf,
  gumbelOf,
  noiseRef,
  gumbelTokenRef,
  inverseCdfTokenRef,
  plantLogits,
  zipfLogits,
  flatLogits,
  draw,
  agreement,
  describeDevices,
  chiSquareSurvival,
  rng,
  ALPHA,
} from './helpers';

// Random123 known-answer vectors (kat_vectors, philox4x32_10).
const KAT: { counter: [number, number, number, number]; key: [number, number]; out: number[] }[] = [
  { counter: [0, 0, 0, 0], key: [0, 0], out: [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8] },
  {
    counter: [0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff],
    key: [0xffffffff, 0xffffffff],
    out: [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
  },
  {
    counter: [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
    key: [0xa4093822, 0x299f31d0],
    out: [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
  },
];

describe('philox4x32_10 (exported JS reference)', () => {
  test.each(KAT.map((k, i) => [i, k] as const))('Random123 known answer #%i', (_i, k) => {
    const got = philox4x32_10(k.counter, k.key).map((x) => x >>> 0);
    expect(got.map((x) => x.toString(16))).toEqual(k.out.map((x) => x.toString(16)));
  });

  test('the test-side model reproduces the known answers too (so it can judge the native noise)', () => {
    for (const k of KAT) expect(philoxRef(k.counter, k.key)).toEqual(k.out);
  });

  test('returns four uint32 in [0, 2^32) and agrees with the test model on 2000 random inputs', () => {
    const r = rng(7);
    const u32 = () => Math.floor(r() * 4294967296) >>> 0;
    for (let i = 0; i < 2000; i++) {
      const c: [number, number, number, number] = [u32(), u32(), u32(), u32()];
      const k: [number, number] = [u32(), u32()];
      const got = philox4x32_10(c, k);
      const want = philoxRef(c, k);
      if (got.length !== 4 || got.some((x, j) => !(Number.isInteger(x) && x >= 0 && x < 2 ** 32) || x !== want[j])) {
        throw new Error(`mismatch at counter ${c} key ${k}: ${got} vs ${want}`);
      }
    }
  });

  test('a one-bit change of the counter or key changes about half of the output bits (avalanche)', () => {
    const popcount = (x: number) => {
      let n = 0;
      for (let v = x >>> 0; v; v >>>= 1) n += v & 1;
      return n;
    };
    let flips = 0;
    let trials = 0;
    for (let bit = 0; bit < 32; bit++) {
      const base = philox4x32_10([1, 2, 3, 4], [5, 6]);
      const c = philox4x32_10([(1 ^ (1 << bit)) >>> 0, 2, 3, 4], [5, 6]);
      const k = philox4x32_10([1, 2, 3, 4], [5, (6 ^ (1 << bit)) >>> 0]);
      for (let j = 0; j < 4; j++) {
        flips += popcount(base[j] ^ c[j]) + popcount(base[j] ^ k[j]);
        trials += 64;
      }
    }
    expect(flips / trials).toBeGreaterThan(0.45);
    expect(flips / trials).toBeLessThan(0.55);
  });
});

describe('Gumbel transform (SEMANTICS §3, modelled in float32)', () => {
  test('u is never 0 or 1, even at x = 0 and x = 2^32 − 1', () => {
    expect(uniformOf(0)).toBeGreaterThan(0);
    expect(uniformOf(0)).toBe(2 ** -33);
    expect(uniformOf(0xffffffff)).toBeLessThan(1);
    expect(uniformOf(0xffffffff)).toBe(1 - 2 ** -24);
  });

  test('g is finite at both ends and monotone non-increasing in x (g = −log(−log(1 − u))), model and native', () => {
    // x = 0: u = 2^-33, E ≈ 2^-33, g ≈ 33·ln 2 = 22.87; x = 2^32 − 1: u = 1 − 2^-24, E = 24·ln 2, g ≈ −2.81
    for (const g of [gumbelOf, gumbelFromBits]) {
      expect(g(0)).toBeCloseTo(33 * Math.LN2, 4);
      expect(g(0xffffffff)).toBeCloseTo(-Math.log(24 * Math.LN2), 4);
      let prev = Infinity;
      for (let i = 0; i <= 4096; i++) {
        const gx = g(Math.min(0xffffffff, i * 1048576));
        expect(Number.isFinite(gx)).toBe(true);
        expect(gx).toBeLessThanOrEqual(prev);
        prev = gx;
      }
    }
  });

  test('native g over native Philox output has the standard Gumbel mean (γ) and variance (π²/6)', () => {
    // 400k draws: sd of the mean = sqrt(1.645 / 4e5) = 2.0e-3, tolerance 5 sd.
    const n = 400000;
    let s = 0;
    let s2 = 0;
    for (let i = 0; i < n / 4; i++) {
      for (const x of philox4x32_10([i, 0, 0, 0], [42, 0])) {
        const g = gumbelFromBits(x); // the native transform
        s += g;
        s2 += g * g;
      }
    }
    const mean = s / n;
    const variance = s2 / n - mean * mean;
    expect(Math.abs(mean - 0.5772156649)).toBeLessThan(5 * Math.sqrt(1.6449 / n));
    // var of the sample variance of a Gumbel: (μ4 − σ⁴)/n with excess kurtosis 12/5
    const sdVar = Math.sqrt(((2 + 2.4) * 1.6449 ** 2) / n);
    expect(Math.abs(variance - Math.PI ** 2 / 6)).toBeLessThan(5 * sdVar);
  });

  test('the upper tail is right: P(g > t) = 1 − exp(−e^−t) for t = 3, 6, 9 (the winners live there)', () => {
    // 1M draws; P(g > 9) = 1.23e-4 → expected 123, sd 11; tolerance 5 sd on each.
    const n = 1000000;
    const ts = [3, 6, 9];
    const counts = [0, 0, 0];
    for (let i = 0; i < n / 4; i++) {
      for (const x of philox4x32_10([i, 1, 2, 3], [0xdeadbeef, 7])) {
        const g = gumbelFromBits(x); // the native transform
        for (let k = 0; k < 3; k++) if (g > ts[k]) counts[k]++;
      }
    }
    for (let k = 0; k < 3; k++) {
      const p = 1 - Math.exp(-Math.exp(-ts[k]));
      const e = n * p;
      expect(Math.abs(counts[k] - e)).toBeLessThan(5 * Math.sqrt(e));
    }
  });

  test('the exported native gumbelFromBits equals the float32 model (log1pf within 2 ulp, then logf), extremes included', () => {
    // g = −log(E): an error of k ulp in E (relative k·2^-24) becomes an absolute error k·2^-24 in g.
    // The model rounds E correctly; glibc's log1pf may be 1–2 ulp off. Tolerance: 3·2^-24 + 1 ulp(g).
    // A fast-math log (absolute error ~2^-21) fails it.
    const xs = [0, 1, 2, 255, 256, 0x7fffffff, 0x80000000, 0xfffffeff, 0xffffff00, 0xffffff7f, 0xffffff80, 0xfffffffe, 0xffffffff];
    const r = rng(5);
    for (let i = 0; i < 20000; i++) xs.push(Math.floor(r() * 4294967296) >>> 0);
    for (let i = 0; i < 2000; i++) xs.push((0xffffffff - i * 97) >>> 0, i * 131); // both tails
    for (const x of xs) {
      const got = gumbelFromBits(x);
      const want = gumbelOf(x);
      const tol = 3 * 2 ** -24 + Math.max(Math.abs(want) * 2 ** -23, 2 ** -126);
      if (!(Math.abs(got - want) <= tol)) throw new Error(`gumbelFromBits(${x}) = ${got}, model ${want}`);
    }
  });

  test('the epilogue\'s mask bound holds: g(x) ≤ 32·ln 2 − ln x + 2e-7 for x ≥ 1, g(0) ≤ 33·ln 2 (common.cuh, noise_bits_can_reach)', () => {
    // The kernels skip the logarithms of a value when x > exp(l/T − t + 32 ln 2 + 1e-3): exact only if
    // the native g never exceeds 32 ln 2 − ln x by more than the 1e-3 margin less ex2.approx's and the
    // roundings' share (< 1e-5). The largest excess sits at small x (u's half-step) and in the top tail.
    const xs = [1, 2, 3, 255, 256, 0x7fffff, 0x800000, 0x800001, 0xffffff, 0x1000000, 0x1000001, 0x7fffffff, 0x80000000, 0xffffff7f, 0xffffff80, 0xfffffffe, 0xffffffff];
    const r = rng(11);
    for (let i = 0; i < 20000; i++) xs.push(1 + (Math.floor(r() * 4294967295) >>> 0));
    for (let i = 1; i < 4000; i++) xs.push(i, (0xffffffff - i * 89) >>> 0, (2 ** (1 + (i % 31)) + (i % 7) - 3) >>> 0);
    let worst = -Infinity;
    for (const x of xs) {
      if (x < 1) continue;
      const excess = gumbelFromBits(x) - (32 * Math.LN2 - Math.log(x));
      worst = Math.max(worst, excess);
    }
    expect(worst).toBeLessThanOrEqual(1e-3 - 1e-5);
    // and it is tight: around x = 2^10 … 2^20 the excess comes within 1e-3 of 0 (−0.41 at x = 1,
    // −2.8 at the top, where E = −log1p(−u) is far above u)
    expect(worst).toBeGreaterThan(-1e-3);
    expect(gumbelFromBits(0)).toBeLessThanOrEqual(33 * Math.LN2 + 1e-3);
  });

  test('the mask test as the kernels compute it in float never drops a value that ties the threshold, at T 1 … 0.001 (and the fixed 1e-3 margin alone does)', () => {
    // A float model of common.cuh's noise_bits_limit_intercept / noise_bits_can_reach: every
    // operation rounded to float32, ex2.approx taken at its worst (2^-22 low). The hardest case is
    // a value whose own score is the threshold t (a tie the smaller index may win): it must pass.
    const f = Math.fround;
    const fmaf = (a: number, b: number, c: number) => f(a * b + c);
    const kLog2e = f(1.44269504);
    const passes = (x: number, l: number, invT: number, t: number, scaled: boolean) => {
      const margin = scaled ? fmaf(f(Math.abs(t) + 32), 2 ** -20, f(1e-3)) : f(1e-3);
      const intercept = f(f(f(f(f(32) * f(0.69314718)) + margin) - t) * kLog2e);
      const slope = f(invT * kLog2e);
      let limit = f(2 ** fmaf(l, slope, intercept) * (1 - 2 ** -22));
      if (limit < 2 ** -126) limit = 0;
      return f(x) <= limit;
    };
    const r = rng(23);
    let missedFixed = 0;
    for (const T of [1, 0.5, 0.1, 0.01, 0.001]) {
      const invT = f(1 / f(T));
      for (let i = 0; i < 20000; i++) {
        const x = i % 4 === 0 ? (Math.floor(r() * 4294967296) >>> 0) : (Math.floor(r() * 2 ** (1 + (i % 32))) >>> 0);
        const l = f((r() * 2 - 1) * 40);
        const t = fmaf(l, invT, gumbelFromBits(x)); // this value's own score
        if (!passes(x, l, invT, t, true)) throw new Error(`dropped: T ${T}, l ${l}, x ${x}, t ${t}`);
        if (!passes(x, l, invT, t, false)) missedFixed++;
      }
    }
    expect(missedFixed).toBeGreaterThan(0); // the model can see the roundings that 3889d80 covers
  });
});

// The native samplers must draw the noise of SEMANTICS §3. The model computes log1pf/logf as
// correctly rounded float64, so a 1-ulp difference can flip a near-tie: agreement ≥ 99.9% (the
// counter layout being wrong anywhere gives ~1/V agreement).
describeDevices((devName, dev) => {
  describe('native noise equals the SEMANTICS §3 model', () => {
    const V = 111;
    const S = 64;
    const cases: { label: string; seed: bigint | BigUint64Array; offset: bigint | BigUint64Array }[] = [
      { label: 'call seed, small', seed: 1n, offset: 0n },
      { label: 'call seed > 2^32, offset > 2^32', seed: 0x123456789abcdefn, offset: 0xfedcba9876543n },
      { label: 'per-row seeds and offsets', seed: new BigUint64Array([3n, 2n ** 63n + 5n, 77n]), offset: new BigUint64Array([0n, 2n ** 40n, 9n]) },
    ];
    for (const c of cases) {
      for (const sampler of ['fused', 'reference-gumbel', 'reference-inverse-cdf'] as const) {
        test(`${sampler}: ${c.label}`, async () => {
          const rows = [zipfLogits(V, 1, 1), flatLogits(V, 2, 2), zipfLogits(V, 0.5, 3)];
          const p = plantLogits(dev(), 'f32', rows);
          try {
            const res = await draw(sampler, p.H, p.W, { seed: c.seed, offset: c.offset, numSamples: S, temperature: 1 });
            const perRow = typeof c.seed !== 'bigint';
            const expected = new Int32Array(3 * S);
            for (let b = 0; b < 3; b++) {
              const seed = typeof c.seed === 'bigint' ? c.seed : c.seed[b];
              const offset = typeof c.offset === 'bigint' ? c.offset : c.offset[b];
              const stream = perRow ? 0 : b;
              for (let j = 0; j < S; j++) {
                expected[b * S + j] =
                  sampler === 'reference-inverse-cdf'
                    ? inverseCdfTokenRef(p.logits[b], 1, seed, offset, stream, j)
                    : gumbelTokenRef(p.logits[b], 1, seed, offset, stream, j);
              }
            }
            expect(agreement(res.tokens, expected)).toBeGreaterThanOrEqual(0.999);
          } finally {
            p.dispose();
          }
        });
      }
    }

    test('the noise of one (seed, offset, stream, sample, v) is what the model says: a planted tie is decided by g alone', async () => {
      // Two tokens with equal logits (every other token -Inf through a huge negative logit): the
      // winner is the one with the larger Gumbel noise.
      const V2 = 37;
      const logits = new Float64Array(V2).fill(-1e4);
      logits[5] = 0;
      logits[30] = 0;
      const p = plantLogits(dev(), 'f32', [logits]);
      try {
        const S2 = 512;
        const res = await draw('fused', p.H, p.W, { seed: 99n, offset: 3n, numSamples: S2 });
        let same = 0;
        for (let j = 0; j < S2; j++) {
          const want = noiseRef(99n, 3n, 0, j, 5) >= noiseRef(99n, 3n, 0, j, 30) ? 5 : 30;
          if (res.tokens[j] === want) same++;
        }
        expect(same / S2).toBeGreaterThanOrEqual(0.998);
      } finally {
        p.dispose();
      }
    });
  });
});

test('chi-square survival function: known values', () => {
  // χ²(df=1) at 3.841 → 0.05; df=10 at 18.307 → 0.05; df=100 at 124.342 → 0.05; df=2 at x → e^{-x/2}
  expect(chiSquareSurvival(3.841458820694124, 1)).toBeCloseTo(0.05, 8);
  expect(chiSquareSurvival(18.307038053275146, 10)).toBeCloseTo(0.05, 8);
  expect(chiSquareSurvival(124.34211340400407, 100)).toBeCloseTo(0.05, 8);
  expect(chiSquareSurvival(7, 2)).toBeCloseTo(Math.exp(-3.5), 12);
  expect(chiSquareSurvival(1000, 100)).toBeLessThan(1e-100);
  expect(chiSquareSurvival(0.5, 100)).toBeCloseTo(1, 12);
  expect(ALPHA).toBe(1e-4);
  void open;
});
