// Property test of the engine sampler (issues 17 and 20): random configurations (the filters a
// sampler declares, logprobs, topLogprobs, logprobsMode, filterOrder, softcap, a mask, enqueue's
// bias, numSamples, the three list tables, recordTokens) and rows (greedy ones, per-row filters,
// seeds, offsets, penalties and minTokens), one to three enqueues with advanceOffset against
// sampleFused with the same per-row seeds, offsets and lists kept on the host: the same tokens and
// top tokens, status 0 (3 where a full penalty table could not count the token), the same logprobs
// (within 1e-5 · max(1, |logprob|)), and after the steps the offsets advanced and the penalty tables holding what
// the host recorded. The fixed cases of
// test/engine.test.ts and test/engine-lists.test.ts pin each feature; this one crosses them.
//
// Deterministic: a fixed fast-check seed (FLASHSAMPLE_ENGINE_FUZZ_SEED picks another); runs:
// FLASHSAMPLE_ENGINE_FUZZ_RUNS (default 150 a device).

import fc from 'fast-check';
import { type Device, sampleFused, type SampleOptions, type Tensor } from '../lib/index';
import {
  FLOAT_DTYPES, type FDType, type HostTable, checkCasesOn, csrRows, describeDevices, expectClose, makeMask, makeTensor, normal,
  randomIdRows, readTables, rng,
} from './helpers';

const SEED = Number(process.env.FLASHSAMPLE_ENGINE_FUZZ_SEED ?? '20261207');
const RUNS = Number(process.env.FLASHSAMPLE_ENGINE_FUZZ_RUNS ?? '150');

interface EngineCase {
  B: number;
  /** rows of the parameter block past the batch (left untouched) */
  spareRows: number;
  V: number;
  D: number;
  dtype: FDType;
  scale: number;
  dataSeed: number;
  optSeed: number;
  topK: boolean;
  topP: boolean;
  minP: boolean;
  logprobs: boolean;
  topLogprobs: number;
  logprobsMode: 'default' | 'processed' | 'raw';
  filterOrder: 'default' | 'hf' | 'vllm';
  softcap: boolean;
  mask: boolean;
  bias: boolean;
  numSamples: number;
  penaltyCapacity: number;
  logitBiasCapacity: number;
  bannedCapacity: number;
  recordTokens: boolean;
  steps: number;
}

const caseArb: fc.Arbitrary<EngineCase> = fc.record({
  B: fc.integer({ min: 1, max: 6 }),
  spareRows: fc.integer({ min: 0, max: 2 }),
  V: fc.integer({ min: 1, max: 300 }),
  D: fc.integer({ min: 1, max: 24 }),
  dtype: fc.constantFrom(...FLOAT_DTYPES),
  scale: fc.constantFrom(0.05, 0.5, 1, 3, 10),
  dataSeed: fc.integer({ min: 0, max: 0x7fffffff }),
  optSeed: fc.integer({ min: 0, max: 0x7fffffff }),
  topK: fc.boolean(),
  topP: fc.boolean(),
  minP: fc.boolean(),
  logprobs: fc.boolean(),
  topLogprobs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 6 })),
  logprobsMode: fc.constantFrom('default', 'processed', 'raw'),
  filterOrder: fc.constantFrom('default', 'hf', 'vllm'),
  softcap: fc.boolean(),
  mask: fc.boolean(),
  bias: fc.boolean(),
  numSamples: fc.integer({ min: 1, max: 3 }),
  penaltyCapacity: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 12 })),
  logitBiasCapacity: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 6 })),
  bannedCapacity: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 6 })),
  recordTokens: fc.boolean(),
  steps: fc.integer({ min: 1, max: 3 }),
});

/** The samplers' CSR form of per-row id lists. */
const csr = (rows: number[][]) => csrRows(rows.length, (b) => rows[b]);

