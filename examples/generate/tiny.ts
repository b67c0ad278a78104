// Writes a random llama2.c checkpoint and a matching tokenizer.bin (`--make-tiny DIR`), so the
// example runs in one command without downloading anything. The weights are random: the text is
// word salad from the tokenizer's pieces, but every part of the loop runs as on a real model.
//
// The tokenizer is a small BPE trained here on a few sentences (the most frequent adjacent pair
// merged first, score = minus the merge's rank, as sentencepiece scores merges), after <unk>, BOS,
// EOS and the 256 byte tokens <0x00>..<0xFF> at ids 3..258, like llama2.c's tokenizers; filler
// pieces "~N~" pad it to the vocabulary size.
//
// Cosmetics of the random weights (a random model would otherwise print mostly byte-fallback
// bytes, which are not valid UTF-8 alone, and repeat its input token through the shared
// embedding): the tiny shape has an unshared classifier, whose rows of the byte and filler tokens
// are scaled down so that sampled text is mostly the corpus's pieces.

import * as fs from 'fs';
import * as path from 'path';
import { mulberry32 } from '../../bench/inputs';
import { layout, type Config, type Shape } from './checkpoint';

export type { Shape };

export const TINY_SHAPES: Record<string, Shape> = {
  tiny: { dim: 64, hiddenDim: 172, nLayers: 2, nHeads: 4, nKvHeads: 2, vocabSize: 512, seqLen: 256, sharedClassifier: false },
  // The shapes of llama2.c's TinyStories checkpoints (random weights: for timing the loop).
  stories15M: { dim: 288, hiddenDim: 768, nLayers: 6, nHeads: 6, nKvHeads: 6, vocabSize: 32000, seqLen: 256, sharedClassifier: true },
  stories42M: { dim: 512, hiddenDim: 1376, nLayers: 8, nHeads: 8, nKvHeads: 8, vocabSize: 32000, seqLen: 1024, sharedClassifier: true },
  stories110M: { dim: 768, hiddenDim: 2048, nLayers: 12, nHeads: 12, nKvHeads: 12, vocabSize: 32000, seqLen: 1024, sharedClassifier: true },
};

const CORPUS = `Once upon a time, there was a little girl named Lily. She loved to play outside in the sun.
One day, she saw a big red ball in the park. She wanted to play with the ball, so she ran to it.
Tom was her friend. He had a small dog named Max. Max liked to run and jump in the grass.
The sun was warm and the sky was blue. Lily and Tom played with the ball all day.
They were very happy. At the end of the day, they went home and had a big dinner.
Mom said, "You can play again tomorrow." Lily smiled and went to sleep.
Ben was a brave boy who lived near the sea. Every morning he looked for shells on the beach.
One morning he found a shiny blue shell. "Look, Mom!" he said. "It is so pretty!"
His mom hugged him and said, "Let's keep it in a box." Ben put the shell in his room.
A little bird sat on a tree. The bird was sad because it could not find its nest.
A kind cat came by and asked, "Why are you sad?" The bird said, "I lost my home."
The cat helped the bird look for the nest. They looked under the leaves and behind the rocks.
At last they found it. The bird was so happy that it sang a song for the cat.
The moral of the story is that friends help each other when things are hard.`;

function configOf(s: Shape): Config {
  return { ...s, headSize: s.dim / s.nHeads, kvDim: (s.dim * s.nKvHeads) / s.nHeads };
}

/** The file of a random checkpoint of this shape (values from mulberry32(seed)); `rowScale(v)`
 *  scales row v of an unshared classifier. */
export function randomCheckpoint(shape: Shape, seed: number, rowScale?: (v: number) => number): Buffer {
  const c = configOf(shape);
  const r = mulberry32(seed);
  const header = new Int32Array([c.dim, c.hiddenDim, c.nLayers, c.nHeads, c.nKvHeads, c.sharedClassifier ? c.vocabSize : -c.vocabSize, c.seqLen]);
  const parts: Buffer[] = [Buffer.from(header.buffer)];
  for (const [name, n] of layout(c)) {
    const a = new Float32Array(n);
    // Uniform with the standard deviation a trained model roughly has: 1 / sqrt(fan-in) for the
    // matrices, ~1 for the norms, and an embedding (= classifier) giving logits of std ~2.5.
    const fanIn = name === 'w2' ? c.hiddenDim : c.dim;
    let std = 1 / Math.sqrt(fanIn);
    if (name === 'tokenEmbedding' || name === 'classifier') std = 2.5 / Math.sqrt(c.dim);
    const half = Math.sqrt(3) * std;
    if (name === 'rmsAtt' || name === 'rmsFfn' || name === 'rmsFinal') for (let i = 0; i < n; i++) a[i] = 1 + 0.2 * (r() - 0.5);
    else if (name !== 'freqCisReal' && name !== 'freqCisImag') for (let i = 0; i < n; i++) a[i] = (2 * r() - 1) * half;
    if (name === 'classifier' && rowScale) {
      for (let v = 0; v < c.vocabSize; v++) {
        const k = rowScale(v);
        for (let j = 0; j < c.dim; j++) a[v * c.dim + j] *= k;
      }
    }
    parts.push(Buffer.from(a.buffer));
  }
  return Buffer.concat(parts);
}

