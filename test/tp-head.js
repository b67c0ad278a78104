// The head, shards and options of the tensor-parallel tests (test/nccl-multi.test.ts and its rank
// processes, test/tp-rank.js): plain JS so that both can load it.
'use strict';

const { hostMatrix } = require('../dist/bench/inputs.js');

/** H [B, D] and W [V, D] as bf16 bits (the bench's uniform matrices): logits of std ~3. */
function headOf(V, D, B) {
  return { h: hostMatrix(B, D, 'bf16', 1, 1235), w: hostMatrix(V, D, 'bf16', 3 / Math.sqrt(D), 1234) };
}

/** Uneven shard bounds [offset, rows] over V for `ranks` ranks, offsets multiples of 4. */
function shardBounds(V, ranks) {
  const out = [];
  let start = 0;
  for (let i = 0; i < ranks; i++) {
    const left = V - start;
    const share = i === ranks - 1 ? left : Math.max(4, Math.floor((left / (ranks - i)) * (i % 2 ? 0.7 : 1.2) / 4) * 4);
    out.push([start, share]);
    start += share;
  }
  return out;
}

/** The options of a case, with per-row seeds. */
function optionsOf(options, B) {
  const o = { ...options, seed: BigUint64Array.from({ length: B }, (_, b) => 500n + BigInt(b)) };
  return o;
}

module.exports = { headOf, shardBounds, optionsOf };
