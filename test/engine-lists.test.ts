// The engine sampler's list tables (issue 20): setPenaltyTokens loads rows' prompt and output
// tokens, setLogitBias and setBannedTokens their bias and min-tokens bans, enqueue's recordTokens
// counts each drawn token and counts minTokens down on the device, and every step draws what
// sampleFused draws with the same lists built on the host (bit for bit, on every device); a full
// table's status; a fixed table's draws against float64 (chi-square); on CUDA, graph replays that
// record equal sequential calls. The same with lists alone on 70 rows: on CUDA such calls merge the
// listed tokens in a kernel of their own after the GEMM (from B = 64 at D 16), tables unchecked and captured.

import { open, sampleFused, type Device, type Sampler, type SampleOptions, type Tensor } from '../lib/index';
import { native } from '../lib/native';
import {
  adjusted,
  cudaStatus,
  describeDevices,
  dominantLogits,
  goodnessOfFit,
  keptDistribution,
  listedOptions,
  plantLogits,
  readTables,
  rowCounts,
  topTokens,
  zipfLogits,
  type HostTable,
  type Listed,
} from './helpers';

interface PenaltyRow {
  temperature: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repetition?: number;
  frequency?: number;
  presence?: number;
  prompt: number[];
  output?: [number, number][];  // [token, count] already drawn
}

/** Rows whose penalties change their draws: a greedy row with a repetition penalty, filters, all three. */
function penaltyRows(top: (b: number) => number[]): PenaltyRow[] {
  return [
    { temperature: 0.8, repetition: 1.5, prompt: top(0).slice(0, 2) },
    { temperature: 1, frequency: 0.7, prompt: [], output: [[top(1)[0], 2]] },
    { temperature: 0.6, topK: 20, presence: 1.2, prompt: [7, 8] },
    { temperature: 1, topP: 0.9, repetition: 1.3, frequency: 0.4, presence: 0.3, prompt: top(3).slice(1, 3) },
    { temperature: 1, prompt: [] },
    { temperature: 0, repetition: 2, prompt: [top(5)[0]] },
    { temperature: 0.9, minP: 0.05, frequency: 1, prompt: [] },
  ];
}

function hostTables(rows: PenaltyRow[]): HostTable[] {
  return rows.map((r) => {
    const t: HostTable = new Map();
    for (const v of r.prompt) t.set(v, [0, true]);
    for (const [v, n] of r.output ?? []) t.set(v, [(t.get(v)?.[0] ?? 0) + n, t.get(v)?.[1] ?? false]);
    return t;
  });
}

function asListed(r: PenaltyRow, t: HostTable): Listed {
  return {
    penalized: [...t].map(([v, [n, p]]) => [v, n, p] as [number, number, boolean]),
    repetition: r.repetition,
    frequency: r.frequency,
    presence: r.presence,
  };
}

/** setPenaltyTokens' argument for the host tables. */
function tableTokens(tables: HostTable[]) {
  const rowOffsets = new Int32Array(tables.length + 1);
  const ids: number[] = [];
  const counts: number[] = [];
  const prompt: number[] = [];
  tables.forEach((t, b) => {
    for (const [v, [n, p]] of t) {
      ids.push(v);
      counts.push(n);
      prompt.push(p ? 1 : 0);
    }
    rowOffsets[b + 1] = ids.length;
  });
  return { rowOffsets, tokenIds: Int32Array.from(ids), outputCounts: Int32Array.from(counts), inPrompt: Uint8Array.from(prompt) };
}

function rowFields(rows: PenaltyRow[], seed0: number) {
  const B = rows.length;
  return {
    temperature: Float32Array.from(rows, (r) => r.temperature),
    topK: Int32Array.from(rows, (r) => r.topK ?? 0),
    topP: Float32Array.from(rows, (r) => r.topP ?? 1),
    minP: Float32Array.from(rows, (r) => r.minP ?? 0),
    seed: BigUint64Array.from({ length: B }, (_, b) => BigInt(seed0 + 13 * b)),
    repetitionPenalty: Float32Array.from(rows, (r) => r.repetition ?? 1),
    frequencyPenalty: Float32Array.from(rows, (r) => r.frequency ?? 0),
    presencePenalty: Float32Array.from(rows, (r) => r.presence ?? 0),
  };
}

