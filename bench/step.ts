// `--mode step`: the engine's decode step (issue 17). Per shape, batch and option set, a sampler
// sized once (createSampler) with the rows set by setRows, then:
//   host µs    the JS-thread time of one enqueue (validation + launches) with the device idle,
//              median and p90; prologue, launches and bookkeeping, of host µs, the addon's own
//              host-step timers (mean): the streams, retire poll and ordering before the launch, a
//              cached graph's replay or the kernels one by one, then the event records and the
//              retire queue; launch µs the same for one graph.launch;
//   busy µs    the same enqueue while the device runs the steps enqueued before it (an engine that
//              enqueues the next step before it reads the last one's tokens), median;
//   eager µs   wall time per step of `iters` back-to-back enqueues, then a wait (GPU-bound when
//              the step takes longer than its enqueue);
//   graph µs   the same for replays of a graph that captured one enqueue (advanceOffset);
//   kernel µs  CUDA events around the same kernels (timeSampler with the rows as per-row arrays);
// and graph / kernel, the replay's overhead over the kernels alone. An option set with listed<n>
// gives the sampler list tables holding the lists --mode sample uses (bench/inputs.ts listedLists:
// logit bias, a ban that stays on, penalties), and every enqueue records its tokens.
import { performance } from 'perf_hooks';
import { native } from '../lib/native';
import { timeSampler, type Device, type Sampler, type SamplerConfig, type SampleOptions, type Tensor } from '../lib/index';
import type { BenchDType, OptionSet } from './args';
import { BENCH_H_SEED, BENCH_W_SEED, logitsInputs } from './logits';
import type { LogitsMode } from './logits';
import { halfMask, listedLists } from './inputs';
import type { Shape } from './presets';
import { summarize } from './stats';
import { DASH, fmtRatio, fmtUs, formatTable } from './table';

export interface StepRow {
  shape: string;
  batch: number;
  options: string;
  hostUs: number;
  hostP90Us: number;
  /** JS-thread time of one enqueue while the device is busy with earlier ones (median). */
  busyUs: number;
  /** Of hostUs, the mean µs per enqueue in the addon's "enqueue prologue", "enqueue kernels" and "enqueue bookkeeping" steps (null: not timed, CPU). */
  prologueUs: number | null;
  launchesUs: number | null;
  bookkeepingUs: number | null;
  /** JS-thread time of graph.launch, device idle (median). */
  launchUs: number | null;
  eagerUs: number;
  graphUs: number | null;
  kernelUs: number | null;
  error?: string;
}

/** What every per-point mode (--mode step, --mode tp) times: shapes, batches and option sets. */
export interface ModePlan {
  shapes: Shape[];
  batches: number[];
  dtype: BenchDType;
  optionSets: OptionSet[];
  iters: number;
  warmup: number;
  logits: LogitsMode;
  logitStd: number;
  onProgress?: (text: string) => void;
}

export interface StepPlan extends ModePlan {
  device: Device;
}

/** What an option set fixes in a sampler's config (createSampler): its filters and outputs. */
export function samplerOptionsFor(set: OptionSet): Pick<SamplerConfig, 'filters' | 'logprobs' | 'topLogprobs' | 'softcap' | 'filterOrder'> {
  return {
    filters: (['topK', 'topP', 'minP'] as const).filter((f) => set[f] !== undefined),
    logprobs: set.logprobs ?? false, topLogprobs: set.topLogprobs ?? 0, softcap: set.softcap ?? 0,
    filterOrder: set.filterOrder ?? 'hf',
  };
}

/** Per-row seeds and temperatures, and the filters of `set` as per-row arrays. */
export function rowsFor(set: OptionSet, B: number): Record<string, unknown> {
  const rows: Record<string, unknown> = {
    seed: BigUint64Array.from({ length: B }, (_, b) => 1234n + BigInt(b)),
    temperature: new Float32Array(B).fill(set.temperature ?? 1),
  };
  if (set.topK !== undefined) rows.topK = new Int32Array(B).fill(set.topK);
  if (set.topP !== undefined) rows.topP = new Float32Array(B).fill(set.topP);
  if (set.minP !== undefined) rows.minP = new Float32Array(B).fill(set.minP);
  return rows;
}

/** The sampleFused options of `set` with the per-row values of `rows` (rowsFor). */
export function optionsFor(set: OptionSet, rows: Record<string, unknown>, allowed: Tensor | undefined, lists?: ListedLists): SampleOptions {
  const o: SampleOptions = { seed: rows.seed as BigUint64Array, offset: 0n, temperature: rows.temperature as Float32Array };
  if (lists) Object.assign(o, lists);
  if (rows.topK) o.topK = rows.topK as Int32Array;
  if (rows.topP) o.topP = rows.topP as Float32Array;
  if (rows.minP) o.minP = rows.minP as Float32Array;
  if (set.logprobs) o.logprobs = true;
  if (set.topLogprobs) o.topLogprobs = set.topLogprobs;
  if (set.softcap) o.softcap = set.softcap;
  if (set.filterOrder) o.filterOrder = set.filterOrder;
  if (set.logprobsMode) o.logprobsMode = set.logprobsMode;
  if (allowed) o.allowedTokens = allowed;
  return o;
}