/** Pieces and scores of a BPE vocabulary of `size` tokens trained on CORPUS. */
export function tinyVocabulary(size: number): { pieces: string[]; scores: number[] } {
  if (size < 259 + 2) throw new RangeError(`vocabulary: expected at least 261 tokens, got ${size}`);
  const pieces: string[] = ['<unk>', '\n<s>\n', '\n</s>\n'];
  const scores: number[] = [0, 0, 0];
  for (let b = 0; b < 256; b++) {
    pieces.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    scores.push(0);
  }
  // Words with the space before them (the dummy prefix makes the first one start with a space too).
  const counts = new Map<string, number>();
  for (const w of CORPUS.replace(/\n/g, ' ').split(' ').filter((x) => x)) counts.set(' ' + w, (counts.get(' ' + w) ?? 0) + 1);
  const words = [...counts].map(([w, n]) => ({ symbols: [...w], n }));
  const chars = [...new Set(words.flatMap((w) => w.symbols))].sort();
  const known = new Set<string>(pieces);
  const merges: string[] = [];
  while (pieces.length + chars.length + merges.length < size) {
    const pairs = new Map<string, { a: string; b: string; n: number }>();
    for (const w of words) {
      for (let i = 0; i + 1 < w.symbols.length; i++) {
        const key = w.symbols[i] + '\u0000' + w.symbols[i + 1];
        const p = pairs.get(key) ?? { a: w.symbols[i], b: w.symbols[i + 1], n: 0 };
        p.n += w.n;
        pairs.set(key, p);
      }
    }
    let best: { a: string; b: string; n: number } | null = null;
    for (const p of pairs.values()) if (!best || p.n > best.n) best = p;
    if (!best) break; // every word is one piece
    const merged = best.a + best.b;
    for (const w of words) {
      const out: string[] = [];
      for (let i = 0; i < w.symbols.length; i++) {
        if (i + 1 < w.symbols.length && w.symbols[i] === best.a && w.symbols[i + 1] === best.b) {
          out.push(merged);
          i++;
        } else out.push(w.symbols[i]);
      }
      w.symbols = out;
    }
    if (!known.has(merged)) {
      known.add(merged);
      merges.push(merged);
    }
  }
  merges.forEach((m, i) => {
    pieces.push(m);
    scores.push(-i);
  });
  chars.forEach((ch, i) => {
    pieces.push(ch);
    scores.push(-merges.length - i);
  });
  for (let i = 0; pieces.length < size; i++) {
    pieces.push(`~${i}~`);
    scores.push(-1e6 - i);
  }
  return { pieces, scores };
}

/** tokenizer.bin bytes for these pieces (UTF-8) and scores. */
export function tokenizerFile(pieces: string[], scores: number[]): Buffer {
  const bufs = pieces.map((p) => Buffer.from(p, 'utf8'));
  const maxLen = Math.max(...bufs.map((b) => b.length));
  const parts: Buffer[] = [Buffer.from(new Int32Array([maxLen]).buffer)];
  bufs.forEach((b, i) => {
    const head = Buffer.alloc(8);
    head.writeFloatLE(scores[i], 0);
    head.writeInt32LE(b.length, 4);
    parts.push(head, b);
  });
  return Buffer.concat(parts);
}

/** Writes DIR/model.bin and DIR/tokenizer.bin; returns their paths. */
export function makeTiny(dir: string, shapeName = 'tiny', seed = 1): { checkpoint: string; tokenizer: string; shape: Shape } {
  const shape = TINY_SHAPES[shapeName];
  if (!shape) throw new RangeError(`--tiny-shape: expected one of ${Object.keys(TINY_SHAPES).join(', ')}, got ${JSON.stringify(shapeName)}`);
  fs.mkdirSync(dir, { recursive: true });
  const checkpoint = path.join(dir, 'model.bin');
  const tokenizer = path.join(dir, 'tokenizer.bin');
  const { pieces, scores } = tinyVocabulary(shape.vocabSize);
  const quiet = (v: number) => (v >= 3 && v < 259) || /^~\d+~$/.test(pieces[v]);
  fs.writeFileSync(checkpoint, randomCheckpoint(shape, seed, (v) => (quiet(v) ? 0.25 : 1)));
  fs.writeFileSync(tokenizer, tokenizerFile(pieces, scores));
  return { checkpoint, tokenizer, shape };
}