/** sampleFused's options for the rows at step `step`, the penalties from the host tables (the filters with `filters`). */
function stepOptions(rows: PenaltyRow[], tables: HostTable[], fields: ReturnType<typeof rowFields>, step: number, filters = true): SampleOptions {
  const B = rows.length;
  return {
    ...listedOptions(rows.map((r, b) => asListed(r, tables[b]))),
    temperature: fields.temperature,
    ...(filters ? { topK: fields.topK, topP: fields.topP, minP: fields.minP } : {}),
    seed: fields.seed,
    offset: new BigUint64Array(B).fill(BigInt(step)),
  };
}

function record(tables: HostTable[], tokens: ArrayLike<number>): void {
  tables.forEach((t, b) => {
    const v = tokens[b];
    if (v < 0) return;
    const e = t.get(v);
    t.set(v, [(e?.[0] ?? 0) + 1, e?.[1] ?? false]);
  });
}

/** A row's logit bias and min-tokens bans (the other list tables). */
interface BiasBan {
  bias: [number, number][];
  banned: number[];
  minTokens: number;
}

/** Bias on some rows, bans that end after 3 and 2 steps, one that never applies (minTokens 0). */
function biasBans(top: (b: number) => number[]): BiasBan[] {
  return [
    { bias: [[top(0)[4], 3]], banned: [], minTokens: 0 },
    { bias: [], banned: [top(1)[0]], minTokens: 3 },
    { bias: [[top(2)[0], -5]], banned: [], minTokens: 0 },
    { bias: [], banned: [], minTokens: 0 },
    { bias: [[top(4)[2], 2], [top(4)[3], 2.5]], banned: [top(4)[3]], minTokens: 2 },
    { bias: [], banned: [], minTokens: 0 },
    { bias: [], banned: [top(6)[0], top(6)[1]], minTokens: 0 },
  ];
}

/**
 * N steps of enqueue (advanceOffset, recordTokens) against N sampleFused calls with the host's lists.
 * `tiles` copies of the seven rows (their seeds differ); without `filters` the sampler declares none
 * and the rows keep only their lists (on CUDA from B = 64 at D 16 such calls merge the listed tokens in a
 * kernel of their own).
 */
