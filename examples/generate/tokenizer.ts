// llama2.c's tokenizer.bin and its BPE, following run.c's conventions:
//
//   file:    int32 max_token_length, then per token: float32 score, int32 len, len bytes (the piece)
//   ids:     0 <unk>, 1 BOS, 2 EOS; byte fallback: byte b is the token "<0xBB>" with id b + 3
//   encode:  BOS first; a " " token (the dummy prefix) when the text is not empty; then each
//            UTF-8 character (at most 4 bytes) as its piece, or as its bytes' fallback tokens when
//            the vocabulary lacks it; then, repeatedly, the adjacent pair whose concatenation is a
//            piece of the highest score is merged (the leftmost of equal scores), until none is
//   decode:  a piece right after BOS loses its leading space; "<0xBB>" becomes the raw byte
//
// Pieces are bytes (a multi-byte character may be split over tokens): they are kept as
// Uint8Array, and looked up by their latin1 string (one char per byte, so lookups are exact).

import * as fs from 'fs';
import { FormatError } from './checkpoint';

export const BOS = 1;
export const EOS = 2;
/** The first byte-fallback token: byte b is token b + BYTE_OFFSET. */
export const BYTE_OFFSET = 3;

export class Tokenizer {
  readonly vocabSize: number;
  readonly maxTokenLength: number;
  readonly pieces: Uint8Array[];
  readonly scores: Float32Array;
  readonly #ids = new Map<string, number>();

