// The head, shards and options of the tensor-parallel tests (test/nccl-multi.test.ts and its rank
// processes, test/tp-rank.js): plain JS so that both can load it.
'use strict';

/** A seeded uniform generator in [0, 1) (mulberry32). */
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
/** bf16 bits of x (round to nearest even). */
function bf16(x) {
  f32[0] = x;
  const u = u32[0];
  return (u + 0x7fff + ((u >>> 16) & 1)) >>> 16;
}

/** H [B, D] and W [V, D] as bf16 bits: logits of std ~3 with a few hot tokens per row. */
function headOf(V, D, B) {
  const r = rng(1234);
  const w = new Uint16Array(V * D);
  for (let i = 0; i < w.length; i++) w[i] = bf16((r() - 0.5) * 2 * Math.sqrt(3 / D) * 3);
  const h = new Uint16Array(B * D);
  for (let i = 0; i < h.length; i++) h[i] = bf16((r() - 0.5) * 2 * Math.sqrt(3));
  return { h, w };
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

module.exports = { rng, headOf, shardBounds, optionsOf };
