// The engine's sharded step (issue 18): a sampler created with a communicator (createSampler's tp)
// whose enqueue writes the shard's partial state, all-gathers the ranks' states over NCCL, merges
// them into device outputs and runs the rows pass, all on the stream, so the step is captured in a
// CUDA graph. On one GPU a communicator has one rank: the same tokens as sampleFused, the rows pass
// for rows the candidates cannot settle (and status 2 past its bound), the list tables in global
// ids with recordTokens against an unsharded sampler, a chi-square of rows-pass draws against
// float64, graph replays equal to eager steps, and the argument errors. The
// multi-GPU runs are issue 19's (scripts/tp-session.sh).

import { Communicator, nccl, open, sampleFused, type Sampler, type SampleOptions, type Tensor } from '../lib/index';
import { csrRows, failure, flatLogits, goodnessOfFit, keptDistribution, makeMask, ncclStatus, plantLogits, rowCounts, zipfLogits } from './helpers';

const { runs, skipWhy } = ncclStatus();

describe('createSampler({ tp }) on the CPU', () => {
  test.each([
    [{ comm: null, vocabOffset: 0, vocabSize: 100 }, TypeError, /^tp: a sharded sampler needs a 'cuda' device, got cpu/],
    [{ comm: null, vocabOffset: 0, vocabSize: 100, extra: 1 }, TypeError, /^tp: unknown option/],
    [7, TypeError, /^tp: expected an object \{comm, vocabOffset, vocabSize\}, got 7/],
  ])('is an error naming the argument (%#)', (tp, kind, message) => {
    const cpu = open('cpu');
    let e: Error | undefined;
    try {
      cpu.createSampler({ maxBatch: 2, vocab: 100, hidden: 8, dtype: 'f32', tp: tp as never });
    } catch (err) {
      e = err as Error;
    }
    expect(e).toBeInstanceOf(kind);
    expect(e!.message).toMatch(message);
  });
});

