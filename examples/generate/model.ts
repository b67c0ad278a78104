// The Llama forward pass of llama2.c's run.c, in TypeScript, for a batch of requests at once:
// RMSNorm (eps 1e-5), RoPE on interleaved pairs, grouped-query attention over a per-request KV
// cache, SwiGLU. It stops at the final RMSNorm: the LM head (H · Wᵀ and the sampling) is
// flashsample's.
//
// Batch invariance: every value a request computes comes from its own token, position, KV cache
// and the weights, in the same order of operations whatever the batch holds. The batched matmul
// only shares the weight reads (each weight row is read once for all the batch's rows, which is
// why batching pays on the CPU too); each output element is the same dot product, summed in the
// same order, alone or in a batch of 64. A request's hidden states are therefore bitwise equal
// alone and in any batch (test/generate.test.ts checks it).
//
// Arithmetic: weights and activations are stored as float32 (Float32Array); the sums run in
// float64 (JS numbers) and are rounded when stored.

import type { Config, Weights } from './checkpoint';

/** One request's keys and values: [layers, seq_len, kv_dim] each. */
export interface KVCache {
  key: Float32Array;
  value: Float32Array;
}

/** One row of a forward step: the token at position `pos` of a request with this cache. */
export interface StepRow {
  cache: KVCache;
  token: number;
  pos: number;
}

const RMS_EPS = 1e-5;

export class Model {
  readonly config: Config;
  readonly weights: Weights;
  /** Scratch, grown to the largest batch seen. */
  #rows = 0;
  #x = new Float32Array(0); // [B, dim] residual stream
  #xb = new Float32Array(0); // [B, dim]
  #xb2 = new Float32Array(0); // [B, dim]
  #q = new Float32Array(0); // [B, dim]
  #k = new Float32Array(0); // [B, kv_dim]
  #v = new Float32Array(0); // [B, kv_dim]
  #hb = new Float32Array(0); // [B, hidden]
  #hb2 = new Float32Array(0); // [B, hidden]
  #att: Float64Array; // [seq_len]
  /** RoPE: cos and sin of pos · freq_i for every (pos, pair i of a head), float32 as in run.c. */
  #ropeCos: Float32Array;
  #ropeSin: Float32Array;

  constructor(config: Config, weights: Weights) {
    this.config = config;
    this.weights = weights;
    this.#att = new Float64Array(config.seqLen);
    const half = config.headSize / 2;
    this.#ropeCos = new Float32Array(config.seqLen * half);
    this.#ropeSin = new Float32Array(config.seqLen * half);
    for (let pos = 0; pos < config.seqLen; pos++) {
      for (let p = 0; p < half; p++) {
        // run.c: head_dim = i % head_size (even), freq = 1 / 10000^(head_dim / head_size)
        const freq = Math.fround(1 / Math.fround(Math.pow(10000, Math.fround((2 * p) / config.headSize))));
        const val = Math.fround(pos * freq);
        this.#ropeCos[pos * half + p] = Math.cos(val);
        this.#ropeSin[pos * half + p] = Math.sin(val);
      }
    }
  }

  newCache(): KVCache {
    const n = this.config.nLayers * this.config.seqLen * this.config.kvDim;
    return { key: new Float32Array(n), value: new Float32Array(n) };
  }

  #grow(B: number): void {
    if (B <= this.#rows) return;
    const { dim, kvDim, hiddenDim } = this.config;
    this.#rows = B;
    this.#x = new Float32Array(B * dim);
    this.#xb = new Float32Array(B * dim);
    this.#xb2 = new Float32Array(B * dim);
    this.#q = new Float32Array(B * dim);
    this.#k = new Float32Array(B * kvDim);
    this.#v = new Float32Array(B * kvDim);
    this.#hb = new Float32Array(B * hiddenDim);
    this.#hb2 = new Float32Array(B * hiddenDim);
  }

