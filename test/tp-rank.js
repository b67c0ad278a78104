// One rank of a tensor-parallel run in its own process (test/nccl-multi.test.ts, issue 19): the
// one-process-per-GPU set-up, with the NCCL unique id handed over by the parent in TP_ID (hex).
// TP_RANKS, TP_RANK: the communicator; TP_CASE: JSON {V, D, B, options, exitAfterInit?,
// timeoutMs?}. The head is made from fixed seeds, so every rank and the parent agree on it.
// Prints one JSON line: {tokens, logprobs?} or {error}.
'use strict';
const { nccl, open, sampleFusedTP } = require('../dist/lib/index.js');
const { headOf, shardBounds, optionsOf } = require('./tp-head.js');

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
  const r = await sampleFusedTP(comm, H, W, { ...optionsOf(c.options, c.B), vocabOffset: offset, vocabSize: c.V });
  process.stdout.write(JSON.stringify({ tokens: Array.from(r.tokens), logprobs: r.logprobs ? Array.from(r.logprobs) : undefined }) + '\n');
  comm.dispose();
}

main().catch((e) => {
  process.stdout.write(JSON.stringify({ error: e instanceof Error ? e.message : String(e) }) + '\n');
  process.exit(1);
});
