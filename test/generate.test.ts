// The decode-loop example (examples/generate/): the llama2.c checkpoint and tokenizer readers, the
// TypeScript forward pass against a float64 reference written here, the loop (greedy continuation,
// batch invariance, continuous batching, end tokens), the CPU and GPU heads under teacher forcing,
// the CLI, and the errors of bad files.
//
// The test writes its own tiny checkpoint (random weights: dim 64, 2 layers, 4 heads, 2 kv heads,
// hidden 128, vocab 512, seq_len 64, unshared classifier) with a writer of its own, and a matching
// tokenizer: <unk>, BOS, EOS, the 256 byte tokens <0x00>..<0xFF> at ids 3..258, single characters
// and a few merged pieces with chosen scores.

import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { open, sampleFused, type Device } from '../lib/index';
import { parseArgs, UsageError } from '../examples/generate/args';
import { FormatError, parseCheckpoint, readCheckpoint } from '../examples/generate/checkpoint';
import { generate, Head, type RequestSpec } from '../examples/generate/engine';
import { LinePrinter, main } from '../examples/generate/main';
import { logitsOf, Model } from '../examples/generate/model';
import { readTokenizer, type Tokenizer } from '../examples/generate/tokenizer';
import { describeDevices, noiseRef, rng, roundTo } from './helpers';

// ------------------------------------------------------------------------------------------------
// Fixture: the checkpoint and tokenizer files, written independently of the example's code
// ------------------------------------------------------------------------------------------------

interface Fixture {
  dim: number;
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  vocab: number;
  seqLen: number;
  shared: boolean;
  emb: Float32Array;
  rmsAtt: Float32Array;
  wq: Float32Array;
  wk: Float32Array;
  wv: Float32Array;
  wo: Float32Array;
  rmsFfn: Float32Array;
  w1: Float32Array;
  w2: Float32Array;
  w3: Float32Array;
  rmsFinal: Float32Array;
  wcls: Float32Array; // = emb when shared
}

function makeFixture(seed: number, shared: boolean): Fixture {
  const dim = 64, hidden = 128, layers = 2, heads = 4, kvHeads = 2, vocab = 512, seqLen = 64;
  const kvDim = (dim * kvHeads) / heads;
  const r = rng(seed);
  const uni = (n: number, std: number) => {
    const a = new Float32Array(n);
    const half = Math.sqrt(3) * std;
    for (let i = 0; i < n; i++) a[i] = (2 * r() - 1) * half;
    return a;
  };
  const norm = (n: number) => Float32Array.from({ length: n }, () => 0.8 + 0.4 * r());
  const emb = uni(vocab * dim, 1);
  const f: Fixture = {
    dim, hidden, layers, heads, kvHeads, vocab, seqLen, shared,
    emb,
    rmsAtt: norm(layers * dim),
    wq: uni(layers * dim * dim, 1 / Math.sqrt(dim)),
    wk: uni(layers * kvDim * dim, 1 / Math.sqrt(dim)),
    wv: uni(layers * kvDim * dim, 1 / Math.sqrt(dim)),
    wo: uni(layers * dim * dim, 1 / Math.sqrt(dim)),
    rmsFfn: norm(layers * dim),
    w1: uni(layers * hidden * dim, 1 / Math.sqrt(dim)),
    w2: uni(layers * dim * hidden, 1 / Math.sqrt(hidden)),
    w3: uni(layers * hidden * dim, 1 / Math.sqrt(dim)),
    rmsFinal: norm(dim),
    wcls: shared ? emb : uni(vocab * dim, 2.5 / Math.sqrt(dim)),
  };
  if (!shared) {
    // The end tokens' rows at zero: their logit is 0 among logits of std ~2.5, so the
    // continuations of the loop tests are long. (The end tokens are tested with a scripted head.)
    f.wcls.fill(0, 1 * dim, 3 * dim);
  }
  return f;
}

function checkpointBytes(f: Fixture): Buffer {
  const header = new Int32Array([f.dim, f.hidden, f.layers, f.heads, f.kvHeads, f.shared ? f.vocab : -f.vocab, f.seqLen]);
  const headSize = f.dim / f.heads;
  const freq = new Float32Array((f.seqLen * headSize) / 2).fill(12345); // skipped by the reader
  const arrays = [f.emb, f.rmsAtt, f.wq, f.wk, f.wv, f.wo, f.rmsFfn, f.w1, f.w2, f.w3, f.rmsFinal, freq, freq];
  if (!f.shared) arrays.push(f.wcls);
  return Buffer.concat([header, ...arrays].map((a) => Buffer.from(a.buffer, a.byteOffset, a.byteLength)));
}

