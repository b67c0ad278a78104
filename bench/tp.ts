// `--mode tp`: a head sharded by vocabulary over N GPUs (issue 18; the multi-GPU runs are issue
// 19's). Per shape, batch, option set and degree N:
//   one GPU µs   CUDA events around sampleFused on the whole head (cuda:0)
//   shard µs     CUDA events around one rank's partial call on its V/N rows (cuda:0): what each
//                rank of TP-N computes, measurable on one GPU
//   shard / one  the compute part of a TP-N step against one GPU (TP-2 target: <= 0.55)
//   bytes        the partial state each rank sends per step
// and, where the process has N GPUs (nccl.initAll over cuda:0 .. N-1; FLASHSAMPLE_NCCL_LIB names
// libnccl), wall times of awaited calls (each includes one host round trip, ~10-30 µs):
//   step µs      sampleFusedTP: partials, the all-gather, the merge on every rank
//   exchange µs  the all-gather of the partial states alone
// and where TP <= the GPUs, one process per GPU (as engines run TP; bench/tp-graph-rank.ts):
//   graph µs     a replayed CUDA graph of a sharded sampler's enqueue (createSampler's tp): the
//                shard, the all-gather, the merge and the rows pass on the device, back to back
//                (rank 0's time)
import { spawn } from 'child_process';
import * as path from 'path';
import { performance } from 'perf_hooks';
import { gpuStatus, nccl, open, sampleFused, sampleFusedTP, timeSampler, type Communicator, type Device, type Tensor } from '../lib/index';
import { native } from '../lib/native';
import { samplePartial } from '../lib/parallel';
import { BENCH_H_SEED, BENCH_W_SEED, logitsInputs } from './logits';
import { optionsFor, rowsFor, type ModePlan } from './step';
import { summarize } from './stats';
import type { GraphCase } from './tp-graph-rank';
import { DASH, fmtRatio, fmtUs, formatTable } from './table';

export interface TpRow {
  shape: string;
  batch: number;
  options: string;
  tp: number;
  oneGpuUs: number;
  shardUs: number;
  bytes: number;
  stepUs: number | null;
  exchangeUs: number | null;
  oneGpuWallUs: number | null;
  /** Rows of one step that the rows pass decided (MergeResult.rowsPassRows). */
  rowsPass: number | null;
  /** µs a step of a replayed graph of a sharded sampler's enqueue (one process per GPU; TP <= the GPUs). */
  graphUs: number | null;
  error?: string;
}

export interface TpPlan extends ModePlan {
  degrees: number[];
}

/** Shard bounds: N ranges of a multiple of 4 rows (the last takes the rest). */
export function shardRanges(V: number, n: number): [number, number][] {
  const step = Math.ceil(V / n / 4) * 4;
  const out: [number, number][] = [];
  for (let i = 0; i < n; i++) {
    const start = Math.min(i * step, V);
    const end = i === n - 1 ? V : Math.min(start + step, V);
    if (end > start) out.push([start, end - start]);
  }
  return out;
}

async function wallUs(iters: number, call: () => Promise<unknown>): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < iters; i++) {
    const t0 = performance.now();
    await call();
    times.push((performance.now() - t0) * 1e3);
  }
  return summarize(times).medianUs;
}

/** The graph step of every batch and option set of `shape` at TP `n`: one process per GPU
 *  (bench/tp-graph-rank.ts), µs a step of rank 0 by "B label"; an error string where one failed. */
