// The engine's way in (issue 17): createSampler, setRows, enqueue with advanceOffset, readRows,
// against sampleFused with the same per-row seeds and offsets (the same tokens, bit for bit), a
// chi-square of the advancing draws against float64, the argument errors, and on CUDA the graphs:
// replays equal sequential calls, parameters rewritten between replays, what capture refuses,
// disposal while a graph holds things, external streams.

import { open, sampleFused, type Device, type Sampler, type SampleOptions, type Tensor } from '../lib/index';
import {
  addInto,
  cudaStatus,
  describeDevices,
  failure,
  goodnessOfFit,
  keptDistribution,
  plantLogits,
  rowCounts,
  safeTopP,
  zipfLogits,
  flatLogits,
} from './helpers';

interface RowSetup {
  temperature: Float32Array;
  seed: BigUint64Array;
  topK?: Int32Array;
  topP?: Float32Array;
  minP?: Float32Array;
}

/** Rows with a mix of filters: some rows filtered, some plain, one greedy. */
function mixedRows(B: number, filters: boolean): RowSetup {
  const rows: RowSetup = {
    temperature: Float32Array.from({ length: B }, (_, b) => (b % 5 === 4 ? 0 : 0.6 + 0.2 * (b % 3))),
    seed: BigUint64Array.from({ length: B }, (_, b) => BigInt(1000 + 7 * b)),
  };
  if (filters) {
    rows.topK = Int32Array.from({ length: B }, (_, b) => (b % 3 === 0 ? 0 : 5 + b));
    rows.topP = Float32Array.from({ length: B }, (_, b) => (b % 4 === 1 ? 1 : 0.8));
    rows.minP = Float32Array.from({ length: B }, (_, b) => (b % 2 === 0 ? 0 : 0.05));
  }
  return rows;
}

/** sampleFused's options for the same rows at decode step `step`. */
function referenceOptions(rows: RowSetup, step: number, extra: SampleOptions = {}): SampleOptions {
  const B = rows.seed.length;
  const o: SampleOptions = {
    ...extra,
    temperature: rows.temperature,
    seed: rows.seed,
    offset: new BigUint64Array(B).fill(BigInt(step)),
  };
  if (rows.topK) o.topK = rows.topK;
  if (rows.topP) o.topP = rows.topP;
  if (rows.minP) o.minP = rows.minP;
  return o;
}

function rowValues(rows: RowSetup) {
  const v: Record<string, unknown> = { temperature: rows.temperature, seed: rows.seed };
  if (rows.topK) v.topK = rows.topK;
  if (rows.topP) v.topP = rows.topP;
  if (rows.minP) v.minP = rows.minP;
  return v;
}

const CASES: { name: string; V: number; B: number; filters: boolean; numSamples?: number; logprobs?: boolean; topLogprobs?: number; filterOrder?: 'vllm' }[] = [
  { name: 'plain, V 1000, B 3', V: 1000, B: 3, filters: false },
  { name: 'top-k / top-p / min-p per row, V 1000, B 99', V: 1000, B: 99, filters: true },
  { name: "filterOrder 'vllm', top-k / top-p / min-p per row, V 1000, B 99", V: 1000, B: 99, filters: true, filterOrder: 'vllm' },
  { name: 'filters + logprobs, V 111, B 3', V: 111, B: 3, filters: true, logprobs: true },
  { name: 'numSamples 3, V 111, B 3', V: 111, B: 3, filters: false, numSamples: 3 },
  { name: 'topLogprobs 4 + logprobs, V 1000, B 1', V: 1000, B: 1, filters: false, logprobs: true, topLogprobs: 4 },
];

