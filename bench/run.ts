// The measurements: the two ceilings, the PyTorch baselines (child process) and the library's
// samplers, collected into one BenchReport that the table, the plot and --json are made from.

import {
  Device,
  SampleOptions,
  SamplerKind,
  Tensor,
  gpuStatus,
  measureReadBandwidth,
  sampleFused,
  timeSampler,
} from '../lib/index';
import type { BenchArgs, BenchDType, LogitsMode, OptionSet } from './args';
import { BASELINE_TITLES, CORE_BASELINES, TorchReport, isStats, runTorchBaselines } from './baselines';
import { DTYPE_BYTES, L2_BYTES, deviceCopies, disposeAll, halfMask, listedLists, rotationCopies, rotationPairs } from './inputs';
import { BENCH_H_SEED, BENCH_W_SEED, MODEL_LOGITS, logitsInputs } from './logits';
import type { Shape } from './presets';
import type { Progress } from './progress';
import { CenterStat, Summary, centerUs, summarize } from './stats';

/** Documented ceilings (bench/TUNING.md, "The floors"; measured on the H200 2026-11-29), used when not measured. */
export const DOCUMENTED_READ_BANDWIDTH = 4.48e12; // bytes/s, 16-byte __ldg loads over 4 GB
export const DOCUMENTED_MATRIX_RATE: Record<BenchDType, { value: number; what: string }> = {
  bf16: { value: 788e12, what: 'documented cuBLAS bf16 8192³ on the H200' },
  f16: { value: 788e12, what: 'documented cuBLAS bf16 8192³ on the H200 (f16 has the same tensor-core rate)' },
  f32: { value: 67e12, what: 'H200 fp32 (non-tensor-core) peak from the spec sheet' },
};
export const READ_BANDWIDTH_BYTES = 4e9;
export const READ_BANDWIDTH_ITERS = 20;

export interface Ceiling {
  /** bytes/s or FLOP/s; null where there is none (the CPU). */
  value: number | null;
  measured: boolean;
  /** How it was obtained, or '(not measured: reason)'. */
  note: string;
}

export interface MethodResult {
  stats?: Summary;
  error?: string;
  /**
   * Fused option sets: the rows of one untimed call that needed the extra pass (`fallbackRows` of
   * its result), with the same inputs as the timed calls' first rotation copy.
   */
  fallbackRows?: number;
  /**
   * On CUDA: of `rotationCalls` untimed calls, one on each rotation copy's inputs (those the timed
   * calls cycle through, one seed), how many sent a row to the extra pass. A median over the timed
   * calls holds the extra pass's cost only when more than half of them do.
   */
  fallbackCalls?: number;
  rotationCalls?: number;
}

export interface BatchResult {
  batch: number;
  /** max(memory, compute) floor in µs; null on the CPU. */
  floorUs: number | null;
  floorMemoryUs: number | null;
  floorComputeUs: number | null;
  /** What bounds the plain fused call at this point (boundOf); null on the CPU or without it. */
  bound?: BoundResult | null;
  /**
   * Keyed by method id: 'fused', 'reference-gumbel', 'reference-inverse-cdf', 'fused[topk50]' (an
   * option set), 'torch[topk50]' (its PyTorch pipeline), 'torch:matmul' (a core baseline), ...
   */
  methods: Record<string, MethodResult>;
}

export interface ShapeResult {
  shape: Shape;
  dtype: BenchDType;
  wBytes: number;
  copies: number;
  /** Set when the shape could not be run at all (e.g. W does not fit). */
  error?: string;
  batches: BatchResult[];
}