/** The tokenizer's pieces: specials, bytes, " ", letters, punctuation, "é", merges, fillers. */
function tokenizerPieces(): { pieces: string[]; scores: number[] } {
  const pieces = ['<unk>', '\n<s>\n', '\n</s>\n'];
  const scores = [0, 0, 0];
  for (let b = 0; b < 256; b++) {
    pieces.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    scores.push(0);
  }
  const singles = [' ', ...'abcdefghijklmnopqrstuvwxyz', ...'ABCDEFGHIJKLMNOPQRSTUVWXYZ', ...'.,!?\'', 'é'];
  for (const s of singles) {
    pieces.push(s);
    scores.push(-100);
  }
  // Merges and their scores (the highest merges first): "en" outranks " t", so "then" encodes as
  // " th" + "en", where a leftmost-first merge would give " the" + "n".
  const merges: [string, number][] = [
    [' t', -1], ['th', -2], ['he', -3], [' th', -4], [' the', -5], ['en', -0.5],
    [' c', -6], ['at', -7], [' cat', -8], [' s', -9], [' sat', -10], ['ll', -11], ['o,', -12],
  ];
  for (const [p, s] of merges) {
    pieces.push(p);
    scores.push(s);
  }
  for (let i = 0; pieces.length < 512; i++) {
    pieces.push(`#${i}`);
    scores.push(-1000);
  }
  return { pieces, scores };
}

function tokenizerBytes(pieces: string[], scores: number[]): Buffer {
  const parts: Buffer[] = [];
  const bufs = pieces.map((p) => Buffer.from(p, 'utf8'));
  const maxLen = Buffer.alloc(4);
  maxLen.writeInt32LE(Math.max(...bufs.map((b) => b.length)));
  parts.push(maxLen);
  bufs.forEach((b, i) => {
    const h = Buffer.alloc(8);
    h.writeFloatLE(scores[i], 0);
    h.writeInt32LE(b.length, 4);
    parts.push(h, b);
  });
  return Buffer.concat(parts);
}

// ------------------------------------------------------------------------------------------------
// The float64 reference: the whole sequence at once, plain loops
// ------------------------------------------------------------------------------------------------

function refRmsnorm(x: number[], w: Float32Array, off: number): number[] {
  let ss = 0;
  for (const v of x) ss += v * v;
  const s = 1 / Math.sqrt(ss / x.length + 1e-5);
  return x.map((v, j) => w[off + j] * v * s);
}

/** y = M x for M [rows, cols] starting at `off`. */
function refMatvec(m: Float32Array, off: number, rows: number, cols: number, x: number[]): number[] {
  const y: number[] = [];
  for (let i = 0; i < rows; i++) {
    let acc = 0;
    for (let j = 0; j < cols; j++) acc += m[off + i * cols + j] * x[j];
    y.push(acc);
  }
  return y;
}

/** Rotates each head's pairs (2j, 2j + 1) of `v` by position t · 10000^(-2j / headSize). */
function refRope(v: number[], t: number, headSize: number): number[] {
  const out = v.slice();
  for (let h = 0; h < v.length / headSize; h++) {
    for (let j = 0; j < headSize / 2; j++) {
      const angle = t * Math.pow(10000, (-2 * j) / headSize);
      const a = v[h * headSize + 2 * j];
      const b = v[h * headSize + 2 * j + 1];
      out[h * headSize + 2 * j] = a * Math.cos(angle) - b * Math.sin(angle);
      out[h * headSize + 2 * j + 1] = a * Math.sin(angle) + b * Math.cos(angle);
    }
  }
  return out;
}

/** Final hidden states (after the last RMSNorm) of every position of `tokens`. */
function refHidden(f: Fixture, tokens: number[]): number[][] {
  const { dim, hidden, heads, kvHeads } = f;
  const hs = dim / heads;
  const kvDim = hs * kvHeads;
  const group = heads / kvHeads;
  const n = tokens.length;
  const x = tokens.map((tok) => Array.from(f.emb.subarray(tok * dim, (tok + 1) * dim)));
  for (let l = 0; l < f.layers; l++) {
    const xn = x.map((row) => refRmsnorm(row, f.rmsAtt, l * dim));
    const q = xn.map((row, t) => refRope(refMatvec(f.wq, l * dim * dim, dim, dim, row), t, hs));
    const k = xn.map((row, t) => refRope(refMatvec(f.wk, l * kvDim * dim, kvDim, dim, row), t, hs));
    const v = xn.map((row) => refMatvec(f.wv, l * kvDim * dim, kvDim, dim, row));
    for (let t = 0; t < n; t++) {
      const att: number[] = new Array(dim).fill(0);
      for (let h = 0; h < heads; h++) {
        const g = Math.floor(h / group);
        const scores: number[] = [];
        for (let s = 0; s <= t; s++) {
          let dot = 0;
          for (let i = 0; i < hs; i++) dot += q[t][h * hs + i] * k[s][g * hs + i];
          scores.push(dot / Math.sqrt(hs));
        }
        const m = Math.max(...scores);
        const e = scores.map((s) => Math.exp(s - m));
        const z = e.reduce((a, b) => a + b, 0);
        for (let s = 0; s <= t; s++) for (let i = 0; i < hs; i++) att[h * hs + i] += (e[s] / z) * v[s][g * hs + i];
      }
      const o = refMatvec(f.wo, l * dim * dim, dim, dim, att);
      for (let i = 0; i < dim; i++) x[t][i] += o[i];
      const xf = refRmsnorm(x[t], f.rmsFfn, l * dim);
      const a = refMatvec(f.w1, l * hidden * dim, hidden, dim, xf);
      const b = refMatvec(f.w3, l * hidden * dim, hidden, dim, xf);
      const gated = a.map((ai, i) => (ai / (1 + Math.exp(-ai))) * b[i]);
      const d = refMatvec(f.w2, l * dim * hidden, dim, hidden, gated);
      for (let i = 0; i < dim; i++) x[t][i] += d[i];
    }
  }
  return x.map((row) => refRmsnorm(row, f.rmsFinal, 0));
}