describeDevices((name, dev) => {
  describe('enqueue draws what sampleFused draws', () => {
    for (const c of CASES) {
      test(c.name, async () => {
        const d = dev();
        const logits = Array.from({ length: c.B }, (_, b) => (b % 2 ? zipfLogits(c.V, 1.1, b) : flatLogits(c.V, b, 3)));
        const p = plantLogits(d, 'bf16', logits, { D: Math.max(16, c.B) });
        const S = c.numSamples ?? 1;
        const n = c.topLogprobs ?? 0;
        const sampler = d.createSampler({
          maxBatch: c.B + 2, vocab: c.V, hidden: p.D, dtype: 'bf16', numSamples: S,
          filters: c.filters ? ['topK', 'topP', 'minP'] : [], logprobs: c.logprobs, topLogprobs: n, filterOrder: c.filterOrder,
        });
        const rows = mixedRows(c.B, c.filters);
        sampler.setRows(0, rowValues(rows));
        const out = d.empty([c.B * S], 'i32');
        const status = d.empty([c.B], 'i32');
        const lp = c.logprobs ? d.empty([c.B * S], 'f32') : undefined;
        const tt = n ? d.empty([c.B * n], 'i32') : undefined;
        const tl = n ? d.empty([c.B * n], 'f32') : undefined;
        for (let step = 0; step < 3; step++) {
          sampler.enqueue({ H: p.H, W: p.W, out, statusOut: status, logprobsOut: lp, topTokensOut: tt, topLogprobsOut: tl, advanceOffset: true });
          await d.synchronize();
          const want = await sampleFused(p.H, p.W, referenceOptions(rows, step, { numSamples: S, logprobs: c.logprobs, topLogprobs: n || undefined, filterOrder: c.filterOrder }));
          expect(Array.from((await out.toArray()) as Int32Array)).toEqual(Array.from(want.tokens));
          expect(Array.from((await status.toArray()) as Int32Array)).toEqual(new Array(c.B).fill(0));
          if (lp) {
            const got = (await lp.toArray()) as Float32Array;
            got.forEach((x, i) => expect(x).toBeCloseTo(want.logprobs![i], 5));
          }
          if (tt) {
            expect(Array.from((await tt.toArray()) as Int32Array)).toEqual(Array.from(want.topTokens!));
            const got = (await tl!.toArray()) as Float32Array;
            got.forEach((x, i) => expect(x).toBeCloseTo(want.topLogprobs![i], 5));
          }
        }
        const after = await sampler.readRows();
        expect(Array.from(after.offset.subarray(0, c.B))).toEqual(new Array(c.B).fill(3n));
        expect(Array.from(after.offset.subarray(c.B))).toEqual([0n, 0n]); // rows past the batch untouched
        expect(Array.from(after.seed.subarray(0, c.B))).toEqual(Array.from(rows.seed));
        for (const t of [out, status, lp, tt, tl]) t?.dispose();
        sampler.dispose();
        p.dispose();
      });
    }
  });

  test('without advanceOffset the draw repeats; with it, it moves on', async () => {
    const d = dev();
    const V = 1000;
    const p = plantLogits(d, 'f32', [flatLogits(V, 3, 0.5), flatLogits(V, 4, 0.5)], { D: 16 });
    const sampler = d.createSampler({ maxBatch: 2, vocab: V, hidden: 16, dtype: 'f32', numSamples: 8 });
    sampler.setRows(0, { seed: new BigUint64Array([11n, 12n]) });
    const out = d.empty([16], 'i32');
    const read = async () => {
      await d.synchronize();
      return Array.from((await out.toArray()) as Int32Array);
    };
    sampler.enqueue({ H: p.H, W: p.W, out });
    const a = await read();
    sampler.enqueue({ H: p.H, W: p.W, out });
    expect(await read()).toEqual(a);
    sampler.enqueue({ H: p.H, W: p.W, out, advanceOffset: true });
    expect(await read()).toEqual(a); // the advance happens after the draw
    sampler.enqueue({ H: p.H, W: p.W, out });
    expect(await read()).not.toEqual(a);
    sampler.dispose();
    p.dispose();
  });

  // 99 rows (independent seeds) × 64 samples × 40 advancing steps = 253,440 draws from one
  // distribution: a 1% relative bias of a token of p ≈ 0.2 is ~4 standard errors.
  test('advancing draws follow softmax(l / T) after top-p, chi-square against float64', async () => {
    const d = dev();
    const V = 111;
    const B = 99;
    const S = 64;
    const steps = 40;
    const l = zipfLogits(V, 0.9, 21);
    const p = plantLogits(d, 'f32', Array.from({ length: B }, () => l), { D: 8 });
    const sampler = d.createSampler({ maxBatch: B, vocab: V, hidden: 8, dtype: 'f32', numSamples: S, filters: ['topP'] });
    sampler.setRows(0, {
      seed: BigUint64Array.from({ length: B }, (_, b) => BigInt(5000 + b)),
      temperature: new Float32Array(B).fill(0.7),
      topP: new Float32Array(B).fill(0.9),
    });
    const out = d.empty([B * S], 'i32');
    const counts = new Float64Array(V);
    for (let step = 0; step < steps; step++) {
      sampler.enqueue({ H: p.H, W: p.W, out, advanceOffset: true });
      await d.synchronize();
      for (const row of rowCounts((await out.toArray()) as Int32Array, B, S, V)) for (let v = 0; v < V; v++) counts[v] += row[v];
    }
    const kept = keptDistribution(p.logits[0], { temperature: 0.7, topP: 0.9 });
    expect(kept.topPMargin).toBeGreaterThan(1e-3);
    const fit = goodnessOfFit(counts, kept.probs);
    expect(fit.summary).toBe(fit.ok ? fit.summary : 'a good fit');
    sampler.dispose();
    p.dispose();
  });

  // The three filters together at V 1000 (bf16): 99 rows × 128 samples × 32 advancing steps =
  // 405 K draws; the top token keeps p ~0.65, so a 1 % bias is ~8.6 sd.
  test('advancing draws follow float64 after top-k 20, top-p 0.95 and min-p 0.05 at V 1000', async () => {
    const d = dev();
    const V = 1000;
    const B = 99;
    const S = 128;
    const l = zipfLogits(V, 1.1, 77);
    const p = plantLogits(d, 'bf16', Array.from({ length: B }, () => l), { D: 8 });
    const spec = { temperature: 0.6, topK: 20, minP: 0.05 };
    const topP = safeTopP(p.logits[0], spec, 0.95);
    const sampler = d.createSampler({ maxBatch: B, vocab: V, hidden: 8, dtype: 'bf16', numSamples: S, filters: ['topK', 'topP', 'minP'] });
    sampler.setRows(0, {
      seed: BigUint64Array.from({ length: B }, (_, b) => BigInt(7000 + b)),
      temperature: new Float32Array(B).fill(spec.temperature),
      topK: new Int32Array(B).fill(spec.topK),
      topP: new Float32Array(B).fill(topP),
      minP: new Float32Array(B).fill(spec.minP),
    });
    const out = d.empty([B * S], 'i32');
    const counts = new Float64Array(V);
    for (let step = 0; step < 32; step++) {
      sampler.enqueue({ H: p.H, W: p.W, out, advanceOffset: true });
      await d.synchronize();
      for (const row of rowCounts((await out.toArray()) as Int32Array, B, S, V)) addInto(counts, row);
    }
    const fit = goodnessOfFit(counts, keptDistribution(p.logits[0], { ...spec, topP }).probs);
    expect(fit.summary).toBe(fit.ok ? fit.summary : 'a good fit');
    sampler.dispose();
    out.dispose();
    p.dispose();
  });

  describe('argument errors name the argument', () => {
    let s: Sampler;
    let H: Tensor, W: Tensor, out: Tensor;
    beforeAll(() => {
      const d = dev();
      s = d.createSampler({ maxBatch: 4, vocab: 100, hidden: 8, dtype: 'f32', filters: ['topK'] });
      H = d.tensor(new Float32Array(4 * 8), [4, 8], 'f32');
      W = d.tensor(new Float32Array(100 * 8), [100, 8], 'f32');
      out = d.empty([4], 'i32');
    });
    afterAll(() => {
      s.dispose();
      for (const t of [H, W, out]) t.dispose();
    });

    test('createSampler', () => {
      const d = dev();
      const ok = { maxBatch: 4, vocab: 100, hidden: 8, dtype: 'f32' as const };
      expect(() => d.createSampler({ ...ok, maxBatch: 0 })).toThrow(/^maxBatch: expected an integer in \[1, 65535\], got 0$/);
      expect(() => d.createSampler({ ...ok, maxBatch: 70000 })).toThrow(/maxBatch/);
      expect(() => d.createSampler({ ...ok, vocab: 1.5 })).toThrow(/^vocab: /);
      expect(() => d.createSampler({ ...ok, dtype: 'i32' as never })).toThrow(/^dtype: expected 'f32', 'f16' or 'bf16'/);
      expect(() => d.createSampler({ ...ok, filters: ['topX' as never] })).toThrow(/^filters: /);
      expect(() => d.createSampler({ ...ok, topLogprobs: 5000 })).toThrow(/^topLogprobs: /);
      expect(() => d.createSampler({ ...ok, softcap: -1 })).toThrow(/^softcap: /);
      expect(() => d.createSampler({ ...ok, filterOrder: 'tgi' as never })).toThrow(/^filterOrder: expected 'hf' or 'vllm', got "tgi"$/);
      expect(() => d.createSampler({ ...ok, logprob: true } as never)).toThrow(/unknown option "logprob"; did you mean "logprobs"/);
      expect(() => d.createSampler(null as never)).toThrow(/^config: expected an object/);
    });

    test('setRows', () => {
      expect(() => s.setRows(0, {})).toThrow(/^rows: expected at least one of/);
      expect(() => s.setRows(0, { temperature: [1, 2] as never })).toThrow(/^temperature: expected a Float32Array/);
      expect(() => s.setRows(0, { temperature: new Float32Array(2), seed: new BigUint64Array(3) })).toThrow(/^seed: expected 2 values/);
      expect(() => s.setRows(3, { temperature: new Float32Array(2) })).toThrow(/^rows: expected 1 \.\. 1 rows from row 3/);
      expect(() => s.setRows(-1, { temperature: new Float32Array(1) })).toThrow(/^first: /);
      expect(() => s.setRows(0, { temperature: new Float32Array([NaN]) })).toThrow(/^temperature\[0\]: expected a finite number >= 0 (.*), got NaN/);
      expect(() => s.setRows(0, { topK: new Int32Array([-1]) })).toThrow(/^topK\[0\]: /);
      expect(() => s.setRows(0, { topP: new Float32Array([0.5]) })).toThrow(/^topP: this sampler was created without 'topP'/);
      expect(() => s.setRows(0, { tmperature: new Float32Array(1) } as never)).toThrow(/did you mean "temperature"/);
    });

    test('enqueue', () => {
      const d = dev();
      expect(() => s.enqueue({ H: W, W, out })).toThrow(/^H: expected shape \[B, 8\]|^H: expected at most maxBatch/);
      const H5 = d.tensor(new Float32Array(5 * 8), [5, 8], 'f32');
      expect(() => s.enqueue({ H: H5, W, out })).toThrow(/^H: expected at most maxBatch = 4 rows/);
      H5.dispose();
      expect(() => s.enqueue({ H, W: H, out })).toThrow(/^W: expected shape \[100, 8\]/);
      const small = d.empty([3], 'i32');
      expect(() => s.enqueue({ H, W, out: small })).toThrow(/^out: expected an 'i32' tensor of at least 4 elements/);
      expect(() => s.enqueue({ H, W, out: small, batch: 3 })).not.toThrow();
      small.dispose();
      expect(() => s.enqueue({ H, W, out, batch: 0 })).toThrow(/^batch: /);
      expect(() => s.enqueue({ H, W, out, logprobsOut: out })).toThrow(/^logprobsOut: this sampler was created without logprobs/);
      expect(() => s.enqueue({ H, W, out, topTokensOut: out })).toThrow(/^topTokensOut: /);
      expect(() => s.enqueue({ H, W, out, allowedTokens: out })).toThrow(/^allowedTokens: this sampler was created without/);
      expect(() => s.enqueue({ H, W, out, stream: 1 as never })).toThrow(/^stream: expected a bigint/);
      expect(() => s.enqueue({ H, W, out, advanceOffset: 1 as never })).toThrow(/^advanceOffset: expected a boolean/);
      expect(() => s.enqueue({ H, W, outt: out } as never)).toThrow(/did you mean "out"/);
      const lp = d.createSampler({ maxBatch: 4, vocab: 100, hidden: 8, dtype: 'f32', logprobs: true });
      expect(() => lp.enqueue({ H, W, out })).toThrow(/^logprobsOut: expected an 'f32' tensor of at least 4 elements/);
      lp.dispose();
      expect(() => lp.enqueue({ H, W, out })).toThrow(/^enqueue: the sampler has been disposed/);
      const other = d.kind === 'cpu' ? undefined : open('cpu').empty([4], 'i32');
      if (other) {
        expect(() => s.enqueue({ H, W, out: other })).toThrow(/^out: expected a tensor on cuda:0/);
        other.dispose();
      }
    });

    test(`${name === 'cpu' ? 'graphs and streams are CUDA only' : 'streams'}`, async () => {
      const d = dev();
      if (d.kind === 'cpu') {
        expect(() => d.captureGraph(() => undefined)).toThrow(/^captureGraph: CUDA graphs need a 'cuda' device, got cpu/);
        expect(() => d.createStream()).toThrow(/^createStream: streams need a 'cuda' device/);
        expect(() => s.enqueue({ H, W, out, stream: 1n })).toThrow(/^stream: a CUDA stream needs a 'cuda' sampler/);
      } else {
        expect(() => d.destroyStream(12345n)).toThrow(/^stream: expected a stream that createStream made/);
        expect(() => d.destroyStream(1 as never)).toThrow(/^stream: expected a bigint/);
      }
      await expect(d.synchronize()).resolves.toBeUndefined();
    });
  });
});