  /**
   * One forward step for every row: writes the row's keys and values at its position into its
   * cache and returns the final hidden states (after the last RMSNorm), [B, dim] row-major, in
   * `out` (a new array when not given). Rows must have 0 <= pos < seq_len and the positions
   * before pos already in their cache.
   */
  forward(rows: readonly StepRow[], out?: Float32Array): Float32Array {
    const c = this.config;
    const w = this.weights;
    const B = rows.length;
    const { dim, kvDim, hiddenDim, headSize, seqLen, nHeads } = c;
    for (const r of rows) {
      if (!(Number.isInteger(r.pos) && r.pos >= 0 && r.pos < seqLen)) {
        throw new RangeError(`forward: expected a position in [0, ${seqLen}), got ${r.pos}`);
      }
      if (!(Number.isInteger(r.token) && r.token >= 0 && r.token < c.vocabSize)) {
        throw new RangeError(`forward: expected a token in [0, ${c.vocabSize}), got ${r.token}`);
      }
    }
    this.#grow(B);
    const x = this.#x;
    const xb = this.#xb;
    const xb2 = this.#xb2;
    const q = this.#q;
    const k = this.#k;
    const v = this.#v;
    const hb = this.#hb;
    const hb2 = this.#hb2;
    const att = this.#att;
    const kvMul = nHeads / c.nKvHeads;
    const half = headSize / 2;
    const scale = Math.sqrt(headSize);

    for (let b = 0; b < B; b++) x.set(w.tokenEmbedding.subarray(rows[b].token * dim, (rows[b].token + 1) * dim), b * dim);

    for (let l = 0; l < c.nLayers; l++) {
      rmsnorm(xb, x, w.rmsAtt.subarray(l * dim, (l + 1) * dim), B, dim);
      matmul(q, xb, w.wq.subarray(l * dim * dim, (l + 1) * dim * dim), B, dim, dim);
      matmul(k, xb, w.wk.subarray(l * kvDim * dim, (l + 1) * kvDim * dim), B, dim, kvDim);
      matmul(v, xb, w.wv.subarray(l * kvDim * dim, (l + 1) * kvDim * dim), B, dim, kvDim);

      for (let b = 0; b < B; b++) {
        const { pos, cache } = rows[b];
        // RoPE on the pairs (x[i], x[i + 1]) of every head of q, and of k (its kv_dim entries).
        const cosRow = pos * half;
        for (let i = 0; i < dim; i += 2) {
          const p = (i % headSize) >> 1;
          const fcr = this.#ropeCos[cosRow + p];
          const fci = this.#ropeSin[cosRow + p];
          const qo = b * dim + i;
          const q0 = q[qo];
          const q1 = q[qo + 1];
          q[qo] = q0 * fcr - q1 * fci;
          q[qo + 1] = q0 * fci + q1 * fcr;
          if (i < kvDim) {
            const ko = b * kvDim + i;
            const k0 = k[ko];
            const k1 = k[ko + 1];
            k[ko] = k0 * fcr - k1 * fci;
            k[ko + 1] = k0 * fci + k1 * fcr;
          }
        }
        // This position's key and value into the cache.
        const layerOff = l * seqLen * kvDim;
        cache.key.set(k.subarray(b * kvDim, (b + 1) * kvDim), layerOff + pos * kvDim);
        cache.value.set(v.subarray(b * kvDim, (b + 1) * kvDim), layerOff + pos * kvDim);

        // Attention of every head over positions 0..pos; head h reads kv head h / kvMul.
        for (let h = 0; h < nHeads; h++) {
          const qo = b * dim + h * headSize;
          const kvHead = Math.floor(h / kvMul) * headSize;
          let max = -Infinity;
          for (let t = 0; t <= pos; t++) {
            const ko = layerOff + t * kvDim + kvHead;
            let s = 0;
            for (let i = 0; i < headSize; i++) s += q[qo + i] * cache.key[ko + i];
            s /= scale;
            att[t] = s;
            if (s > max) max = s;
          }
          let sum = 0;
          for (let t = 0; t <= pos; t++) {
            att[t] = Math.exp(att[t] - max);
            sum += att[t];
          }
          for (let i = 0; i < headSize; i++) {
            let acc = 0;
            for (let t = 0; t <= pos; t++) acc += att[t] * cache.value[layerOff + t * kvDim + kvHead + i];
            xb[qo + i] = acc / sum;
          }
        }
      }

      matmul(xb2, xb, w.wo.subarray(l * dim * dim, (l + 1) * dim * dim), B, dim, dim);
      for (let i = 0; i < B * dim; i++) x[i] += xb2[i];

      rmsnorm(xb, x, w.rmsFfn.subarray(l * dim, (l + 1) * dim), B, dim);
      matmul(hb, xb, w.w1.subarray(l * hiddenDim * dim, (l + 1) * hiddenDim * dim), B, dim, hiddenDim);
      matmul(hb2, xb, w.w3.subarray(l * hiddenDim * dim, (l + 1) * hiddenDim * dim), B, dim, hiddenDim);
      for (let i = 0; i < B * hiddenDim; i++) {
        const a = hb[i];
        hb[i] = (a / (1 + Math.exp(-a))) * hb2[i]; // SiLU(w1 x) · (w3 x)
      }
      matmul(xb, hb, w.w2.subarray(l * dim * hiddenDim, (l + 1) * dim * hiddenDim), B, hiddenDim, dim);
      for (let i = 0; i < B * dim; i++) x[i] += xb[i];
    }

    const result = out ?? new Float32Array(B * dim);
    rmsnorm(result, x, w.rmsFinal, B, dim);
    return result;
  }
}