function refLogits(f: Fixture, h: number[]): number[] {
  return refMatvec(f.wcls, 0, f.vocab, f.dim, h);
}

function argmax(a: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[best]) best = i;
  return best;
}

function topTwoGap(a: ArrayLike<number>): number {
  const s = Array.from(a).sort((x, y) => y - x);
  return s[0] - s[1];
}

// ------------------------------------------------------------------------------------------------
// Setup
// ------------------------------------------------------------------------------------------------

let dir: string;
let fix: Fixture;
let ckptPath: string;
let tokPath: string;
let model: Model;
let tok: Tokenizer;
const cpu = open('cpu');
let cpuHead: Head;
const ID = (t: Tokenizer, piece: string) => t.lookup(Buffer.from(piece, 'utf8').toString('latin1'));

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fs-generate-'));
  fix = makeFixture(2024, false);
  ckptPath = path.join(dir, 'model.bin');
  tokPath = path.join(dir, 'tokenizer.bin');
  fs.writeFileSync(ckptPath, checkpointBytes(fix));
  const { pieces, scores } = tokenizerPieces();
  fs.writeFileSync(tokPath, tokenizerBytes(pieces, scores));
  const ck = readCheckpoint(ckptPath);
  model = new Model(ck.config, ck.weights);
  tok = readTokenizer(tokPath, { size: ck.config.vocabSize, from: ckptPath });
  cpuHead = new Head(cpu, ck.weights.classifier, ck.config.vocabSize, ck.config.dim, 'f32');
});

afterAll(() => {
  cpuHead?.dispose();
  fs.rmSync(dir, { recursive: true, force: true });
});

function request(id: number, prompt: string | number[], extra: Partial<RequestSpec> = {}): RequestSpec {
  return { id, prompt, temperature: 0.8, topP: 0.9, topK: 0, seed: BigInt(1000 + id), maxTokens: 20, ...extra };
}

// ------------------------------------------------------------------------------------------------
// Checkpoint reader and forward pass
// ------------------------------------------------------------------------------------------------

describe('checkpoint and forward pass', () => {
  test('the reader takes the header and every array where run.c does (unshared classifier)', () => {
    const ck = readCheckpoint(ckptPath);
    expect(ck.config).toMatchObject({ dim: 64, hiddenDim: 128, nLayers: 2, nHeads: 4, nKvHeads: 2, vocabSize: 512, seqLen: 64, sharedClassifier: false, headSize: 16, kvDim: 32 });
    expect(Array.from(ck.weights.tokenEmbedding.subarray(0, 5))).toEqual(Array.from(fix.emb.subarray(0, 5)));
    expect(Array.from(ck.weights.rmsFinal)).toEqual(Array.from(fix.rmsFinal));
    expect(Array.from(ck.weights.w3.subarray(-4))).toEqual(Array.from(fix.w3.subarray(-4)));
    expect(ck.weights.classifier.length).toBe(512 * 64);
    expect(Array.from(ck.weights.classifier.subarray(-4))).toEqual(Array.from(fix.wcls.subarray(-4)));
  });

  test('a shared classifier is the token embedding table', () => {
    const f = makeFixture(7, true);
    const ck = parseCheckpoint('shared.bin', checkpointBytes(f));
    expect(ck.config.sharedClassifier).toBe(true);
    expect(ck.weights.classifier).toBe(ck.weights.tokenEmbedding);
    // And the forward pass over it matches the reference too.
    const m = new Model(ck.config, ck.weights);
    const tokens = [1, 300, 40, 77];
    const cache = m.newCache();
    const ref = refHidden(f, tokens);
    tokens.forEach((t, pos) => {
      const h = m.forward([{ cache, token: t, pos }]);
      const ours = logitsOf(h, ck.weights.classifier, 64);
      const want = refLogits(f, ref[pos]);
      const scale = Math.max(...want.map(Math.abs));
      for (let v = 0; v < want.length; v++) expect(Math.abs(ours[v] - want[v])).toBeLessThanOrEqual(1e-4 * scale);
    });
  });

  test('the logits of every position equal the float64 reference within 1e-4 (relative to the row)', () => {
    const tokens = [1, ...Array.from({ length: 47 }, (_, i) => 3 + ((i * 97 + 11) % 509))];
    const ref = refHidden(fix, tokens);
    const cache = model.newCache();
    let worst = 0;
    tokens.forEach((t, pos) => {
      const h = model.forward([{ cache, token: t, pos }]);
      const ours = logitsOf(h, model.weights.classifier, fix.dim);
      const want = refLogits(fix, ref[pos]);
      const scale = Math.max(...want.map(Math.abs));
      for (let v = 0; v < want.length; v++) worst = Math.max(worst, Math.abs(ours[v] - want[v]) / scale);
    });
    expect(worst).toBeLessThan(1e-4);
  });

  test('hidden states are bitwise the same alone and in a batch (batch invariance)', () => {
    const promptA = [1, 300, 301, 302, 303, 304];
    const promptB = [1, 400, 401];
    const promptC = [1, 5, 6, 7, 8, 9, 10, 11, 12];
    // A alone.
    const alone: Float32Array[] = [];
    const ca = model.newCache();
    promptA.forEach((t, pos) => alone.push(model.forward([{ cache: ca, token: t, pos }]).slice()));
    // A with B and C, which start at other steps and positions; A in varying rows.
    const caches = [model.newCache(), model.newCache(), model.newCache()];
    const prompts = [promptA, promptB, promptC];
    const starts = [2, 0, 1]; // the step at which each request joins
    for (let step = 0; step < 12; step++) {
      const rows: { cache: (typeof caches)[0]; token: number; pos: number; r: number }[] = [];
      for (const r of step % 2 ? [2, 0, 1] : [0, 1, 2]) {
        const pos = step - starts[r];
        if (pos >= 0 && pos < prompts[r].length) rows.push({ cache: caches[r], token: prompts[r][pos], pos, r });
      }
      if (rows.length === 0) continue;
      const h = model.forward(rows);
      rows.forEach((row, i) => {
        if (row.r !== 0) return;
        expect(Buffer.compare(Buffer.from(h.slice(i * 64, (i + 1) * 64).buffer), Buffer.from(alone[row.pos].buffer))).toBe(0);
      });
    }
  });
});