export interface BenchReport {
  tool: 'flashsample-bench';
  date: string;
  command: string[];
  environment: {
    device: string;
    deviceKind: 'cpu' | 'cuda';
    ordinal: number;
    gpu: ReturnType<typeof gpuStatus> | { error: string };
    node: string;
    platform: string;
    torch: { python?: string; torch?: string | null; cuda?: string | null; gpu?: string | null } | null;
  };
  config: {
    batches: number[];
    dtype: BenchDType;
    iters: number;
    warmup: number;
    /** What the tables report per point (--stat); absent in reports written before it: median. */
    stat?: CenterStat;
    samplers: SamplerKind[];
    optionSets: OptionSet[];
    /** How H and W were made (bench/logits.ts); the same mode for the PyTorch baselines. */
    logits: LogitsMode;
    /** The gaussian mode's logit std (unused by the model mode). */
    logitStd: number;
    /** The model mode's constants (bench/logits.ts MODEL_LOGITS); null in the gaussian mode. */
    modelLogits: typeof MODEL_LOGITS | null;
    l2RotationBytes: number;
  };
  ceilings: { readBandwidth: Ceiling; matrixRate: Ceiling };
  /**
   * The fixed costs of one fused call (launches, synchronization): the median of a plain call on
   * LAUNCH_PROBE_SHAPE at B = 1, whose W is too small to cost anything else; null if it failed.
   */
  launchUs: number | null;
  baselines: {
    requested: boolean;
    available: boolean;
    reason: string | null;
    /** torch_baselines.py ids in column order. */
    ids: string[];
    titles: Record<string, string>;
    /** Option-set labels timed as PyTorch pipelines (methods 'torch[label]'), with what each runs. */
    options: string[];
    optionPipelines: Record<string, string>;
  };
  shapes: ShapeResult[];
}

/** Everything run() needs, with the device's defaults already filled in. */
export interface RunPlan {
  args: BenchArgs;
  device: Device;
  shapes: Shape[];
  batches: number[];
  dtype: BenchDType;
  iters: number;
  warmup: number;
  progress: Progress;
  /** Called as each shape completes (the CLI prints its table then). */
  onShape?: (shape: ShapeResult, report: BenchReport) => void;
  /** Called once the ceilings and baselines are known. */
  onCeilings?: (report: BenchReport) => void;
}

export function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

export function optionMethodId(set: OptionSet): string {
  return `fused[${set.label}]`;
}

/** The method id of an option set's PyTorch pipeline. */
export function torchOptionMethodId(set: OptionSet): string {
  return `torch[${set.label}]`;
}

/** An option set as torch_baselines.py's --option-sets takes it (snake_case, no undefined keys). */
export function torchOptionSet(set: OptionSet): Record<string, string | number | boolean> {
  const o: Record<string, string | number | boolean> = { label: set.label };
  if (set.temperature !== undefined) o.temperature = set.temperature;
  if (set.topK !== undefined) o.top_k = set.topK;
  if (set.topP !== undefined) o.top_p = set.topP;
  if (set.minP !== undefined) o.min_p = set.minP;
  if (set.logprobs) o.logprobs = true;
  if (set.topLogprobs !== undefined) o.top_logprobs = set.topLogprobs;
  if (set.softcap !== undefined) o.softcap = set.softcap;
  if (set.mask) o.mask = true;
  if (set.filterOrder) o.filter_order = set.filterOrder;
  if (set.numSamples !== undefined) o.num_samples = set.numSamples;
  return o;
}

export function baselineTitle(id: string, torch: TorchReport | null, sets: readonly OptionSet[]): string {
  if (id === 'topk') return `mm+topk${torch?.top_k ?? sets.find((s) => s.topK !== undefined)?.topK ?? ''}`;
  if (id === 'topp') return `mm+topp${torch?.top_p ?? sets.find((s) => s.topP !== undefined)?.topP ?? ''}`;
  return BASELINE_TITLES[id] ?? id;
}

/** The floor of one call: reading W once at full bandwidth, or the MMA work at the matrix rate. */
export function floorOf(
  shape: Shape,
  batch: number,
  dtype: BenchDType,
  readBandwidth: number | null,
  matrixRate: number | null,
): { floorUs: number | null; memoryUs: number | null; computeUs: number | null } {
  const memoryUs = readBandwidth ? ((shape.vocab * shape.hidden * DTYPE_BYTES[dtype]) / readBandwidth) * 1e6 : null;
  const computeUs = matrixRate ? ((2 * batch * shape.vocab * shape.hidden) / matrixRate) * 1e6 : null;
  const floorUs = memoryUs === null && computeUs === null ? null : Math.max(memoryUs ?? 0, computeUs ?? 0);
  return { floorUs, memoryUs, computeUs };
}

