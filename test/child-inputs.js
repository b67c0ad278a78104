// Inputs of the suites' child processes (fallback-child.js, products-child.js): the same fixed
// values in every process, whatever the environment it was started with.
'use strict';

/** xorshift32 in [0, 1), from a fixed seed. */
function uniforms(n, seed) {
  let x = seed >>> 0 || 1;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = x / 4294967296;
  }
  return out;
}

module.exports = { uniforms };
