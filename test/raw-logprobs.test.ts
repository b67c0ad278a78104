// logprobsMode 'raw' (issue 20; SEMANTICS §4): logprobs and topLogprobs of softmax(softcap(logits)),
// the model's bias included, before the listed tokens' steps, the mask, the temperature and the
// filters, checked against float64 on planted logits, on every path that reports logprobs (the
// one-pass and chunked fused paths, the extra pass, the reference, the engine's sampler).

import type { Device, SampleOptions } from '../lib/index';
import { sampleFused, sampleReference } from '../lib/index';
import {
  agreement,
  describeDevices,
  failure,
  flatLogits,
  gaussianLogits,
  keptDistribution,
  makeMask,
  plantLogits,
  zipfLogits,
} from './helpers';

/** Every reported logprob and top list of `res` against the raw model of each row. */
function expectRaw(
  res: { tokens: Int32Array; logprobs?: Float32Array; topTokens?: Int32Array; topLogprobs?: Float32Array },
  logits: ArrayLike<number>[], softcap: number, S: number, n: number,
) {
  const raw = new Map<ArrayLike<number>, ReturnType<typeof keptDistribution>>();  // (rows repeat)
  logits.forEach((row, b) => {
    // the raw distribution: softcap only, T = 1, no mask, no lists, no filters
    if (!raw.has(row)) raw.set(row, keptDistribution(row, { softcap }));
    const m = raw.get(row)!;
    for (let j = 0; j < S; j++) {
      const t = res.tokens[b * S + j];
      const want = m.logprob[t];
      const got = res.logprobs![b * S + j];
      if (want === -Infinity) expect({ b, j, got }).toEqual({ b, j, got: -Infinity });
      else expect({ b, j, err: Math.abs(got - want) < 1e-4 }).toEqual({ b, j, err: true });
    }
    for (let i = 0; i < n; i++) {
      const t = i < m.order.length ? m.order[i] : -1;
      expect({ b, i, token: res.topTokens![b * n + i] }).toEqual({ b, i, token: t });
      const got = res.topLogprobs![b * n + i];
      if (t < 0) expect(got).toBe(-Infinity);
      else expect({ b, i, err: Math.abs(got - m.logprob[t]) < 1e-4 }).toEqual({ b, i, err: true });
    }
  });
}