/** A head of 16 KB: a fused call on it costs its fixed costs alone (boundOf's launch term). */
export const LAUNCH_PROBE_SHAPE: Shape = { name: 'launch-probe', vocab: 128, hidden: 64, source: 'the fixed costs of a call' };

export type Bound = 'memory' | 'matrix' | 'launch' | 'epilogue';
export interface BoundResult {
  bound: Bound;
  /** fused / (floor + launch): how far the point is from what the three terms explain. */
  ratio: number;
}
/** Within this factor of floor + launch, a point is bound by the larger of the two terms. */
export const BOUND_SLACK = 1.15;

/**
 * What bounds a plain fused call of `fusedUs`: the fixed costs and the floor add up (a call
 * launches, then streams W or runs its MMAs). Within BOUND_SLACK of their sum, the larger term
 * names the regime (memory or matrix: whichever sets the floor; launch: the fixed costs); beyond
 * it, 'epilogue': the per-logit sampling work and the pipeline that the floors do not explain.
 * Null without a measured call or a floor (the CPU).
 */
export function boundOf(
  fusedUs: number | null,
  memoryUs: number | null,
  computeUs: number | null,
  launchUs: number | null,
): BoundResult | null {
  if (fusedUs === null || memoryUs === null || computeUs === null) return null;
  const floor = Math.max(memoryUs, computeUs);
  const fixed = launchUs ?? 0;
  const ratio = fusedUs / (floor + fixed);
  if (ratio > BOUND_SLACK) return { bound: 'epilogue', ratio };
  return { bound: fixed > floor ? 'launch' : memoryUs >= computeUs ? 'memory' : 'matrix', ratio };
}

/** The median µs of a plain fused call on LAUNCH_PROBE_SHAPE at B = 1; null if it fails. */
async function measureLaunch(plan: RunPlan): Promise<number | null> {
  const { device, dtype, iters, warmup } = plan;
  const { vocab, hidden } = LAUNCH_PROBE_SHAPE;
  const owned: Tensor[] = [];
  try {
    const host = logitsInputs('gaussian', vocab, hidden, dtype, 4, BENCH_W_SEED);
    const W = device.tensor(host.w, [vocab, hidden], dtype);
    owned.push(W);
    const H = device.tensor(host.h(1, BENCH_H_SEED), [1, hidden], dtype);
    owned.push(H);
    const times = await timeSampler('fused', [{ H, W }], sampleOptionsFor(null, 1, vocab, device, owned), { warmup, iters });
    return summarize(times).medianUs;
  } catch {
    return null;
  } finally {
    disposeAll(owned);
  }
}

function sampleOptionsFor(
  set: OptionSet | null,
  batch: number,
  vocab: number,
  dev: Device,
  owned: Tensor[],
): SampleOptions {
  const o: SampleOptions = { seed: 1234n, offset: 0n };
  if (set === null) return o;
  if (set.temperature !== undefined) o.temperature = set.temperature;
  if (set.topK !== undefined) o.topK = set.topK;
  if (set.topP !== undefined) o.topP = set.topP;
  if (set.minP !== undefined) o.minP = set.minP;
  if (set.logprobs) o.logprobs = true;
  if (set.topLogprobs !== undefined) o.topLogprobs = set.topLogprobs;
  if (set.softcap !== undefined) o.softcap = set.softcap;
  if (set.filterOrder) o.filterOrder = set.filterOrder;
  if (set.logprobsMode) o.logprobsMode = set.logprobsMode;
  if (set.numSamples !== undefined) o.numSamples = set.numSamples;
  if (set.listed !== undefined) Object.assign(o, listedLists(batch, vocab, set.listed, set.listedShared ?? false, 98));
  if (set.mask) {
    const mask = halfMask(batch, vocab, 99);
    // On the device the mask should already live there: a host array would add a copy per call.
    try {
      const t = dev.tensor(new Int32Array(mask.buffer, mask.byteOffset, mask.length), [mask.length], 'i32');
      owned.push(t);
      o.allowedTokens = t;
    } catch {
      o.allowedTokens = mask;
    }
  }
  return o;
}

