// Stress script (issue 6, "Reliability"): thousands of concurrent async sampler calls from Node.
//
//   node --expose-gc dist/bench/stress.js [--calls 5000] [--concurrency 256] [--device auto]
//        [--seed 1] [--phases 5] [--max-lag-ms 1000] [--p99-lag-ms 50] [--max-rss-growth-mb 64]
//        [--max-in-use-growth-mb 4] [--no-oom]
//
// What it checks (exit code 0 only when every check passes; a summary table at the end):
//   correctness   every call's tokens (and logprobs / topTokens when asked) equal a precomputed
//                 sampleReference({method: 'gumbel'}) answer for the same problem and seed
//                 (SEMANTICS §3: on the CPU identical; on CUDA up to fp32 rounding ties, so CUDA
//                 accepts a token agreement >= 99.9% over the run and counts the rest);
//   dispose       a share of the calls upload fresh copies of their tensors and dispose them right
//                 after the call starts, while it is in flight: the call must still resolve with
//                 the right tokens (the native side keeps the memory alive until it finishes);
//   event loop    max and p99 delay of the event loop while the calls run (perf_hooks
//                 monitorEventLoopDelay, a fresh histogram per phase, plus a 10 ms setInterval
//                 measuring its own lateness; the collections between phases are not counted):
//                 a sampler that blocked the main thread would show up in the p99 (the worst
//                 phase's is gated). Each phase's workers start 8 at a time with a yield between:
//                 started all at once, their synchronous first steps (tensor copies, bf16
//                 encoding) blocked the loop for 200-380 ms per phase, the script's own doing;
//   memory        the calls run in --phases equal phases (default 5); after each one the script
//                 collects (global.gc(), with --expose-gc) and records RSS, the JS heap (used and
//                 reserved), malloc's bytes in use and free-but-held (mallinfo2, glibc), V8's
//                 external memory and the addon's own counters (native.memoryStats(): native
//                 buffers alive, bytes reported to V8). The first phase is the warm-up. Checks:
//                 'memory in use': JS heap used + malloc in use grow by at most
//                 --max-in-use-growth-mb from the end of the warm-up to the end (a leak keeps
//                 objects alive, so it grows with the calls: 4 KB per call fails it at 5000 calls);
//                 'host RSS': RSS grows by at most --max-rss-growth-mb over the same span (loose:
//                 RSS also holds freed memory that malloc keeps and heap V8 reserves, which grow
//                 over the first ~15000 calls and level off; bench/TUNING.md "Stress / RSS");
//                 'native buffers': after the run exactly the problems' buffers are alive (every
//                 copy made for a call was freed when the call finished);
//   accounting    once every tensor is disposed, no native buffer is alive and the external
//                 memory reported to V8 (napi_adjust_external_memory) is back to 0: every
//                 allocation's report was undone exactly once;
//   cuda memory   allocating the run's peak working set again succeeds after the run (nothing
//                 leaked on the device); an impossible allocation (200 GB) throws a clear error and
//                 the next call still works.
//
// `npm run stress` (script: "node --expose-gc dist/bench/stress.js") after `npx tsc -p .`.

import { monitorEventLoopDelay, performance } from 'perf_hooks';
import { native, type NativeHostStepStats } from '../lib/native';
import {
  open,
  sampleFused,
  sampleReference,
  type Device,
  type FloatDType,
  type SampleOptions,
  type SampleResult,
  type Tensor,
} from '../lib/index';
import { mulberry32 } from './inputs';

// ------------------------------------------------------------------------------------------------
// Arguments
// ------------------------------------------------------------------------------------------------

/** Time spent in one synchronous step: the shape native.hostStepStats() reports per native step. */
type StepTime = Omit<NativeHostStepStats, 'name'>;

interface Args {
  calls: number;
  concurrency: number;
  device: string;
  seed: number;
  problems: number;
  maxLagMs: number;
  p99LagMs: number;
  maxRssGrowthMb: number;
  maxInUseGrowthMb: number;
  phases: number;
  oom: boolean;
  disposeShare: number;
}

const USAGE = `usage: node --expose-gc dist/bench/stress.js [--calls N] [--concurrency N] [--device auto|cpu|cuda|cuda:N]
       [--seed N] [--problems N] [--dispose-share F] [--phases N] [--max-lag-ms MS] [--p99-lag-ms MS]
       [--max-rss-growth-mb MB] [--max-in-use-growth-mb MB] [--no-oom]`;