async function graphSteps(plan: TpPlan, shape: GraphCase['shape'], n: number): Promise<Map<string, number | string>> {
  const testCase: GraphCase = {
    shape, batches: plan.batches, sets: plan.optionSets.filter((set) => !set.listed && !set.mask),
    dtype: plan.dtype, logits: plan.logits, logitStd: plan.logitStd, iters: plan.iters, warmup: plan.warmup,
  };
  const id = Buffer.from(nccl.createUniqueId()).toString('hex');
  const script = path.join(__dirname, 'tp-graph-rank.js');
  const outputs = await Promise.all(Array.from({ length: n }, (_, rank) => new Promise<string>((resolve) => {
    const child = spawn(process.execPath, [script], {
      env: { ...process.env, TP_ID: id, TP_RANKS: String(n), TP_RANK: String(rank), TP_CASE: JSON.stringify(testCase) },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.on('exit', () => resolve(out));
  })));
  const points = new Map<string, number | string>();
  for (const line of outputs[0].trim().split('\n')) {
    try {
      const r = JSON.parse(line) as { batch?: number; options?: string; graphUs?: number; error?: string };
      if (r.batch !== undefined) points.set(`${r.batch} ${r.options}`, r.graphUs ?? r.error ?? 'no result');
      else if (r.error) for (const B of plan.batches) for (const set of testCase.sets) points.set(`${B} ${set.label}`, r.error);
    } catch {
      // (a line that is not JSON: the rank's own output)
    }
  }
  return points;
}

function sliceRows(host: Float32Array | Uint16Array, D: number, start: number, rows: number): Float32Array | Uint16Array {
  return host.subarray(start * D, (start + rows) * D);
}

export async function runTp(plan: TpPlan): Promise<TpRow[]> {
  const gpus = gpuStatus().deviceCount;
  const dev0 = open('cuda:0');
  const out: TpRow[] = [];
  const comms = new Map<number, Communicator[]>();
  const getComms = async (n: number) => {
    if (!comms.has(n)) comms.set(n, await nccl.initAll(Array.from({ length: n }, (_, i) => i)));
    return comms.get(n)!;
  };
  try {
    for (const shape of plan.shapes) {
      // The graph steps first, in child processes that make their own W: this one's GPU memory is free.
      const graphs = new Map<number, Map<string, number | string>>();
      for (const n of plan.degrees.filter((d) => d <= gpus)) {
        plan.onProgress?.(`${shape.name}: TP-${n} graph steps (${n} processes)`);
        graphs.set(n, await graphSteps(plan, shape, n));
      }
      plan.onProgress?.(`${shape.name}: making W`);
      const host = logitsInputs(plan.logits, shape.vocab, shape.hidden, plan.dtype, plan.logitStd, BENCH_W_SEED);
      const W = dev0.tensor(host.w, [shape.vocab, shape.hidden], plan.dtype);
      // Each degree's shards: on cuda:0 for the shard timing, on cuda:i for the real step.
      const owned: Tensor[] = [W];
      const shardOn = (dev: Device, start: number, rows: number) => {
        const t = dev.tensor(sliceRows(host.w, shape.hidden, start, rows), [rows, shape.hidden], plan.dtype);
        owned.push(t);
        return t;
      };
      try {
        for (const B of plan.batches) {
          const hHost = host.h(B, BENCH_H_SEED);
          const H = dev0.tensor(hHost, [B, shape.hidden], plan.dtype);
          owned.push(H);
          for (const set of plan.optionSets) {
            const options = optionsFor(set, rowsFor(set, B), undefined);
            plan.onProgress?.(`${shape.name} B=${B} ${set.label}: one GPU`);
            const oneGpuUs = summarize(await timeSampler('fused', [{ H, W }], options, plan)).medianUs;
            for (const n of plan.degrees) {
              const row: TpRow = { shape: shape.name, batch: B, options: set.label, tp: n, oneGpuUs, shardUs: NaN, bytes: NaN, stepUs: null, exchangeUs: null, oneGpuWallUs: null, rowsPass: null, graphUs: null };
              try {
                plan.onProgress?.(`${shape.name} B=${B} ${set.label}: TP-${n} shard`);
                const [[start, rows]] = shardRanges(shape.vocab, n);
                const shard = shardOn(dev0, start, rows);
                const shardOptions = { ...options, partial: true as const, vocabOffset: start, vocabSize: shape.vocab };
                row.shardUs = summarize(await timeSampler('fused', [{ H, W: shard }], shardOptions, plan)).medianUs;
                const probe = await samplePartial(H, shard, shardOptions);
                row.bytes = probe.bytes;
                probe.dispose();
                if (n <= gpus) {
                  plan.onProgress?.(`${shape.name} B=${B} ${set.label}: TP-${n} step`);
                  const cs = await getComms(n);
                  const shards = shardRanges(shape.vocab, n).map(([s, r], i) => {
                    const dev = open(`cuda:${i}`);
                    const Hi = i === 0 ? H : dev.tensor(hHost, [B, shape.hidden], plan.dtype);
                    if (i !== 0) owned.push(Hi);
                    return { H: Hi, W: shardOn(dev, s, r), vocabOffset: s };
                  });
                  const step = () => sampleFusedTP(cs, shards, { ...options, vocabSize: shape.vocab });
                  for (let i = 0; i < plan.warmup; i++) await step();
                  row.rowsPass = (await step())[0].rowsPassRows.length;
                  row.stepUs = await wallUs(plan.iters, step);
                  row.oneGpuWallUs = await wallUs(plan.iters, () => sampleFused(H, W, options));
                  const partials = await Promise.all(shards.map((s) => samplePartial(s.H, s.W, { ...options, partial: true, vocabOffset: s.vocabOffset, vocabSize: shape.vocab })));
                  const recvs = partials.map((p) => p.state.device.empty([(n * p.bytes) / 4], 'i32'));
                  const gather = () =>
                    native.ncclAllGather(cs.map((c) => c.handle), partials.map((p) => p.state.handle('send')), recvs.map((r) => r.handle('recv')), partials[0].bytes, undefined, 30_000);
                  for (let i = 0; i < plan.warmup; i++) await gather();
                  row.exchangeUs = await wallUs(plan.iters, gather);
                  for (const p of partials) p.dispose();
                  for (const r of recvs) r.dispose();
                }
              } catch (e) {
                row.error = e instanceof Error ? e.message : String(e);
              }
              const graph = graphs.get(n)?.get(`${B} ${set.label}`);
              if (typeof graph === 'number') row.graphUs = graph;
              else if (graph !== undefined) row.error = `${row.error ? `${row.error}; ` : ''}graph step: ${graph}`;
              out.push(row);
            }
          }
        }
      } finally {
        for (const t of owned) t.dispose();
      }
    }
  } finally {
    for (const cs of comms.values()) for (const c of cs) c.dispose();
  }
  return out;
}

export function tpTable(rows: TpRow[]): string {
  const columns = [
    { title: 'shape', align: 'left' as const }, { title: 'B' }, { title: 'options', align: 'left' as const }, { title: 'TP' },
    { title: 'one GPU µs' }, { title: 'shard µs' }, { title: 'shard/one' }, { title: 'bytes' },
    { title: 'step µs' }, { title: 'exchange µs' }, { title: 'one GPU wall µs' }, { title: 'step/one' },
    { title: 'rows pass' }, { title: 'graph µs' }, { title: 'graph/one' },
  ];
  const errors = rows.some((r) => r.error !== undefined);
  if (errors) columns.push({ title: 'error', align: 'left' as const });
  const cells = rows.map((r) => [
    r.shape, String(r.batch), r.options, String(r.tp), fmtUs(r.oneGpuUs), fmtUs(r.shardUs), fmtRatio(r.shardUs / r.oneGpuUs),
    Number.isFinite(r.bytes) ? String(r.bytes) : DASH, fmtUs(r.stepUs), fmtUs(r.exchangeUs), fmtUs(r.oneGpuWallUs),
    r.stepUs !== null && r.oneGpuWallUs !== null ? fmtRatio(r.stepUs / r.oneGpuWallUs) : DASH,
    r.rowsPass !== null ? `${r.rowsPass}/${r.batch}` : DASH,
    fmtUs(r.graphUs), r.graphUs !== null ? fmtRatio(r.graphUs / r.oneGpuUs) : DASH,
    ...(errors ? [r.error ?? ''] : []),
  ]);
  return [
    formatTable(columns, cells),
    '  one GPU / shard µs: CUDA events (timeSampler) on cuda:0: the whole head, and one rank\'s V/TP rows as a partial call',
    '  step / exchange / one GPU wall µs: medians of awaited calls (sampleFusedTP; the all-gather alone; sampleFused), where TP <= the GPUs',
    '  rows pass: N/B rows of a step that the candidates left undecided and the rows pass decided (MergeResult.rowsPassRows)',
    '  graph µs: back-to-back replays of a captured sharded-sampler step (createSampler tp), one process per GPU, rank 0, per step; graph/one against one GPU µs',
  ].join('\n');
}