async function checkRecordedSteps(
  d: Device, steps: number, enqueue: (s: Sampler, out: Tensor, status: Tensor, H: Tensor, W: Tensor) => void, withBiasBans = false,
  { tiles = 1, filters = true }: { tiles?: number; filters?: boolean } = {},
) {
  const V = 1000;
  const seven = Array.from({ length: 7 }, (_, b) => dominantLogits(V, 70 + b, 6));
  // the greedy row (5, repetition 2, its top token in the prompt): a runner-up at 4 wins until drawn
  seven[5][(seven[5].indexOf(6) + 1) % V] = 4;
  const logits = Array.from({ length: 7 * tiles }, (_, b) => seven[b % 7]);
  const top = (b: number) => topTokens(seven[b % 7], V);
  // (without `filters` the rows' topK, topP and minP reach no call: setRows and stepOptions drop them)
  const rows = Array.from({ length: tiles }, () => penaltyRows(top)).flat();
  const B = rows.length;
  const cap = 16;
  const p = plantLogits(d, 'bf16', logits, { D: 16 });
  const sampler = d.createSampler({
    maxBatch: B + 1, vocab: V, hidden: p.D, dtype: 'bf16', ...(filters ? { filters: ['topK', 'topP', 'minP'] as const } : {}),
    penaltyCapacity: cap, logitBiasCapacity: withBiasBans ? 3 : 0, bannedCapacity: withBiasBans ? 2 : 0,
  });
  const fields = rowFields(rows, 900);
  const { topK: _k, topP: _p, minP: _m, ...listsOnly } = fields;
  sampler.setRows(0, filters ? fields : listsOnly);
  const tables = hostTables(rows);
  sampler.setPenaltyTokens(0, tableTokens(tables));
  const lists = withBiasBans ? Array.from({ length: tiles }, () => biasBans(top)).flat() : [];
  const minTokens = lists.map((l) => l.minTokens);
  if (withBiasBans) {
    const csr = (get: (l: BiasBan) => number[]) => {
      const rowOffsets = new Int32Array(B + 1);
      const items: number[] = [];
      lists.forEach((l, b) => {
        items.push(...get(l));
        rowOffsets[b + 1] = items.length;
      });
      return { rowOffsets, items };
    };
    const bias = csr((l) => l.bias.map(([t]) => t));
    sampler.setLogitBias(0, { rowOffsets: bias.rowOffsets, tokenIds: Int32Array.from(bias.items), values: Float32Array.from(lists.flatMap((l) => l.bias.map(([, v]) => v))) });
    const ban = csr((l) => l.banned);
    sampler.setBannedTokens(0, { rowOffsets: ban.rowOffsets, tokenIds: Int32Array.from(ban.items) });
    sampler.setRows(0, { minTokens: Int32Array.from(minTokens) });
  }
  const out = d.empty([B], 'i32');
  const status = d.empty([B], 'i32');
  const drawn: number[][] = [];
  for (let step = 0; step < steps; step++) {
    const options = stepOptions(rows, tables, fields, step, filters);
    if (withBiasBans) {
      const active = lists.map((l, b) => (minTokens[b] - step > 0 ? l.banned : []));
      Object.assign(options, listedOptions(lists.map((l, b) => ({ bias: l.bias, banned: active[b] }))));
      options.penaltyTokens = stepOptions(rows, tables, fields, step, filters).penaltyTokens;
    }
    const want = await sampleFused(p.H, p.W, options);
    enqueue(sampler, out, status, p.H, p.W);
    await d.synchronize();
    const got = Array.from((await out.toArray()) as Int32Array);
    expect(got).toEqual(Array.from(want.tokens));
    expect(Array.from((await status.toArray()) as Int32Array)).toEqual(new Array(B).fill(0));
    record(tables, got);
    drawn.push(got);
  }
  const after = await sampler.readRows();
  expect(readTables(after.penaltyTable!, B, cap)).toEqual(tables);
  expect(readTables(after.penaltyTable!, B + 1, cap)[B].size).toBe(0); // the row past the batch untouched
  expect(after.unrecordedTokens).toBe(0);
  if (withBiasBans) {
    expect(Array.from(after.minTokens.subarray(0, B))).toEqual(minTokens.map((m) => Math.max(0, m - steps)));
    // the bans did something: row 1 never drew its top token while it was banned, then did
    expect(drawn.slice(0, 3).every((t) => t[1] !== top(1)[0])).toBe(true);
  }
  // the penalties did something: the greedy row with repetition 2 moved off its first token
  expect(new Set(drawn.map((t) => t[5])).size).toBeGreaterThan(1);
  out.dispose();
  status.dispose();
  sampler.dispose();
  p.dispose();
}