function parseArgs(argv: string[]): Args {
  const a: Args = {
    calls: 5000,
    concurrency: 256,
    device: 'auto',
    seed: 1,
    problems: 48,
    maxLagMs: 1000,
    p99LagMs: 50,
    maxRssGrowthMb: 64,
    maxInUseGrowthMb: 4,
    phases: 5,
    oom: true,
    disposeShare: 0.25,
  };
  const num = (flag: string, v: string | undefined, min: number, int = true): number => {
    const x = Number(v);
    if (v === undefined || !Number.isFinite(x) || x < min || (int && !Number.isInteger(x))) {
      throw new Error(`${flag}: expected ${int ? 'an integer' : 'a number'} >= ${min}, got ${v === undefined ? 'nothing' : JSON.stringify(v)}`);
    }
    return x;
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const [name, inline] = flag.includes('=') ? [flag.slice(0, flag.indexOf('=')), flag.slice(flag.indexOf('=') + 1)] : [flag, undefined];
    const value = () => (inline !== undefined ? inline : argv[++i]);
    switch (name) {
      case '--calls': a.calls = num(name, value(), 1); break;
      case '--concurrency': a.concurrency = num(name, value(), 1); break;
      case '--device': a.device = value() ?? ''; break;
      case '--seed': a.seed = num(name, value(), 0); break;
      case '--problems': a.problems = num(name, value(), 1); break;
      case '--dispose-share': a.disposeShare = num(name, value(), 0, false); break;
      case '--max-lag-ms': a.maxLagMs = num(name, value(), 1, false); break;
      case '--p99-lag-ms': a.p99LagMs = num(name, value(), 1, false); break;
      case '--max-rss-growth-mb': a.maxRssGrowthMb = num(name, value(), 0, false); break;
      case '--max-in-use-growth-mb': a.maxInUseGrowthMb = num(name, value(), 0, false); break;
      case '--phases': a.phases = num(name, value(), 2); break;
      case '--no-oom': a.oom = false; break;
      case '-h':
      case '--help':
        console.log(USAGE);
        process.exit(0);
      // eslint-disable-next-line no-fallthrough
      default:
        throw new Error(`unknown argument ${JSON.stringify(flag)}\n${USAGE}`);
    }
  }
  return a;
}

// ------------------------------------------------------------------------------------------------
// Problems: mixed shapes, dtypes and options, with host copies of their data
// ------------------------------------------------------------------------------------------------


interface Problem {
  id: number;
  dtype: FloatDType;
  B: number;
  V: number;
  D: number;
  h: Float32Array;
  w: Float32Array;
  b?: Float32Array;
  H: Tensor;
  W: Tensor;
  bias?: Tensor;
  /** options without `bias` (added per call: a fresh copy when the call disposes its tensors) */
  options: SampleOptions;
  expected?: SampleResult;
  bytes: number;
}

const DTYPES: FloatDType[] = ['f32', 'f16', 'bf16'];

