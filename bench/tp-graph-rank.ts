// One rank of `--mode tp`'s graph step (bench/tp.ts), in its own process: one process per GPU, as
// engines run tensor parallelism and as a sharded sampler needs. Env: TP_ID (the NCCL unique id,
// hex), TP_RANKS, TP_RANK, TP_CASE (JSON GraphCase). For every batch and option set, in the same
// order on every rank: a sharded sampler on this rank's shard (bench/tp.ts shardRanges), its enqueue
// captured in a CUDA graph, replayed back to back. Prints one JSON line per point, {batch, options,
// graphUs} or {batch, options, error}, then {done: true}.
import { performance } from 'perf_hooks';
import { nccl, open, type Sampler, type Tensor } from '../lib/index';
import type { BenchDType, LogitsMode, OptionSet } from './args';
import { BENCH_H_SEED, BENCH_W_SEED, logitsInputs } from './logits';
import type { Shape } from './presets';
import { rowsFor, samplerOptionsFor } from './step';
import { shardRanges } from './tp';

export interface GraphCase {
  shape: Shape;
  batches: number[];
  sets: OptionSet[];
  dtype: BenchDType;
  logits: LogitsMode;
  logitStd: number;
  iters: number;
  warmup: number;
}

async function main(): Promise<void> {
  const id = Uint8Array.from(Buffer.from(process.env.TP_ID ?? '', 'hex'));
  const ranks = Number(process.env.TP_RANKS);
  const rank = Number(process.env.TP_RANK);
  const c = JSON.parse(process.env.TP_CASE ?? '{}') as GraphCase;
  const dev = open(`cuda:${rank}`);
  const comm = await nccl.initRank(id, ranks, rank, dev, { timeoutMs: 120_000 });
  const { shape } = c;
  const [start, rows] = shardRanges(shape.vocab, ranks)[rank];
  const maxShardVocab = Math.max(...shardRanges(shape.vocab, ranks).map(([, n]) => n));
  const host = logitsInputs(c.logits, shape.vocab, shape.hidden, c.dtype, c.logitStd, BENCH_W_SEED);
  const W = dev.tensor(host.w.subarray(start * shape.hidden, (start + rows) * shape.hidden), [rows, shape.hidden], c.dtype);
  try {
    for (const B of c.batches) {
      const H = dev.tensor(host.h(B, BENCH_H_SEED), [B, shape.hidden], c.dtype);
      for (const set of c.sets) {
        const owned: Tensor[] = [];
        let sampler: Sampler | undefined;
        try {
          sampler = dev.createSampler({
            maxBatch: B, vocab: rows, hidden: shape.hidden, dtype: c.dtype, numSamples: set.numSamples ?? 1,
            ...samplerOptionsFor(set),
            tp: { comm, vocabOffset: start, vocabSize: shape.vocab, maxShardVocab },
          });
          sampler.setRows(0, rowsFor(set, B));
          const make = (n: number, dtype: 'i32' | 'f32') => {
            const t = dev.empty([n], dtype);
            owned.push(t);
            return t;
          };
          const S = set.numSamples ?? 1, n = set.topLogprobs ?? 0;
          const s = sampler;
          const args = {
            H, W, out: make(B * S, 'i32'), statusOut: make(B, 'i32'), logprobsOut: set.logprobs ? make(B * S, 'f32') : undefined,
            topTokensOut: n ? make(B * n, 'i32') : undefined, topLogprobsOut: n ? make(B * n, 'f32') : undefined, advanceOffset: true,
          };
          const graph = dev.captureGraph(() => s.enqueue(args));
          for (let i = 0; i < c.warmup; i++) graph.launch();
          await dev.synchronize();
          const t0 = performance.now();
          for (let i = 0; i < c.iters; i++) graph.launch();
          await dev.synchronize();
          const graphUs = ((performance.now() - t0) * 1e3) / c.iters;
          graph.dispose();
          process.stdout.write(JSON.stringify({ batch: B, options: set.label, graphUs }) + '\n');
        } catch (e) {
          process.stdout.write(JSON.stringify({ batch: B, options: set.label, error: e instanceof Error ? e.message : String(e) }) + '\n');
        } finally {
          sampler?.dispose();
          for (const t of owned) t.dispose();
        }
      }
      H.dispose();
    }
  } finally {
    W.dispose();
    comm.dispose();
  }
  process.stdout.write(JSON.stringify({ done: true }) + '\n');
}

if (require.main === module) {
  main().catch((e) => {
    process.stdout.write(JSON.stringify({ error: e instanceof Error ? e.message : String(e) }) + '\n');
    process.exit(1);
  });
}