type ListedLists = ReturnType<typeof listedLists>;

/** listedLists for a listed<n> option set (undefined without one). */
function listsFor(set: OptionSet, B: number, vocab: number): ListedLists | undefined {
  if (set.listed === undefined) return undefined;
  return listedLists(B, vocab, set.listed, set.listedShared ?? false, 98);
}

/** JS-thread µs of each of `iters` calls of `call`, each with the device idle (a wait after it). */
async function idleHostTimes(device: Device, iters: number, call: () => void): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < iters; i++) {
    const t0 = performance.now();
    call();
    times.push((performance.now() - t0) * 1e3);
    await device.synchronize();
  }
  return times;
}

/**
 * JS-thread µs of `iters` calls of `call` made while the device is busy: bursts of `burst` calls
 * back to back, then a wait; the first call of a burst (made with the device idle) is not counted.
 */
async function busyHostTimes(device: Device, iters: number, call: () => void, burst = 16): Promise<number[]> {
  const times: number[] = [];
  while (times.length < iters) {
    call();
    for (let i = 1; i < burst && times.length < iters; i++) {
      const t0 = performance.now();
      call();
      times.push((performance.now() - t0) * 1e3);
    }
    await device.synchronize();
  }
  return times;
}

/** The addon's host-step timers by name (calls and total ms since the process started). */
function hostStepMs(): Map<string, { calls: number; totalMs: number }> {
  return new Map(native.hostStepStats().map((x) => [x.name, { calls: x.calls, totalMs: x.totalMs }]));
}

/** Wall µs per call of `iters` back-to-back calls of `call`, then one wait. */
async function backToBackUs(device: Device, iters: number, call: () => void): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < iters; i++) call();
  await device.synchronize();
  return ((performance.now() - t0) * 1e3) / iters;
}

async function stepPoint(plan: StepPlan, shape: Shape, W: Tensor, H: Tensor, B: number, set: OptionSet): Promise<StepRow> {
  const { device, iters, warmup } = plan;
  const row: StepRow = { shape: shape.name, batch: B, options: set.label, hostUs: NaN, hostP90Us: NaN, busyUs: NaN, prologueUs: null, launchesUs: null, bookkeepingUs: null, launchUs: null, eagerUs: NaN, graphUs: null, kernelUs: null };
  const owned: Tensor[] = [];
  let sampler: Sampler | undefined;
  try {
    const lists = listsFor(set, B, shape.vocab);
    sampler = device.createSampler({
      maxBatch: B, vocab: shape.vocab, hidden: shape.hidden, dtype: plan.dtype, ...samplerOptionsFor(set),
      allowedTokens: set.mask ?? false,
      logprobsMode: set.logprobsMode ?? 'processed',
      // room for the steps' recorded tokens; a full row only reports status 3
      penaltyCapacity: lists ? (set.listed ?? 0) + 64 : 0,
      logitBiasCapacity: lists ? set.listed : 0,
      bannedCapacity: lists ? 1 : 0,
    });
    const rows = rowsFor(set, B);
    sampler.setRows(0, rows);
    if (lists) {
      sampler.setRows(0, {
        repetitionPenalty: new Float32Array(B).fill(lists.repetitionPenalty),
        frequencyPenalty: new Float32Array(B).fill(lists.frequencyPenalty),
        presencePenalty: new Float32Array(B).fill(lists.presencePenalty),
        minTokens: new Int32Array(B).fill(2 ** 30), // the ban stays on, as in --mode sample
      });
      sampler.setPenaltyTokens(0, lists.penaltyTokens);
      sampler.setLogitBias(0, lists.logitBias);
      sampler.setBannedTokens(0, lists.bannedTokens);
    }
    const make = (shape0: number[], dtype: 'i32' | 'f32') => {
      const t = device.empty(shape0, dtype);
      owned.push(t);
      return t;
    };
    let allowed: Tensor | undefined;
    if (set.mask) {
      allowed = device.tensor(new Int32Array(halfMask(B, shape.vocab, 77).buffer), [B * Math.ceil(shape.vocab / 32)], 'i32');
      owned.push(allowed);
    }
    const n = set.topLogprobs ?? 0;
    const args = {
      H, W, out: make([B], 'i32'), statusOut: make([B], 'i32'),
      logprobsOut: set.logprobs ? make([B], 'f32') : undefined,
      topTokensOut: n ? make([B * n], 'i32') : undefined,
      topLogprobsOut: n ? make([B * n], 'f32') : undefined,
      allowedTokens: allowed,
      advanceOffset: true,
      recordTokens: lists !== undefined,
    };
    const s = sampler;
    for (let i = 0; i < warmup; i++) s.enqueue(args);
    await device.synchronize();
    // Host time with the device idle, as in a decode loop that waits for each step: back to back,
    // the launch queue fills and enqueue would time the GPU instead.
    const enqueue = () => s.enqueue(args);
    const before = hostStepMs();
    const h = summarize(await idleHostTimes(device, iters, enqueue));
    const after = hostStepMs();
    const perCallUs = (name: string) => {
      const calls = (after.get(name)?.calls ?? 0) - (before.get(name)?.calls ?? 0);
      return calls > 0 ? (((after.get(name)?.totalMs ?? 0) - (before.get(name)?.totalMs ?? 0)) * 1e3) / calls : null;
    };
    row.prologueUs = perCallUs('enqueue prologue');
    row.launchesUs = perCallUs('enqueue kernels');
    row.bookkeepingUs = perCallUs('enqueue bookkeeping');
    row.hostUs = h.medianUs;
    row.hostP90Us = h.p90Us;
    row.busyUs = summarize(await busyHostTimes(device, iters, enqueue)).medianUs;
    row.eagerUs = await backToBackUs(device, iters, enqueue);
    if (device.kind === 'cuda') {
      const graph = device.captureGraph(enqueue);
      const launch = () => graph.launch();
      try {
        for (let i = 0; i < warmup; i++) launch();
        await device.synchronize();
        row.launchUs = summarize(await idleHostTimes(device, iters, launch)).medianUs;
        row.graphUs = await backToBackUs(device, iters, launch);
      } finally {
        graph.dispose();
      }
      const times = await timeSampler('fused', [{ H, W }], optionsFor(set, rows, allowed, lists), { warmup, iters });
      row.kernelUs = summarize(times).medianUs;
    }
  } catch (e) {
    row.error = e instanceof Error ? e.message : String(e);
  } finally {
    sampler?.dispose();
    for (const t of owned) t.dispose();
  }
  return row;
}