(runs ? describe : describe.skip)(`a sharded sampler over NCCL on one GPU${runs ? '' : ` — skipped: ${skipWhy}`}`, () => {
  let comm: Communicator;
  beforeAll(async () => {
    comm = await nccl.initRank(nccl.createUniqueId(), 1, 0, 'cuda:0');
  });
  afterAll(() => comm?.dispose());

  const dev = () => open('cuda:0');
  const seeds = (B: number, base: number) => BigUint64Array.from({ length: B }, (_, b) => BigInt(base + 13 * b));

  /** Runs `steps` steps of `sampler` (eager enqueues, or replays of one captured graph) and returns
   *  each step's tokens, statuses and logprobs. */
  async function steps(
    sampler: Sampler, p: ReturnType<typeof plantLogits>, count: number, graph: boolean, logprobs = false,
    extra: { bias?: Tensor; allowedTokens?: Tensor } = {},
  ): Promise<{ tokens: number[]; status: number[]; logprobs?: Float32Array }[]> {
    const d = dev();
    const S = sampler.numSamples;
    const out = d.empty([p.B * S], 'i32');
    const st = d.empty([p.B], 'i32');
    const lp = logprobs ? d.empty([p.B * S], 'f32') : undefined;
    const enqueue = () => sampler.enqueue({ H: p.H, W: p.W, out, statusOut: st, logprobsOut: lp, advanceOffset: true, ...extra });
    const g = graph ? d.captureGraph(enqueue) : undefined;
    const results = [];
    for (let i = 0; i < count; i++) {
      if (g) g.launch();
      else enqueue();
      await d.synchronize();
      results.push({
        tokens: Array.from((await out.toArray()) as Int32Array),
        status: Array.from((await st.toArray()) as Int32Array),
        logprobs: lp ? ((await lp.toArray()) as Float32Array) : undefined,
      });
    }
    g?.dispose();
    for (const t of [out, st, lp]) t?.dispose();
    return results;
  }

  test.each<[string, SampleOptions & { filters?: ('topK' | 'topP' | 'minP')[] }]>([
    ['plain, 3 samples a row', { numSamples: 3 }],
    ['top-k with logprobs', { filters: ['topK'], topK: 30, logprobs: true }],
    ['top-p and min-p with logprobs', { filters: ['topP', 'minP'], topP: 0.9, minP: 0.001, logprobs: true }],
    // (raw: the shard materializes; top-p 0.95 leaves the flat row to the rows pass)
    ["top-k, logprobsMode 'raw'", { filters: ['topK'], topK: 30, logprobs: true, logprobsMode: 'raw' }],
    ["top-p 0.95, logprobsMode 'raw'", { filters: ['topP'], topP: 0.95, logprobs: true, logprobsMode: 'raw' }],
  ])('enqueue and graph replays draw sampleFused\'s tokens: %s', async (_label, o) => {
    const d = dev();
    const V = 5000, B = 3;
    const p = plantLogits(d, 'bf16', [flatLogits(V, 1, 1), zipfLogits(V, 1.2, 2), zipfLogits(V, 0.8, 3)], { D: 16 });
    const S = o.numSamples ?? 1;
    const sampler = d.createSampler({
      maxBatch: B, vocab: V, hidden: p.D, dtype: 'bf16', numSamples: S, filters: o.filters, logprobs: o.logprobs,
      logprobsMode: o.logprobsMode, tp: { comm, vocabOffset: 0, vocabSize: V },
    });
    const rows = {
      seed: seeds(B, 40), temperature: new Float32Array(B).fill(0.8),
      ...(o.topK ? { topK: new Int32Array(B).fill(o.topK as number) } : {}),
      ...(o.topP ? { topP: new Float32Array(B).fill(o.topP as number) } : {}),
      ...(o.minP ? { minP: new Float32Array(B).fill(o.minP as number) } : {}),
    };
    sampler.setRows(0, rows);
    const eager = await steps(sampler, p, 2, false, !!o.logprobs);
    sampler.setRows(0, { offset: new BigUint64Array(B) });  // back to step 0
    const replayed = await steps(sampler, p, 2, true, !!o.logprobs);
    for (let step = 0; step < 2; step++) {
      const want = await sampleFused(p.H, p.W, {
        ...rows, numSamples: S, logprobs: o.logprobs, logprobsMode: o.logprobsMode, offset: new BigUint64Array(B).fill(BigInt(step)),
      });
      for (const got of [eager[step], replayed[step]]) {
        expect(got.tokens).toEqual(Array.from(want.tokens));
        expect(got.status).toEqual([0, 0, 0]);
        if (want.logprobs) want.logprobs.forEach((x, i) => expect(Math.abs(got.logprobs![i] - x)).toBeLessThan(1e-5));
      }
    }
    expect(sampler.shard).toMatchObject({ rank: 0, ranks: 1, vocabOffset: 0, vocabSize: V, maxShardVocab: V });
    sampler.dispose();
    p.dispose();
  });

  test('rows 8 candidates cannot settle take the rows pass; past rowsPassRows they come back status 2', async () => {
    const d = dev();
    const V = 3001, B = 5;  // (V odd: the shard's vocab need not be a multiple of 4)
    const p = plantLogits(d, 'bf16', [flatLogits(V, 4, 1), zipfLogits(V, 3, 5), flatLogits(V, 6, 2), zipfLogits(V, 3.5, 7), flatLogits(V, 8, 1)], { D: 16 });
    const rows = { seed: seeds(B, 90), topP: new Float32Array(B).fill(0.95) };
    const make = (rowsPassRows: number) => {
      const s = d.createSampler({
        maxBatch: B, vocab: V, hidden: p.D, dtype: 'bf16', filters: ['topP'], logprobs: true,
        tp: { comm, vocabOffset: 0, vocabSize: V, candidates: 8, rowsPassRows },
      });
      s.setRows(0, rows);
      return s;
    };
    const want = await sampleFused(p.H, p.W, { ...rows, logprobs: true, offset: new BigUint64Array(B) });
    const all = make(B);
    for (const graph of [false, true]) {
      all.setRows(0, { offset: new BigUint64Array(B) });
      const [got] = await steps(all, p, 1, graph, true);
      expect(got.status).toEqual(new Array(B).fill(0));
      expect(got.tokens).toEqual(Array.from(want.tokens));
      want.logprobs!.forEach((x, i) => expect(Math.abs(got.logprobs![i] - x)).toBeLessThan(1e-5));
    }
    all.dispose();
    // Two rows in the pass: the flat rows 0 and 2 are decided, row 4 (flat too) is left undecided.
    const two = make(2);
    const [got] = await steps(two, p, 1, true, true);
    expect(got.status[4]).toBe(2);
    expect(got.tokens[4]).toBe(-1);
    for (const b of [0, 1, 2, 3]) {
      expect(got.status[b]).toBe(0);
      expect(got.tokens[b]).toBe(want.tokens[b]);
    }
    two.dispose();
    // None: every flat row is undecided.
    const none = make(0);
    const [bare] = await steps(none, p, 1, false, true);
    expect(bare.status).toEqual([2, 0, 2, 0, 2]);
    none.dispose();
    p.dispose();
  });

  test("the shard's bias, mask and softcap reach the rows pass", async () => {
    const d = dev();
    const V = 3001, B = 4;
    const p = plantLogits(d, 'bf16', [flatLogits(V, 11, 1), flatLogits(V, 12, 2), zipfLogits(V, 3, 13), flatLogits(V, 14, 1)], {
      D: 16, biasLogits: zipfLogits(V, 0.7, 15),
    });
    const mask = makeMask(B, V, (b, v) => (v * 7 + b) % 5 !== 0);
    const allowed = d.tensor(new Int32Array(mask.buffer), [mask.length], 'i32');
    const rows = { seed: seeds(B, 300), topP: new Float32Array(B).fill(0.9), temperature: new Float32Array(B).fill(0.9) };
    const sampler = d.createSampler({
      maxBatch: B, vocab: V, hidden: p.D, dtype: 'bf16', filters: ['topP'], logprobs: true, softcap: 6, allowedTokens: true,
      tp: { comm, vocabOffset: 0, vocabSize: V, candidates: 8, rowsPassRows: B },
    });
    sampler.setRows(0, rows);
    const got = await steps(sampler, p, 3, true, true, { bias: p.bias, allowedTokens: allowed });
    for (let step = 0; step < 3; step++) {
      const want = await sampleFused(p.H, p.W, {
        ...rows, logprobs: true, softcap: 6, bias: p.bias, allowedTokens: mask, offset: new BigUint64Array(B).fill(BigInt(step)),
      });
      expect(got[step].status).toEqual(new Array(B).fill(0));
      expect(got[step].tokens).toEqual(Array.from(want.tokens));
      want.logprobs!.forEach((x, i) => expect(Math.abs(got[step].logprobs![i] - x)).toBeLessThan(1e-5));
      got[step].tokens.forEach((t, b) => expect((t * 7 + b) % 5).not.toBe(0));
    }
    sampler.dispose();
    allowed.dispose();
    p.dispose();
  });

  test('list tables in global ids with recordTokens: the steps of an unsharded sampler with the same tables', async () => {
    const d = dev();
    const V = 3001, B = 4;
    const p = plantLogits(d, 'bf16', [flatLogits(V, 21, 1), zipfLogits(V, 1.1, 22), flatLogits(V, 23, 2), zipfLogits(V, 0.9, 24)], { D: 16 });
    const rowsOf = (f: (b: number) => number[]) => csrRows(B, f);
    const make = (tp?: { comm: Communicator; vocabOffset: number; vocabSize: number; candidates: number }) => {
      const s = d.createSampler({
        maxBatch: B, vocab: V, hidden: p.D, dtype: 'bf16', filters: ['topP'], logprobs: true,
        penaltyCapacity: 64, logitBiasCapacity: 4, bannedCapacity: 2, ...(tp ? { tp } : {}),
      });
      s.setRows(0, {
        seed: seeds(B, 500), topP: new Float32Array(B).fill(0.9), repetitionPenalty: new Float32Array(B).fill(1.3),
        frequencyPenalty: new Float32Array(B).fill(0.3), presencePenalty: new Float32Array(B).fill(0.1),
        minTokens: Int32Array.from([0, 2, 5, 1]),
      });
      const pen = rowsOf((b) => [5 + b, 1200 + b, 3000]);
      s.setPenaltyTokens(0, { ...pen, outputCounts: Int32Array.from(pen.tokenIds, (_, i) => i % 3), inPrompt: Uint8Array.from(pen.tokenIds, (_, i) => (i % 3 === 0 ? 1 : 0)) });
      const bias = rowsOf((b) => [40 + b, 2999 - b]);
      s.setLogitBias(0, { ...bias, values: Float32Array.from(bias.tokenIds, (_, i) => (i % 2 ? 4 : -3)) });
      s.setBannedTokens(0, rowsOf((b) => [9 + b]));
      return s;
    };
    const unsharded = make();
    const sharded = make({ comm, vocabOffset: 0, vocabSize: V, candidates: 8 });
    const outs = [unsharded, sharded].map(() => ({ out: d.empty([B], 'i32'), st: d.empty([B], 'i32'), lp: d.empty([B], 'f32') }));
    for (let step = 0; step < 4; step++) {
      const got: { tokens: number[]; status: number[]; logprobs: Float32Array }[] = [];
      for (const [i, s] of [unsharded, sharded].entries()) {
        s.enqueue({ H: p.H, W: p.W, out: outs[i].out, statusOut: outs[i].st, logprobsOut: outs[i].lp, advanceOffset: true, recordTokens: true });
        await d.synchronize();
        got.push({
          tokens: Array.from((await outs[i].out.toArray()) as Int32Array),
          status: Array.from((await outs[i].st.toArray()) as Int32Array),
          logprobs: (await outs[i].lp.toArray()) as Float32Array,
        });
      }
      expect(got[1].tokens).toEqual(got[0].tokens);
      expect(got[1].status).toEqual(got[0].status);
      got[0].logprobs.forEach((x, i) => expect(Math.abs(got[1].logprobs[i] - x)).toBeLessThan(1e-5));
    }
    const [a, b] = [await unsharded.readRows(), await sharded.readRows()];
    expect(Array.from(b.penaltyTable!.tokenIds)).toEqual(Array.from(a.penaltyTable!.tokenIds));
    expect(Array.from(b.penaltyTable!.outputCounts)).toEqual(Array.from(a.penaltyTable!.outputCounts));
    expect(Array.from(b.minTokens)).toEqual(Array.from(a.minTokens));
    for (const o of outs) for (const t of [o.out, o.st, o.lp]) t.dispose();
    unsharded.dispose();
    sharded.dispose();
    p.dispose();
  });

  // 99 rows (independent seeds) × 64 samples × 100 replayed steps = 633,600 draws, every row through
  // the rows pass (4 candidates for a nucleus of 14-39 tokens): a 1% relative bias of a token of
  // p ≈ 0.2 is ~4 standard errors.
  test.each([
    [111, 0.9, 0.9],
    [1000, 1.1, 0.85],
  ])('rows-pass draws follow softmax(l / T) after top-p, chi-square against float64 (V %i)', async (V, s, topP) => {
    const d = dev();
    const B = 99, S = 64, count = 100;
    const l = zipfLogits(V, s, 21);
    const p = plantLogits(d, 'f32', Array.from({ length: B }, () => l), { D: 8 });
    const sampler = d.createSampler({
      maxBatch: B, vocab: V, hidden: 8, dtype: 'f32', numSamples: S, filters: ['topP'],
      tp: { comm, vocabOffset: 0, vocabSize: V, candidates: 4, rowsPassRows: B },
    });
    sampler.setRows(0, { seed: seeds(B, 7000), temperature: new Float32Array(B).fill(0.7), topP: new Float32Array(B).fill(topP) });
    const counts = new Float64Array(V);
    for (const step of await steps(sampler, p, count, true)) {
      expect(step.status).toEqual(new Array(B).fill(0));
      for (const row of rowCounts(step.tokens, B, S, V)) for (let v = 0; v < V; v++) counts[v] += row[v];
    }
    const kept = keptDistribution(p.logits[0], { temperature: 0.7, topP });
    expect(kept.keptCount).toBeGreaterThan(4);  // (every row needs the rows pass)
    expect(kept.topPMargin).toBeGreaterThan(1e-3);
    const fit = goodnessOfFit(counts, kept.probs);
    expect(fit.summary).toBe(fit.ok ? fit.summary : 'a good fit');
    sampler.dispose();
    p.dispose();
  });

  test.each<[string, Record<string, unknown>, Record<string, unknown>, ErrorConstructor, RegExp]>([
    ['vocabOffset not a multiple of 4', {}, { vocabOffset: 2, vocabSize: 1002 }, RangeError, /^tp\.vocabOffset: expected a multiple of 4/],
    ['a shard past vocabSize', {}, { vocabOffset: 4, vocabSize: 1000 }, RangeError, /^tp\.vocabOffset: expected an integer in \[0, 0\] \(vocabOffset \+ vocab 1000 <= vocabSize\)/],
    ['maxShardVocab below the shard', {}, { vocabOffset: 0, vocabSize: 1000, maxShardVocab: 999 }, RangeError, /^tp\.maxShardVocab: expected at least this shard's vocab 1000/],
    ['rowsPassRows past maxBatch', {}, { vocabOffset: 0, vocabSize: 1000, rowsPassRows: 5 }, RangeError, /^tp\.rowsPassRows: expected an integer in \[0, 4\] \(at most maxBatch\)/],
    ['not a communicator', {}, { comm: {}, vocabOffset: 0, vocabSize: 1000 }, TypeError, /^tp\.comm: expected a Communicator \(nccl\.initRank\)/],
  ])('%s is an error naming the argument', (_label, config, tp, kind, message) => {
    let e: Error | undefined;
    try {
      dev().createSampler({ maxBatch: 4, vocab: 1000, hidden: 8, dtype: 'f32', ...config, tp: { comm, ...tp } as never });
    } catch (err) {
      e = err as Error;
    }
    expect(e).toBeInstanceOf(kind);
    expect(e!.message).toMatch(message);
  });

  test('a disposed communicator is an error naming it', async () => {
    const c = await nccl.initRank(nccl.createUniqueId(), 1, 0, 'cuda:0');
    c.dispose();
    const e = await failure(async () => dev().createSampler({ maxBatch: 2, vocab: 100, hidden: 8, dtype: 'f32', tp: { comm: c, vocabOffset: 0, vocabSize: 100 } }));
    expect(e).toBeInstanceOf(TypeError);
    expect(e.message).toMatch(/^tp\.comm: the communicator was aborted or disposed/);
  });
});