// ------------------------------------------------------------------------------------------------
// Tokenizer
// ------------------------------------------------------------------------------------------------

describe('tokenizer (run.c conventions)', () => {
  test('BOS first, the dummy-prefix space only for non-empty text, merges by best score', () => {
    expect(tok.encode('')).toEqual([1]);
    expect(tok.encode('the')).toEqual([1, ID(tok, ' the')]);
    // "en" (score -0.5) merges before " t" (-1): not leftmost-first.
    expect(tok.encode('then')).toEqual([1, ID(tok, ' th'), ID(tok, 'en')]);
    expect(tok.encode('the cat sat')).toEqual([1, ID(tok, ' the'), ID(tok, ' cat'), ID(tok, ' sat')]);
    expect(tok.encode('the', { bos: false })).toEqual([ID(tok, ' the')]);
    expect(tok.encode('the', { eos: true })).toEqual([1, ID(tok, ' the'), 2]);
  });

  test('byte fallback: a character without a piece becomes its UTF-8 bytes + 3', () => {
    const space = ID(tok, ' ');
    expect(tok.encode('~')).toEqual([1, space, 0x7e + 3]);
    expect(tok.encode('é')).toEqual([1, space, ID(tok, 'é')]); // a 2-byte character with a piece
    expect(tok.encode('😀')).toEqual([1, space, 0xf0 + 3, 0x9f + 3, 0x98 + 3, 0x80 + 3]);
    expect(tok.encode('ü')).toEqual([1, space, 0xc3 + 3, 0xbc + 3]);
  });

  test('decode: the space after BOS is stripped, <0xXX> is the raw byte', () => {
    const the = ID(tok, ' the');
    expect(Buffer.from(tok.decode(1, the)).toString()).toBe('the');
    expect(Buffer.from(tok.decode(the, the)).toString()).toBe(' the');
    expect(Buffer.from(tok.decode(2, the)).toString()).toBe(' the');
    expect(Array.from(tok.decode(5, 0x41 + 3))).toEqual([0x41]);
    expect(Array.from(tok.decode(1, 0x20 + 3))).toEqual([0x20]); // a byte piece has no leading space to strip
    expect(Array.from(tok.decode(1, ID(tok, ' ')))).toEqual([]);
  });

  test('encode then decode gives the text back', () => {
    for (const text of ['the cat sat.', 'Hello, World!', 'é😀 then~', '  two spaces', 'ü', 'x', 'tab\tand\nnewline']) {
      const tokens = tok.encode(text);
      expect(tokens[0]).toBe(1);
      expect(tok.decodeAll(tokens.slice(1), tokens[0])).toBe(text);
    }
  });
});

// ------------------------------------------------------------------------------------------------
// The loop
// ------------------------------------------------------------------------------------------------

