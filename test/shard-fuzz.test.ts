// Property test of vocabulary shards (issue 18): random heads cut into 2 to 4 shards at random
// multiples of 4, random options (temperature, seeds, numSamples, top-k / top-p / min-p, filter
// order, logprobs, topLogprobs, raw logprobs, a mask, the model's bias and a softcap given to each
// shard for its own rows, the call's lists by global id, few candidates so that rows go through
// the rows pass), sampleSharded against the unsharded sampleFused: every row decided, the same
// tokens and top tokens, logprobs within 1e-5 relative. The logits are planted (exact in the
// dtype), so a shard's products are the unsharded call's whatever the tiles. The fixed cases of
// test/parallel.test.ts pin each feature; this one crosses them.
//
// Deterministic: a fixed fast-check seed (FLASHSAMPLE_SHARD_FUZZ_SEED picks another); runs:
// FLASHSAMPLE_SHARD_FUZZ_RUNS (default 120 a device).

import fc from 'fast-check';
import { type Device, sampleFused, sampleSharded, type SampleOptions, type Tensor } from '../lib/index';
import {
  checkCasesOn, csrRows, describeDevices, expectClose, makeMask, makeTensor, normal, plantLogits, randomIdRows, rng, shardMask,
} from './helpers';

const SEED = Number(process.env.FLASHSAMPLE_SHARD_FUZZ_SEED ?? '20261207');
const RUNS = Number(process.env.FLASHSAMPLE_SHARD_FUZZ_RUNS ?? '120');

interface ShardCase {
  B: number;
  V: number;
  shards: number;
  dtype: 'f32' | 'bf16';
  scale: number;
  dataSeed: number;
  optSeed: number;
  temperature: 'default' | 'scalar' | 'zero' | 'perRow';
  perRowSeeds: boolean;
  numSamples: number;
  topK: boolean;
  topP: boolean;
  minP: boolean;
  filterOrder: 'default' | 'hf' | 'vllm';
  logprobs: boolean;
  topLogprobs: number;
  raw: boolean;
  mask: boolean;
  bias: boolean;
  softcap: boolean;
  lists: boolean;
  /** candidates a shard keeps: few send rows through the rows pass */
  candidates: 'default' | 'few';
}

const caseArb: fc.Arbitrary<ShardCase> = fc.record({
  B: fc.integer({ min: 1, max: 4 }),
  V: fc.integer({ min: 9, max: 300 }),
  shards: fc.integer({ min: 2, max: 4 }),
  dtype: fc.constantFrom('f32', 'bf16'),
  scale: fc.constantFrom(0.3, 1, 3, 8),
  dataSeed: fc.integer({ min: 0, max: 0x7fffffff }),
  optSeed: fc.integer({ min: 0, max: 0x7fffffff }),
  temperature: fc.constantFrom('default', 'scalar', 'zero', 'perRow'),
  perRowSeeds: fc.boolean(),
  numSamples: fc.integer({ min: 1, max: 3 }),
  topK: fc.boolean(),
  topP: fc.boolean(),
  minP: fc.boolean(),
  filterOrder: fc.constantFrom('default', 'hf', 'vllm'),
  logprobs: fc.boolean(),
  topLogprobs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 5 })),
  raw: fc.boolean(),
  mask: fc.boolean(),
  bias: fc.boolean(),
  softcap: fc.boolean(),
  lists: fc.boolean(),
  candidates: fc.constantFrom('default', 'few'),
});

/** The shards' edges [0, cuts…, V]: up to `shards` − 1 cuts at distinct multiples of 4 inside
 *  (0, V), at most ⌊(V − 1) / 4⌋ of them. */
function shardEdges(r: () => number, V: number, shards: number): number[] {
  const slots = Math.floor((V - 1) / 4);
  const cuts = new Set<number>();
  while (cuts.size < Math.min(shards - 1, slots)) cuts.add(4 * (1 + Math.floor(r() * slots)));
  return [0, ...[...cuts].sort((a, b) => a - b), V];
}

/** Rows the merged calls sent through the rows pass, over the run. */
let rowsPassed = 0;

