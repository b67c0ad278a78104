// Reads a llama2.c checkpoint (the legacy "version 0" format that llama2.c's run.c reads):
//
//   7 × int32   dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
//               (vocab_size < 0: the classifier is stored separately, at the end)
//   float32     token_embedding_table [vocab, dim]
//               rms_att_weight [layers, dim]
//               wq [layers, dim, dim]   wk [layers, kv_dim, dim]   wv [layers, kv_dim, dim]
//               wo [layers, dim, dim]
//               rms_ffn_weight [layers, dim]
//               w1 [layers, hidden, dim]   w2 [layers, dim, hidden]   w3 [layers, hidden, dim]
//               rms_final_weight [dim]
//               freq_cis_real [seq_len, head_size / 2]   freq_cis_imag [seq_len, head_size / 2]
//               (what run.c skips: RoPE is computed at run time)
//               wcls [vocab, dim]   only when vocab_size was negative
//
// Every matrix is row-major [out, in] (run.c's matmul: xout[i] = Σ_j w[i * n + j] · x[j]).
// kv_dim = dim · n_kv_heads / n_heads, head_size = dim / n_heads.

import * as fs from 'fs';

export const HEADER_INTS = 7;
export const HEADER_BYTES = HEADER_INTS * 4;

/** The seven header values of a checkpoint (vocab_size's sign as sharedClassifier). */
export interface Shape {
  dim: number;
  hiddenDim: number;
  nLayers: number;
  nHeads: number;
  nKvHeads: number;
  vocabSize: number;
  seqLen: number;
  /** The classifier is the token embedding table (vocab_size was positive in the file). */
  sharedClassifier: boolean;
}

export interface Config extends Shape {
  headSize: number;
  kvDim: number;
}

export interface Weights {
  tokenEmbedding: Float32Array; // [vocab, dim]
  rmsAtt: Float32Array; // [layers, dim]
  wq: Float32Array; // [layers, dim, dim]
  wk: Float32Array; // [layers, kv_dim, dim]
  wv: Float32Array; // [layers, kv_dim, dim]
  wo: Float32Array; // [layers, dim, dim]
  rmsFfn: Float32Array; // [layers, dim]
  w1: Float32Array; // [layers, hidden, dim]
  w2: Float32Array; // [layers, dim, hidden]
  w3: Float32Array; // [layers, hidden, dim]
  rmsFinal: Float32Array; // [dim]
  /** [vocab, dim]: wcls, or the token embedding table itself when shared. */
  classifier: Float32Array;
}

export interface Checkpoint {
  path: string;
  config: Config;
  weights: Weights;
}

/** A checkpoint or tokenizer file that is not what it must be; the message starts with the file. */
export class FormatError extends Error {
  constructor(file: string, what: string) {
    super(`${file}: ${what}`);
    this.name = 'FormatError';
  }
}

const HEADER_NAMES = ['dim', 'hidden_dim', 'n_layers', 'n_heads', 'n_kv_heads', 'vocab_size', 'seq_len'] as const;

/** Validates the 7 header ints into a Config; `file` names the source in errors. */
export function configFromHeader(file: string, header: ArrayLike<number>): Config {
  const h = Array.from(header);
  for (let i = 0; i < HEADER_INTS; i++) {
    const v = i === 5 ? Math.abs(h[i]) : h[i];
    if (!(v > 0)) {
      const expected = i === 5 ? 'a vocab_size other than 0 (negative: unshared classifier)' : `${HEADER_NAMES[i]} > 0`;
      throw new FormatError(file, `header: expected ${expected}, got ${HEADER_NAMES[i]} = ${h[i]} (header ${describeHeader(h)})`);
    }
  }
  const [dim, hiddenDim, nLayers, nHeads, nKvHeads, vocab, seqLen] = h;
  if (dim % nHeads !== 0) {
    throw new FormatError(file, `header: expected dim (${dim}) to be a multiple of n_heads (${nHeads}) (header ${describeHeader(h)})`);
  }
  if (nHeads % nKvHeads !== 0) {
    throw new FormatError(file, `header: expected n_heads (${nHeads}) to be a multiple of n_kv_heads (${nKvHeads}) (header ${describeHeader(h)})`);
  }
  const headSize = dim / nHeads;
  if (headSize % 2 !== 0) {
    throw new FormatError(file, `header: expected an even head size dim / n_heads for RoPE's pairs, got ${dim} / ${nHeads} = ${headSize} (header ${describeHeader(h)})`);
  }
  return {
    dim,
    hiddenDim,
    nLayers,
    nHeads,
    nKvHeads,
    vocabSize: Math.abs(vocab),
    seqLen,
    sharedClassifier: vocab > 0,
    headSize,
    kvDim: (dim * nKvHeads) / nHeads,
  };
}