async function measureCeilings(plan: RunPlan, torch: TorchReport | null, torchSkipReason: string | null): Promise<{ readBandwidth: Ceiling; matrixRate: Ceiling }> {
  const { args, device, dtype } = plan;
  let readBandwidth: Ceiling;
  let matrixRate: Ceiling;
  if (args.readBandwidth !== null) {
    readBandwidth = { value: args.readBandwidth, measured: false, note: '(given by --read-bw)' };
  } else if (device.kind !== 'cuda') {
    readBandwidth = { value: null, measured: false, note: '(not measured: CPU run; the ceilings are GPU measurements)' };
  } else {
    plan.progress.update(`ceiling: read bandwidth over ${READ_BANDWIDTH_BYTES / 1e9} GB`);
    try {
      const bw = await measureReadBandwidth(device, READ_BANDWIDTH_BYTES, READ_BANDWIDTH_ITERS);
      if (!(bw > 0) || !Number.isFinite(bw)) throw new Error(`measureReadBandwidth returned ${bw}`);
      readBandwidth = {
        value: bw,
        measured: true,
        note: `(measured: measureReadBandwidth, ${READ_BANDWIDTH_BYTES / 1e9} GB, ${READ_BANDWIDTH_ITERS} iters)`,
      };
    } catch (e) {
      readBandwidth = {
        value: DOCUMENTED_READ_BANDWIDTH,
        measured: false,
        note: `(not measured: ${message(e)}; documented H200 value)`,
      };
    }
  }

  const doc = DOCUMENTED_MATRIX_RATE[dtype];
  if (args.matrixRate !== null) {
    matrixRate = { value: args.matrixRate, measured: false, note: '(given by --matrix-rate)' };
  } else if (device.kind !== 'cuda') {
    matrixRate = { value: null, measured: false, note: '(not measured: CPU run; the ceilings are GPU measurements)' };
  } else {
    const entry = torch?.matrix_rate?.[dtype];
    if (entry && typeof entry.flops_per_s === 'number' && entry.flops_per_s > 0) {
      matrixRate = {
        value: entry.flops_per_s,
        measured: true,
        note: `(measured: torch ${torch?.torch ?? '?'} cuBLAS ${entry.size ?? 8192}³ ${dtype})`,
      };
    } else {
      const why = entry?.error ?? torch?.reason ?? torchSkipReason ?? 'no matrix rate in the PyTorch report';
      matrixRate = { value: doc.value, measured: false, note: `(not measured: ${why}; ${doc.what})` };
    }
  }
  return { readBandwidth, matrixRate };
}

function toSummary(cell: { median_us: number; p10_us: number; p90_us: number; min_us: number; max_us: number; mean_us: number; n: number }): Summary {
  return {
    n: cell.n,
    medianUs: cell.median_us,
    p10Us: cell.p10_us,
    p90Us: cell.p90_us,
    minUs: cell.min_us,
    maxUs: cell.max_us,
    meanUs: cell.mean_us,
  };
}

