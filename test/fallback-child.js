// The fused sampler against reference(gumbel) in its own process, so that the dispatch's escape
// hatches (FLASHSAMPLE_NO_WGMMA, FLASHSAMPLE_NO_TENSOR_MAPS), read once per process, are in force
// for every call (test/cuda-fallbacks.test.ts). Each case is a head of V × D bf16 from fixed seeds,
// B rows with per-row seeds and temperatures (every seventh row greedy), numSamples S and optional
// filters; prints one JSON line: {cases: [{name, tokens, differing, worstLogprob}], escapeHatches}
// (the hatches the dispatch reads, cuda/escape_hatches.h) or {error}.
'use strict';
const { open, sampleFused, sampleReference } = require('../dist/lib/index.js');
const { native } = require('../dist/lib/native.js');
const { uniforms } = require('./child-inputs.js');

const CASES = [
  ...[1, 3, 20, 40, 99, 130].map((B) => ({ name: `one sample, B ${B}`, B, S: 1 })),
  { name: 'numSamples 3, B 20', B: 20, S: 3 },
  { name: 'numSamples 3, B 130', B: 130, S: 3 },
  { name: 'numSamples 6, B 40', B: 40, S: 6 },
  { name: 'top-k 20 + top-p 0.9, logprobs, B 64', B: 64, S: 1, filters: { topK: 20, topP: 0.9, logprobs: true } },
  { name: 'min-p 0.05, numSamples 2, B 3', B: 3, S: 2, filters: { minP: 0.05, logprobs: true } },
];

async function main() {
  const dev = open('cuda');
  const V = 1000;
  const D = 64;
  const w = uniforms(V * D, 7).map((u) => (u - 0.5) * 1.5);
  const W = dev.tensor(w, [V, D], 'bf16');
  const results = [];
  for (const c of CASES) {
    const h = uniforms(c.B * D, 100 + c.B).map((u) => (u - 0.5) * 2);
    const H = dev.tensor(h, [c.B, D], 'bf16');
    const o = {
      seed: BigUint64Array.from({ length: c.B }, (_, b) => BigInt(500 + b)),
      offset: 3n,
      temperature: Float32Array.from({ length: c.B }, (_, b) => (b % 7 === 6 ? 0 : 0.7 + 0.1 * (b % 4))),
      numSamples: c.S,
      ...(c.filters ?? {}),
    };
    const f = await sampleFused(H, W, o);
    const g = await sampleReference(H, W, { ...o, method: 'gumbel' });
    let differing = 0;
    let worstLogprob = 0;
    for (let i = 0; i < f.tokens.length; i++) {
      if (f.tokens[i] !== g.tokens[i]) differing++;
      else if (f.logprobs) worstLogprob = Math.max(worstLogprob, Math.abs(f.logprobs[i] - g.logprobs[i]));
    }
    results.push({ name: c.name, tokens: f.tokens.length, differing, worstLogprob });
    H.dispose();
  }
  W.dispose();
  process.stdout.write(JSON.stringify({ cases: results, escapeHatches: native.gpuStatus().escapeHatches }) + '\n');
}

main().catch((e) => {
  process.stdout.write(JSON.stringify({ error: e instanceof Error ? e.message : String(e) }) + '\n');
  process.exit(1);
});
