// One rank of a tensor-parallel run in its own process (test/nccl-multi.test.ts, issue 19): the
// one-process-per-GPU set-up, with the NCCL unique id handed over by the parent in TP_ID (hex).
// TP_RANKS, TP_RANK: the communicator; TP_CASE: JSON {V, D, B, options, exitAfterInit?,
// timeoutMs?, sampler?}. The head is made from fixed seeds, so every rank and the parent agree on
// it. With `sampler`, the step is a sharded sampler's enqueue (createSampler's tp) captured in a
// CUDA graph and launched, instead of sampleFusedTP. Prints one JSON line: {tokens, logprobs?} or
// {error}.
'use strict';
const { nccl, open, sampleFusedTP } = require('../dist/lib/index.js');
const { headOf, shardBounds, optionsOf } = require('./tp-head.js');

/** One step of a sharded sampler with `options`' rows (scalars filled per row), captured and launched. */
async function samplerStep(dev, comm, H, W, options, c, offset, maxShardVocab) {
  const B = c.B, S = options.numSamples ?? 1;
  const filters = ['topK', 'topP', 'minP'].filter((k) => options[k] !== undefined);
  const sampler = dev.createSampler({
    maxBatch: B, vocab: W.shape[0], hidden: c.D, dtype: 'bf16', numSamples: S, filters,
    logprobs: !!options.logprobs, topLogprobs: options.topLogprobs ?? 0,
    tp: { comm, vocabOffset: offset, vocabSize: c.V, maxShardVocab },
  });
  const perRow = (v, Kind) => (v === undefined ? undefined : typeof v === 'number' ? new Kind(B).fill(v) : v);
  const rows = { seed: options.seed };
  for (const [k, Kind] of [['temperature', Float32Array], ['topK', Int32Array], ['topP', Float32Array], ['minP', Float32Array]]) {
    const v = perRow(options[k], Kind);
    if (v !== undefined) rows[k] = v;
  }
  sampler.setRows(0, rows);
  const out = dev.empty([B * S], 'i32');
  const status = dev.empty([B], 'i32');
  const lp = options.logprobs ? dev.empty([B * S], 'f32') : undefined;
  const graph = dev.captureGraph(() => sampler.enqueue({ H, W, out, statusOut: status, logprobsOut: lp }));
  graph.launch();
  await dev.synchronize();
  const bad = Array.from(await status.toArray()).findIndex((x) => x !== 0);
  if (bad >= 0) throw new Error(`row ${bad}: status ${(await status.toArray())[bad]}`);
  const result = { tokens: await out.toArray(), logprobs: lp ? await lp.toArray() : undefined };
  graph.dispose();
  sampler.dispose();
  return result;
}

async function main() {
  const id = Uint8Array.from(Buffer.from(process.env.TP_ID, 'hex'));
  const ranks = Number(process.env.TP_RANKS);
  const rank = Number(process.env.TP_RANK);
  const c = JSON.parse(process.env.TP_CASE);
  const comm = await nccl.initRank(id, ranks, rank, `cuda:${rank}`, { timeoutMs: c.timeoutMs ?? 60000 });
  if (c.exitAfterInit === rank) process.exit(3);  // a rank that dies before the exchange
  const dev = open(`cuda:${rank}`);
  const head = headOf(c.V, c.D, c.B);
  const [offset, rows] = shardBounds(c.V, ranks)[rank];
  const H = dev.tensor(head.h, [c.B, c.D], 'bf16');
  const W = dev.tensor(head.w.subarray(offset * c.D, (offset + rows) * c.D), [rows, c.D], 'bf16');
  const options = optionsOf(c.options, c.B);
  const r = c.sampler
    ? await samplerStep(dev, comm, H, W, options, c, offset, Math.max(...shardBounds(c.V, ranks).map(([, n]) => n)))
    : await sampleFusedTP(comm, H, W, { ...options, vocabOffset: offset, vocabSize: c.V });
  process.stdout.write(JSON.stringify({ tokens: Array.from(r.tokens), logprobs: r.logprobs ? Array.from(r.logprobs) : undefined }) + '\n');
  comm.dispose();
}

main().catch((e) => {
  process.stdout.write(JSON.stringify({ error: e instanceof Error ? e.message : String(e) }) + '\n');
  process.exit(1);
});