describe('decode loop', () => {
  test('T = 0: the loop produces exactly the reference argmax continuation', async () => {
    const prompt = tok.encode('the cat sat');
    const { results } = await generate(model, tok, cpuHead, [request(0, prompt, { temperature: 0, maxTokens: 24 })], { batch: 4 });
    // The reference: greedy over float64 logits, the whole sequence recomputed at each step.
    const seq = prompt.slice();
    const want: number[] = [];
    for (let i = 0; i < 24; i++) {
      const h = refHidden(fix, seq);
      const logits = refLogits(fix, h[h.length - 1]);
      // The fixture must not have a near tie, or float32 vs float64 could legitimately differ.
      expect(topTwoGap(logits)).toBeGreaterThan(1e-3);
      const next = argmax(logits);
      if (next === 1 || next === 2) break;
      want.push(next);
      seq.push(next);
    }
    expect(results[0].tokens).toEqual(want);
    expect(results[0].reason).toBe('max-tokens');
  });

  test('a request gives the same tokens alone and inside a batch (per-request seeds)', async () => {
    const a = request(7, 'the cat', { maxTokens: 30, seed: 99n, temperature: 0.9, topP: 0.9, topK: 0 });
    const alone = await generate(model, tok, cpuHead, [a], { batch: 1 });
    const others = [
      request(1, 'then', { maxTokens: 5, temperature: 1.2 }),
      request(2, 'Hello, World!', { maxTokens: 12, topK: 20 }),
      request(3, '', { maxTokens: 40, topP: 0.5 }),
      request(4, 'é', { maxTokens: 3, temperature: 0 }),
    ];
    for (const [batch, order] of [[3, [others[0], a, others[1], others[2], others[3]]], [2, [others[0], others[1], a, others[2]]], [5, [...others, a]]] as const) {
      const rows: number[] = [];
      const together = await generate(model, tok, cpuHead, order, { batch, onStep: (s) => rows.push(s.rows) });
      const got = together.results.find((r) => r.id === 7)!;
      expect(got.tokens).toEqual(alone.results[0].tokens);
      expect(got.text).toBe(alone.results[0].text);
      expect(Math.max(...rows)).toBeLessThanOrEqual(batch);
    }
    expect(alone.results[0].tokens.length).toBe(30);
  });

  test('continuous batching: requests leave at EOS, BOS, max tokens or seq_len, waiting ones join', async () => {
    // A head that plays a script: the token of (request = seed, position = offset).
    const scripts = new Map<bigint, (offset: number) => number>([
      [10n, (o) => (o === 6 ? 2 : 300 + o)], // EOS at position 6
      [11n, (o) => (o === 4 ? 1 : 300 + o)], // BOS at position 4
      [12n, (o) => 300 + o], // max tokens
      [13n, (o) => 300 + o], // seq_len
      [14n, (o) => 300 + o],
    ]);
    const calls: { seeds: bigint[]; offsets: number[] }[] = [];
    const fake = {
      vocab: 512,
      dim: 64,
      async sample(_h: Float32Array, rows: number, p: { seed: BigUint64Array; offset: BigUint64Array; temperature: Float32Array }) {
        const seeds = Array.from(p.seed.subarray(0, rows));
        const offsets = Array.from(p.offset.subarray(0, rows), Number);
        calls.push({ seeds, offsets });
        return Int32Array.from(seeds, (s, i) => scripts.get(s)!(offsets[i]));
      },
    } as unknown as Head;
    const long = Array.from({ length: 60 }, (_, i) => (i === 0 ? 1 : 3 + i)); // 60 prompt tokens, seq_len 64
    const reqs = [
      request(0, [1, 50, 51], { seed: 10n, maxTokens: 100 }),
      request(1, [1, 60], { seed: 11n, maxTokens: 100 }),
      request(2, [1, 70, 71, 72], { seed: 12n, maxTokens: 3 }),
      request(3, long, { seed: 13n, maxTokens: 100 }),
      request(4, [1], { seed: 14n, maxTokens: 2 }),
    ];
    const order: string[] = [];
    const { results, stats } = await generate(model, tok, fake, reqs, {
      batch: 2,
      onStart: (id) => order.push(`start ${id}`),
      onDone: (r) => order.push(`done ${r.id}`),
    });
    expect(results.map((r) => r.reason)).toEqual(['eos', 'bos', 'max-tokens', 'context', 'max-tokens']);
    expect(results[0].tokens).toEqual([303, 304, 305]); // positions 3, 4, 5; EOS at 6 not included
    expect(results[1].tokens).toEqual([302, 303]);
    expect(results[2].tokens).toEqual([304, 305, 306]);
    expect(results[3].tokens).toEqual([360, 361, 362, 363, 364]); // drawn at positions 60..64: the cache is full
    expect(results[4].tokens).toEqual([301, 302]);
    // Offsets are the positions of the tokens drawn; each call has at most `batch` rows.
    for (const c of calls) {
      expect(c.seeds.length).toBeLessThanOrEqual(2);
      c.offsets.forEach((o) => expect(o).toBeGreaterThan(0));
    }
    expect(calls[0]).toEqual({ seeds: [11n], offsets: [2] }); // step 2: request 1 (prompt of 2) draws first
    expect(order).toEqual(['start 0', 'start 1', 'done 1', 'start 2', 'done 0', 'start 3', 'done 2', 'start 4', 'done 4', 'done 3']);
    expect(stats.generatedTokens).toBe(3 + 2 + 3 + 5 + 2);
    expect(stats.promptTokens).toBe(3 + 2 + 4 + 60 + 1);
  });

  test('requests that cannot run are refused before any work, naming the request', async () => {
    const tooLong = Array.from({ length: 65 }, () => 5);
    await expect(generate(model, tok, cpuHead, [request(3, tooLong)], { batch: 1 })).rejects.toThrow(
      'request 3: the prompt has 65 tokens, more than the checkpoint\'s seq_len (64)',
    );
    await expect(generate(model, tok, cpuHead, [request(1, [1, 600])], { batch: 1 })).rejects.toThrow('request 1: expected prompt tokens in [0, 512), got 600');
    await expect(generate(model, tok, cpuHead, [request(1, 'x', { maxTokens: 0 })], { batch: 1 })).rejects.toThrow('request 1: expected maxTokens');
    await expect(generate(model, tok, cpuHead, [request(1, 'x'), request(1, 'y')], { batch: 1 })).rejects.toThrow('request ids to be unique');
  });
});