describeDevices((name, dev) => {
  const recorded = (s: Sampler, out: Tensor, status: Tensor, H: Tensor, W: Tensor) =>
    s.enqueue({ H, W, out, statusOut: status, advanceOffset: true, recordTokens: true });
  test('recordTokens: each step draws what sampleFused draws with the lists kept on the host', async () => {
    await checkRecordedSteps(dev(), 8, recorded);
  });

  test('with logit bias and min-tokens bans too: the same, and the bans end when minTokens reaches 0', async () => {
    await checkRecordedSteps(dev(), 6, recorded, true);
  });

  test('lists alone on 70 rows (no filters: the listed tokens merged after the GEMM on CUDA): the same', async () => {
    await checkRecordedSteps(dev(), 4, recorded, true, { tiles: 10, filters: false });
  });

  test('a full table: status 3, the token drawn but not recorded, unrecordedTokens counts it', async () => {
    const d = dev();
    const V = 111;
    const l = dominantLogits(V, 5, 1);
    const top = topTokens(l, V);
    const p = plantLogits(d, 'f32', [l, l], { D: 8 });
    const sampler = d.createSampler({ maxBatch: 2, vocab: V, hidden: 8, dtype: 'f32', penaltyCapacity: 1 });
    sampler.setRows(0, { temperature: new Float32Array([0, 0]) });
    // row 0's one slot holds an unlikely token; row 1's is free
    sampler.setPenaltyTokens(0, { rowOffsets: new Int32Array([0, 1, 1]), tokenIds: new Int32Array([top[V - 1]]), outputCounts: new Int32Array([0]), inPrompt: new Uint8Array([1]) });
    const out = d.empty([2], 'i32');
    const status = d.empty([2], 'i32');
    for (let i = 0; i < 2; i++) {
      sampler.enqueue({ H: p.H, W: p.W, out, statusOut: status, recordTokens: true });
      await d.synchronize();
      expect(Array.from((await out.toArray()) as Int32Array)).toEqual([top[0], top[0]]);
      expect(Array.from((await status.toArray()) as Int32Array)).toEqual([3, 0]);
    }
    const after = await sampler.readRows();
    expect(after.unrecordedTokens).toBe(2);
    expect(Array.from(after.penaltyTable!.tokenIds)).toEqual([top[V - 1], top[0]]);
    expect(Array.from(after.penaltyTable!.outputCounts)).toEqual([0, 2]);
    // without statusOut the row is still counted
    sampler.enqueue({ H: p.H, W: p.W, out, recordTokens: true });
    expect((await sampler.readRows()).unrecordedTokens).toBe(3);
    // setPenaltyTokens frees the slots it does not fill
    sampler.setPenaltyTokens(1, { rowOffsets: new Int32Array([0, 0]), tokenIds: new Int32Array(0), outputCounts: new Int32Array(0), inPrompt: new Uint8Array(0) });
    expect(Array.from((await sampler.readRows()).penaltyTable!.tokenIds)).toEqual([top[V - 1], -1]);
    out.dispose();
    status.dispose();
    sampler.dispose();
    p.dispose();
  });

  // Token 0 is a token like any other: drawing it counts minTokens down and records it, in the
  // row's first free slot (the smallest index: a packed table stays packed).
  test('recordTokens: token 0 counts minTokens down and takes the first free slot', async () => {
    const d = dev();
    const V = 111;
    const l = Float64Array.from({ length: V }, (_, v) => (v === 0 ? 9 : (v % 7) * 0.5));
    const p = plantLogits(d, 'f32', [l], { D: 8 });
    const sampler = d.createSampler({ maxBatch: 1, vocab: V, hidden: 8, dtype: 'f32', penaltyCapacity: 3, bannedCapacity: 1 });
    sampler.setRows(0, { temperature: new Float32Array([0]), minTokens: new Int32Array([2]) });
    sampler.setBannedTokens(0, { rowOffsets: new Int32Array([0, 1]), tokenIds: new Int32Array([7]) });
    sampler.setPenaltyTokens(0, { rowOffsets: new Int32Array([0, 1]), tokenIds: new Int32Array([5]), outputCounts: new Int32Array([0]), inPrompt: new Uint8Array([1]) });
    const out = d.empty([1], 'i32');
    const left: number[] = [];
    for (let i = 0; i < 3; i++) {
      sampler.enqueue({ H: p.H, W: p.W, out, recordTokens: true });
      await d.synchronize();
      expect(Array.from((await out.toArray()) as Int32Array)).toEqual([0]);
      left.push((await sampler.readRows()).minTokens[0]);
    }
    expect(left).toEqual([1, 0, 0]);
    const table = (await sampler.readRows()).penaltyTable!;
    expect(Array.from(table.tokenIds)).toEqual([5, 0, -1]);
    expect(Array.from(table.outputCounts)).toEqual([0, 3, 0]);
    expect(Array.from(table.inPrompt)).toEqual([1, 0, 0]);
    out.dispose();
    sampler.dispose();
    p.dispose();
  });

  // 2048 rows (independent seeds) x 120 advancing steps = 245,760 draws from one distribution: a 1%
  // relative bias of a token of p ~ 0.2 is ~4 standard errors.
  test('fixed tables draw softmax of the biased, banned and penalized logits, chi-square against float64', async () => {
    const d = dev();
    const V = 111;
    const B = 2048;
    const steps = 120;
    const l = zipfLogits(V, 1.0, 33);
    const top = topTokens(l, V);
    const listed: Listed = {
      penalized: [[top[0], 2, true], [top[1], 0, true], [top[2], 1, false], [top[5], 3, false]],
      bias: [[top[3], 1.5], [top[8], -2]],
      banned: [top[4]],
      repetition: 1.4,
      frequency: 0.3,
      presence: 0.2,
    };
    const p = plantLogits(d, 'f32', Array.from({ length: B }, () => l), { D: 8 });
    const sampler = d.createSampler({ maxBatch: B, vocab: V, hidden: 8, dtype: 'f32', penaltyCapacity: 8, logitBiasCapacity: 4, bannedCapacity: 2 });
    sampler.setRows(0, {
      temperature: new Float32Array(B).fill(0.8),
      seed: BigUint64Array.from({ length: B }, (_, b) => BigInt(77000 + b)),
      repetitionPenalty: new Float32Array(B).fill(1.4),
      frequencyPenalty: new Float32Array(B).fill(0.3),
      presencePenalty: new Float32Array(B).fill(0.2),
      minTokens: new Int32Array(B).fill(1000), // no recordTokens here: the ban stays
    });
    const every = <T extends Int32Array | Float32Array | Uint8Array>(a: T, make: (n: number, f: (i: number) => number) => T) => {
      const n = a.length;
      return { offsets: Int32Array.from({ length: B + 1 }, (_, b) => b * n), repeated: make(B * n, (i) => a[i % n]) };
    };
    const i32 = (n: number, f: (i: number) => number) => Int32Array.from({ length: n }, (_, i) => f(i));
    const biasOne = listedOptions([listed]).logitBias!;
    const biasIds = every(biasOne.tokenIds, i32);
    sampler.setLogitBias(0, { rowOffsets: biasIds.offsets, tokenIds: biasIds.repeated, values: every(biasOne.values, (n, f) => Float32Array.from({ length: n }, (_, i) => f(i))).repeated });
    const banIds = every(listedOptions([listed]).bannedTokens!.tokenIds, i32);
    sampler.setBannedTokens(0, { rowOffsets: banIds.offsets, tokenIds: banIds.repeated });
    const one = listedOptions([listed]).penaltyTokens!;
    const n = one.tokenIds.length;
    sampler.setPenaltyTokens(0, {
      rowOffsets: Int32Array.from({ length: B + 1 }, (_, b) => b * n),
      tokenIds: Int32Array.from({ length: B * n }, (_, i) => one.tokenIds[i % n]),
      outputCounts: Int32Array.from({ length: B * n }, (_, i) => one.outputCounts[i % n]),
      inPrompt: Uint8Array.from({ length: B * n }, (_, i) => one.inPrompt[i % n]),
    });
    const out = d.empty([B], 'i32');
    const counts = new Float64Array(V);
    for (let step = 0; step < steps; step++) {
      sampler.enqueue({ H: p.H, W: p.W, out, advanceOffset: true });
      await d.synchronize();
      for (const row of rowCounts((await out.toArray()) as Int32Array, B, 1, V)) for (let v = 0; v < V; v++) counts[v] += row[v];
    }
    const kept = keptDistribution(adjusted(p.logits[0], listed), { temperature: 0.8 });
    const fit = goodnessOfFit(counts, kept.probs);
    expect(fit.summary).toBe(fit.ok ? fit.summary : 'a good fit');
    // the lists moved mass: the top token's share is below its unpenalized share; the ban holds
    const plain = keptDistribution(p.logits[0], { temperature: 0.8 });
    expect(kept.probs[top[0]]).toBeLessThan(0.8 * plain.probs[top[0]]);
    expect(counts[top[4]]).toBe(0);
    expect(plain.probs[top[4]]).toBeGreaterThan(0.01);
    out.dispose();
    sampler.dispose();
    p.dispose();
  });

  // An engine writes the tables with its own kernels, unchecked: the native setter stands in for
  // that here (Sampler's setters refuse such ids).
  test('ids outside [0, V) in tables the engine wrote: skipped, and the row reports status 4', async () => {
    const d = dev();
    const V = 111;
    const logits = [zipfLogits(V, 0.5, 1), zipfLogits(V, 0.5, 2), zipfLogits(V, 0.5, 3)];
    const p = plantLogits(d, 'f32', logits, { D: 8 });
    const h = new native.NativeSampler({
      device: d.kind === 'cuda' ? 1 : 0, ordinal: d.ordinal, maxBatch: 3, dtype: 0, vocab: V, dim: 8, numSamples: 1,
      topK: false, topP: false, minP: false, logprobs: false, topLogprobs: 0, softcap: 0, allowedTokens: false,
      filterOrder: 0, logprobsMode: 0, penaltyCapacity: 2, logitBiasCapacity: 2, bannedCapacity: 0,
    });
    // row 0: a bias on 5 and one on V + 5; row 1: a free slot (-1) and a bias on 7; row 2: -7 and 9
    h.setListRows(1, 0, 3, [new Int32Array([5, V + 5, -1, 7, -7, 9]), new Float32Array([4, 3, 0, 4, 1, 4])]);
    // row 1's penalty table: token 2 twice in the output, and an id of V
    h.setListRows(0, 1, 1, [new Int32Array([2, V]), new Int32Array([2, 1]), new Uint8Array([0, 0])]);
    const out = d.empty([3], 'i32');
    const status = d.empty([3], 'i32');
    h.enqueue({ hidden: p.H.handle('H'), weight: p.W.handle('W'), out: out.handle('out'), status: status.handle('status'), batch: 3, advanceOffset: false, recordTokens: false });
    await d.synchronize();
    const want = await sampleFused(p.H, p.W, {
      seed: new BigUint64Array(3),
      logitBias: { rowOffsets: new Int32Array([0, 1, 2, 3]), tokenIds: new Int32Array([5, 7, 9]), values: new Float32Array([4, 4, 4]) },
      penaltyTokens: { rowOffsets: new Int32Array([0, 0, 1, 1]), tokenIds: new Int32Array([2]), outputCounts: new Int32Array([2]), inPrompt: new Uint8Array([0]) },
      repetitionPenalty: new Float32Array([1, 1, 1]),
    });
    expect(Array.from((await out.toArray()) as Int32Array)).toEqual(Array.from(want.tokens));
    expect(Array.from((await status.toArray()) as Int32Array)).toEqual([4, 4, 4]);
    // once the engine frees the bad slots, the rows are fine again
    h.setListRows(1, 0, 3, [new Int32Array([5, -1, -1, 7, -1, 9]), new Float32Array([4, 0, 0, 4, 0, 4])]);
    h.setListRows(0, 1, 1, [new Int32Array([2, -1]), new Int32Array([2, 0]), new Uint8Array([0, 0])]);
    h.enqueue({ hidden: p.H.handle('H'), weight: p.W.handle('W'), out: out.handle('out'), status: status.handle('status'), batch: 3, advanceOffset: false, recordTokens: false });
    await d.synchronize();
    expect(Array.from((await out.toArray()) as Int32Array)).toEqual(Array.from(want.tokens));
    expect(Array.from((await status.toArray()) as Int32Array)).toEqual([0, 0, 0]);
    h.dispose();
    out.dispose();
    status.dispose();
    p.dispose();
  });

  test(`${name}: penalty fields and the table need a sampler created with penaltyCapacity`, async () => {
    const d = dev();
    const s = d.createSampler({ maxBatch: 2, vocab: 100, hidden: 8, dtype: 'f32' });
    expect(s.penaltyCapacity).toBe(0);
    expect(s.layout.penaltyCapacity).toBe(0);
    expect((await s.readRows()).penaltyTable).toBeNull();
    s.dispose();
  });
});

const st = cudaStatus();
/** checkRecordedSteps on CUDA with all three lists, each step a replay of one captured graph of the enqueue. */
async function checkGraphSteps(steps: number, shape?: { tiles?: number; filters?: boolean }) {
  const gpu = open('cuda');
  let graph: ReturnType<Device['captureGraph']> | undefined;
  await checkRecordedSteps(gpu, steps, (s, out, status, H, W) => {
    graph ??= gpu.captureGraph(() => s.enqueue({ H, W, out, statusOut: status, advanceOffset: true, recordTokens: true }));
    graph.launch();
  }, true, shape);
  graph?.dispose();
}

(st.usable ? test : test.skip)('cuda: N graph replays with recordTokens = N sequential sampleFused calls (all three lists)', async () => {
  await checkGraphSteps(6);
});

(st.usable ? test : test.skip)('cuda: the same with lists alone on 70 rows (the listed tokens merged after the GEMM, captured)', async () => {
  await checkGraphSteps(4, { tiles: 10, filters: false });
});