  constructor(pieces: Uint8Array[], scores: Float32Array, maxTokenLength: number) {
    this.pieces = pieces;
    this.scores = scores;
    this.vocabSize = pieces.length;
    this.maxTokenLength = maxTokenLength;
    // The first of equal pieces wins (run.c's bsearch over a sorted copy picks one of them).
    for (let i = 0; i < pieces.length; i++) {
      const key = latin1(pieces[i]);
      if (!this.#ids.has(key)) this.#ids.set(key, i);
    }
  }

  /** The id of a piece given as bytes (latin1 string), or -1. */
  lookup(key: string): number {
    return this.#ids.get(key) ?? -1;
  }

  /** Tokens of `text` (UTF-8), run.c's encode(text, bos = 1, eos = 0) unless told otherwise. */
  encode(text: string, opts: { bos?: boolean; eos?: boolean } = {}): number[] {
    const bytes = Buffer.from(text, 'utf8');
    const tokens: number[] = [];
    if (opts.bos ?? true) tokens.push(BOS);
    if (bytes.length > 0) {
      // The dummy prefix. (Every llama2.c tokenizer has a " " piece; without one, run.c would emit
      // id -1: here the space takes its byte-fallback token instead.)
      const space = this.lookup(' ');
      tokens.push(space >= 0 ? space : this.byteToken(0x20));
    }
    // One token per UTF-8 character, or its bytes' fallback tokens.
    let start = 0;
    for (let i = 0; i < bytes.length; i++) {
      const len = i + 1 - start;
      const nextIsContinuation = i + 1 < bytes.length && (bytes[i + 1] & 0xc0) === 0x80;
      if (nextIsContinuation && len < 4) continue;
      const id = this.lookup(latin1(bytes.subarray(start, i + 1)));
      if (id >= 0) tokens.push(id);
      else for (let j = start; j <= i; j++) tokens.push(this.byteToken(bytes[j]));
      start = i + 1;
      // run.c resets its buffer at every byte that is not a continuation byte; a continuation
      // byte after 4 bytes of a character starts a group of its own, as here.
    }
    // Merge the best-scoring adjacent pair until no pair is a piece.
    for (;;) {
      let bestScore = -1e10;
      let bestId = -1;
      let bestIdx = -1;
      for (let i = 0; i + 1 < tokens.length; i++) {
        const id = this.lookup(latin1(this.pieces[tokens[i]]) + latin1(this.pieces[tokens[i + 1]]));
        if (id !== -1 && this.scores[id] > bestScore) {
          bestScore = this.scores[id];
          bestId = id;
          bestIdx = i;
        }
      }
      if (bestIdx === -1) break;
      tokens.splice(bestIdx, 2, bestId);
    }
    if (opts.eos ?? false) tokens.push(EOS);
    return tokens;
  }

  /** The bytes `token` prints as after `prev` (run.c's decode). */
  decode(prev: number, token: number): Uint8Array {
    if (!(Number.isInteger(token) && token >= 0 && token < this.vocabSize)) {
      throw new RangeError(`decode: expected a token id in [0, ${this.vocabSize}), got ${token}`);
    }
    let piece = this.pieces[token];
    if (prev === BOS && piece[0] === 0x20) piece = piece.subarray(1);
    // sscanf(piece, "<0x%02hhX>"): "<0x" and one or two hex digits.
    const m = /^<0x([0-9A-Fa-f]{1,2})/.exec(latin1(piece));
    if (m) return Uint8Array.of(parseInt(m[1], 16));
    return piece;
  }

  /** The text of a token sequence (the bytes of every decode(prev, token), as UTF-8). */
  decodeAll(tokens: readonly number[], prev = -1): string {
    const parts: Uint8Array[] = [];
    for (const t of tokens) {
      parts.push(this.decode(prev, t));
      prev = t;
    }
    return Buffer.concat(parts).toString('utf8');
  }

  private byteToken(b: number): number {
    const id = b + BYTE_OFFSET;
    if (id >= this.vocabSize) {
      throw new RangeError(`encode: byte 0x${b.toString(16)} has no piece and no byte-fallback token (vocabulary of ${this.vocabSize})`);
    }
    return id;
  }
}

export function latin1(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('latin1');
}

/** Parses tokenizer.bin held in memory. `expectVocab`: the checkpoint's vocab_size, and where it came from. */
export function parseTokenizer(file: string, bytes: Uint8Array, expectVocab?: { size: number; from: string }): Tokenizer {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.byteLength < 4) {
    throw new FormatError(file, `truncated: expected at least 4 bytes (int32 max_token_length), got ${bytes.byteLength}`);
  }
  const maxTokenLength = view.getInt32(0, true);
  if (maxTokenLength <= 0) throw new FormatError(file, `expected max_token_length > 0, got ${maxTokenLength}`);
  const pieces: Uint8Array[] = [];
  const scores: number[] = [];
  let off = 4;
  while (off < bytes.byteLength) {
    const i = pieces.length;
    if (off + 8 > bytes.byteLength) {
      throw new FormatError(file, `truncated at token ${i}: expected 8 bytes (float32 score, int32 length), got ${bytes.byteLength - off}`);
    }
    const score = view.getFloat32(off, true);
    const len = view.getInt32(off + 4, true);
    off += 8;
    if (len < 0) throw new FormatError(file, `token ${i}: expected a piece length >= 0, got ${len}`);
    if (off + len > bytes.byteLength) {
      throw new FormatError(file, `truncated at token ${i}: expected ${len} bytes of its piece, got ${bytes.byteLength - off}`);
    }
    pieces.push(bytes.slice(off, off + len));
    scores.push(score);
    off += len;
  }
  if (expectVocab && pieces.length !== expectVocab.size) {
    throw new FormatError(
      file,
      `expected ${expectVocab.size} tokens (the vocab_size of ${expectVocab.from}), got ${pieces.length}: ` +
        'the tokenizer does not belong to that checkpoint',
    );
  }
  if (pieces.length <= EOS) throw new FormatError(file, `expected at least 3 tokens (<unk>, BOS, EOS), got ${pieces.length}`);
  return new Tokenizer(pieces, Float32Array.from(scores), maxTokenLength);
}

export function readTokenizer(file: string, expectVocab?: { size: number; from: string }): Tokenizer {
  let bytes: Buffer;
  try {
    bytes = fs.readFileSync(file);
  } catch (e) {
    throw new FormatError(file, `cannot read the tokenizer: ${(e as Error).message}`);
  }
  return parseTokenizer(file, bytes, expectVocab);
}