function makeProblem(dev: Device, id: number, r: () => number): Problem {
  const dtype = DTYPES[Math.floor(r() * 3)];
  const B = 1 + Math.floor(r() * (r() < 0.2 ? 64 : 8));
  const V = r() < 0.3 ? 1 + Math.floor(r() * 64) : 64 + Math.floor(r() * (dev.kind === 'cuda' ? 40000 : 4000));
  const D = 1 + Math.floor(r() * (dev.kind === 'cuda' ? 256 : 64));
  const scale = [0.05, 0.3, 1, 3][Math.floor(r() * 4)];
  const g = () => (r() + r() + r() - 1.5) * 2 * scale;
  const h = Float32Array.from({ length: B * D }, g);
  const w = Float32Array.from({ length: V * D }, g);
  const b = r() < 0.3 ? Float32Array.from({ length: V }, g) : undefined;
  const options: SampleOptions = {
    numSamples: 1 + Math.floor(r() * 16),
    seed: r() < 0.7 ? Math.floor(r() * 2 ** 40) : BigUint64Array.from({ length: B }, () => BigInt(Math.floor(r() * 2 ** 52))),
    offset: Math.floor(r() * 1000),
  };
  const pick = r();
  if (pick < 0.15) options.temperature = 0;
  else if (pick < 0.3) options.temperature = Float32Array.from({ length: B }, () => (r() < 0.3 ? 0 : 0.1 + r() * 2));
  else if (pick < 0.6) options.temperature = 0.2 + r() * 1.5;
  if (r() < 0.3) options.topK = 1 + Math.floor(r() * Math.min(V, 100));
  if (r() < 0.3) options.topP = 0.1 + r() * 0.9;
  if (r() < 0.2) options.minP = r() * 0.5;
  if (r() < 0.15) options.softcap = 1 + r() * 30;
  if (r() < 0.2) {
    const words = Math.ceil(V / 32);
    const m = new Uint32Array(B * words);
    for (let row = 0; row < B; row++) {
      for (let i = 0; i < words; i++) m[row * words + i] = Math.floor(r() * 2 ** 32);
      const v = Math.floor(r() * V);
      m[row * words + (v >>> 5)] |= 1 << (v & 31);
      // the tail bits past V are ignored by the library; leave them random on purpose
    }
    options.allowedTokens = m;
  }
  if (r() < 0.3) options.logprobs = true;
  if (r() < 0.2) options.topLogprobs = 1 + Math.floor(r() * 8);
  const H = dev.tensor(h, [B, D], dtype);
  const W = dev.tensor(w, [V, D], dtype);
  const bias = b ? dev.tensor(b, [V], dtype) : undefined;
  const eb = dtype === 'f32' ? 4 : 2;
  return { id, dtype, B, V, D, h, w, b, H, W, bias, options, bytes: (B * D + V * D + (b ? V : 0)) * eb };
}

// ------------------------------------------------------------------------------------------------
// Checks and the report
// ------------------------------------------------------------------------------------------------

interface Check {
  name: string;
  ok: boolean;
  detail: string;
  skipped?: boolean;
}

function table(rows: string[][]): string {
  const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
  const line = (r: string[]) => r.map((x, c) => x.padEnd(widths[c])).join('  ');
  return [line(rows[0]), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.slice(1).map(line)].join('\n');
}

const MB = 1024 * 1024;
const gc = (globalThis as { gc?: () => void }).gc;

async function settle(): Promise<void> {
  // let FinalizationRegistry callbacks and pending native completions run, then collect
  for (let i = 0; i < 3; i++) {
    gc?.();
    await new Promise((res) => setTimeout(res, 20));
  }
}

interface Memory {
  rss: number;
  /** JS heap in use (after a collection: live objects only), and what V8 has reserved for it. */
  heapUsed: number;
  heapTotal: number;
  /** V8's external memory (array buffers and what addons report). */
  external: number;
  /** The addon's own counters (binding/storage.h). */
  native: ReturnType<typeof native.memoryStats>;
}

function memory(): Memory {
  const m = process.memoryUsage();
  const stats = native.memoryStats();
  if (!stats.mallocInUse) {
    // no glibc, or a malloc that mallinfo2 does not see (valgrind's): unknown, not zero
    stats.mallocInUse = undefined;
    stats.mallocFree = undefined;
  }
  return { rss: m.rss, heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external, native: stats };
}

/** Memory that live objects hold: the JS heap in use and malloc's bytes in use (glibc). */
function inUse(m: Memory): number {
  return m.heapUsed + (m.native.mallocInUse ?? 0);
}

function sameArray(a: ArrayLike<number> | undefined, b: ArrayLike<number> | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (!(a[i] === b[i] || (Number.isNaN(a[i]) && Number.isNaN(b[i])))) return false;
  return true;
}