// ------------------------------------------------------------------------------------------------
// CPU and GPU heads under teacher forcing
// ------------------------------------------------------------------------------------------------

describeDevices((name, dev) => {
  for (const dtype of ['f32', 'bf16'] as const) {
    test(`${dtype} head on ${name} vs the CPU head and float64, same seeds, teacher forcing: equal tokens except near ties (< 1e-4)`, async () => {
      const device: Device = dev();
      const W = model.weights.classifier;
      const other = new Head(device, W, 512, 64, dtype);
      const ref = new Head(cpu, W, 512, 64, dtype);
      try {
        const T = 0.8;
        const seed = 321n;
        // The forced sequence: the CPU head's own free run.
        const prompt = tok.encode('the cat');
        const { results } = await generate(model, tok, ref, [request(0, prompt, { temperature: T, topP: 1, seed, maxTokens: 40 })], { batch: 1 });
        const seq = [...prompt, ...results[0].tokens];
        const cache = model.newCache();
        let steps = 0;
        let flips = 0;
        for (let pos = 0; pos + 1 < seq.length; pos++) {
          const h = model.forward([{ cache, token: seq[pos], pos }]);
          if (pos + 1 < prompt.length) continue;
          const offset = BigInt(pos + 1); // the position of the token drawn, as the loop does
          const params = {
            temperature: Float32Array.of(T),
            topP: Float32Array.of(1),
            topK: Int32Array.of(0),
            seed: BigUint64Array.of(seed),
            offset: BigUint64Array.of(offset),
          };
          const a = (await ref.sample(h, 1, params))[0];
          const b = (await other.sample(h, 1, params))[0];
          steps++;
          if (a !== b) flips++;
          // Each head's token is the float64 argmax of the perturbed scores (float64 logits of the
          // dtype-rounded operands plus the noise of SEMANTICS §3), or the runner-up only when the
          // two lie within 1e-4: on the CPU this is what holds the CPU head to account.
          const hr = Array.from(h, (x) => roundTo(dtype, x));
          const scores = Array.from({ length: 512 }, (_, v) => {
            let acc = 0;
            for (let j = 0; j < 64; j++) acc += roundTo(dtype, W[v * 64 + j]) * hr[j];
            return acc / T + noiseRef(seed, offset, 0, 0, v);
          });
          const order = scores.map((s, v) => [s, v]).sort((x, y) => y[0] - x[0]);
          for (const t of [a, b]) {
            if (t === order[0][1]) continue;
            expect(t).toBe(order[1][1]);
            expect(order[0][0] - order[1][0]).toBeLessThan(1e-4);
          }
        }
        expect(steps).toBe(40);
        if (name === 'cpu') expect(flips).toBe(0);
      } finally {
        other.dispose();
        ref.dispose();
      }
    });
  }
});

// ------------------------------------------------------------------------------------------------
// Bad files
// ------------------------------------------------------------------------------------------------