export async function run(plan: RunPlan): Promise<BenchReport> {
  const { args, device, shapes, batches, dtype, iters, warmup, progress } = plan;
  let status: BenchReport['environment']['gpu'];
  try {
    status = gpuStatus();
  } catch (e) {
    status = { error: message(e) };
  }

  // 1. PyTorch first, while this process holds no big buffers: the matrix-rate ceiling and the
  //    baselines for every shape.
  // Every option set gets its own PyTorch pipeline (torch[label]); the older single topk / topp
  // baselines of torch_baselines.py are not asked for: the option columns cover them.
  const ids: string[] = [];
  const torchOptions: OptionSet[] = [];
  if (args.baselines) {
    ids.push(...CORE_BASELINES);
    torchOptions.push(...args.optionSets.filter((s) => s.listed === undefined)); // no PyTorch counterpart
  }
  let torch: TorchReport | null = null;
  let torchSkip: string | null = null;
  const needRate = args.matrixRate === null;
  if (device.kind !== 'cuda') {
    torchSkip = 'not run: the device is the CPU (the PyTorch baselines time CUDA)';
  } else if (ids.length === 0 && torchOptions.length === 0 && !needRate) {
    torchSkip = 'not run: --no-baselines';
  } else {
    progress.update(`PyTorch: ${ids.length ? 'baselines and ' : ''}matrix-rate ceiling (${args.python})`);
    const k = args.optionSets.find((s) => s.topK !== undefined)?.topK ?? 50;
    const p = args.optionSets.find((s) => s.topP !== undefined)?.topP ?? 0.9;
    torch = await runTorchBaselines({
      python: args.python,
      shapes: ids.length ? shapes : [],
      batches,
      dtype,
      iters,
      warmup,
      baselines: ids,
      matrixRate: needRate,
      topK: k,
      topP: p,
      logitStd: args.logitStd,
      logits: args.logits,
      logitsSeed: MODEL_LOGITS.seed,
      optionSets: torchOptions.map(torchOptionSet),
      deviceIndex: device.ordinal,
      onLine: (line) => progress.update(line.replace(/^\[torch_baselines\] /, 'PyTorch: ')),
    });
  }

  const report: BenchReport = {
    tool: 'flashsample-bench',
    date: new Date().toISOString(),
    command: process.argv.slice(),
    environment: {
      device: device.name,
      deviceKind: device.kind,
      ordinal: device.ordinal,
      gpu: status,
      node: process.version,
      platform: `${process.platform} ${process.arch}`,
      torch: torch ? { python: torch.python, torch: torch.torch, cuda: torch.cuda, gpu: torch.gpu } : null,
    },
    config: {
      batches,
      dtype,
      iters,
      warmup,
      stat: args.stat,
      samplers: args.samplers,
      optionSets: args.optionSets,
      logits: args.logits,
      logitStd: args.logitStd,
      modelLogits: args.logits === 'model' ? MODEL_LOGITS : null,
      l2RotationBytes: 2 * L2_BYTES,
    },
    ceilings: await measureCeilings(plan, torch, torchSkip),
    launchUs: null,
    baselines: {
      requested: args.baselines,
      available: Boolean(torch?.available) && ids.length + torchOptions.length > 0,
      reason: !args.baselines ? '--no-baselines' : torchSkip ?? (torch && !torch.available ? torch.reason : null),
      ids,
      titles: Object.fromEntries(ids.map((id) => [id, baselineTitle(id, torch, args.optionSets)])),
      options: torchOptions.map((s) => s.label),
      optionPipelines: Object.fromEntries(
        torchOptions.map((s) => [s.label, torch?.options?.[s.label] ?? '(not run)']),
      ),
    },
    shapes: [],
  };
  progress.update('the fixed costs of a call (a plain fused call on a 128 × 64 head)');
  report.launchUs = await measureLaunch(plan);
  plan.onCeilings?.(report);

  // 2. The library's samplers, shape by shape.
  const steps = shapes.length * batches.length * (args.samplers.length + args.optionSets.length);
  let step = 0;
  for (const shape of shapes) {
    const wBytes = shape.vocab * shape.hidden * DTYPE_BYTES[dtype];
    const copies = rotationCopies(wBytes);
    const result: ShapeResult = { shape, dtype, wBytes, copies, batches: [] };
    report.shapes.push(result);
    for (const batch of batches) {
      const f = floorOf(shape, batch, dtype, report.ceilings.readBandwidth.value, report.ceilings.matrixRate.value);
      const methods: Record<string, MethodResult> = {};
      for (const id of ids) {
        const row = torch?.results.find((r) => r.shape === shape.name && r.batch === batch);
        const cell = row?.baselines[id];
        if (isStats(cell)) methods[`torch:${id}`] = { stats: toSummary(cell) };
        else if (cell && 'error' in cell) methods[`torch:${id}`] = { error: cell.error };
      }
      for (const set of torchOptions) {
        const row = torch?.results.find((r) => r.shape === shape.name && r.batch === batch);
        const cell = row?.options?.[set.label];
        if (isStats(cell)) methods[torchOptionMethodId(set)] = { stats: toSummary(cell) };
        else if (cell && 'error' in cell) methods[torchOptionMethodId(set)] = { error: cell.error };
      }
      result.batches.push({ batch, floorUs: f.floorUs, floorMemoryUs: f.memoryUs, floorComputeUs: f.computeUs, methods });
    }

    let Ws: Tensor[] = [];
    let makeH: (batch: number, seed: number) => Float32Array | Uint16Array;
    try {
      progress.update(`${shape.name}: making ${copies} copies of W (${(wBytes / 1e6).toFixed(1)} MB each, ${args.logits} logits)`);
      const host = logitsInputs(args.logits, shape.vocab, shape.hidden, dtype, args.logitStd, BENCH_W_SEED);
      makeH = host.h;
      Ws = deviceCopies(device, host.w, [shape.vocab, shape.hidden], dtype, copies);
    } catch (e) {
      result.error = `W: ${message(e)}`;
      step += batches.length * (args.samplers.length + args.optionSets.length);
      plan.onShape?.(result, report);
      continue;
    }

    try {
      for (const br of result.batches) {
        const B = br.batch;
        const owned: Tensor[] = [];
        try {
          let inputs: { H: Tensor; W: Tensor }[];
          try {
            // H_COPIES distinct H at least (rotationPairs): a call's logits and what depends on
            // them and on the noise vary from call to call as an engine's steps do
            inputs = rotationPairs(Ws.length).map((w, c) => {
              const H = device.tensor(makeH(B, BENCH_H_SEED + c), [B, shape.hidden], dtype);
              owned.push(H);
              return { H, W: Ws[w] };
            });
          } catch (e) {
            const err = `H: ${message(e)}`;
            for (const kind of args.samplers) br.methods[kind] = { error: err };
            for (const set of args.optionSets) br.methods[optionMethodId(set)] = { error: err };
            step += args.samplers.length + args.optionSets.length;
            continue;
          }
          const jobs: { id: string; kind: SamplerKind; set: OptionSet | null }[] = [
            ...args.samplers.map((kind) => ({ id: kind as string, kind, set: null })),
            ...args.optionSets.map((set) => ({ id: optionMethodId(set), kind: 'fused' as const, set })),
          ];
          for (const job of jobs) {
            step++;
            progress.update(`[${step}/${steps}] ${shape.name} B=${B} ${job.id}`);
            const r: MethodResult = {};
            try {
              const options = sampleOptionsFor(job.set, B, shape.vocab, device, owned);
              if (job.set !== null) {
                // One untimed call: surfaces a rejected option as a clean error, and reports how
                // many rows needed the materializing fallback with these inputs.
                const res = await sampleFused(inputs[0].H, inputs[0].W, options);
                r.fallbackRows = res.fallbackRows;
                if (device.kind === 'cuda') {
                  // and one on each other copy: which calls pay the extra pass, as the timed ones
                  let calls = res.fallbackRows > 0 ? 1 : 0;
                  for (const input of inputs.slice(1)) {
                    if ((await sampleFused(input.H, input.W, options)).fallbackRows > 0) calls++;
                  }
                  r.fallbackCalls = calls;
                  r.rotationCalls = inputs.length;
                }
              }
              const times = await timeSampler(job.kind, inputs, options, { warmup, iters });
              r.stats = summarize(times);
            } catch (e) {
              r.error = message(e);
            }
            br.methods[job.id] = r;
          }
          const plainStats = br.methods.fused?.stats;
          const plain = plainStats ? centerUs(plainStats, args.stat) : null;
          br.bound = boundOf(plain, br.floorMemoryUs, br.floorComputeUs, report.launchUs);
        } finally {
          disposeAll(owned);
        }
      }
    } finally {
      disposeAll(Ws);
    }
    plan.onShape?.(result, report);
  }
  progress.clear();
  return report;
}