async function main(): Promise<number> {
  const args = parseArgs(process.argv.slice(2));
  const dev = open(args.device as Parameters<typeof open>[0]);
  const exact = dev.kind === 'cpu';
  console.log(
    `flashsample stress: ${args.calls} calls, concurrency ${args.concurrency}, ${args.problems} problems on ${dev.name}` +
      `${gc ? '' : ' (run with --expose-gc for exact memory numbers)'}`,
  );
  const checks: Check[] = [];
  const check = (name: string, ok: boolean, detail: string, skipped = false) => checks.push({ name, ok, detail, skipped });
  await settle();
  const start = memory();

  // ---- problems and their reference answers ---------------------------------------------------
  const r = mulberry32(args.seed);
  const problems: Problem[] = [];
  for (let i = 0; i < args.problems; i++) problems.push(makeProblem(dev, i, r));
  const t0 = performance.now();
  for (const p of problems) {
    p.expected = await sampleReference(p.H, p.W, { ...p.options, bias: p.bias, method: 'gumbel' });
  }
  console.log(`  references: ${problems.length} problems in ${(performance.now() - t0).toFixed(0)} ms`);

  // ---- the load, in phases; the first is the warm-up of the memory measurement ---------------------
  // The event loop's delay is measured while calls run, not while the script collects between the
  // phases: a fresh histogram per phase (one that is disabled and enabled again records the gap as
  // one huge delay), and a 10 ms ticker that only counts while a phase runs.
  const lagPhases: { max: number; p99: number }[] = [];
  let intervalMaxLag = 0;
  let last = performance.now();
  let measuring = false;
  const ticker = setInterval(() => {
    const now = performance.now();
    if (measuring) intervalMaxLag = Math.max(intervalMaxLag, now - last - 10);
    last = now;
  }, 10);

  let next = 0;
  let tokens = 0;
  let tokenMismatches = 0;
  let resultMismatches = 0;
  let rejected = 0;
  let disposedInFlight = 0;
  let disposedOk = 0;
  let disposedResolved = 0;
  let peakBytes = 0;
  let liveBytes = 0;
  const failures: string[] = [];
  const record = (msg: string) => {
    if (failures.length < 10) failures.push(msg);
  };

  // Time the JS thread spends inside each synchronous API step (after the warm-up phase): what
  // blocks the event loop, if anything, shows up here with its name.
  const syncSteps = new Map<string, StepTime>();
  const timedSync = <T>(name: string, fn: () => T): T => {
    const t0 = performance.now();
    try {
      return fn();
    } finally {
      if (lagPhases.length > 0) {
        const ms = performance.now() - t0;
        const s = syncSteps.get(name) ?? { calls: 0, totalMs: 0, maxMs: 0, over10ms: 0 };
        s.calls++;
        s.totalMs += ms;
        s.maxMs = Math.max(s.maxMs, ms);
        if (ms > 10) s.over10ms++;
        syncSteps.set(name, s);
      }
    }
  };

  const one = async (k: number): Promise<void> => {
    const p = problems[(k * 7919) % problems.length];
    const useReference = k % 11 === 5; // a share of reference calls in the mix
    const disposeEarly = (k * 2654435761) % 1000 < args.disposeShare * 1000;
    let H = p.H;
    let W = p.W;
    let bias = p.bias;
    if (disposeEarly) {
      // tensorAsync: the conversion and copy of these multi-MB copies run on a worker thread (with
      // the synchronous tensor() they held the JS thread 3.5-4.8 ms per call: H200 run, 2026-11-30)
      const made = timedSync('device.tensorAsync() x ' + (p.b ? 3 : 2), () =>
        Promise.all([
          dev.tensorAsync(p.h, [p.B, p.D], p.dtype),
          dev.tensorAsync(p.w, [p.V, p.D], p.dtype),
          p.b ? dev.tensorAsync(p.b, [p.V], p.dtype) : Promise.resolve(undefined),
        ]),
      );
      [H, W, bias] = await made;
      liveBytes += p.bytes;
      peakBytes = Math.max(peakBytes, liveBytes);
    }
    const opts = { ...p.options, bias };
    let pending: Promise<SampleResult>;
    try {
      pending = timedSync(useReference ? 'sampleReference() launch' : 'sampleFused() launch', () =>
        useReference ? sampleReference(H, W, { ...opts, method: 'gumbel' }) : sampleFused(H, W, opts),
      );
    } finally {
      if (disposeEarly) {
        // while the call is in flight
        timedSync('dispose() in flight', () => {
          H.dispose();
          W.dispose();
          bias?.dispose();
        });
        liveBytes -= p.bytes;
        disposedInFlight++;
      }
    }
    let got: SampleResult;
    try {
      got = await pending;
    } catch (e) {
      rejected++;
      record(`call ${k} (problem ${p.id}${disposeEarly ? ', disposed in flight' : ''}): rejected: ${(e as Error).message}`);
      return;
    }
    if (disposeEarly) disposedResolved++;
    const want = p.expected!;
    let bad = 0;
    for (let i = 0; i < want.tokens.length; i++) if (got.tokens[i] !== want.tokens[i]) bad++;
    tokens += want.tokens.length;
    tokenMismatches += bad;
    const sameExtras =
      bad > 0 ||
      ((p.options.logprobs ? got.logprobs !== undefined && got.logprobs.length === want.logprobs!.length : got.logprobs === undefined) &&
        (!exact || !p.options.topLogprobs || sameArray(got.topTokens, want.topTokens)));
    if (bad > 0 || !sameExtras) {
      resultMismatches++;
      record(`call ${k} (problem ${p.id}, ${useReference ? 'reference' : 'fused'}${disposeEarly ? ', disposed in flight' : ''}): ${bad}/${want.tokens.length} tokens differ${sameExtras ? '' : ', logprobs/topTokens differ'}`);
    } else if (disposeEarly) disposedOk++;
  };

  // Phase boundaries: phase i runs calls [ends[i - 1], ends[i]) at the full concurrency; after it,
  // the script collects and records the memory.
  const phases = Math.min(args.phases, args.calls);
  const ends = Array.from({ length: phases }, (_, i) => Math.round((args.calls * (i + 1)) / phases));
  const snapshots: { calls: number; mem: Memory }[] = [];
  let loadMs = 0;
  for (const end of ends) {
    const tPhase = performance.now();
    const histogram = monitorEventLoopDelay({ resolution: 5 });
    histogram.enable();
    last = tPhase;
    measuring = true;
    const worker = async () => {
      while (next < end) {
        const k = next++;
        await one(k);
      }
    };
    // Start the workers 8 at a time, yielding to the event loop in between: a phase's first calls
    // (each may upload fresh tensor copies) would otherwise run back to back in one macrotask, and
    // that burst of the script's own work, repeated every phase, would dominate the lag p99.
    const workers: Promise<void>[] = [];
    for (let i = 0; i < Math.min(args.concurrency, end - next); i++) {
      if (i > 0 && i % 8 === 0) await new Promise((res) => setTimeout(res, 0));
      workers.push(worker());
    }
    await Promise.all(workers);
    histogram.disable();
    measuring = false;
    lagPhases.push({ max: histogram.max / 1e6, p99: histogram.percentile(99) / 1e6 });
    loadMs += performance.now() - tPhase;
    await settle();
    snapshots.push({ calls: end, mem: memory() });
  }
  clearInterval(ticker);

  // The p99 limit applies after the warm-up phase: the first calls of a process load the CUDA
  // kernels' modules (lazy loading, on the calling thread) and grow the pinned staging pool, a
  // one-time cost (H200, 2026-11-30: one ~490 ms stall in the warm-up, < 50 ms p99 after). The
  // max limit applies to every phase, the warm-up included, and both are printed.
  const lagMax = Math.max(intervalMaxLag, ...lagPhases.map((x) => x.max));
  const steady = lagPhases.length > 1 ? lagPhases.slice(1) : lagPhases;
  const lagP99 = Math.max(...steady.map((x) => x.p99)); // the worst steady phase's
  const warmLag = lagPhases[0] ?? { max: 0, p99: 0 };
  const agreement = tokens ? 1 - tokenMismatches / tokens : 0;
  check('calls resolved', rejected === 0, `${args.calls - rejected}/${args.calls} in ${(loadMs / 1000).toFixed(2)} s (${((args.calls / loadMs) * 1000).toFixed(0)} calls/s)`);
  if (exact) {
    check('results == reference', resultMismatches === 0, `${tokens} tokens, ${tokenMismatches} differ; ${resultMismatches} calls differ`);
  } else {
    check('tokens ~ reference (>= 99.9%)', agreement >= 0.999, `${tokens} tokens, agreement ${(agreement * 100).toFixed(4)}%; ${resultMismatches} calls differ`);
  }
  check(
    'disposed in flight',
    disposedInFlight > 0 && disposedResolved === disposedInFlight && (!exact || disposedOk === disposedInFlight),
    `${disposedResolved}/${disposedInFlight} calls whose tensors were disposed while in flight resolved, ${disposedOk} with exactly the reference's result`,
  );
  check(
    'event loop lag',
    lagMax <= args.maxLagMs && lagP99 <= args.p99LagMs,
    `max ${lagMax.toFixed(1)} ms; p99 ${lagP99.toFixed(1)} ms in the worst phase after the warm-up (limits ${args.maxLagMs} / ${args.p99LagMs} ms); ` +
      `warm-up phase: max ${warmLag.max.toFixed(1)}, p99 ${warmLag.p99.toFixed(1)} ms; per phase p99: ${lagPhases.map((x) => x.p99.toFixed(0)).join(' / ')} ms`,
  );
  // Where the JS thread's synchronous time went after the warm-up (API steps, timed here), and the
  // host-side CUDA steps inside them since the process started (native.hostStepStats()).
  const stepRow = (name: string, x: StepTime) =>
    [name, String(x.calls), x.totalMs.toFixed(1), (x.totalMs / x.calls).toFixed(3), x.maxMs.toFixed(1), String(x.over10ms)];
  const stepRows = [...syncSteps.entries()].map(([name, x]) => stepRow(name, x));
  if (dev.kind === 'cuda') {
    for (const x of native.hostStepStats()) if (x.calls > 0) stepRows.push(stepRow(`  native: ${x.name}`, x));
  }
  console.log('\n  synchronous steps on the JS thread (API steps after the warm-up; native steps: the whole run):');
  console.log('  ' + table([['step', 'calls', 'total ms', 'mean ms', 'max ms', '> 10 ms'], ...stepRows]).replace(/\n/g, '\n  '));

  // ---- memory after the run -----------------------------------------------------------------------
  // Growth from the end of the warm-up phase to the end of the run. A leak keeps objects alive: the
  // memory in use (JS heap used after a collection + malloc's bytes in use) grows with the calls.
  // RSS also holds what the allocator keeps after frees and what V8 reserves for its heap; both
  // grow over the first thousands of calls and then level off (bench/TUNING.md, "Stress / RSS"),
  // so RSS is gated loosely and reported with that breakdown.
  const warm = snapshots[0];
  const end = snapshots[snapshots.length - 1];
  const afterWarm = Math.max(1, end.calls - warm.calls);
  const growth = (end.mem.rss - warm.mem.rss) / MB;
  const inUseGrowth = (inUse(end.mem) - inUse(warm.mem)) / MB;
  const heapTotalGrowth = (end.mem.heapTotal - warm.mem.heapTotal) / MB;
  const mallocFreeGrowth =
    end.mem.native.mallocFree !== undefined && warm.mem.native.mallocFree !== undefined
      ? (end.mem.native.mallocFree - warm.mem.native.mallocFree) / MB
      : undefined;
  const signed = (x: number) => `${x >= 0 ? '+' : ''}${x.toFixed(1)}`;
  console.log(`\n  memory after each phase (after global.gc()${gc ? '' : ': unavailable, run with --expose-gc'}):`);
  console.log(
    '  ' +
      table([
        ['calls', 'RSS MB', 'JS heap used / total MB', 'malloc in use / free MB', 'V8 external MB', 'native buffers', 'native MB', 'reported MB'],
        ...[{ calls: 0, mem: start }, ...snapshots].map((x, i) => [
          i === 0 ? 'start' : String(x.calls),
          (x.mem.rss / MB).toFixed(1),
          `${(x.mem.heapUsed / MB).toFixed(1)} / ${(x.mem.heapTotal / MB).toFixed(1)}`,
          x.mem.native.mallocInUse === undefined
            ? 'n/a'
            : `${(x.mem.native.mallocInUse / MB).toFixed(1)} / ${(x.mem.native.mallocFree! / MB).toFixed(1)}`,
          (x.mem.external / MB).toFixed(1),
          String(x.mem.native.hostBuffers + x.mem.native.deviceBuffers + x.mem.native.externalBuffers),
          ((x.mem.native.hostBytes + x.mem.native.deviceBytes) / MB).toFixed(1),
          (x.mem.native.reportedBytes / MB).toFixed(1),
        ]),
      ]).replace(/\n/g, '\n  '),
  );
  if (gc) {
    check(
      'memory in use',
      inUseGrowth <= args.maxInUseGrowthMb,
      `JS heap used + malloc in use after the warm-up (${warm.calls} calls) -> end: ${signed(inUseGrowth)} MB ` +
        `(${((inUseGrowth * MB) / afterWarm).toFixed(0)} B/call over ${afterWarm} calls; limit ${args.maxInUseGrowthMb} MB)` +
        `${end.mem.native.mallocInUse === undefined ? ' (no mallinfo2: JS heap only)' : ''}`,
    );
  } else {
    check('memory in use', true, 'not checked: run with --expose-gc (node --expose-gc dist/bench/stress.js)', true);
  }
  check(
    'host RSS',
    growth <= args.maxRssGrowthMb,
    `after the warm-up (${warm.calls} calls) ${(warm.mem.rss / MB).toFixed(1)} -> ${(end.mem.rss / MB).toFixed(1)} MB ` +
      `(${signed(growth)}, limit ${args.maxRssGrowthMb}); of which V8 heap reserved ${signed(heapTotalGrowth)} MB` +
      `${mallocFreeGrowth === undefined ? '' : `, malloc free but held ${signed(mallocFreeGrowth)} MB`}`,
  );
  // While the problems are alive, the buffers alive must be exactly the problems' (every copy made
  // for a call was freed once that call finished).
  const problemBuffers = problems.reduce((n, p) => n + 2 + (p.bias ? 1 : 0), 0);
  const problemBytes = problems.reduce((n, p) => n + p.bytes, 0);
  const liveBuffers = (m: Memory) => m.native.hostBuffers + m.native.deviceBuffers - (start.native.hostBuffers + start.native.deviceBuffers);
  const liveBytesOf = (m: Memory) => m.native.hostBytes + m.native.deviceBytes - (start.native.hostBytes + start.native.deviceBytes);
  check(
    'native buffers',
    liveBuffers(end.mem) === problemBuffers && liveBytesOf(end.mem) === problemBytes,
    `after the run: ${liveBuffers(end.mem)} buffers, ${liveBytesOf(end.mem)} bytes alive; the problems hold ${problemBuffers}, ${problemBytes} bytes`,
  );

  if (dev.kind === 'cuda') {
    // The peak working set of in-flight copies, allocated again at once: must fit after the run.
    try {
      const again: Tensor[] = [];
      const per = Math.max(1, Math.ceil(Math.max(peakBytes, 1) / 4));
      for (let i = 0; i < 4; i++) again.push(dev.empty([per], 'u64'));
      for (const t of again) t.dispose();
      check('device memory', true, `re-allocated 4x the peak in-flight working set (4 x ${(peakBytes / MB).toFixed(1)} MB) after the run`);
    } catch (e) {
      check('device memory', false, `re-allocating the peak working set failed: ${(e as Error).message}`);
    }
    if (args.oom) {
      let message = '';
      try {
        const huge = dev.empty([25_000_000_000], 'u64'); // 200 GB
        huge.dispose();
      } catch (e) {
        message = (e as Error).message;
      }
      const clear = message !== '' && /memory|alloc/i.test(message);
      check('OOM error', clear, message ? `Device.empty(200 GB) threw: ${message.slice(0, 120)}` : 'Device.empty(200 GB) did not throw');
      const p = problems[0];
      try {
        const res = await sampleFused(p.H, p.W, { ...p.options, bias: p.bias });
        const same = sameArray(res.tokens, p.expected!.tokens);
        check('call after OOM', true, `resolved; tokens ${same ? 'equal the reference' : 'differ from the reference (rounding ties?)'}`);
      } catch (e) {
        check('call after OOM', false, `rejected: ${(e as Error).message}`);
      }
    }
  } else {
    check('device memory', true, 'cpu: covered by host memory');
  }

  for (const p of problems) {
    p.H.dispose();
    p.W.dispose();
    p.bias?.dispose();
  }
  await settle();
  const final = memory();
  check(
    'accounting',
    liveBuffers(final) === 0 && liveBytesOf(final) === 0 && final.native.reportedBytes === start.native.reportedBytes,
    `every tensor disposed: ${liveBuffers(final)} native buffers, ${liveBytesOf(final)} bytes alive; ` +
      `external memory reported to V8 ${(start.native.reportedBytes / MB).toFixed(1)} -> ${(final.native.reportedBytes / MB).toFixed(1)} MB`,
  );

  console.log('');
  console.log(table([['check', 'result', 'detail'], ...checks.map((c) => [c.name, c.skipped ? 'SKIP' : c.ok ? 'PASS' : 'FAIL', c.detail])]));
  if (failures.length) console.log(`\nfirst failures:\n  ${failures.join('\n  ')}`);
  const ok = checks.every((c) => c.ok);
  console.log(`\nstress: ${ok ? 'all checks passed' : 'FAILED'}`);
  return ok ? 0 : 1;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (e) => {
    console.error(`stress: ${(e as Error).stack ?? e}`);
    process.exitCode = 2;
  },
);
