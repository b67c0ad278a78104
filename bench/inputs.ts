// Random inputs for the benchmark: host matrices in the run's dtype and device tensors rotated
// over enough distinct copies of W that the L2 cache cannot hold them.

import { constants as bufferConstants } from 'buffer';
import { encodeBF16, encodeF16 } from '../lib/dtype';
import type { Device, Tensor } from '../lib/index';
import type { BenchDType } from './args';

/** The L2 size the rotation must defeat (the figure issue 4 uses for the H200). */
export const L2_BYTES = 60e6;

export const DTYPE_BYTES: Record<BenchDType, number> = { bf16: 2, f16: 2, f32: 4 };

/**
 * Distinct copies of W whose total exceeds 2 × L2, at least two: a large W (llama3-8b bf16 is
 * 1.05 GB) needs two so that consecutive calls never share one; a small W needs more.
 */
export function rotationCopies(wBytes: number, l2Bytes: number = L2_BYTES): number {
  return Math.max(2, Math.floor((2 * l2Bytes) / Math.max(1, wBytes)) + 1);
}

/** Distinct H a batch size's timed calls rotate over (each with a copy of W in turn, so that
 *  consecutive calls never share one): their logits, and what depends on them and on the noise
 *  (the rows that keep their unfiltered winner, the extra pass's rows), vary from call to call. */
export const H_COPIES = 8;

/** The copy of W each timed input takes: `hCopies` distinct H at least, rounded up to a multiple
 *  of `wCopies` so that no two calls in a row share a W, the wrap from the last to the first too. */
export function rotationPairs(wCopies: number, hCopies: number = H_COPIES): number[] {
  const pairs = Math.ceil(Math.max(hCopies, wCopies) / wCopies) * wCopies;
  return Array.from({ length: pairs }, (_, c) => c % wCopies);
}

/** mulberry32: a small seeded generator, so runs are reproducible. Returns floats in [0, 1).
 *  The one generator of the bench, the stress script and the test helpers. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  // A local binding, not `Math.imul` per call: code run in a vm context (jest's test environment)
  // pays a slow global lookup for `Math` every time, 330 ns a call against 8 ns here.
  const imul = Math.imul;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = imul(t ^ (t >>> 15), t | 1);
    t ^= t + imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Generating ~10^9 random values one by one would take seconds: generate this many, then tile. */
const RANDOM_BLOCK = 1_048_573; // prime, so the tiling period does not line up with rows

/**
 * A rows × cols matrix of uniform values with standard deviation `std`, in the dtype's host
 * representation (Float32Array for f32, raw 16-bit patterns for bf16/f16).
 */
export function hostMatrix(rows: number, cols: number, dtype: BenchDType, std: number, seed: number): Float32Array | Uint16Array {
  const n = rows * cols;
  const bytes = n * DTYPE_BYTES[dtype];
  if (bytes > bufferConstants.MAX_LENGTH) {
    throw new RangeError(
      `a ${rows} × ${cols} ${dtype} matrix is ${(bytes / 1e9).toFixed(2)} GB, more than one host array can hold ` +
        `(${(bufferConstants.MAX_LENGTH / 2 ** 30).toFixed(0)} GiB); use a 16-bit dtype or a smaller shape`,
    );
  }
  const rand = mulberry32(seed);
  const half = Math.sqrt(3) * std; // uniform on [-half, half] has this standard deviation
  const block = new Float32Array(Math.min(n, RANDOM_BLOCK));
  for (let i = 0; i < block.length; i++) block[i] = (2 * rand() - 1) * half;
  const encoded: Float32Array | Uint16Array = dtype === 'f32' ? block : dtype === 'bf16' ? encodeBF16(block) : encodeF16(block);
  if (encoded.length === n) return encoded;
  const out = dtype === 'f32' ? new Float32Array(n) : new Uint16Array(n);
  for (let off = 0; off < n; off += encoded.length) {
    const len = Math.min(encoded.length, n - off);
    if (out instanceof Float32Array) out.set((encoded as Float32Array).subarray(0, len), off);
    else out.set((encoded as Uint16Array).subarray(0, len), off);
  }
  return out;
}

/** Allowed-token bitmask [B * ceil(V/32)] with about half of the tokens allowed, none empty. */
export function halfMask(batch: number, vocab: number, seed: number): Uint32Array {
  const words = Math.ceil(vocab / 32);
  const rand = mulberry32(seed);
  const mask = new Uint32Array(batch * words);
  for (let i = 0; i < mask.length; i++) mask[i] = (rand() * 4294967296) >>> 0;
  for (let b = 0; b < batch; b++) mask[b * words] |= 1; // token 0 always allowed: no row is empty
  const tail = vocab % 32;
  if (tail !== 0) for (let b = 0; b < batch; b++) mask[b * words + words - 1] &= (1 << tail) - 1;
  return mask;
}

/**
 * Per-row token lists of `n` distinct tokens a row (the same tokens for every row when `shared`):
 * the first n / 8 get a logit bias, one is banned, the rest are penalty tokens with output counts
 * 0-3 and every third in the prompt (repetition 1.1, frequency 0.2, presence 0.1).
 */
export function listedLists(batch: number, vocab: number, n: number, shared: boolean, seed: number) {
  const rand = mulberry32(seed);
  const nb = Math.max(1, Math.floor(n / 8));
  const np = Math.max(0, n - nb - 1);
  const rowTokens: number[][] = [];
  for (let b = 0; b < batch; b++) {
    if (shared && b > 0) {
      rowTokens.push(rowTokens[0]);
      continue;
    }
    const picked = new Set<number>();
    while (picked.size < Math.min(n, vocab)) picked.add(Math.floor(rand() * vocab));
    rowTokens.push([...picked]);
  }
  const csr = (take: (t: number[]) => number[]) => {
    const rowOffsets = new Int32Array(batch + 1);
    const ids: number[] = [];
    for (let b = 0; b < batch; b++) {
      ids.push(...take(rowTokens[b]));
      rowOffsets[b + 1] = ids.length;
    }
    return { rowOffsets, tokenIds: Int32Array.from(ids) };
  };
  const bias = csr((t) => t.slice(0, nb));
  const pen = csr((t) => t.slice(nb + 1, nb + 1 + np));
  return {
    logitBias: { ...bias, values: Float32Array.from(bias.tokenIds, (_, i) => (i % 2 ? 1.5 : -2)) },
    bannedTokens: csr((t) => t.slice(nb, nb + 1)),
    penaltyTokens: {
      ...pen,
      outputCounts: Int32Array.from(pen.tokenIds, (_, i) => i % 4),
      inPrompt: Uint8Array.from(pen.tokenIds, (_, i) => (i % 3 === 0 ? 1 : 0)),
    },
    repetitionPenalty: 1.1,
    frequencyPenalty: 0.2,
    presencePenalty: 0.1,
  };
}

/** Disposes every tensor given, ignoring ones already disposed. */
export function disposeAll(tensors: Iterable<Tensor>): void {
  for (const t of tensors) t.dispose();
}

/** Device copies of one host matrix. On failure, frees what it made and rethrows. */
export function deviceCopies(dev: Device, host: Float32Array | Uint16Array, shape: number[], dtype: BenchDType, copies: number): Tensor[] {
  const out: Tensor[] = [];
  try {
    for (let c = 0; c < copies; c++) out.push(dev.tensor(host, shape, dtype));
  } catch (e) {
    disposeAll(out);
    throw e;
  }
  return out;
}