describeDevices((devName, dev) => {
  // Rows with a temperature, greedy rows, top-k, top-p and min-p, a softcap, a mask that hides each
  // row's raw favourite, a logit bias and penalties: none of them moves the raw distribution.
  // topLogprobs 0 takes the one-pass path's tile statistics (no stored rows) on Hopper; D = 12 the
  // drawn tokens' dot products without 16-byte loads
  for (const [V, dtype, S, n] of [[1000, 'bf16', 1, 4], [1000, 'bf16', 1, 0], [111, 'f16', 1, 4], [111, 'f16', 1, 0],
    [1000, 'f32', 1, 4], [1000, 'bf16', 3, 4], [1000, 'bf16', 3, 0]] as const) {
    test(`V = ${V}, ${dtype}, numSamples ${S}, topLogprobs ${n}: raw logprobs and topLogprobs ignore the lists, mask, temperature and filters`, async () => {
      const B = 6;
      const shapes = [zipfLogits(V, 1.1, 3), flatLogits(V, 4, 2), zipfLogits(V, 0.7, 5)];
      const logits = Array.from({ length: B }, (_, b) => shapes[b % 3]);
      const p = plantLogits(dev(), dtype, logits, { D: V === 111 ? 12 : 8 });
      const favourite = logits.map((row) => keptDistribution(row, { softcap: 12 }).order[0]);
      try {
        const o: SampleOptions = {
          seed: BigUint64Array.from({ length: B }, (_, b) => BigInt(70 + b)),
          numSamples: S,
          temperature: Float32Array.from({ length: B }, (_, b) => (b === 4 ? 0 : 0.6 + 0.2 * b)),
          topK: Int32Array.from({ length: B }, (_, b) => (b === 1 ? 20 : 0)),
          topP: Float32Array.from({ length: B }, (_, b) => (b === 2 ? 0.8 : 1)),
          minP: Float32Array.from({ length: B }, (_, b) => (b === 3 ? 0.05 : 0)),
          softcap: 12,
          allowedTokens: makeMask(B, V, (b, v) => v !== favourite[b]),
          logitBias: { rowOffsets: Int32Array.from([0, 1, 1, 2, 2, 2, 2]), tokenIds: Int32Array.from([5, 9]), values: Float32Array.from([3, -2]) },
          penaltyTokens: {
            rowOffsets: Int32Array.from([0, 0, 2, 2, 3, 3, 3]), tokenIds: Int32Array.from([7, 8, 11]),
            outputCounts: Int32Array.from([2, 0, 1]), inPrompt: Uint8Array.from([0, 1, 0]),
          },
          repetitionPenalty: 1.3,
          frequencyPenalty: 0.5,
          logprobs: true,
          topLogprobs: n,
        };
        for (let offset = 0; offset < 3; offset++) {
          const processed = await sampleFused(p.H, p.W, { ...o, offset });
          const raw = await sampleFused(p.H, p.W, { ...o, offset, logprobsMode: 'raw' });
          // the mode changes what is reported, never what is drawn
          expect(Array.from(raw.tokens)).toEqual(Array.from(processed.tokens));
          for (let b = 0; b < B; b++) for (let j = 0; j < S; j++) expect(raw.tokens[b * S + j]).not.toBe(favourite[b]);
          expectRaw(raw, p.logits, 12, S, n);
          const ref = await sampleReference(p.H, p.W, { ...o, offset, logprobsMode: 'raw', method: 'gumbel' });
          expect(agreement(ref.tokens, raw.tokens)).toBe(1);
          expectRaw(ref, p.logits, 12, S, n);
        }
      } finally {
        p.dispose();
      }
    });
  }

  test('rows through the extra pass (V = 3001, top-p 0.99 of near-flat rows) report raw logprobs', async () => {
    const V = 3001;
    const flats = [flatLogits(V, 8, 3), flatLogits(V, 9, 3)];
    const logits = Array.from({ length: 16 }, (_, b) => flats[b % 2]);
    const p = plantLogits(dev(), 'bf16', logits, { D: 8, biasLogits: flatLogits(V, 9, 1) });
    try {
      for (const n of [3, 0]) {
        const o: SampleOptions = { seed: 5n, bias: p.bias, temperature: 2, topP: 0.99, logprobs: true, topLogprobs: n, logprobsMode: 'raw' };
        const res = await sampleFused(p.H, p.W, o);
        if (devName === 'cuda') expect(res.fallbackRows).toBeGreaterThan(0);
        expectRaw(res, p.logits, 0, 1, n);
      }
    } finally {
      p.dispose();
    }
  });

  // 99 rows with their own seeds and options against the same rows drawn one at a time: the raw
  // logprobs and top tokens of a row do not depend on its batch slot or the batch size.
  test('B = 99 at V = 128256 (CPU: 4099), D = 64: each row reports what it reports alone, within 1e-6', async () => {
    const V = devName === 'cuda' ? 128256 : 4099, B = 99;
    const shapes = [zipfLogits(V, 1.1, 1), gaussianLogits(V, 2, 3), flatLogits(V, 3, 2)];
    const logits = Array.from({ length: B }, (_, b) => shapes[b % 3]);
    const options = (rows: number[], n: number): SampleOptions => ({
      seed: BigUint64Array.from(rows, (b) => BigInt(1000 + b)),
      temperature: Float32Array.from(rows, (b) => (b % 7 === 3 ? 0 : 0.5 + (b % 5) * 0.2)),
      topK: Int32Array.from(rows, (b) => (b % 4 === 1 ? 40 : 0)),
      topP: Float32Array.from(rows, (b) => (b % 4 === 2 ? 0.9 : 1)),
      logprobs: true, topLogprobs: n, logprobsMode: 'raw',
    });
    const all = plantLogits(dev(), 'bf16', logits, { D: 64 });
    try {
      for (const n of [0, 5]) {
        const res = await sampleFused(all.H, all.W, options(Array.from({ length: B }, (_, b) => b), n));
        expectRaw(res, all.logits, 0, 1, n);
        for (const b of [0, 1, 2, 3, 50, 98]) {
          const one = plantLogits(dev(), 'bf16', [logits[b]], { D: 64 });
          try {
            const alone = await sampleFused(one.H, one.W, options([b], n));
            expect({ b, token: res.tokens[b] }).toEqual({ b, token: alone.tokens[0] });
            expect({ b, close: Math.abs(res.logprobs![b] - alone.logprobs![0]) <= 1e-6 }).toEqual({ b, close: true });
            if (n > 0) expect(Array.from(res.topTokens!.subarray(b * n, b * n + n))).toEqual(Array.from(alone.topTokens!));
          } finally {
            one.dispose();
          }
        }
      }
    } finally {
      all.dispose();
    }
  });

  test('+Inf logits: the raw distribution is uniform over them, whatever the mask lets the row draw', async () => {
    const V = 1000;
    const row = Float64Array.from(zipfLogits(V, 1, 2), (x, v) => (v === 7 || v === 500 ? Infinity : x));
    const p = plantLogits(dev(), 'bf16', [row, row, row], { D: 8 });
    try {
      // row 1 may not draw the +Inf tokens: it draws a finite one, of raw probability 0
      const allowedTokens = makeMask(3, V, (b, v) => b !== 1 || (v !== 7 && v !== 500));
      for (const n of [3, 0]) {
        const res = await sampleFused(p.H, p.W, { seed: 3n, allowedTokens, logprobs: true, topLogprobs: n, logprobsMode: 'raw' });
        expect([7, 500]).toContain(res.tokens[0]);
        expect(res.logprobs![0]).toBeCloseTo(-Math.log(2), 5);
        expect(res.logprobs![1]).toBe(-Infinity);
        if (n > 0) expect(Array.from(res.topTokens!.subarray(3, 6))).toEqual([7, 500, -1]);
        expectRaw(res, p.logits, 0, 1, n);
      }
    } finally {
      p.dispose();
    }
  });

  // The GPU sums a row in slices of 4096 values, one block each, and merges them: a row's max, its
  // +Inf values or all its finite values may sit in any slice, the last one partial (V = 12289).
  test('rows over several slices (V = 12289): max, ties, +Inf and -Inf in later slices, one-pass, chunked and reference', async () => {
    const V = 12289;
    const peaked = Float64Array.from(flatLogits(V, 6, 3), (x, v) => (v === 12288 ? 14 : v === 5000 ? 12 : x));
    // the third row: values in [0, 0.05) rounded to bf16, so ties between slices break by index
    const logits = [peaked, zipfLogits(V, 1.1, 4), flatLogits(V, 7, 0.05)];
    for (const dtype of ['bf16', 'f32'] as const) {  // bf16: the one-pass path on Hopper; f32: the chunked path
      const p = plantLogits(dev(), dtype, logits, { D: 8 });
      try {
        for (const n of [0, 5, 40]) {  // 5: from each slice's top keys; 40: the row's bucketing pass
          const o: SampleOptions = { seed: 9n, temperature: 0.7, topK: 40, logprobs: true, topLogprobs: n, logprobsMode: 'raw' };
          expectRaw(await sampleFused(p.H, p.W, o), p.logits, 0, 1, n);
          expectRaw(await sampleFused(p.H, p.W, { seed: 9n, logprobs: true, topLogprobs: n, logprobsMode: 'raw' }), p.logits, 0, 1, n);
          expectRaw(await sampleReference(p.H, p.W, { ...o, method: 'gumbel' }), p.logits, 0, 1, n);
        }
      } finally {
        p.dispose();
      }
    }
    // the model's bias: -Inf over the whole first slice, then +Inf on the last value alone
    const row = zipfLogits(V, 0.9, 5);
    const firstOut = Float64Array.from({ length: V }, (_, v) => (v < 4096 ? -Infinity : 0));
    const lastInf = Float64Array.from({ length: V }, (_, v) => (v === 12288 ? Infinity : 0));
    for (const biasLogits of [firstOut, lastInf]) {
      const p = plantLogits(dev(), 'bf16', [row, row], { D: 8, biasLogits });
      try {
        for (const n of [3, 0]) {
          const res = await sampleFused(p.H, p.W, { seed: 2n, bias: p.bias, logprobs: true, topLogprobs: n, logprobsMode: 'raw' });
          if (biasLogits === lastInf) expect(Array.from(res.tokens)).toEqual([12288, 12288]);
          expectRaw(res, p.logits, 0, 1, n);
        }
      } finally {
        p.dispose();
      }
    }
  });

  for (const n of [2, 0]) {
    test(`the engine's sampler created with logprobsMode 'raw', topLogprobs ${n}, reports what sampleFused reports (in a graph on CUDA)`, async () => {
      const d: Device = dev();
      const V = 1000;
      const logits = [zipfLogits(V, 1.1, 1), flatLogits(V, 2, 2), zipfLogits(V, 0.8, 3)];
      const p = plantLogits(d, 'bf16', logits, { D: 8 });
      const sampler = d.createSampler({
        maxBatch: 4, vocab: V, hidden: 8, dtype: 'bf16', filters: ['topK'], logprobs: true, topLogprobs: n, logprobsMode: 'raw',
      });
      expect(sampler.logprobsMode).toBe('raw');
      const seed = BigUint64Array.from([11n, 12n, 13n]);
      sampler.setRows(0, { seed, temperature: Float32Array.from([0.7, 1, 0]), topK: Int32Array.from([5, 0, 0]) });
      const out = d.empty([3], 'i32');
      const lp = d.empty([3], 'f32');
      const tt = n > 0 ? d.empty([3 * n], 'i32') : undefined;
      const tl = n > 0 ? d.empty([3 * n], 'f32') : undefined;
      const graph = devName === 'cuda' ? d.captureGraph(() => sampler.enqueue({ H: p.H, W: p.W, out, logprobsOut: lp, topTokensOut: tt, topLogprobsOut: tl })) : undefined;
      try {
        if (graph) graph.launch();
        else sampler.enqueue({ H: p.H, W: p.W, out, logprobsOut: lp, topTokensOut: tt, topLogprobsOut: tl });
        await d.synchronize();
        const want = await sampleFused(p.H, p.W, {
          seed, temperature: Float32Array.from([0.7, 1, 0]), topK: Int32Array.from([5, 0, 0]), logprobs: true, topLogprobs: n, logprobsMode: 'raw',
        });
        expect(Array.from((await out.toArray()) as Int32Array)).toEqual(Array.from(want.tokens));
        const got = {
          tokens: (await out.toArray()) as Int32Array, logprobs: (await lp.toArray()) as Float32Array,
          topTokens: tt ? (await tt.toArray()) as Int32Array : undefined, topLogprobs: tl ? (await tl.toArray()) as Float32Array : undefined,
        };
        got.logprobs.forEach((x, i) => expect(x).toBeCloseTo(want.logprobs![i], 5));
        expectRaw(got, p.logits, 0, 1, n);
      } finally {
        graph?.dispose();
        for (const t of [out, lp, tt, tl]) t?.dispose();
        sampler.dispose();
        p.dispose();
      }
    });
  }

  test('bad logprobsMode values are clear errors; a shard takes raw logprobs', async () => {
    const p = plantLogits(dev(), 'f32', [zipfLogits(111, 1, 1)], { D: 8 });
    try {
      expect((await failure(() => sampleFused(p.H, p.W, { logprobsMode: 'logits' as never }))).message)
        .toMatch(/^logprobsMode: expected 'processed' or 'raw', got "logits"$/);
      expect(() => dev().createSampler({ maxBatch: 1, vocab: 111, hidden: 8, dtype: 'f32', logprobsMode: 1 as never }))
        .toThrow(/^logprobsMode: expected 'processed' or 'raw', got 1$/);
      // (what the shards report: test/parallel.test.ts)
      const state = await sampleFused(p.H, p.W, { partial: true, vocabOffset: 0, vocabSize: 111, logprobs: true, logprobsMode: 'raw' } as never);
      expect(state.rawTop).toBe(0);
      state.dispose();
    } finally {
      p.dispose();
    }
  });
});