describe('bad checkpoints and tokenizers: clear errors naming the file', () => {
  const good = () => checkpointBytes(fix);
  const withHeader = (h: number[]) => {
    const b = Buffer.from(good());
    h.forEach((v, i) => b.writeInt32LE(v, 4 * i));
    return b;
  };
  const write = (name: string, b: Buffer) => {
    const p = path.join(dir, name);
    fs.writeFileSync(p, b);
    return p;
  };
  const cases: [string, () => Buffer, RegExp][] = [
    ['truncated', () => good().subarray(0, good().length - 100), /bad\.bin: truncated: expected 562460 bytes for a llama2\.c checkpoint with dim=64 hidden_dim=128 n_layers=2 n_heads=4 n_kv_heads=2 vocab_size=-512 seq_len=64 \(unshared classifier\), got 562360/],
    ['shorter than the header', () => good().subarray(0, 10), /bad\.bin: truncated: expected at least 28 bytes \(the header of 7 int32\), got 10/],
    ['too long', () => Buffer.concat([good(), Buffer.alloc(8)]), /bad\.bin: too long: expected 562460 bytes .* got 562468/],
    ['dim 0', () => withHeader([0, 128, 2, 4, 2, -512, 64]), /bad\.bin: header: expected dim > 0, got dim = 0/],
    ['negative n_layers', () => withHeader([64, 128, -2, 4, 2, -512, 64]), /bad\.bin: header: expected n_layers > 0, got n_layers = -2/],
    ['vocab 0', () => withHeader([64, 128, 2, 4, 2, 0, 64]), /bad\.bin: header: expected a vocab_size other than 0 .* got vocab_size = 0/],
    ['seq_len 0', () => withHeader([64, 128, 2, 4, 2, -512, 0]), /bad\.bin: header: expected seq_len > 0, got seq_len = 0/],
    ['dim % n_heads', () => withHeader([64, 128, 2, 5, 5, -512, 64]), /bad\.bin: header: expected dim \(64\) to be a multiple of n_heads \(5\)/],
    ['n_heads % n_kv_heads', () => withHeader([64, 128, 2, 4, 3, -512, 64]), /bad\.bin: header: expected n_heads \(4\) to be a multiple of n_kv_heads \(3\)/],
    ['odd head size', () => withHeader([12, 128, 2, 4, 2, -512, 64]), /bad\.bin: header: expected an even head size dim \/ n_heads for RoPE's pairs, got 12 \/ 4 = 3/],
    ['another format (llama2.c export version 1: magic "ak42")', () => withHeader([0x616b3432, 1, 64, 128, 2, 4, 2]), /bad\.bin: (truncated|too long|header)/],
  ];
  for (const [what, bytes, message] of cases) {
    test(`checkpoint: ${what}`, () => {
      const p = write('bad.bin', bytes());
      let err: Error | undefined;
      try {
        readCheckpoint(p);
      } catch (e) {
        err = e as Error;
      }
      expect(err).toBeInstanceOf(FormatError);
      expect(err!.message.startsWith(p + ': ')).toBe(true);
      expect(err!.message).toMatch(message);
    });
  }

  test('checkpoint: a missing file', () => {
    expect(() => readCheckpoint(path.join(dir, 'nope.bin'))).toThrow(/nope\.bin: cannot read the checkpoint: ENOENT/);
  });

  test('tokenizer: vocab mismatch with the checkpoint, truncated entries, bad header', () => {
    const { pieces, scores } = tokenizerPieces();
    const small = write('small-tok.bin', tokenizerBytes(pieces.slice(0, 300), scores.slice(0, 300)));
    expect(() => readTokenizer(small, { size: 512, from: 'model.bin' })).toThrow(
      `${small}: expected 512 tokens (the vocab_size of model.bin), got 300: the tokenizer does not belong to that checkpoint`,
    );
    const full = tokenizerBytes(pieces, scores);
    const cut = write('cut-tok.bin', full.subarray(0, full.length - 2));
    expect(() => readTokenizer(cut, { size: 512, from: 'model.bin' })).toThrow(`${cut}: truncated at token 511: expected 4 bytes of its piece, got 2`);
    const cut2 = write('cut2-tok.bin', full.subarray(0, 4 + 2 * (8 + 5) + 3));
    expect(() => readTokenizer(cut2)).toThrow(`${cut2}: truncated at token 2: expected 8 bytes (float32 score, int32 length), got 3`);
    const neg = Buffer.from(full);
    neg.writeInt32LE(0, 0);
    expect(() => readTokenizer(write('neg-tok.bin', neg))).toThrow(/neg-tok\.bin: expected max_token_length > 0, got 0/);
  });

  test('the CLI prints the error and exits with 1; bad flags exit with 2 and the usage', async () => {
    const p = write('bad.bin', good().subarray(0, 1000));
    const out: string[] = [];
    const err: string[] = [];
    const code = await main(['--checkpoint', p, '--tokenizer', tokPath, '--device', 'cpu'], (s) => out.push(s), (s) => err.push(s));
    expect(code).toBe(1);
    expect(err.join('')).toMatch(/^generate: .*bad\.bin: truncated: expected 562460 bytes/);
    const small = write('small-tok.bin', tokenizerBytes(tokenizerPieces().pieces.slice(0, 300), tokenizerPieces().scores.slice(0, 300)));
    err.length = 0;
    expect(await main(['--checkpoint', ckptPath, '--tokenizer', small, '--device', 'cpu'], () => {}, (s) => err.push(s))).toBe(1);
    expect(err.join('')).toContain('expected 512 tokens (the vocab_size of');
    err.length = 0;
    expect(await main(['--checkpoint', ckptPath, '--temperature', '-1'], () => {}, (s) => err.push(s))).toBe(2);
    expect(err.join('')).toMatch(/^generate: --temperature: expected a finite number >= 0, got "-1"\nusage:/);
  });
});

// ------------------------------------------------------------------------------------------------
// The command line
// ------------------------------------------------------------------------------------------------

describe('command line', () => {
  test('parseArgs: defaults, repeated prompts, and errors naming the flag', () => {
    const a = parseArgs(['--checkpoint', 'm.bin', '--prompt', 'a', '--prompt=b c', '--top-k', '40', '--seed', '18446744073709551615']);
    expect(a).toMatchObject({ checkpoint: 'm.bin', prompts: ['a', 'b c'], temperature: 0.8, topP: 0.9, topK: 40, seed: 2n ** 64n - 1n, maxTokens: 256, batch: 8, device: 'auto', headDtype: null });
    expect(parseArgs(['--checkpoint', 'm.bin']).prompts).toEqual(['']);
    const bad: [string[], string][] = [
      [['--checkpoint', 'm', '--top-p', '0'], '--top-p: expected a number in (0, 1], got "0"'],
      [['--checkpoint', 'm', '--batch', '0'], '--batch: expected an integer in [1, 65535], got "0"'],
      [['--checkpoint', 'm', '--seed', '-3'], '--seed: expected an integer in [0, 2^64), got "-3"'],
      [['--checkpoint', 'm', '--head-dtype', 'f64'], '--head-dtype: expected f32, bf16 or f16, got "f64"'],
      [['--checkpoint', 'm', '--device', 'tpu'], '--device: expected cpu, cuda, cuda:N or auto, got "tpu"'],
      [['--checkpoint', 'm', '--max-tokens'], '--max-tokens: expected a value'],
      [['--checkpoint', 'm', '--bogus'], '"--bogus": unknown argument (--help lists them)'],
      [[], '--checkpoint: expected a llama2.c checkpoint (or --make-tiny DIR for a random one)'],
    ];
    for (const [argv, message] of bad) {
      expect(() => parseArgs(argv)).toThrow(UsageError);
      expect(() => parseArgs(argv)).toThrow(message);
    }
  });

  test('a run streams every request as prefixed lines and ends with tokens/s and the sampling share', async () => {
    const out: string[] = [];
    const code = await main(
      ['--checkpoint', ckptPath, '--tokenizer', tokPath, '--prompt', 'the cat', '--prompt', 'then', '--repeat', '2', '--batch', '3', '--max-tokens', '6', '--device', 'cpu'],
      (s) => out.push(s),
      (s) => out.push(s),
    );
    const text = out.join('');
    expect(code).toBe(0);
    for (const id of [0, 1, 2, 3]) expect(text).toMatch(new RegExp(`^\\[${id}\\] -- done: max-tokens, 6 tokens$`, 'm'));
    expect(text).toMatch(/^\[0\] the cat/m);
    expect(text).toMatch(/^\[1\] then/m);
    expect(text).toMatch(/4 requests: 24 tokens generated \(\+ 12 prompt tokens\) in [\d.]+ s: [\d.]+ tokens\/s/);
    expect(text).toMatch(/step time: sampling [\d.]+ % \(tensorAsync \+ sampleFused\), forward [\d.]+ %/);
  });

  test('--make-tiny writes a checkpoint and tokenizer the reader takes, and runs on them', async () => {
    const out: string[] = [];
    const tinyDir = path.join(dir, 'tiny');
    const code = await main(['--make-tiny', tinyDir, '--prompt', 'Once upon a time', '--max-tokens', '4', '--device', 'cpu', '--quiet'], (s) => out.push(s), (s) => out.push(s));
    expect(code).toBe(0);
    expect(out.join('')).toMatch(/1 request: 4 tokens generated/);
    const ck = readCheckpoint(path.join(tinyDir, 'model.bin'));
    const t = readTokenizer(path.join(tinyDir, 'tokenizer.bin'), { size: ck.config.vocabSize, from: 'model.bin' });
    expect(t.decodeAll(t.encode('Once upon a time').slice(1), 1)).toBe('Once upon a time');
    expect(t.encode('Once upon a time').length).toBeLessThan(6); // merged pieces, not characters
  });

  test('LinePrinter: whole lines per request, UTF-8 split over pieces, run.c\'s control-byte filter', () => {
    const out: string[] = [];
    const p = new LinePrinter((s) => out.push(s), 20);
    const e = Buffer.from('é');
    p.push(0, Buffer.from('hello'));
    p.push(1, Buffer.from('other\n'));
    p.push(0, e.subarray(0, 1));
    p.push(0, Uint8Array.of(0x07)); // BEL: not printed
    p.push(0, e.subarray(1));
    p.push(0, Buffer.from(' world, this is a long line'));
    p.end(0, '-- done');
    expect(out.join('')).toBe('[1] other\n[0] helloé world, this\n[0] is a long line\n[0] -- done\n');
  });
});

// The library's sampler is what the head calls: one direct call, for the record.
test('the head is sampleFused on [S, dim] rows with per-row seeds and offsets', async () => {
  const h = model.forward([{ cache: model.newCache(), token: 1, pos: 0 }]);
  const H = cpu.tensor(h, [1, 64], 'f32');
  try {
    const direct = await sampleFused(H, cpuHead.W, { temperature: 0.7, seed: BigUint64Array.of(5n), offset: BigUint64Array.of(1n) });
    const viaHead = await cpuHead.sample(h, 1, {
      temperature: Float32Array.of(0.7), topP: Float32Array.of(1), topK: Int32Array.of(0), seed: BigUint64Array.of(5n), offset: BigUint64Array.of(1n),
    });
    expect(Array.from(viaHead)).toEqual(Array.from(direct.tokens));
  } finally {
    H.dispose();
  }
});