async function runCase(d: Device, c: EngineCase): Promise<void> {
  const { B, V, D, dtype } = c;
  const rd = rng(c.dataSeed);
  const ro = rng(c.optSeed);
  const owned: Tensor[] = [];
  const own = <T extends Tensor>(t: T): T => {
    owned.push(t);
    return t;
  };
  const H = own(makeTensor(d, dtype, Float32Array.from({ length: B * D }, () => normal(rd) * Math.sqrt(c.scale)), [B, D]));
  const W = own(makeTensor(d, dtype, Float32Array.from({ length: V * D }, () => normal(rd) * Math.sqrt(c.scale)), [V, D]));
  // Penalties and bans need one sample a row.
  const S = c.penaltyCapacity > 0 || c.bannedCapacity > 0 ? 1 : c.numSamples;
  // recordTokens counts each drawn token into the penalty table and minTokens down: it needs one of
  // the two tables.
  const record = c.recordTokens && (c.penaltyCapacity > 0 || c.bannedCapacity > 0);
  const n = c.topLogprobs;
  const filters = (['topK', 'topP', 'minP'] as const).filter((f) => c[f]);
  const softcap = c.softcap ? Math.fround(0.5 + ro() * 30) : 0;
  const sampler = d.createSampler({
    maxBatch: B + c.spareRows, vocab: V, hidden: D, dtype, numSamples: S, filters: [...filters],
    logprobs: c.logprobs, topLogprobs: n, softcap, allowedTokens: c.mask,
    ...(c.filterOrder !== 'default' ? { filterOrder: c.filterOrder } : {}),
    ...(c.logprobsMode !== 'default' ? { logprobsMode: c.logprobsMode } : {}),
    penaltyCapacity: c.penaltyCapacity, logitBiasCapacity: c.logitBiasCapacity, bannedCapacity: c.bannedCapacity,
  });
  try {
    const u64 = () => (BigInt(Math.floor(ro() * 2 ** 32)) << 32n) | BigInt(Math.floor(ro() * 2 ** 32));
    const temperature = Float32Array.from({ length: B }, () => (ro() < 0.25 ? 0 : Math.fround(0.05 + ro() * 3)));
    const seed = BigUint64Array.from({ length: B }, u64);
    const offset0 = BigUint64Array.from({ length: B }, () => u64() >> 1n); // far from wrapping
    const rows: Record<string, Float32Array | Int32Array | BigUint64Array> = { temperature, seed, offset: offset0 };
    const filterValues: SampleOptions = {};
    if (c.topK) filterValues.topK = rows.topK = Int32Array.from({ length: B }, () => (ro() < 0.2 ? 0 : 1 + Math.floor(ro() * (V + 4))));
    if (c.topP) filterValues.topP = rows.topP = Float32Array.from({ length: B }, () => (ro() < 0.2 ? 1 : Math.fround(0.02 + ro() * 0.98)));
    if (c.minP) filterValues.minP = rows.minP = Float32Array.from({ length: B }, () => (ro() < 0.2 ? 0 : Math.fround(ro() * 0.95)));
    const perRow = (lo: number, hi: number, off: number) =>
      Float32Array.from({ length: B }, () => (ro() < 0.3 ? off : Math.fround(lo + ro() * (hi - lo))));
    const penalties: SampleOptions = {};
    if (c.penaltyCapacity > 0) {
      penalties.repetitionPenalty = rows.repetitionPenalty = perRow(0.5, 2, 1);
      penalties.frequencyPenalty = rows.frequencyPenalty = perRow(-1, 2, 0);
      penalties.presencePenalty = rows.presencePenalty = perRow(-1, 2, 0);
    }
    const minTokens = Int32Array.from({ length: B }, () => Math.floor(ro() * 4));
    if (c.bannedCapacity > 0) rows.minTokens = minTokens;
    sampler.setRows(0, rows);

    // A token of each row that the mask allows and no ban removes: every row has one to draw.
    const keep = Array.from({ length: B }, () => Math.floor(ro() * V));
    let mask: Tensor | undefined;
    if (c.mask) {
      const density = ro() < 0.5 ? 0.05 : 0.7;
      const m = makeMask(B, V, (b, v) => v === keep[b] || ro() < density);
      mask = own(d.tensor(new Int32Array(m.buffer), [m.length], 'i32'));
    }
    const bias = c.bias ? own(makeTensor(d, dtype, Float32Array.from({ length: V }, () => normal(ro) * c.scale), [V])) : undefined;
    const ids = (most: number, spare: boolean) => randomIdRows(ro, B, V, most, spare ? keep : undefined);

    // The penalty tables start at most full; a token a full table cannot take is drawn, not counted
    // (status 3).
    const tables: HostTable[] = ids(c.penaltyCapacity, false).map(
      (r) => new Map(r.map((t) => [t, [ro() < 0.3 ? 0 : 1 + Math.floor(ro() * 4), ro() < 0.5]] as [number, [number, boolean]])),
    );
    const penaltyTokens = () => {
      const list = csr(tables.map((t) => [...t.keys()]));
      const entries = tables.flatMap((t) => [...t.values()]);
      return { ...list, outputCounts: Int32Array.from(entries, ([k]) => k), inPrompt: Uint8Array.from(entries, ([, p]) => (p ? 1 : 0)) };
    };
    if (c.penaltyCapacity > 0) sampler.setPenaltyTokens(0, penaltyTokens());
    const biasIds = ids(c.logitBiasCapacity, false);
    const logitBias = { ...csr(biasIds), values: Float32Array.from(biasIds.flat(), () => Math.fround(normal(ro) * 2 * Math.max(1, c.scale))) };
    if (c.logitBiasCapacity > 0) sampler.setLogitBias(0, logitBias);
    const banned = ids(c.bannedCapacity, true);
    if (c.bannedCapacity > 0) sampler.setBannedTokens(0, csr(banned));

    const out = own(d.empty([B * S], 'i32'));
    const status = own(d.empty([B], 'i32'));
    const lp = c.logprobs ? own(d.empty([B * S], 'f32')) : undefined;
    const tt = n ? own(d.empty([B * n], 'i32')) : undefined;
    const tl = n ? own(d.empty([B * n], 'f32')) : undefined;
    let unrecorded = 0;
    for (let step = 0; step < c.steps; step++) {
      const options: SampleOptions = {
        ...filterValues, ...penalties,
        temperature, seed, offset: offset0.map((o) => o + BigInt(step)), numSamples: S,
        ...(softcap > 0 ? { softcap } : {}), ...(mask ? { allowedTokens: mask } : {}), ...(bias ? { bias } : {}),
        ...(c.logprobs ? { logprobs: true } : {}), ...(n ? { topLogprobs: n } : {}),
        ...(c.filterOrder !== 'default' ? { filterOrder: c.filterOrder } : {}),
        ...(c.logprobsMode !== 'default' ? { logprobsMode: c.logprobsMode } : {}),
      };
      if (c.penaltyCapacity > 0) options.penaltyTokens = penaltyTokens();
      if (c.logitBiasCapacity > 0) options.logitBias = logitBias;
      if (c.bannedCapacity > 0) {
        // a row's bans apply while its minTokens, counted down by each recorded step, is above 0
        options.bannedTokens = csr(banned.map((r, b) => (minTokens[b] - (record ? step : 0) > 0 ? r : [])));
      }
      const want = await sampleFused(H, W, options);
      sampler.enqueue({
        H, W, out, statusOut: status, logprobsOut: lp, topTokensOut: tt, topLogprobsOut: tl, bias, allowedTokens: mask,
        advanceOffset: true, recordTokens: record,
      });
      await d.synchronize();
      const got = (await out.toArray()) as Int32Array;
      expect({ step, tokens: Array.from(got) }).toEqual({ step, tokens: Array.from(want.tokens) });
      const counts = record && c.penaltyCapacity > 0;
      const full = tables.map((t, b) => counts && !t.has(got[b]) && t.size === c.penaltyCapacity);
      expect({ step, status: Array.from((await status.toArray()) as Int32Array) }).toEqual({ step, status: full.map((f) => (f ? 3 : 0)) });
      if (lp) expectClose((await lp.toArray()) as Float32Array, want.logprobs, 1e-5);
      if (tt) {
        expect(Array.from((await tt.toArray()) as Int32Array)).toEqual(Array.from(want.topTokens!));
        expectClose((await tl!.toArray()) as Float32Array, want.topLogprobs, 1e-5);
      }
      if (counts) {
        tables.forEach((t, b) => {
          if (full[b]) {
            unrecorded++;
            return;
          }
          const e = t.get(got[b]);
          t.set(got[b], [(e?.[0] ?? 0) + 1, e?.[1] ?? false]);
        });
      }
    }
    const after = await sampler.readRows();
    expect(Array.from(after.offset.subarray(0, B))).toEqual(Array.from(offset0, (o) => o + BigInt(c.steps)));
    expect(Array.from(after.offset.subarray(B))).toEqual(new Array(c.spareRows).fill(0n));
    if (c.penaltyCapacity > 0) {
      expect(readTables(after.penaltyTable!, B, c.penaltyCapacity)).toEqual(tables);
      expect(after.unrecordedTokens).toBe(unrecorded);
    }
    if (c.bannedCapacity > 0) {
      expect(Array.from(after.minTokens.subarray(0, B))).toEqual(Array.from(minTokens, (m) => Math.max(0, m - (record ? c.steps : 0))));
    }
  } finally {
    sampler.dispose();
    for (const t of owned) t.dispose();
  }
}

describeDevices((name, dev) => {
  test(`${RUNS} random engine configurations: enqueue draws, reports and records what sampleFused does`, async () => {
    await checkCasesOn(name, caseArb, (c) => runCase(dev(), c), SEED, RUNS);
  });
});
