// Vocabulary shards (issue 18, SEMANTICS §6): the shards of W drawn one after another on one
// device, their partial states merged, against the unsharded call on the same device: the same
// tokens bit for bit (plain, greedy, top-k, min-p, top-p, numSamples > 1, masks, bias, softcap),
// log-probabilities within 1e-5, at TP = 2, 3, 4 and 8 with uneven shards (one of 1 row); shards of
// several CUDA slices (V = 40003); bf16 heads of one sample a row (CUDA's one-pass shards: the
// unsharded tokens, a state that is a prefix of the materialized one, chi-square at V = 1000); rows
// the candidates cannot settle, and their re-run; chi-square of merged draws against float64; the
// partial state as JS reads it; the argument and merge errors.

import { mergePartials, open, sampleFused, sampleSharded, type Device, type MergeResult, type PartialState, type SampleOptions, type Tensor } from '../lib/index';
import {
  MAX_S,
  addRowDraws,
  countTokens,
  mixedRowOptions,
  rowFitFailures,
  safeTopP,
  csrRows,
  describeDevices,
  dominantLogits,
  failure,
  flatLogits,
  gaussianLogits,
  goodnessOfFit,
  keptDistribution,
  expectClose,
  makeMask,
  makeTensor,
  plantLogits,
  rng,
  rowCounts,
  rowOptions,
  scaled,
  shardMask,
  zipfLogits,
  type FilterSpec,
  type Planted,
} from './helpers';

/** Shard bounds [offset, size] over V: offsets multiples of 4, uneven sizes; the last shard holds
 *  one row when `oneRowLast` (V % 4 === 1). */
function shardBounds(V: number, tp: number, seed: number, oneRowLast = false): [number, number][] {
  const r = rng(seed);
  const body = oneRowLast ? V - 1 : V;
  const cuts = new Set<number>();
  while (cuts.size < (oneRowLast ? tp - 2 : tp - 1)) {
    const c = 4 * (1 + Math.floor(r() * (Math.floor(body / 4) - 1)));
    if (c > 0 && c < body) cuts.add(c);
  }
  const edges = [0, ...[...cuts].sort((a, b) => a - b), body];
  if (oneRowLast) edges.push(V);
  const out: [number, number][] = [];
  for (let i = 0; i + 1 < edges.length; i++) out.push([edges[i], edges[i + 1] - edges[i]]);
  return out;
}

interface Head extends Planted {
  shard(offset: number, size: number): Tensor;
}

/** planted logits (exact in f32; in bf16 the rows rounded to it) whose W can be cut into
 *  vocabulary shards. */
function plantedHead(dev: Device, rows: ArrayLike<number>[], dtype: 'f32' | 'bf16' = 'f32'): Head {
  const planted = plantLogits(dev, dtype, rows);
  const { D } = planted;
  const shards: Tensor[] = [];
  return {
    ...planted,
    shard(offset, size) {
      const t = makeTensor(dev, dtype, planted.w.subarray(offset * D, (offset + size) * D), [size, D]);
      shards.push(t);
      return t;
    },
    dispose() {
      planted.dispose();
      for (const t of shards) t.dispose();
    },
  };
}

/** A shard's logitBias for rows whose token ids[b][k] gets bias values[k]: the ids it holds, local. */
function shardLogitBias(ids: number[][], values: number[], offset: number, size: number) {
  const rowOffsets = new Int32Array(ids.length + 1);
  const tokenIds: number[] = [];
  const biases: number[] = [];
  ids.forEach((row, b) => {
    row.forEach((id, k) => {
      if (id >= offset && id < offset + size) {
        tokenIds.push(id - offset);
        biases.push(values[k]);
      }
    });
    rowOffsets[b + 1] = tokenIds.length;
  });
  return { rowOffsets, tokenIds: Int32Array.from(tokenIds), values: Float32Array.from(biases) };
}

/** Draws every shard's partial state in turn (options per shard from `perShard`), then merges. */
async function shardAndMerge(
  head: Head, bounds: [number, number][], options: SampleOptions,
  perShard: (offset: number, size: number) => Record<string, unknown> = () => ({}),
  extra: Record<string, unknown> = {},
): Promise<{ result: MergeResult; partials: PartialState[] }> {
  const partials: PartialState[] = [];
  for (const [offset, size] of bounds) {
    partials.push(
      await sampleFused(head.H, head.shard(offset, size), {
        ...options, ...perShard(offset, size), ...extra, partial: true, vocabOffset: offset, vocabSize: head.V,
      }),
    );
  }
  // Shuffled: the merge does not depend on the order of the partials.
  const order = partials.map((_, i) => i).sort((a, b) => ((a * 7919) % 13) - ((b * 7919) % 13));
  const result = await mergePartials(order.map((i) => partials[i]), options);
  return { result, partials };
}

/** Every row decided, the unsharded call's tokens and top tokens, logprobs within 1e-5. */
function expectSameDraws(result: MergeResult, want: Awaited<ReturnType<typeof sampleFused>>): void {
  expect(result.undecidedRows.length).toBe(0);
  expect(Array.from(result.tokens)).toEqual(Array.from(want.tokens));
  if (want.logprobs) expectClose(result.logprobs, want.logprobs, 1e-5);
  if (want.topTokens) {
    expect(Array.from(result.topTokens!)).toEqual(Array.from(want.topTokens));
    expectClose(result.topLogprobs, want.topLogprobs, 1e-5);
  }
}

/** numSamples S draws of one row under the filters of `f`, from `seed`. */
function samplesOf(f: FilterSpec, seed: bigint, S: number): SampleOptions {
  const options: SampleOptions = { temperature: f.temperature ?? 1, seed, numSamples: S };
  if (f.topK) options.topK = f.topK;
  if (f.topP) options.topP = f.topP;
  if (f.minP) options.minP = f.minP;
  return options;
}

const perRowSeeds = (B: number) => BigUint64Array.from({ length: B }, (_, b) => BigInt(4242 + 17 * b));