const st = cudaStatus();
const gpuSuite = st.usable ? describe : describe.skip;

gpuSuite(st.usable ? 'cuda graphs' : `cuda graphs — skipped: ${st.reason}`, () => {
  let gpu: Device;
  beforeAll(() => {
    gpu = open('cuda');
  });

  const GRAPH_CASES: { name: string; filters: boolean; numSamples?: number; logprobs?: boolean }[] = [
    { name: 'plain', filters: false },
    { name: 'top-k / top-p / min-p per row', filters: true },
    { name: 'filters + logprobs', filters: true, logprobs: true },
    { name: 'numSamples 4', filters: false, numSamples: 4 },
  ];

  for (const c of GRAPH_CASES) {
    test(`N replays with advanceOffset = N sequential sampleFused calls: ${c.name}`, async () => {
      const V = 1000;
      const B = 5;
      const S = c.numSamples ?? 1;
      const p = plantLogits(gpu, 'bf16', Array.from({ length: B }, (_, b) => zipfLogits(V, 1, 40 + b)), { D: 16 });
      const sampler = gpu.createSampler({
        maxBatch: B, vocab: V, hidden: 16, dtype: 'bf16', numSamples: S,
        filters: c.filters ? ['topK', 'topP', 'minP'] : [], logprobs: c.logprobs,
      });
      const rows = mixedRows(B, c.filters);
      sampler.setRows(0, rowValues(rows));
      const out = gpu.empty([B * S], 'i32');
      const lp = c.logprobs ? gpu.empty([B * S], 'f32') : undefined;
      const graph = gpu.captureGraph(() => sampler.enqueue({ H: p.H, W: p.W, out, logprobsOut: lp, advanceOffset: true }));
      expect((await sampler.readRows()).offset[0]).toBe(0n); // capturing ran nothing
      for (let step = 0; step < 4; step++) {
        graph.launch();
        await gpu.synchronize();
        const want = await sampleFused(p.H, p.W, referenceOptions(rows, step, { numSamples: S, logprobs: c.logprobs }));
        expect(Array.from((await out.toArray()) as Int32Array)).toEqual(Array.from(want.tokens));
        if (lp) ((await lp.toArray()) as Float32Array).forEach((x, i) => expect(x).toBeCloseTo(want.logprobs![i], 5));
      }
      expect(Array.from((await sampler.readRows()).offset)).toEqual(new Array(B).fill(4n));
      graph.dispose();
      sampler.dispose();
      out.dispose();
      lp?.dispose();
      p.dispose();
    });
  }

  test('parameters rewritten between replays take effect (setRows and the engine writing the block)', async () => {
    const V = 1000;
    const p = plantLogits(gpu, 'f32', [flatLogits(V, 1, 4), flatLogits(V, 2, 4)], { D: 16 });
    const sampler = gpu.createSampler({ maxBatch: 2, vocab: V, hidden: 16, dtype: 'f32', filters: ['topK'] });
    sampler.setRows(0, { seed: new BigUint64Array([1n, 2n]) });
    const out = gpu.empty([2], 'i32');
    const graph = gpu.captureGraph(() => sampler.enqueue({ H: p.H, W: p.W, out }));
    const argmax = p.logits.map((l) => l.indexOf(Math.max(...l)));
    const replay = async () => {
      graph.launch();
      await gpu.synchronize();
      return Array.from((await out.toArray()) as Int32Array);
    };
    const before = await replay();
    sampler.setRows(0, { temperature: new Float32Array([0, 0]) });
    expect(await replay()).toEqual(argmax);
    sampler.setRows(0, { temperature: new Float32Array([1, 1]), topK: new Int32Array([1, 1]) });
    expect(await replay()).toEqual(argmax);
    sampler.setRows(0, { topK: new Int32Array([0, 0]) });
    expect(await replay()).toEqual(before);
    const block = await sampler.readRows();
    expect(Array.from(block.topK)).toEqual([0, 0]);
    expect(Array.from(block.temperature)).toEqual([1, 1]);
    graph.dispose();
    sampler.dispose();
    out.dispose();
    p.dispose();
  });

  test('capture refuses what would break it, with the operation named, and ends cleanly', async () => {
    const V = 111;
    const p = plantLogits(gpu, 'f32', [flatLogits(V, 1)], { D: 8 });
    const sampler = gpu.createSampler({ maxBatch: 1, vocab: V, hidden: 8, dtype: 'f32' });
    const out = gpu.empty([1], 'i32');
    const other = gpu.createStream();
    const refused: [string, () => unknown, RegExp][] = [
      ['an allocation', () => gpu.empty([4], 'f32'), /^tensor: cannot allocate device memory during graph capture/],
      ['a host copy', () => gpu.tensor(new Float32Array(4), [4], 'f32'), /^tensor: cannot allocate device memory during graph capture/],
      ['setRows', () => sampler.setRows(0, { temperature: new Float32Array([1]) }), /^setRows: cannot run during graph capture/],
      ['createSampler', () => gpu.createSampler({ maxBatch: 1, vocab: V, hidden: 8, dtype: 'f32' }), /^createSampler: cannot run during graph capture/],
      ['a nested capture', () => gpu.captureGraph(() => undefined), /^captureGraph: a capture is already in progress/],
      ['enqueue on another stream', () => sampler.enqueue({ H: p.H, W: p.W, out, stream: other }), /^enqueue: stream is not the stream being captured/],
      ['a stream', () => gpu.createStream(), /^createStream: cannot run during graph capture/],
    ];
    for (const [what, fn, message] of refused) {
      const e = await failure(() =>
        gpu.captureGraph(() => {
          sampler.enqueue({ H: p.H, W: p.W, out });
          return fn();
        }),
      );
      expect(`${what}: ${e.message}`).toMatch(new RegExp(`^${what}: ${message.source.slice(1)}`));
    }
    gpu.destroyStream(other);
    let read: Promise<unknown> | undefined;
    gpu.captureGraph(() => {
      read = out.toArray();
    }).dispose();
    await expect(read).rejects.toThrow(/^toArray: a host read of device memory cannot happen during graph capture/);
    let call: Promise<unknown> | undefined;
    gpu.captureGraph(() => {
      call = sampleFused(p.H, p.W);
    }).dispose();
    await expect(call).rejects.toThrow(/^sampleFused: cannot run during graph capture/);
    const asyncFn = await failure(() => gpu.captureGraph(async () => undefined));
    expect(asyncFn.message).toMatch(/^fn: expected a synchronous function/);
    const thrown = await failure(() => gpu.captureGraph(() => { throw new Error('boom'); }));
    expect(thrown.message).toBe('boom');
    // Nothing is left capturing: eager calls and a fresh capture work.
    const want = await sampleFused(p.H, p.W, { seed: new BigUint64Array([0n]) });
    const graph = gpu.captureGraph(() => sampler.enqueue({ H: p.H, W: p.W, out }));
    graph.launch();
    await gpu.synchronize();
    expect(Array.from((await out.toArray()) as Int32Array)).toEqual(Array.from(want.tokens));
    graph.dispose();
    expect(() => graph.launch()).toThrow(/^launch: the graph has been disposed/);
    sampler.dispose();
    out.dispose();
    p.dispose();
  });

  test('disposing the tensors and the sampler while a graph holds them is safe', async () => {
    const V = 1000;
    const p = plantLogits(gpu, 'bf16', [zipfLogits(V, 1, 9), zipfLogits(V, 1, 10)], { D: 16 });
    const rows = { seed: new BigUint64Array([3n, 4n]), temperature: new Float32Array([1, 1]) };
    let sampler: Sampler | undefined = gpu.createSampler({ maxBatch: 2, vocab: V, hidden: 16, dtype: 'bf16' });
    sampler.setRows(0, rows);
    const out = gpu.empty([2], 'i32');
    const graph = gpu.captureGraph(() => sampler!.enqueue({ H: p.H, W: p.W, out, advanceOffset: true }));
    const want = [];
    for (let step = 0; step < 3; step++) want.push(Array.from((await sampleFused(p.H, p.W, referenceOptions(rows, step))).tokens));
    sampler.dispose();
    sampler = undefined;
    p.dispose(); // H and W
    // Churn the tensor pool so that freed memory would be reused if the graph had let it go.
    for (let i = 0; i < 8; i++) gpu.tensor(new Float32Array(1000 * 16).fill(7), [1000, 16], 'f32').dispose();
    for (let step = 0; step < 3; step++) {
      graph.launch();
      await gpu.synchronize();
      expect(Array.from((await out.toArray()) as Int32Array)).toEqual(want[step]);
    }
    graph.dispose();
    out.dispose();
  });

  test('capture and replay on a stream the test creates', async () => {
    const V = 1000;
    const p = plantLogits(gpu, 'bf16', [zipfLogits(V, 1, 1), zipfLogits(V, 1, 2), zipfLogits(V, 1, 3)], { D: 16 });
    const sampler = gpu.createSampler({ maxBatch: 3, vocab: V, hidden: 16, dtype: 'bf16', filters: ['topP'] });
    const stream = gpu.createStream();
    const rows: RowSetup = { seed: new BigUint64Array([5n, 6n, 7n]), temperature: new Float32Array([1, 0.5, 2]), topP: new Float32Array([0.9, 1, 0.5]) };
    sampler.setRows(0, rowValues(rows), { stream });
    const out = gpu.empty([3], 'i32');
    const graph = gpu.captureGraph(stream, () => sampler.enqueue({ H: p.H, W: p.W, out, stream, advanceOffset: true }));
    for (let step = 0; step < 3; step++) {
      graph.launch(stream);
      await gpu.synchronize(stream);
      const want = await sampleFused(p.H, p.W, referenceOptions(rows, step));
      expect(Array.from((await out.toArray()) as Int32Array)).toEqual(Array.from(want.tokens));
    }
    // The same sampler eagerly on the library's stream: ordered after the replays on `stream`.
    sampler.enqueue({ H: p.H, W: p.W, out });
    await gpu.synchronize();
    const want3 = await sampleFused(p.H, p.W, referenceOptions(rows, 3));
    expect(Array.from((await out.toArray()) as Int32Array)).toEqual(Array.from(want3.tokens));
    graph.dispose();
    gpu.destroyStream(stream);
    expect(() => gpu.destroyStream(stream)).toThrow(/^stream: expected a stream that createStream made/);
    sampler.dispose();
    out.dispose();
    p.dispose();
  });
});