/** out[b] = weight ⊙ x[b] / sqrt(mean(x[b]²) + 1e-5), for each of the B rows of length n. */
export function rmsnorm(out: Float32Array, x: Float32Array, weight: Float32Array, B: number, n: number): void {
  for (let b = 0; b < B; b++) {
    const o = b * n;
    let ss = 0;
    for (let j = 0; j < n; j++) ss += x[o + j] * x[o + j];
    const inv = 1 / Math.sqrt(ss / n + RMS_EPS);
    for (let j = 0; j < n; j++) out[o + j] = weight[j] * (inv * x[o + j]);
  }
}

/**
 * out[b, i] = Σ_j w[i, j] · x[b, j] for w [d, n] row-major (run.c's matmul, for B rows). Each
 * weight row is read once for all rows; each element is summed in the same order (four partial
 * sums over j mod 4, then their sum) whatever B is.
 */
export function matmul(out: Float32Array, x: Float32Array, w: Float32Array, B: number, n: number, d: number): void {
  const n4 = n - (n % 4);
  for (let i = 0; i < d; i++) {
    const r = i * n;
    for (let b = 0; b < B; b++) {
      const xo = b * n;
      let a0 = 0;
      let a1 = 0;
      let a2 = 0;
      let a3 = 0;
      let j = 0;
      for (; j < n4; j += 4) {
        a0 += w[r + j] * x[xo + j];
        a1 += w[r + j + 1] * x[xo + j + 1];
        a2 += w[r + j + 2] * x[xo + j + 2];
        a3 += w[r + j + 3] * x[xo + j + 3];
      }
      for (; j < n; j++) a0 += w[r + j] * x[xo + j];
      out[b * d + i] = a0 + a1 + (a2 + a3);
    }
  }
}

/** logits[v] = classifier[v] · hidden, for tests and checks (the example samples with flashsample instead). */
export function logitsOf(hidden: Float32Array, classifier: Float32Array, dim: number): Float64Array {
  const V = classifier.length / dim;
  const out = new Float64Array(V);
  for (let v = 0; v < V; v++) {
    let acc = 0;
    for (let j = 0; j < dim; j++) acc += classifier[v * dim + j] * hidden[j];
    out[v] = acc;
  }
  return out;
}
