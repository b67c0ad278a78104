// Stress script (issue 6, "Reliability"): thousands of concurrent async sampler calls from Node.
//
//   node --expose-gc dist/bench/stress.js [--calls 5000] [--concurrency 256] [--device auto]
//        [--seed 1] [--max-lag-ms 1000] [--p99-lag-ms 50] [--max-rss-growth-mb 128] [--no-oom]
//
// What it checks (exit code 0 only when every check passes; a summary table at the end):
//   correctness   every call's tokens (and logprobs / topTokens when asked) equal a precomputed
//                 sampleReference({method: 'gumbel'}) answer for the same problem and seed
//                 (SEMANTICS §3: on the CPU identical; on CUDA up to fp32 rounding ties, so CUDA
//                 accepts a token agreement >= 99.9% over the run and counts the rest);
//   dispose       a share of the calls upload fresh copies of their tensors and dispose them right
//                 after the call starts, while it is in flight: the call must still resolve with
//                 the right tokens (the native side keeps the memory alive until it finishes);
//   event loop    max and p99 delay of the event loop while the load runs (perf_hooks
//                 monitorEventLoopDelay, plus a 10 ms setInterval measuring its own lateness):
//                 a sampler that blocked the main thread would show up in the p99. The max is
//                 gated loosely: on a 2-core machine the CPU backend's threads can deschedule
//                 the main thread for a few hundred ms (observed 270-380 ms, p99 ~20 ms);
//   host memory   RSS and external memory after a warm-up and after the run (after global.gc()
//                 when run with --expose-gc): the growth must stay below --max-rss-growth-mb;
//   cuda memory   allocating the run's peak working set again succeeds after the run (nothing
//                 leaked on the device); an impossible allocation (200 GB) throws a clear error and
//                 the next call still works.
//
// `npm run stress` (script: "node --expose-gc dist/bench/stress.js") after `npx tsc -p .`.

import { monitorEventLoopDelay, performance } from 'perf_hooks';
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

// ------------------------------------------------------------------------------------------------
// Arguments
// ------------------------------------------------------------------------------------------------

interface Args {
  calls: number;
  concurrency: number;
  device: string;
  seed: number;
  problems: number;
  maxLagMs: number;
  p99LagMs: number;
  maxRssGrowthMb: number;
  oom: boolean;
  disposeShare: number;
}

const USAGE = `usage: node --expose-gc dist/bench/stress.js [--calls N] [--concurrency N] [--device auto|cpu|cuda|cuda:N]
       [--seed N] [--problems N] [--dispose-share F] [--max-lag-ms MS] [--p99-lag-ms MS] [--max-rss-growth-mb MB] [--no-oom]`;

function parseArgs(argv: string[]): Args {
  const a: Args = {
    calls: 5000,
    concurrency: 256,
    device: 'auto',
    seed: 1,
    problems: 48,
    maxLagMs: 1000,
    p99LagMs: 50,
    maxRssGrowthMb: 128,
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

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

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

function memory(): { rss: number; external: number; heap: number } {
  const m = process.memoryUsage();
  return { rss: m.rss, external: m.external + m.arrayBuffers, heap: m.heapTotal };
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
  const check = (name: string, ok: boolean, detail: string) => checks.push({ name, ok, detail });

  // ---- problems and their reference answers ---------------------------------------------------
  const r = rng(args.seed);
  const problems: Problem[] = [];
  for (let i = 0; i < args.problems; i++) problems.push(makeProblem(dev, i, r));
  const t0 = performance.now();
  for (const p of problems) {
    p.expected = await sampleReference(p.H, p.W, { ...p.options, bias: p.bias, method: 'gumbel' });
  }
  console.log(`  references: ${problems.length} problems in ${(performance.now() - t0).toFixed(0)} ms`);

  // ---- warm-up (first-call allocations, thread pools), then the memory baseline ------------------
  await Promise.all(problems.map((p) => sampleFused(p.H, p.W, { ...p.options, bias: p.bias })));
  await settle();
  const before = memory();

  // ---- the load ---------------------------------------------------------------------------------
  const histogram = monitorEventLoopDelay({ resolution: 5 });
  let intervalMaxLag = 0;
  let last = performance.now();
  const ticker = setInterval(() => {
    const now = performance.now();
    intervalMaxLag = Math.max(intervalMaxLag, now - last - 10);
    last = now;
  }, 10);
  histogram.enable();

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

  const one = async (k: number): Promise<void> => {
    const p = problems[(k * 7919) % problems.length];
    const useReference = k % 11 === 5; // a share of reference calls in the mix
    const disposeEarly = (k * 2654435761) % 1000 < args.disposeShare * 1000;
    let H = p.H;
    let W = p.W;
    let bias = p.bias;
    if (disposeEarly) {
      H = dev.tensor(p.h, [p.B, p.D], p.dtype);
      W = dev.tensor(p.w, [p.V, p.D], p.dtype);
      bias = p.b ? dev.tensor(p.b, [p.V], p.dtype) : undefined;
      liveBytes += p.bytes;
      peakBytes = Math.max(peakBytes, liveBytes);
    }
    const opts = { ...p.options, bias };
    let pending: Promise<SampleResult>;
    try {
      pending = useReference ? sampleReference(H, W, { ...opts, method: 'gumbel' }) : sampleFused(H, W, opts);
    } finally {
      if (disposeEarly) {
        // while the call is in flight
        H.dispose();
        W.dispose();
        bias?.dispose();
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

  const tLoad = performance.now();
  const workers = Array.from({ length: Math.min(args.concurrency, args.calls) }, async () => {
    while (next < args.calls) {
      const k = next++;
      await one(k);
    }
  });
  await Promise.all(workers);
  const loadMs = performance.now() - tLoad;
  histogram.disable();
  clearInterval(ticker);

  const lagMax = Math.max(histogram.max / 1e6, intervalMaxLag);
  const lagP99 = histogram.percentile(99) / 1e6;
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
    `max ${lagMax.toFixed(1)} ms, p99 ${lagP99.toFixed(1)} ms (limits ${args.maxLagMs} / ${args.p99LagMs} ms)`,
  );

  // ---- memory after the run -----------------------------------------------------------------------
  await settle();
  const after = memory();
  const growth = (after.rss - before.rss) / MB;
  check(
    'host memory',
    growth <= args.maxRssGrowthMb,
    `RSS ${(before.rss / MB).toFixed(1)} -> ${(after.rss / MB).toFixed(1)} MB (${growth >= 0 ? '+' : ''}${growth.toFixed(1)}), ` +
      `JS heap ${(before.heap / MB).toFixed(1)} -> ${(after.heap / MB).toFixed(1)} MB, ` +
      `external ${(before.external / MB).toFixed(1)} -> ${(after.external / MB).toFixed(1)} MB${gc ? '' : ' (no --expose-gc)'}`,
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

  console.log('');
  console.log(table([['check', 'result', 'detail'], ...checks.map((c) => [c.name, c.ok ? 'PASS' : 'FAIL', c.detail])]));
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
