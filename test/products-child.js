// The CPU backend's outputs in a process of its own, so that FLASHSAMPLE_CPU_ISA (read once, at
// load) picks the product and exp kernels for every call (test/cpu-products.test.ts). Heads from
// fixed seeds whose shapes reach every block remainder and tail of cpu/cpu_logits.cc's products: B
// 1, 3, 5, 99 (blocks of 4, 2 and 1 rows), V 111 and 1000 (of 4 and 2 columns; cpu/cpu_exp.cc's
// groups of 8 and 32: a tail of 7 and 8), D 17, 64 and 100 (a 16-lane tail or none). Prints one
// JSON line: {hash, cases} or {error}. The hash covers the tokens, logprobs and top logprobs of
// fused and reference(gumbel) calls, raw and processed: their f32 bits follow the logits' and the
// masses' bits.
'use strict';
const crypto = require('crypto');
const { open, sampleFused, sampleReference } = require('../dist/lib/index.js');
const { native } = require('../dist/lib/native.js');
const { uniforms } = require('./child-inputs.js');

/** Fixed values in [-0.5, 0.5) · scale. */
function values(n, seed, scale) {
  return uniforms(n, seed).map((u) => (u - 0.5) * scale);
}

const OPTIONS = [
  { logprobs: true, topLogprobs: 4 },
  { logprobs: true, topLogprobs: 4, logprobsMode: 'raw', topP: 0.9, temperature: 0.7 },
  { logprobs: true, topK: 20, minP: 0.05, softcap: 2.5 },
  { logprobs: true, temperature: 0 },
];

async function main() {
  const dev = open('cpu');
  const hash = crypto.createHash('sha256');
  let cases = 0;
  for (const [V, D] of [[111, 17], [1000, 64], [1000, 100]]) {
    for (const dtype of ['bf16', 'f16', 'f32']) {
      const W = dev.tensor(values(V * D, V + D, 6), [V, D], dtype);
      const bias = dev.tensor(values(V, 3 * V + D, 2), [V], dtype);
      for (const B of [1, 3, 5, 99]) {
        const H = dev.tensor(values(B * D, 7 * B + D, 6), [B, D], dtype);
        for (const [i, o] of OPTIONS.entries()) {
          const options = { seed: 11n, offset: B, ...o, ...(i % 2 === 1 ? { bias } : {}) };
          for (const r of [await sampleFused(H, W, options), await sampleReference(H, W, { ...options, method: 'gumbel' })]) {
            for (const a of [r.tokens, r.logprobs, r.topTokens, r.topLogprobs]) {
              if (a) hash.update(Buffer.from(a.buffer, a.byteOffset, a.byteLength));
            }
            cases++;
          }
        }
        H.dispose();
      }
      W.dispose();
      bias.dispose();
    }
  }
  return { hash: hash.digest('hex'), cases, isa: native.cpuIsa() };
}

main().then(
  (r) => console.log(JSON.stringify(r)),
  (e) => console.log(JSON.stringify({ error: String(e && e.stack ? e.stack : e) })),
);