function describeHeader(h: number[]): string {
  return HEADER_NAMES.map((n, i) => `${n}=${h[i]}`).join(' ');
}

/** The float32 arrays of the file in order, with their element counts (the layout above). */
export function layout(c: Config): [keyof Weights | 'freqCisReal' | 'freqCisImag', number][] {
  const { dim, hiddenDim: hid, nLayers: L, kvDim, vocabSize: V, seqLen, headSize } = c;
  const parts: [keyof Weights | 'freqCisReal' | 'freqCisImag', number][] = [
    ['tokenEmbedding', V * dim],
    ['rmsAtt', L * dim],
    ['wq', L * dim * dim],
    ['wk', L * kvDim * dim],
    ['wv', L * kvDim * dim],
    ['wo', L * dim * dim],
    ['rmsFfn', L * dim],
    ['w1', L * hid * dim],
    ['w2', L * dim * hid],
    ['w3', L * hid * dim],
    ['rmsFinal', dim],
    ['freqCisReal', (seqLen * headSize) / 2],
    ['freqCisImag', (seqLen * headSize) / 2],
  ];
  if (!c.sharedClassifier) parts.push(['classifier', V * dim]);
  return parts;
}

/** Bytes a checkpoint of this config has: the header and every array of the layout. */
export function expectedBytes(c: Config): number {
  return HEADER_BYTES + 4 * layout(c).reduce((a, [, n]) => a + n, 0);
}

/** Parses a whole checkpoint held in memory (`file` names it in errors). */
export function parseCheckpoint(file: string, bytes: Uint8Array): Checkpoint {
  if (bytes.byteLength < HEADER_BYTES) {
    throw new FormatError(file, `truncated: expected at least ${HEADER_BYTES} bytes (the header of 7 int32), got ${bytes.byteLength}`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const header = Array.from({ length: HEADER_INTS }, (_, i) => view.getInt32(4 * i, true));
  const config = configFromHeader(file, header);
  const want = expectedBytes(config);
  if (bytes.byteLength !== want) {
    const what = bytes.byteLength < want ? 'truncated' : 'too long';
    throw new FormatError(
      file,
      `${what}: expected ${want} bytes for a llama2.c checkpoint with ${describeHeader(header)} ` +
        `(${config.sharedClassifier ? 'shared' : 'unshared'} classifier), got ${bytes.byteLength}`,
    );
  }
  // The floats start at byte 28 of the file: 4-byte aligned whenever the buffer is.
  const floats =
    (bytes.byteOffset + HEADER_BYTES) % 4 === 0
      ? new Float32Array(bytes.buffer, bytes.byteOffset + HEADER_BYTES, (want - HEADER_BYTES) / 4)
      : new Float32Array(bytes.slice(HEADER_BYTES).buffer);
  const weights: Partial<Weights> = {};
  let off = 0;
  for (const [name, n] of layout(config)) {
    if (name !== 'freqCisReal' && name !== 'freqCisImag') weights[name] = floats.subarray(off, off + n);
    off += n;
  }
  if (config.sharedClassifier) weights.classifier = weights.tokenEmbedding;
  return { path: file, config, weights: weights as Weights };
}

/** Reads and parses a checkpoint file. */
export function readCheckpoint(file: string): Checkpoint {
  let bytes: Buffer;
  try {
    bytes = fs.readFileSync(file);
  } catch (e) {
    throw new FormatError(file, `cannot read the checkpoint: ${(e as Error).message}`);
  }
  return parseCheckpoint(file, bytes);
}