export async function runStep(plan: StepPlan): Promise<StepRow[]> {
  const out: StepRow[] = [];
  for (const shape of plan.shapes) {
    plan.onProgress?.(`${shape.name}: making W`);
    const host = logitsInputs(plan.logits, shape.vocab, shape.hidden, plan.dtype, plan.logitStd, BENCH_W_SEED);
    const W = plan.device.tensor(host.w, [shape.vocab, shape.hidden], plan.dtype);
    try {
      for (const B of plan.batches) {
        const H = plan.device.tensor(host.h(B, BENCH_H_SEED), [B, shape.hidden], plan.dtype);
        try {
          for (const set of plan.optionSets) {
            plan.onProgress?.(`${shape.name} B=${B} ${set.label}`);
            out.push(await stepPoint(plan, shape, W, H, B, set));
          }
        } finally {
          H.dispose();
        }
      }
    } finally {
      W.dispose();
    }
  }
  return out;
}

export function stepTable(rows: StepRow[]): string {
  const columns = [
    { title: 'shape', align: 'left' as const }, { title: 'B' }, { title: 'options', align: 'left' as const },
    { title: 'host µs' }, { title: 'host p90' }, { title: 'busy µs' }, { title: 'prologue' }, { title: 'launches' }, { title: 'bookkeeping' }, { title: 'launch µs' }, { title: 'eager µs' }, { title: 'graph µs' }, { title: 'kernel µs' },
    { title: 'graph/kernel' },
  ];
  const errors = rows.some((r) => r.error !== undefined);
  if (errors) columns.push({ title: 'error', align: 'left' as const });
  const cells = rows.map((r) => [
    r.shape, String(r.batch), r.options,
    r.error ? DASH : r.hostUs.toFixed(1), r.error ? DASH : r.hostP90Us.toFixed(1), r.error ? DASH : r.busyUs.toFixed(1),
    r.prologueUs === null ? DASH : r.prologueUs.toFixed(1), r.launchesUs === null ? DASH : r.launchesUs.toFixed(1), r.bookkeepingUs === null ? DASH : r.bookkeepingUs.toFixed(1), r.launchUs === null ? DASH : r.launchUs.toFixed(1),
    r.error ? DASH : fmtUs(r.eagerUs), fmtUs(r.graphUs), fmtUs(r.kernelUs),
    r.graphUs !== null && r.kernelUs !== null ? fmtRatio(r.graphUs / r.kernelUs) : DASH,
    ...(errors ? [r.error ?? ''] : []),
  ]);
  return [
    formatTable(columns, cells),
    '  host µs: JS-thread time of one enqueue, device idle (median, p90); busy µs: the same with the device busy with',
    '  earlier enqueues (median); prologue / launches / bookkeeping: of host µs, the addon\'s streams, retire poll and',
    '  ordering, its launches (a cached graph or the kernels) and the event records after them (mean µs);',
    '  launch µs: graph.launch, device idle (median)',
    '  eager / graph µs: wall time per step of back-to-back enqueues / replays, then one wait',
    '  kernel µs: CUDA events around the same kernels (timeSampler)',
  ].join('\n');
}