describeDevices((name, dev) => {
  // V = 1001: uneven shards, the last of 1 row; rows of different shapes (Zipf, flat, peaked).
  const V = 1001;
  const B = 3;
  let head: Head;
  beforeAll(() => {
    head = plantedHead(dev(), [zipfLogits(V, 1.1, 1), flatLogits(V, 2, 3), zipfLogits(V, 0.6, 3)]);
  });
  afterAll(() => head.dispose());

  const cases: [string, SampleOptions][] = [
    ['plain', { temperature: 0.8, seed: 11n, numSamples: 5 }],
    ['greedy and sampled rows', { temperature: new Float32Array([0, 1.3, 0]), seed: perRowSeeds(B), numSamples: 2 }],
    ['top-k with logprobs', { temperature: 0.9, topK: 20, logprobs: true, topLogprobs: 5, seed: 5n, numSamples: 4 }],
    ['min-p', { minP: 0.08, seed: perRowSeeds(B), offset: 3n, logprobs: true }],
    ['top-p', { topP: 0.85, temperature: 1.2, seed: 9n, numSamples: 3, logprobs: true }],
    ['top-k, top-p and min-p', { topK: 300, topP: 0.7, minP: 0.01, seed: 21n, numSamples: 6, topLogprobs: 3 }],
    ['logprobs alone', { logprobs: true, topLogprobs: 8, seed: 2n, numSamples: 3 }],
  ];
  for (const tp of [2, 3, 4, 8]) {
    test.each(cases)(`TP ${tp}: %s: the merged shards draw the unsharded tokens`, async (_label, options) => {
      const bounds = shardBounds(V, tp, 100 + tp, tp >= 3);
      const want = await sampleFused(head.H, head.W, options);
      const { result, partials } = await shardAndMerge(head, bounds, options);
      expectSameDraws(result, want);
      for (const p of partials) p.dispose();
    });
  }

  // A CUDA one-pass shard (one sample a row) offers no winner for a filtered row: a row whose filters
  // keep every token is drawn from the merged keys (or the rows pass), the unsharded draw.
  test.each([2, 4])('TP %i: filtered rows that keep every token draw the unsharded tokens', async (tp) => {
    const options: SampleOptions = { topK: new Int32Array([V, 5, V]), minP: new Float32Array([0, 0, 1e-12]), seed: perRowSeeds(B), logprobs: true };
    const shards = shardBounds(V, tp, 60 + tp).map(([offset, size]) => ({ H: head.H, W: head.shard(offset, size), vocabOffset: offset }));
    for (let step = 0; step < 3; step++) {
      const o = { ...options, offset: BigInt(step) };
      const got = await sampleSharded(shards, { ...o, vocabSize: V });
      expectSameDraws(got, await sampleFused(head.H, head.W, o));
    }
  });

  test('per-shard masks, bias and softcap: the merged tokens are the unsharded ones', async () => {
    const r = rng(77);
    const mask = makeMask(B, V, (b, v) => (v * 7 + b) % 5 !== 0 || r() < 0.1);
    const biasValues = Float32Array.from({ length: V }, (_, v) => (v % 13 === 0 ? 1.5 : 0));
    const bias = dev().tensor(biasValues, [V], 'f32');
    const options: SampleOptions = { topK: 40, logprobs: true, seed: 8n, numSamples: 3 };
    const want = await sampleFused(head.H, head.W, { ...options, allowedTokens: mask, bias, softcap: 6 });
    const bounds = shardBounds(V, 4, 3, true);
    const shardBias: Tensor[] = [];
    const { result, partials } = await shardAndMerge(head, bounds, options, (offset, size) => {
      const t = dev().tensor(biasValues.slice(offset, offset + size), [size], 'f32');
      shardBias.push(t);
      return { allowedTokens: shardMask(mask, B, V, offset, size), bias: t, softcap: 6 };
    });
    expect(Array.from(result.tokens)).toEqual(Array.from(want.tokens));
    expectClose(result.logprobs, want.logprobs, 1e-5);
    for (const p of partials) p.dispose();
    for (const t of shardBias) t.dispose();
    bias.dispose();
  });

  /** sampleSharded's shards of `head`, each with its own mask, bias (owned, disposed by the caller),
   *  softcap and logit bias. */
  function adjustedShards(
    bounds: [number, number][], mask: Uint32Array, biasValues: Float32Array, softcap: number,
    lists: (offset: number, size: number) => ReturnType<typeof shardLogitBias>, owned: Tensor[],
  ) {
    return bounds.map(([offset, size]) => {
      const t = dev().tensor(biasValues.slice(offset, offset + size), [size], 'f32');
      owned.push(t);
      return {
        H: head.H, W: head.shard(offset, size), vocabOffset: offset,
        options: { allowedTokens: shardMask(mask, B, V, offset, size), bias: t, softcap, logitBias: lists(offset, size) },
      };
    });
  }

  test("the rows pass applies each shard's mask, bias, softcap and logit bias: the unsharded tokens", async () => {
    // 4 candidates settle none of these rows under top-p 0.9: every row's values come from the
    // shards with their own adjustments (indexed locally), gathered and decided whole.
    const r = rng(78);
    const mask = makeMask(B, V, (b, v) => (v * 3 + b) % 7 !== 0 || r() < 0.1);
    const biasValues = Float32Array.from({ length: V }, (_, v) => (v % 11 === 0 ? 1.25 : 0));
    const bias = dev().tensor(biasValues, [V], 'f32');
    // row b: tokens 3b + 1, 500 + b and 1000 (the last shard's one row) biased by 2, -1.5 and 3
    const ids = Array.from({ length: B }, (_, b) => [3 * b + 1, 500 + b, 1000]);
    const lists = (offset: number, size: number) => shardLogitBias(ids, [2, -1.5, 3], offset, size);
    const options: SampleOptions = { topP: 0.9, temperature: 1.1, logprobs: true, topLogprobs: 2, seed: perRowSeeds(B), numSamples: 2 };
    const want = await sampleFused(head.H, head.W, { ...options, allowedTokens: mask, bias, softcap: 5, logitBias: lists(0, V) });
    const owned: Tensor[] = [bias];
    const shards = adjustedShards(shardBounds(V, 3, 13, true), mask, biasValues, 5, lists, owned);
    const got = await sampleSharded(shards, { ...options, vocabSize: V, candidates: 4 });
    expect(got.rowsPassRows.length).toBeGreaterThan(0);
    expectSameDraws(got, want);
    for (const t of owned) t.dispose();
  });

  test.each([
    ['top-k 30 (the first round)', { topK: 30, seed: 31n, numSamples: 2, logprobs: true }, undefined],
    ['top-p 0.9 (the rows pass)', { topP: 0.9, seed: perRowSeeds(B), logprobs: true }, 4],
  ] as [string, SampleOptions, number | undefined][])("listIds 'global': every shard takes the whole vocabulary's lists: %s", async (_label, rowOptions, candidates) => {
    // row b: bias on 3b + 1, 500 + b and 1000 (the last shard's one row), a ban on 7 + b, penalties
    // on 2 + b (in the prompt), 600 + b (counted twice) and 999
    const rowsOf = (f: (b: number) => number[]) => csrRows(B, f);
    const bias = rowsOf((b) => [3 * b + 1, 500 + b, 1000]);
    const pen = rowsOf((b) => [2 + b, 600 + b, 999]);
    const lists: SampleOptions = {
      logitBias: { ...bias, values: Float32Array.from({ length: 3 * B }, (_, i) => [2, -1.5, 3][i % 3]) },
      bannedTokens: rowsOf((b) => [7 + b]),
      penaltyTokens: {
        ...pen,
        outputCounts: Int32Array.from({ length: 3 * B }, (_, i) => [0, 2, 1][i % 3]),
        inPrompt: Uint8Array.from({ length: 3 * B }, (_, i) => (i % 3 === 0 ? 1 : 0)),
      },
      repetitionPenalty: 1.3, frequencyPenalty: 0.4, presencePenalty: 0.2,
    };
    const options = { ...rowOptions, ...lists };
    const want = await sampleFused(head.H, head.W, options);
    const shards = shardBounds(V, 3, 14, true).map(([offset, size]) => ({ H: head.H, W: head.shard(offset, size), vocabOffset: offset }));
    const got = await sampleSharded(shards, { ...options, vocabSize: V, listIds: 'global', ...(candidates ? { candidates } : {}) });
    if (candidates) expect(got.rowsPassRows.length).toBeGreaterThan(0);
    expectSameDraws(got, want);
    // ('local', the default: the ids name each shard's own rows, and 1000 is past every shard but the last)
    await expect(sampleSharded(shards, { ...options, vocabSize: V, ...(candidates ? { candidates } : {}) })).rejects.toBeInstanceOf(RangeError);
  });

  // logprobsMode 'raw' (SEMANTICS §4): a shard's state carries the raw distribution of its rows
  // (softcap and the model's bias; no mask, no lists, T = 1), the raw logits of its winners and
  // candidates, and its best raw tokens; the merge (and the rows pass, whose segments carry the raw
  // logits too) reports the unsharded call's raw log-probabilities and top tokens. Greedy, filtered
  // and unfiltered rows; per-shard masks, bias, softcap and logit bias, which the draw sees and the
  // raw distribution does not.
  const rawCases: [string, SampleOptions, number | undefined][] = [
    ['top-p, top tokens, greedy row, the merge decides', {
      topP: 0.9, temperature: new Float32Array([1.1, 0, 0.8]), logprobs: true, topLogprobs: 4, seed: perRowSeeds(B), numSamples: 2,
    }, undefined],
    ['top-p through the rows pass', { topP: 0.9, temperature: 1.1, logprobs: true, topLogprobs: 3, seed: 31n, numSamples: 3 }, 4],
    ['no filter, logprobs alone', { logprobs: true, seed: 5n, numSamples: 4 }, undefined],
    ['top-k, top tokens alone', { topK: 12, topLogprobs: 6, seed: 6n }, undefined],
  ];
  test.each(rawCases)("logprobsMode 'raw', TP 3: %s: the unsharded raw log-probabilities", async (_label, options, candidates) => {
    const r = rng(79);
    const mask = makeMask(B, V, (b, v) => (v * 5 + b) % 9 !== 0 || r() < 0.1);
    const biasValues = Float32Array.from({ length: V }, (_, v) => (v % 17 === 0 ? -0.75 : 0));
    const bias = dev().tensor(biasValues, [V], 'f32');
    const ids = Array.from({ length: B }, (_, b) => [2 * b + 1, 600 + b, 1000]);  // biased 3, -2, 4
    const lists = (offset: number, size: number) => shardLogitBias(ids, [3, -2, 4], offset, size);
    const raw: SampleOptions = { ...options, logprobsMode: 'raw' };
    const want = await sampleFused(head.H, head.W, { ...raw, allowedTokens: mask, bias, softcap: 7, logitBias: lists(0, V) });
    const owned: Tensor[] = [bias];
    const shards = adjustedShards(shardBounds(V, 3, 17, true), mask, biasValues, 7, lists, owned);
    const got = await sampleSharded(shards, { ...raw, vocabSize: V, ...(candidates === undefined ? {} : { candidates }) });
    if (candidates !== undefined) expect(got.rowsPassRows.length).toBeGreaterThan(0);
    expectSameDraws(got, want);
    // the raw reports are not the processed ones (the lists, the mask and T change the distribution)
    const processed = await sampleFused(head.H, head.W, { ...options, allowedTokens: mask, bias, softcap: 7, logitBias: lists(0, V) });
    expect(Array.from(got.tokens)).toEqual(Array.from(processed.tokens));
    const differs = (a?: Float32Array, b?: Float32Array) => a !== undefined && b !== undefined && a.some((x, i) => Math.abs(x - b[i]) > 1e-3);
    expect(differs(got.logprobs, processed.logprobs) || differs(got.topLogprobs, processed.topLogprobs)).toBe(true);
    for (const t of owned) t.dispose();
  });

  test("logprobsMode 'raw': the state's raw section as JS reads it", async () => {
    const options: SampleOptions = { topK: 5, logprobs: true, topLogprobs: 3, logprobsMode: 'raw', seed: 3n, softcap: 9 };
    const p = await sampleFused(head.H, head.shard(500, 501), { ...options, partial: true, vocabOffset: 500, vocabSize: V });
    const q = await sampleFused(head.H, head.shard(500, 501), { ...options, logprobsMode: 'processed', partial: true, vocabOffset: 500, vocabSize: V });
    try {
      expect(p.rawTop).toBe(3);
      expect(q.rawTop).toBe(-1);
      expect(p.bytes).toBeGreaterThan(q.bytes);
      const d = await p.read();
      expect(d.rawTop).toBe(3);
      expect((await q.read()).rows[0].raw).toBeUndefined();
      for (const row of d.rows) {
        const raw = row.raw!;
        expect(raw.keys.length).toBe(3);
        // the raw keys: global ids of the shard, in (logit descending, id ascending) order
        for (let i = 0; i < raw.keys.length; i++) {
          expect(raw.keys[i].token).toBeGreaterThanOrEqual(500);
          if (i > 0) expect(raw.keys[i].logit).toBeLessThanOrEqual(raw.keys[i - 1].logit);
        }
        expect(raw.zMax).toBe(raw.keys[0].logit);
        expect(raw.sum).toBeGreaterThanOrEqual(1);
        expect(raw.infCount).toBe(0);
        expect(raw.candidateLogits.length).toBe(row.candidates.length);
        // softcap only: a candidate's raw logit is its processed one (T = 1, no mask or lists here)
        row.candidates.forEach((c, i) => expect(raw.candidateLogits[i]).toBe(c.logit));
      }
    } finally {
      p.dispose();
      q.dispose();
    }
  });

  // (logprobsMode 'raw': the +Inf tier is the raw distribution's too, its top tokens the two +Inf
  // ones and then none)
  const infModes: ['processed' | 'raw'][] = [['processed'], ['raw']];
  test.each(infModes)('+Inf logits in two shards share the mass (logprobsMode %s): the merged tokens are the unsharded ones', async (mode) => {
    const biasValues = new Float32Array(V);
    biasValues[5] = Infinity;
    biasValues[998] = Infinity;
    const bias = dev().tensor(biasValues, [V], 'f32');
    const options: SampleOptions = { topP: 0.5, logprobs: true, seed: 3n, numSamples: 16 };
    if (mode === 'raw') Object.assign(options, { topLogprobs: 3, logprobsMode: mode });
    const want = await sampleFused(head.H, head.W, { ...options, bias });
    const bounds = shardBounds(V, 3, 9);
    const biases: Tensor[] = [];
    const { result } = await shardAndMerge(head, bounds, options, (offset, size) => {
      const t = dev().tensor(biasValues.slice(offset, offset + size), [size], 'f32');
      biases.push(t);
      return { bias: t };
    });
    expect(Array.from(result.tokens)).toEqual(Array.from(want.tokens));
    expect(new Set(result.tokens)).toEqual(new Set([5, 998]));
    expectClose(result.logprobs, want.logprobs, 1e-6);
    if (mode === 'raw') {
      expect(Array.from(result.topTokens!)).toEqual(Array.from(want.topTokens!));
      expect(Array.from(result.topTokens!.subarray(0, 3))).toEqual([5, 998, -1]);
      expectClose(result.topLogprobs, want.topLogprobs, 1e-6);
    }
    for (const t of biases) t.dispose();
    bias.dispose();
  });

  // V = 40003: a CUDA shard cuts its rows into slices of 8192 values, each keeping its share of the
  // candidates, merged per row: several slices a shard, candidates fewer than a slice's values
  // (selected in every slice), and 16384 candidates (the row's selection and sort in global memory).
  const sliced: [string, SampleOptions, Record<string, unknown>][] = [
    ['top-k 50, logprobs, topLogprobs 5', { topK: 50, logprobs: true, topLogprobs: 5, seed: 8n, numSamples: 3 }, {}],
    ['top-p 0.9, T 1.1, per-row seeds', { topP: 0.9, temperature: 1.1, logprobs: true, seed: perRowSeeds(B) }, {}],
    ['min-p 0.02, 16384 candidates', { minP: 0.02, logprobs: true, seed: 4n, numSamples: 2 }, { candidates: 16384 }],
    ['greedy and sampled rows', { temperature: new Float32Array([1.2, 0, 0.7]), topK: 9, seed: 3n, numSamples: 2 }, {}],
  ];
  test.each(sliced)('V = 40003, TP 1 and 3: %s: the merged shards draw the unsharded tokens', async (_label, options, extra) => {
    const V4 = 40003;
    const big = plantedHead(dev(), [zipfLogits(V4, 1.6, 5), dominantLogits(V4, 6, 14), zipfLogits(V4, 2.2, 7)]);
    const want = await sampleFused(big.H, big.W, options);
    for (const bounds of [[[0, V4]] as [number, number][], shardBounds(V4, 3, 55)]) {
      const { result, partials } = await shardAndMerge(big, bounds, options, () => ({}), extra);
      expectSameDraws(result, want);
      for (const p of partials) p.dispose();
    }
    big.dispose();
  });

  test('rows the candidates cannot settle are undecided; more candidates settle them', async () => {
    // Flat rows at V = 5000: the nucleus of top-p 0.95 holds thousands of tokens, far more than
    // 16 candidates a shard; the re-run with a shard's whole rows settles every row.
    const V2 = 5000;
    const flat = plantedHead(dev(), [flatLogits(V2, 4, 1), dominantLogits(V2, 5, 12)]);
    const options: SampleOptions = { topP: 0.95, seed: 12n, logprobs: true };
    const bounds = shardBounds(V2, 3, 31);
    const first = await shardAndMerge(flat, bounds, options, () => ({}), { candidates: 16 });
    expect(Array.from(first.result.undecidedRows)).toEqual([0]);
    expect(first.result.tokens[0]).toBe(-1);
    const largest = Math.max(...bounds.map(([, s]) => s));
    const again = await shardAndMerge(flat, bounds, options, () => ({}), { candidates: largest });
    expect(again.result.undecidedRows.length).toBe(0);
    const want = await sampleFused(flat.H, flat.W, options);
    expect(Array.from(again.result.tokens)).toEqual(Array.from(want.tokens));
    expect(first.result.tokens[1]).toBe(want.tokens[1]);  // the peaked row was decided at once
    expectClose(again.result.logprobs, want.logprobs, 1e-5);
    flat.dispose();
  });

  test('the complete prefix ends at the highest last key of the incomplete shards', async () => {
    // Shard [0, 32) holds the row's 32 best tokens (logits 10 down to 6.9), shard [32, 64) 32 more
    // 5 logits below. With 4 candidates each, the merged keys form a complete prefix only down to
    // the first shard's 4th key: the second shard's keys are all below it, and the first shard's
    // 5th to 32nd, which it did not send, lie above the second's. So top-k 6 (row 0) and 6
    // topLogprobs of a row without filters (row 2) reach past that prefix and are undecided;
    // top-k 3 (row 1) is decided from it. The rows pass then draws the unsharded tokens.
    const V2 = 64;
    const row = Float64Array.from({ length: V2 }, (_, v) => (v < 32 ? 10 - 0.1 * v : 5 - 0.1 * (v - 32)));
    const two = plantedHead(dev(), [row, row, row]);
    const options: SampleOptions = { topK: new Int32Array([6, 3, 0]), topLogprobs: 6, logprobs: true, seed: perRowSeeds(3) };
    const bounds: [number, number][] = [[0, 32], [32, 32]];
    const want = await sampleFused(two.H, two.W, options);
    const first = await shardAndMerge(two, bounds, options, () => ({}), { candidates: 4 });
    expect(Array.from(first.result.undecidedRows)).toEqual([0, 2]);
    expect(first.result.tokens[1]).toBe(want.tokens[1]);
    const shards = bounds.map(([offset, size]) => ({ H: two.H, W: two.shard(offset, size), vocabOffset: offset }));
    const got = await sampleSharded(shards, { ...options, vocabSize: V2, candidates: 4 });
    expect(Array.from(got.rowsPassRows)).toEqual([0, 2]);
    expectSameDraws(got, want);
    for (const p of first.partials) p.dispose();
    two.dispose();
  });

  // SEMANTICS §2.6 across shards: four allowed tokens of equal logits (two in each of the first two
  // shards) put p = 0.5, 0.75 and 0.25 exactly on a prefix's mass, which the merge's float64 sums
  // hold exactly: 2, 3 and 1 tokens kept. CPU only, as filters.test.ts's single-device case: CUDA's
  // unsharded fp32 masses may cut within a relative 1e-6 of a boundary (§5).
  (name === 'cpu' ? test : test.skip)('top-p on an exact mass boundary: the merge keeps the prefix that reaches p (V = 111, TP 3)', async () => {
    const V2 = 111;
    const allowed = [7, 20, 60, 90];
    const logits = Float64Array.from({ length: V2 }, (_, v) => (allowed.includes(v) ? 1.5 : 3 - (v % 5)));
    const exact = plantedHead(dev(), [logits, logits, logits]);
    const mask = makeMask(3, V2, (_b, v) => allowed.includes(v));
    const S = scaled(4096, 65536);
    const options: SampleOptions = { topP: new Float32Array([0.5, 0.75, 0.25]), temperature: new Float32Array([1, 0.7, 1]), seed: 14n, numSamples: S };
    const bounds: [number, number][] = [[0, 40], [40, 60], [100, 11]];
    const want = await sampleFused(exact.H, exact.W, { ...options, allowedTokens: mask });
    const { result, partials } = await shardAndMerge(exact, bounds, options, (offset, size) => ({ allowedTokens: shardMask(mask, 3, V2, offset, size) }));
    expectSameDraws(result, want);
    [2, 3, 1].forEach((n, b) => {
      const seen = new Set(result.tokens.subarray(b * S, (b + 1) * S));
      expect([...seen].sort((x, y) => x - y)).toEqual(allowed.slice(0, n));
    });
    for (const p of partials) p.dispose();
    exact.dispose();
  });

  const fits: [string, FilterSpec][] = [
    ['plain', { temperature: 1 }],
    ['top-k 7, T 0.7', { topK: 7, temperature: 0.7 }],
    ['top-p 0.8 and min-p 0.02', { topP: 0.8, minP: 0.02 }],
  ];
  test.each(fits)('chi-square: merged draws at V = 111, TP = 3 match float64 (%s)', async (_label, f) => {
    const V3 = 111;
    const row = zipfLogits(V3, 0.9, 17);
    const small = plantedHead(dev(), [row]);
    const kept = keptDistribution(small.logits[0], f);
    const S = scaled(60000, 65536);
    const options = samplesOf(f, 99n, S);
    const { result } = await shardAndMerge(small, shardBounds(V3, 3, 8), options);
    const counts = rowCounts(result.tokens, 1, S, V3)[0];
    const fit = goodnessOfFit(counts, kept.probs);
    if (!fit.ok) throw new Error(fit.summary);
    small.dispose();
  });

  const throughRowsPass: [string, FilterSpec][] = [
    ['top-p 0.9, T 0.8', { topP: 0.9, temperature: 0.8 }],
    ['top-k 60 and min-p 0.01', { topK: 60, minP: 0.01 }],
  ];
  test.each(throughRowsPass)('chi-square: rows through the rows pass at V = 1000, TP = 3 match float64 (%s)', async (_label, f) => {
    // 4 candidates a shard settle no row of this Zipf head: every draw comes from the rows pass
    // (each shard's candidate values of the row, decided whole).
    const V3 = 1000;
    const row = zipfLogits(V3, 0.8, 23);
    const small = plantedHead(dev(), [row]);
    const kept = keptDistribution(small.logits[0], f);
    const S = scaled(60000, 65536);
    const options = samplesOf(f, 5n, S);
    const bounds = shardBounds(V3, 3, 9);
    const first = await shardAndMerge(small, bounds, options, () => ({}), { candidates: 4 });
    expect(Array.from(first.result.undecidedRows)).toEqual([0]);
    const shards = bounds.map(([offset, size]) => ({ H: small.H, W: small.shard(offset, size), vocabOffset: offset }));
    const got = await sampleSharded(shards, { ...options, vocabSize: V3, candidates: 4 });
    expect(got.undecidedRows.length).toBe(0);
    expect(Array.from(got.rowsPassRows)).toEqual([0]);
    const want = await sampleFused(small.H, small.W, options);
    expect(Array.from(got.tokens)).toEqual(Array.from(want.tokens));
    const fit = goodnessOfFit(rowCounts(got.tokens, 1, S, V3)[0], kept.probs);
    if (!fit.ok) throw new Error(fit.summary);
    small.dispose();
  });

  test("filterOrder 'vllm' (min-p first): the merged shards draw the unsharded tokens", async () => {
    // min-p and top-p both set: the nucleus differs between the orders, and the merge must follow vLLM's.
    const options: SampleOptions = { minP: 0.05, topP: 0.6, filterOrder: 'vllm', logprobs: true, seed: 77n, numSamples: 8 };
    const want = await sampleFused(head.H, head.W, options);
    const hf = await sampleFused(head.H, head.W, { ...options, filterOrder: 'hf' });
    expect(Array.from(want.tokens)).not.toEqual(Array.from(hf.tokens));
    const { result, partials } = await shardAndMerge(head, shardBounds(V, 4, 21, true), options);
    expect(Array.from(result.tokens)).toEqual(Array.from(want.tokens));
    expectClose(result.logprobs, want.logprobs, 1e-5);
    for (const p of partials) p.dispose();
  });

  test('sampleSharded: the shards in turn, no NCCL, the rows pass for undecided rows', async () => {
    const V2 = 5000;
    const flat = plantedHead(dev(), [flatLogits(V2, 4, 1), dominantLogits(V2, 5, 12)]);
    const bounds = shardBounds(V2, 3, 41);
    const shards = bounds.map(([offset, size]) => ({ H: flat.H, W: flat.shard(offset, size), vocabOffset: offset }));
    for (const options of [
      { topP: 0.95, seed: 12n, logprobs: true },
      { topK: 7, temperature: 0.8, seed: 2n, numSamples: 5 },
      { temperature: 1.1, seed: 3n, numSamples: 3 },
    ] as SampleOptions[]) {
      const want = await sampleFused(flat.H, flat.W, options);
      // 16 candidates a shard cannot settle the flat row's nucleus: the rows pass draws it from its
      // whole row, beside the peaked row the merge decided.
      const got = await sampleSharded(shards, { ...options, vocabSize: V2, candidates: 16 });
      expect(got.undecidedRows.length).toBe(0);
      expect(Array.from(got.rowsPassRows)).toEqual(options.topP !== undefined ? [0] : []);
      expect(Array.from(got.tokens)).toEqual(Array.from(want.tokens));
      if (want.logprobs) expectClose(got.logprobs, want.logprobs, 1e-5);
    }
    flat.dispose();
  });

  (name === 'cuda' ? test : test.skip)('sampleSharded: shards on the CPU and the GPU draw the one-device tokens', async () => {
    const cpuHead = plantedHead(open('cpu'), [zipfLogits(V, 1.1, 1), flatLogits(V, 2, 3), zipfLogits(V, 0.6, 3)]);
    const bounds = shardBounds(V, 2, 5);
    const options: SampleOptions = { topK: 40, seed: 6n, numSamples: 64 };
    const want = await sampleFused(head.H, head.W, options);
    const got = await sampleSharded(
      [
        { H: head.H, W: head.shard(...bounds[0]), vocabOffset: bounds[0][0] },
        { H: cpuHead.H, W: cpuHead.shard(...bounds[1]), vocabOffset: bounds[1][0] },
      ],
      { ...options, vocabSize: V },
    );
    // Both backends compute these planted logits exactly; only the float log of the noise may
    // differ in its last bit between them, which can flip a near-tie.
    let same = 0;
    for (let i = 0; i < want.tokens.length; i++) same += got.tokens[i] === want.tokens[i] ? 1 : 0;
    expect(same / want.tokens.length).toBeGreaterThanOrEqual(0.99);
    cpuHead.dispose();
  });

  (name === 'cuda' ? test : test.skip)("sampleSharded, logprobsMode 'raw': a CPU and a GPU shard report the one-device raw log-probabilities", async () => {
    const cpuHead = plantedHead(open('cpu'), [zipfLogits(V, 1.1, 1), flatLogits(V, 2, 3), zipfLogits(V, 0.6, 3)]);
    const bounds = shardBounds(V, 2, 5);
    const options: SampleOptions = { topK: 40, seed: 6n, logprobs: true, topLogprobs: 5, logprobsMode: 'raw' };
    const want = await sampleFused(head.H, head.W, options);
    const got = await sampleSharded(
      [
        { H: head.H, W: head.shard(...bounds[0]), vocabOffset: bounds[0][0] },
        { H: cpuHead.H, W: cpuHead.shard(...bounds[1]), vocabOffset: bounds[1][0] },
      ],
      { ...options, vocabSize: V },
    );
    expectSameDraws(got, want);
    cpuHead.dispose();
  });

  // bf16 heads: a CUDA shard with one sample a row and at most 2048 candidates takes the one-pass
  // filtered GEMM (its candidates and tile summaries make the state; cuda/partial.cu). V = 128256:
  // rows of several tiles a CTA; hot, Gaussian, Zipf, flat and greedy rows in one batch.
  describe('bf16 shards (the one-pass path on CUDA)', () => {
    const VB = 128256;
    const BB = 5;
    let bf: Head;
    beforeAll(() => {
      bf = plantedHead(dev(), [
        dominantLogits(VB, 4, 9), gaussianLogits(VB, 5, 4), zipfLogits(VB, 1.1, 6), gaussianLogits(VB, 7, 2.5),
        flatLogits(VB, 8, 3),
      ], 'bf16');
    });
    afterAll(() => bf.dispose());
    const seeds = BigUint64Array.from({ length: BB }, (_, b) => BigInt(31 + 7 * b));
    const oneSample: [string, SampleOptions][] = [
      ['top-k 50, logprobs, topLogprobs 5', { topK: 50, logprobs: true, topLogprobs: 5, seed: 8n }],
      ['Llama 3 default (T 0.6, top-p 0.9), logprobs', { temperature: 0.6, topP: 0.9, logprobs: true, seed: seeds }],
      ['Qwen3 default (T 0.6, top-k 20, top-p 0.95)', { temperature: 0.6, topK: 20, topP: 0.95, seed: 4n, offset: 9n }],
      ['min-p 0.05, logprobs', { minP: 0.05, logprobs: true, seed: 12n }],
      ['logprobs alone, topLogprobs 3', { logprobs: true, topLogprobs: 3, temperature: 0.9, seed: 5n }],
      ['per-row: greedy, top-k, none, top-p, min-p', {
        temperature: new Float32Array([0, 0.8, 1, 0.7, 1.2]), topK: new Int32Array([0, 40, 0, 0, 0]),
        topP: new Float32Array([1, 1, 1, 0.5, 1]), minP: new Float32Array([0, 0, 0, 0, 0.1]), logprobs: true, seed: seeds,
      }],
      ["filterOrder 'vllm': min-p 0.1 and top-p 0.6", { minP: 0.1, topP: 0.6, filterOrder: 'vllm', logprobs: true, seed: 77n }],
      // (raw: a CUDA shard materializes; the flat row's raw top tokens come through the rows pass)
      ["Llama 3 default, logprobsMode 'raw', topLogprobs 20", {
        temperature: 0.6, topP: 0.9, logprobs: true, topLogprobs: 20, logprobsMode: 'raw', seed: seeds,
      }],
      // (40 top tokens: more than one GPU's raw tiles path takes, 32)
      ["per-row greedy, top-k, none, min-p; logprobsMode 'raw', topLogprobs 40", {
        temperature: new Float32Array([0, 0.8, 1, 0.7, 1.2]), topK: new Int32Array([0, 40, 0, 0, 0]),
        minP: new Float32Array([0, 0, 0, 0, 0.1]), logprobs: true, topLogprobs: 40, logprobsMode: 'raw', seed: seeds,
      }],
    ];
    test.each(oneSample)('TP 1, 2 and 3: %s: the merged shards draw the unsharded tokens', async (_label, options) => {
      const want = await sampleFused(bf.H, bf.W, options);
      for (const bounds of [[[0, VB]] as [number, number][], shardBounds(VB, 2, 61), shardBounds(VB, 3, 62)]) {
        const shards = bounds.map(([offset, size]) => ({ H: bf.H, W: bf.shard(offset, size), vocabOffset: offset }));
        // (the flat row's nucleus outgrows the first round's candidates: later rounds settle it)
        const got = await sampleSharded(shards, { ...options, vocabSize: VB });
        expectSameDraws(got, want);
      }
    });

    test('per-shard masks, bias and softcap, and +Inf tokens: the merged tokens are the unsharded ones', async () => {
      const r = rng(3);
      const mask = makeMask(BB, VB, (b, v) => (v * 3 + b) % 7 !== 0 || r() < 0.2);
      const biasValues = Float32Array.from({ length: VB }, (_, v) => (v % 101 === 0 ? 2 : 0));
      const withInf = new Float32Array(VB);
      withInf[3] = Infinity;  // (3 and 70005: no row's mask leaves them out)
      withInf[70005] = Infinity;
      for (const [values, options, softcap] of [
        [biasValues, { topK: 30, topP: 0.9, logprobs: true, topLogprobs: 2, seed: 6n }, { softcap: 8 }],
        [withInf, { topP: 0.9, logprobs: true, seed: 7n }, {}],  // (no softcap: it would make them finite)
      ] as [Float32Array, SampleOptions, { softcap?: number }][]) {
        const bias = makeTensor(dev(), 'bf16', values, [VB]);
        const want = await sampleFused(bf.H, bf.W, { ...options, ...softcap, allowedTokens: mask, bias });
        const shardTensors: Tensor[] = [];
        const shards = shardBounds(VB, 3, 64).map(([offset, size]) => {
          const t = makeTensor(dev(), 'bf16', values.slice(offset, offset + size), [size]);
          shardTensors.push(t);
          return { H: bf.H, W: bf.shard(offset, size), vocabOffset: offset, options: { allowedTokens: shardMask(mask, BB, VB, offset, size), bias: t, ...softcap } };
        });
        const result = await sampleSharded(shards, { ...options, vocabSize: VB });
        expectSameDraws(result, want);
        if (values === withInf) {
          for (const t of result.tokens) expect([3, 70005]).toContain(t);
          // (a one-pass shard's candidates hold no +Inf token and it offers no winner for a
          // filtered row: those rows are the rows pass's)
          if (name === 'cuda') expect(result.rowsPassRows.length).toBe(BB);
        }
        for (const t of shardTensors) t.dispose();
        bias.dispose();
      }
    });

    test('a one-pass state is a prefix of the materialized one: same winners, counts and z_max', async () => {
      // 4096 candidates take the materializing path (cuda/partial.cu: above 2048); its keys are
      // the shard's order, so the one-pass state's keys must be their first ones.
      const [offset, size] = [40000, 60000];
      const W = bf.shard(offset, size);
      for (const options of [
        { topK: 50, logprobs: true, seed: 3n },
        { temperature: 0.6, topP: 0.9, logprobs: true, seed: 4n },
        { minP: 0.05, topLogprobs: 4, seed: 5n },
        { topK: 20, logprobs: true, topLogprobs: 6, logprobsMode: 'raw', softcap: 6, seed: 6n },
      ] as SampleOptions[]) {
        const one = await sampleFused(bf.H, W, { ...options, partial: true, vocabOffset: offset, vocabSize: VB });
        const full = await sampleFused(bf.H, W, { ...options, partial: true, vocabOffset: offset, vocabSize: VB, candidates: 4096 });
        const [a, z] = [await one.read(), await full.read()];
        // On CUDA the two come from different kernels (one-pass: the tile summaries' fp32 sums), so
        // some row's sum differs in rounding: the one-pass path did run.
        if (name === 'cuda') expect(a.rows.some((r, b) => r.sum !== z.rows[b].sum)).toBe(true);
        for (let b = 0; b < BB; b++) {
          const [ra, rz] = [a.rows[b], z.rows[b]];
          if (name === 'cuda') {
            expect(ra.winners[0].token).toBe(-1);  // (a filtered row: the merge draws its keys)
          } else {
            expect(ra.winners[0].token).toBe(rz.winners[0].token);
            expect(ra.winners[0].score).toBe(rz.winners[0].score);
            expect(ra.winners[0].logit).toBe(rz.winners[0].logit);
          }
          expect([ra.finiteCount, ra.infCount, ra.zMax]).toEqual([rz.finiteCount, rz.infCount, rz.zMax]);
          expect(Math.abs(ra.sum - rz.sum)).toBeLessThanOrEqual(1e-6 * rz.sum);
          expect(ra.candidates.length).toBeLessThanOrEqual(one.capacity);
          expect(ra.candidates).toEqual(rz.candidates.slice(0, ra.candidates.length));
          if (ra.complete) expect(ra.candidates.length).toBe(ra.finiteCount + ra.infCount);
          // logprobsMode 'raw': both sections from the same stored logits by the same kernel
          if (options.logprobsMode === 'raw') {
            const [wa, wz] = [ra.raw!, rz.raw!];
            expect([wa.zMax, wa.sum, wa.infCount, wa.keys]).toEqual([wz.zMax, wz.sum, wz.infCount, wz.keys]);
            expect(wa.keys.length).toBe(6);
            expect(wa.candidateLogits).toEqual(wz.candidateLogits.slice(0, ra.candidates.length));
            if (name === 'cpu') expect(wa.winnerLogits).toEqual(wz.winnerLogits);
          }
        }
        one.dispose();
        full.dispose();
      }
    });

    // The gate's other side (cuda/partial.cu): at B = 64 a shard takes the one-pass path only when
    // V_shard · D >= 200 · 2^20, so a 110000 × 2048 shard at offset 18256 runs it beside an 18256-row
    // shard that materializes. CUDA only: the CPU would take minutes over 0.5 G weights.
    (name === 'cuda' ? test : test.skip)('B = 64, shards of 18256 and 110000 rows × D 2048: one-pass beside materialized, the unsharded tokens', async () => {
      const [VL, DL, BL] = [128256, 2048, 64];
      // random bf16 bits from a table of 65536 values uniform in ±0.3: logits of std ~8, so the
      // nuclei are small and no top-p boundary lies within the fp32 sums' rounding (SEMANTICS §6)
      const table = new Uint16Array(65536);
      const f = new Float32Array(1);
      const bits = new Uint32Array(f.buffer);
      const r = rng(91);
      for (let i = 0; i < table.length; i++) {
        f[0] = (r() - 0.5) * 0.6;
        table[i] = bits[0] >>> 16;
      }
      let x = 2463534242;
      const randomBits = (n: number) => {
        const out = new Uint16Array(n);
        for (let i = 0; i < n; i++) {
          x ^= x << 13;
          x ^= x >>> 17;
          x ^= x << 5;
          out[i] = table[x & 0xffff];
        }
        return out;
      };
      const w = randomBits(VL * DL);
      const h = new Uint16Array(BL * DL);
      for (let i = 0; i < h.length; i++) {
        f[0] = (r() - 0.5) * 3.4;  // std ~1
        h[i] = bits[0] >>> 16;
      }
      const d = dev();
      const W = d.tensor(w, [VL, DL], 'bf16');
      const H = d.tensor(h, [BL, DL], 'bf16');
      const bounds: [number, number][] = [[0, 18256], [18256, 110000]];
      const shardW = bounds.map(([offset, size]) => d.tensor(w.subarray(offset * DL, (offset + size) * DL), [size, DL], 'bf16'));
      const seeds = perRowSeeds(BL);
      for (const options of [
        { temperature: 0.6, topP: 0.9, logprobs: true, seed: seeds },
        { topK: 50, logprobs: true, topLogprobs: 5, seed: 21n },
        { minP: 0.1, logprobs: true, temperature: 0.7, seed: seeds },
      ] as SampleOptions[]) {
        const want = await sampleFused(H, W, options);
        const got = await sampleSharded(bounds.map(([offset], i) => ({ H, W: shardW[i], vocabOffset: offset })), { ...options, vocabSize: VL });
        expectSameDraws(got, want);
        // the large shard's state came from the one-pass GEMM: its tile sums differ in rounding
        // from the materialized state's (4096 candidates materialize)
        const [offset, size] = bounds[1];
        const one = await sampleFused(H, shardW[1], { ...options, partial: true, vocabOffset: offset, vocabSize: VL });
        const full = await sampleFused(H, shardW[1], { ...options, partial: true, vocabOffset: offset, vocabSize: VL, candidates: 4096 });
        const [a, z] = [await one.read(), await full.read()];
        expect(size * DL).toBeGreaterThanOrEqual(200 * 2 ** 20);
        expect(a.rows.some((row, b) => row.sum !== z.rows[b].sum)).toBe(true);
        for (let b = 0; b < BL; b++) {
          expect(a.rows[b].winners[0].token).toBe(-1);  // (a filtered row: the merge draws its keys)
          expect(Math.abs(a.rows[b].sum - z.rows[b].sum)).toBeLessThanOrEqual(1e-6 * z.rows[b].sum);
        }
        one.dispose();
        full.dispose();
      }
      for (const t of [W, H, ...shardW]) t.dispose();
    }, 120000);

    const fitsOne: [string, FilterSpec][] = [
      ['top-k 7, T 0.7', { topK: 7, temperature: 0.7 }],
      ['top-p 0.8 and min-p 0.02', { topP: 0.8, minP: 0.02 }],
    ];
    test.each(fitsOne)('chi-square: one sample a row, V = 1000, TP 3, against float64 (%s)', async (_label, f) => {
      // 16 rows of one logit row (a batch that takes the one-pass path), each its own seed, 3840
      // calls: 61 K draws of numSamples 1.
      const V3 = 1000;
      const rows = 16;
      const row = zipfLogits(V3, 0.9, 19);
      const small = plantedHead(dev(), Array.from({ length: rows }, () => row), 'bf16');
      const kept = keptDistribution(small.logits[0], f);
      const bounds = shardBounds(V3, 3, 18);
      const shards = bounds.map(([offset, size]) => ({ H: small.H, W: small.shard(offset, size), vocabOffset: offset }));
      const counts = new Float64Array(V3);
      const calls = scaled(3840);
      for (let i = 0; i < calls; i++) {
        const options = rowOptions(rows, f, i);
        const got = await sampleSharded(shards, { ...options, vocabSize: V3 });
        countTokens(counts, got.tokens);
      }
      const fit = goodnessOfFit(counts, kept.probs);
      if (!fit.ok) throw new Error(fit.summary);
      small.dispose();
    });

    // Filters with logprobs over shards: 3 rows (the Qwen3 default, min-p 0.1, top-k 7), numSamples
    // 65536 × 4 offsets (262 K draws a row; the top token keeps p 0.55–0.61, a 1 % bias is 5.7–6.5
    // sd), logprobs within 1e-4 of float64.
    test('chi-square: 262 K draws a row, V = 1000, TP 3, filters with logprobs, against float64', async () => {
      const V3 = 1000;
      const row = zipfLogits(V3, 1.1, 77);
      const small = plantedHead(dev(), [row, row, row], 'bf16');
      try {
        const qwen = { temperature: 0.6, topK: 20 };
        const specs: FilterSpec[] = [
          { ...qwen, topP: safeTopP(small.logits[0], qwen, 0.95) },
          { temperature: 0.7, minP: 0.1 },
          { temperature: 0.7, topK: 7 },
        ];
        const kept = specs.map((f, b) => keptDistribution(small.logits[b], f));
        const shards = shardBounds(V3, 3, 18).map(([offset, size]) => ({ H: small.H, W: small.shard(offset, size), vocabOffset: offset }));
        const counts = specs.map(() => new Float64Array(V3));
        for (let offset = 0; offset < 4; offset++) {
          const options = { ...mixedRowOptions(specs, 3, offset, 91), numSamples: MAX_S, logprobs: true, vocabSize: V3 };
          expect(addRowDraws(counts, await sampleSharded(shards, options), MAX_S, kept)).toBeLessThan(1e-4);
        }
        expect(rowFitFailures(counts, kept.map((k) => k.probs))).toEqual([]);
      } finally {
        small.dispose();
      }
    });
  });

  test('states sized for more rows (maxBatch) merge like exact-size ones', async () => {
    const options: SampleOptions = { topK: 25, logprobs: true, seed: 31n, numSamples: 2 };
    const want = await sampleFused(head.H, head.W, options);
    const { result, partials } = await shardAndMerge(head, shardBounds(V, 3, 12), options, () => ({}), { maxBatch: 64 });
    expect(partials[0].bytes).toBe(64 + 64 * (40 + 16 * 2 + 8 * 25));
    expect(Array.from(result.tokens)).toEqual(Array.from(want.tokens));
    expectClose(result.logprobs, want.logprobs, 1e-5);
    for (const p of partials) p.dispose();
  });

  test('the partial state reads back from JS: global ids, sorted candidates, the header', async () => {
    const p = (await sampleFused(head.H, head.shard(500, 300), {
      topK: 10, seed: 1n, partial: true, vocabOffset: 500, vocabSize: V, maxBatch: 8,
    })) as PartialState;
    expect(p.capacity).toBe(10);
    expect(p.state.device.kind).toBe(name);
    const d = await p.read();
    expect(d).toMatchObject({ batch: B, maxBatch: 8, numSamples: 1, capacity: 10, vocabOffset: 500, vocabSize: 300, vocabTotal: V, hasStats: true });
    for (let b = 0; b < B; b++) {
      const row = d.rows[b];
      expect(row.finiteCount).toBe(300);
      expect(row.complete).toBe(false);
      expect(row.candidates.length).toBe(10);
      const want = Array.from({ length: 300 }, (_, i) => 500 + i).sort((x, y) => head.logits[b][y] - head.logits[b][x] || x - y);
      expect(row.candidates.map((c) => c.token)).toEqual(want.slice(0, 10));
      expect(row.candidates[0].logit).toBe(head.logits[b][want[0]]);
      expect(row.winners[0].token).toBeGreaterThanOrEqual(500);
      expect(row.winners[0].token).toBeLessThan(800);
    }
    expect(p.bytes).toBe(64 + 8 * (40 + 16 + 80));
    p.dispose();
  });

  describe('errors', () => {
    const shardOf = (o: Record<string, unknown>) => sampleFused(head.H, head.shard(0, 500), { partial: true, vocabOffset: 0, vocabSize: V, ...o } as never);
    test.each([
      [{ vocabOffset: 2 }, RangeError, /vocabOffset: expected a multiple of 4/],
      [{ vocabOffset: 504 }, RangeError, /vocabOffset: expected an integer in \[0, 501\]/],
      [{ vocabSize: 400 }, RangeError, /vocabSize: expected an integer in \[500, /],
      [{ vocabSize: undefined }, TypeError, /vocabSize: expected an integer/],
      [{ partial: false }, TypeError, /partial: expected true/],
      [{ candidates: -1 }, RangeError, /candidates: expected an integer in \[0, 1048576\]/],
      [{ maxBatch: 2 }, RangeError, /maxBatch: expected an integer in \[3, /],
    ])('sampleFused(..., %o) fails clearly', async (o, kind, message) => {
      const e = await failure(() => shardOf(o));
      expect(e).toBeInstanceOf(kind);
      expect(e.message).toMatch(message);
    });

    test('merges of partials that do not belong together name the partial', async () => {
      const opts = { seed: 4n, temperature: 0.5 };
      const a = await sampleFused(head.H, head.shard(0, 500), { ...opts, partial: true, vocabOffset: 0, vocabSize: V });
      const b = await sampleFused(head.H, head.shard(500, 501), { ...opts, partial: true, vocabOffset: 500, vocabSize: V });
      const c = await sampleFused(head.H, head.shard(400, 601), { ...opts, partial: true, vocabOffset: 400, vocabSize: V });
      const hot = await sampleFused(head.H, head.shard(500, 501), { seed: 4n, temperature: 0.7, partial: true, vocabOffset: 500, vocabSize: V });
      const other = await sampleFused(head.H, head.shard(500, 501), { ...opts, partial: true, vocabOffset: 500, vocabSize: V + 4 });
      expect((await mergePartials([a, b], opts)).tokens.length).toBe(B);
      const cases: [PartialState[], SampleOptions, RegExp][] = [
        [[a, hot], opts, /partials\[1\]: made with other per-row options than the merge's/],
        [[a, b], { ...opts, temperature: 0.6 }, /partials\[0\]: made with other per-row options/],
        [[a, c], opts, /partials: the shards do not cover the vocabulary \[0, 1001\) exactly once/],
        [[a], opts, /the shards do not cover the vocabulary/],
        [[a, b, b], opts, /do not cover the vocabulary/],
        [[a, b, c], opts, /do not cover the vocabulary/],  // (every end a start or V: only the sizes' sum tells)
        [[a, other], opts, /partials\[1\]: made for another vocabulary size than partials\[0\] \(1001\)/],
      ];
      for (const [set, o, message] of cases) {
        const e = await failure(() => mergePartials(set, o));
        expect(e).toBeInstanceOf(RangeError);
        expect(e.message).toMatch(message);
      }
      await expect(mergePartials([], opts)).rejects.toThrow(/partials: expected an array of 1 \.\. 64 partial states/);
      await expect(mergePartials([{} as PartialState], opts)).rejects.toThrow(/partials\[0\]: expected a partial state/);
      await expect(mergePartials([a, b], { ...opts, softcap: 3 })).rejects.toThrow(/softcap: applies to a shard's own rows of W/);
      await expect(mergePartials([a, b], { ...opts, bias: head.W } as never)).rejects.toThrow(/bias: applies to a shard's own rows/);
      const small = plantedHead(dev(), [zipfLogits(V, 1, 1)]);
      const one = await sampleFused(small.H, small.W, { ...opts, partial: true, vocabOffset: 0, vocabSize: V });
      await expect(mergePartials([one, b], opts)).rejects.toThrow(/partials\[1\]: made for another batch size than partials\[0\] \(1 rows\)/);
      small.dispose();
      b.dispose();
      await expect(mergePartials([a, b], opts)).rejects.toThrow(/partials\[1\]: the partial state has been disposed/);
      if (name === 'cuda') {
        const cpuHead = plantedHead(open('cpu'), [zipfLogits(V, 1, 1), zipfLogits(V, 1, 2), zipfLogits(V, 1, 3)]);
        const onCpu = await sampleFused(cpuHead.H, cpuHead.shard(500, 501), { ...opts, partial: true, vocabOffset: 500, vocabSize: V });
        await expect(mergePartials([a, onCpu], opts)).rejects.toThrow(/partials\[1\]: expected a partial state on cuda/);
        cpuHead.dispose();
      }
      for (const p of [a, c, hot, other, one]) p.dispose();
    });
  });
});