async function runCase(d: Device, c: ShardCase): Promise<void> {
  const { B, V } = c;
  const rd = rng(c.dataSeed);
  const ro = rng(c.optSeed);
  const logits = Array.from({ length: B }, () => Float64Array.from({ length: V }, () => normal(rd) * c.scale));
  const head = plantLogits(d, c.dtype, logits, { junkSeed: c.dataSeed });
  const owned: Tensor[] = [];
  try {
    const edges = shardEdges(ro, V, c.shards);

    const u64 = () => (BigInt(Math.floor(ro() * 2 ** 32)) << 32n) | BigInt(Math.floor(ro() * 2 ** 32));
    const o: SampleOptions = {
      numSamples: c.numSamples,
      seed: c.perRowSeeds ? BigUint64Array.from({ length: B }, u64) : u64(),
      offset: u64() >> 1n,
    };
    if (c.temperature === 'scalar') o.temperature = Math.fround(0.1 + ro() * 2);
    if (c.temperature === 'zero') o.temperature = 0;
    if (c.temperature === 'perRow') o.temperature = Float32Array.from({ length: B }, () => (ro() < 0.3 ? 0 : Math.fround(0.1 + ro() * 2)));
    if (c.topK) o.topK = Int32Array.from({ length: B }, () => (ro() < 0.2 ? 0 : 1 + Math.floor(ro() * (V + 4))));
    if (c.topP) o.topP = Float32Array.from({ length: B }, () => (ro() < 0.2 ? 1 : Math.fround(0.05 + ro() * 0.95)));
    if (c.minP) o.minP = Float32Array.from({ length: B }, () => (ro() < 0.2 ? 0 : Math.fround(ro() * 0.5)));
    if (c.filterOrder !== 'default') o.filterOrder = c.filterOrder;
    if (c.logprobs) o.logprobs = true;
    if (c.topLogprobs > 0) o.topLogprobs = c.topLogprobs;
    if (c.raw) o.logprobsMode = 'raw';

    // A token of each row that the mask allows and no ban removes: every row has one to draw.
    const keep = Array.from({ length: B }, () => Math.floor(ro() * V));
    const mask = c.mask ? makeMask(B, V, (b, v) => v === keep[b] || ro() < 0.6) : undefined;
    const biasValues = Float32Array.from({ length: V }, () => (ro() < 0.3 ? Math.fround(normal(ro) * 2) : 0));
    const softcap = c.softcap ? Math.fround(1 + ro() * 20) : 0;
    const ids = (most: number, spare: boolean) => randomIdRows(ro, B, V, most, spare ? keep : undefined);
    const csr = (rows: number[][]) => csrRows(B, (b) => rows[b]);
    const lists: SampleOptions = {};
    if (c.lists) {
      const bias = ids(6, false);
      lists.logitBias = { ...csr(bias), values: Float32Array.from(bias.flat(), () => Math.fround(normal(ro) * 3)) };
      lists.bannedTokens = csr(ids(4, true));
      const pen = ids(6, false);
      const flat = pen.flat();
      lists.penaltyTokens = {
        ...csr(pen),
        outputCounts: Int32Array.from(flat, () => Math.floor(ro() * 4)),
        inPrompt: Uint8Array.from(flat, () => (ro() < 0.5 ? 1 : 0)),
      };
      lists.repetitionPenalty = Math.fround(0.6 + ro() * 1.2);
      lists.frequencyPenalty = Math.fround(ro() - 0.3);
      lists.presencePenalty = Math.fround(ro() - 0.3);
    }

    const whole: SampleOptions = { ...o, ...lists };
    if (mask) whole.allowedTokens = mask;
    if (c.bias) whole.bias = owned[owned.push(makeTensor(d, c.dtype, biasValues, [V])) - 1];
    if (softcap > 0) whole.softcap = softcap;
    const want = await sampleFused(head.H, head.W, whole);

    const shards = edges.slice(0, -1).map((offset, i) => {
      const size = edges[i + 1] - offset;
      const W = makeTensor(d, c.dtype, head.w.subarray(offset * head.D, (offset + size) * head.D), [size, head.D]);
      owned.push(W);
      const options: SampleOptions = {};
      if (mask) options.allowedTokens = shardMask(mask, B, V, offset, size);
      if (c.bias) options.bias = owned[owned.push(makeTensor(d, c.dtype, biasValues.subarray(offset, offset + size), [size])) - 1];
      if (softcap > 0) options.softcap = softcap;
      return { H: head.H, W, vocabOffset: offset, options };
    });
    const got = await sampleSharded(shards, {
      ...o, ...lists, vocabSize: V, listIds: 'global', ...(c.candidates === 'few' ? { candidates: 1 + Math.floor(ro() * 4) } : {}),
    });
    expect(got.undecidedRows.length).toBe(0);
    rowsPassed += got.rowsPassRows.length;
    expect(Array.from(got.tokens)).toEqual(Array.from(want.tokens));
    if (want.logprobs) expectClose(got.logprobs, want.logprobs, 1e-5);
    if (want.topTokens) {
      expect(Array.from(got.topTokens!)).toEqual(Array.from(want.topTokens));
      expectClose(got.topLogprobs, want.topLogprobs, 1e-5);
    }
  } finally {
    head.dispose();
    for (const t of owned) t.dispose();
  }
}

describeDevices((name, dev) => {
  test(`${RUNS} random heads cut into 2 to 4 shards: sampleSharded draws and reports the unsharded call`, async () => {
    await checkCasesOn(name, caseArb, (c) => runCase(dev(), c), SEED, RUNS);
  });

  // CUDA's counterexample of 2026-12-07: a last shard of 131 rows makes an odd pitch; unless each
  // segment is rounded to 16 bytes the second rank's header sits 4 bytes off its 8-byte fields
  // (cudaErrorMisalignedAddress on a GPU; on the CPU the decide call's alignment check refuses it).
  test('a last shard of odd size through the rows pass', async () => {
    const before = rowsPassed;
    await runCase(dev(), {
      B: 2, V: 263, shards: 2, dtype: 'f32', scale: 3, dataSeed: 1439436905, optSeed: 2147483632, temperature: 'default',
      perRowSeeds: true, numSamples: 2, topK: true, topP: false, minP: true, filterOrder: 'hf', logprobs: true, topLogprobs: 0,
      raw: false, mask: false, bias: true, softcap: false, lists: true, candidates: 'few',
    });
    expect(rowsPassed).toBeGreaterThan(before);
  });

  test('the run sent rows through the rows pass', () => {
    expect(rowsPassed).toBeGreaterThan(0);
    rowsPassed = 0;
  });
});
