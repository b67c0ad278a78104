#!/usr/bin/env node
// npm run generate -- --checkpoint model.bin --tokenizer tokenizer.bin --prompt "…" [--help]
//
// Loads a llama2.c checkpoint and tokenizer, puts the classifier on the chosen device as a
// flashsample tensor, and decodes every prompt with continuous batching (engine.ts). Each
// request's text streams as it is produced, one line at a time, prefixed with the request id; the
// end prints tokens/s and the share of step time spent in sampling.

import * as path from 'path';
import { StringDecoder } from 'string_decoder';
import { open, type Device, type FloatDType } from '../../lib/index';
import { parseArgs, USAGE, UsageError } from './args';
import { FormatError, readCheckpoint } from './checkpoint';
import { generate, Head, type RequestSpec, type Stats } from './engine';
import { Model } from './model';
import { makeTiny } from './tiny';
import { readTokenizer } from './tokenizer';

/** Per-request line buffers: text goes out as whole lines "[id] …", wrapped at `width` columns. */
export class LinePrinter {
  readonly #write: (s: string) => void;
  readonly #width: number;
  readonly #open = new Map<number, { decoder: StringDecoder; line: string }>();

  constructor(write: (s: string) => void, width = 100) {
    this.#write = write;
    this.#width = width;
  }

  push(id: number, bytes: Uint8Array): void {
    let state = this.#open.get(id);
    if (!state) {
      state = { decoder: new StringDecoder('utf8'), line: '' };
      this.#open.set(id, state);
    }
    // run.c's safe_printf: a piece that is one control byte (other than whitespace) is not
    // printed. (Bytes >= 0x80 are kept, so that byte-fallback tokens assemble into UTF-8.)
    if (bytes.length === 1 && (bytes[0] < 0x20 || bytes[0] === 0x7f) && !/\s/.test(String.fromCharCode(bytes[0]))) return;
    state.line += state.decoder.write(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    for (;;) {
      const nl = state.line.indexOf('\n');
      if (nl >= 0) {
        this.#emit(id, state.line.slice(0, nl));
        state.line = state.line.slice(nl + 1);
        continue;
      }
      if (state.line.length <= this.#width) break;
      const cut = state.line.lastIndexOf(' ', this.#width);
      const at = cut > 0 ? cut : this.#width;
      this.#emit(id, state.line.slice(0, at));
      state.line = state.line.slice(cut > 0 ? at + 1 : at);
    }
  }

  end(id: number, trailer: string): void {
    const state = this.#open.get(id);
    if (state) {
      const rest = state.line + state.decoder.end();
      if (rest.length > 0) this.#emit(id, rest);
      this.#open.delete(id);
    }
    this.#write(`[${id}] ${trailer}\n`);
  }

  #emit(id: number, text: string): void {
    this.#write(`[${id}] ${text}\n`);
  }
}

export function summary(stats: Stats): string {
  const pct = (x: number) => `${((100 * x) / Math.max(stats.stepMs, 1e-9)).toFixed(1)} %`;
  const other = stats.stepMs - stats.forwardMs - stats.sampleMs;
  return (
    `${stats.requests} request${stats.requests === 1 ? '' : 's'}: ${stats.generatedTokens} tokens generated ` +
    `(+ ${stats.promptTokens} prompt tokens) in ${(stats.wallMs / 1000).toFixed(2)} s: ` +
    `${((1000 * stats.generatedTokens) / stats.wallMs).toFixed(1)} tokens/s\n` +
    `${stats.steps} steps, ${(stats.forwardRows / Math.max(stats.steps, 1)).toFixed(2)} rows per step ` +
    `(${(stats.sampledRows / Math.max(stats.steps, 1)).toFixed(2)} sampled), ` +
    `${(stats.stepMs / Math.max(stats.steps, 1)).toFixed(2)} ms per step\n` +
    `step time: sampling ${pct(stats.sampleMs)} (tensorAsync + sampleFused), forward ${pct(stats.forwardMs)}, ` +
    `other ${pct(other)}\n`
  );
}

/** Runs the CLI; resolves with the exit code (0 ok, 1 failure, 2 bad arguments). */
export async function main(argv: readonly string[], write: (s: string) => void, writeErr: (s: string) => void): Promise<number> {
  let args;
  try {
    args = parseArgs(argv);
  } catch (e) {
    if (e instanceof UsageError) {
      writeErr(`generate: ${e.message}\n${USAGE}\n`);
      return 2;
    }
    throw e;
  }
  if (args.help) {
    write(USAGE + '\n');
    return 0;
  }
  let head: Head | null = null;
  try {
    let checkpointPath = args.checkpoint;
    let tokenizerPath = args.tokenizer;
    if (args.makeTiny !== null) {
      const made = makeTiny(args.makeTiny, args.tinyShape);
      write(`wrote ${made.checkpoint} and ${made.tokenizer} (random weights, shape ${args.tinyShape})\n`);
      checkpointPath = made.checkpoint;
      tokenizerPath ??= made.tokenizer;
    }
    checkpointPath = checkpointPath!;
    tokenizerPath ??= path.join(path.dirname(checkpointPath), 'tokenizer.bin');

    const checkpoint = readCheckpoint(checkpointPath);
    const c = checkpoint.config;
    const tokenizer = readTokenizer(tokenizerPath, { size: c.vocabSize, from: checkpointPath });
    const device: Device = open(args.device);
    const dtype: FloatDType = args.headDtype ?? (device.kind === 'cuda' ? 'bf16' : 'f32');
    const model = new Model(c, checkpoint.weights);
    head = new Head(device, checkpoint.weights.classifier, c.vocabSize, c.dim, dtype);
    write(
      `model  ${checkpointPath}: dim ${c.dim}, hidden ${c.hiddenDim}, ${c.nLayers} layers, ${c.nHeads} heads ` +
        `(${c.nKvHeads} kv), vocab ${c.vocabSize}, seq_len ${c.seqLen}, ${c.sharedClassifier ? 'shared' : 'unshared'} classifier\n` +
        `head   ${dtype} [${c.vocabSize}, ${c.dim}] on ${device.name}; batch ${args.batch}; ` +
        `T ${args.temperature}, top-p ${args.topP}, top-k ${args.topK}, seed ${args.seed} + request id\n`,
    );

    const requests: RequestSpec[] = [];
    for (let r = 0; r < args.repeat; r++) {
      for (const prompt of args.prompts) {
        const id = requests.length;
        requests.push({
          id,
          prompt,
          temperature: args.temperature,
          topP: args.topP,
          topK: args.topK,
          seed: BigInt.asUintN(64, args.seed + BigInt(id)),
          maxTokens: args.maxTokens,
        });
      }
    }
    const printer = new LinePrinter(write);
    const { stats } = await generate(model, tokenizer, head, requests, {
      batch: args.batch,
      onStart: args.quiet ? undefined : (id, prompt) => printer.push(id, prompt),
      onToken: args.quiet ? undefined : (id, _token, piece) => printer.push(id, piece),
      onDone: args.quiet ? undefined : (r) => printer.end(r.id, `-- done: ${r.reason}, ${r.tokens.length} tokens`),
    });
    write(summary(stats));
    return 0;
  } catch (e) {
    if (e instanceof FormatError || e instanceof RangeError || e instanceof TypeError || (e instanceof Error && /^device:/.test(e.message))) {
      writeErr(`generate: ${e.message}\n`);
      return 1;
    }
    throw e;
  } finally {
    head?.dispose();
  }
}

if (require.main === module) {
  main(process.argv.slice(2), (s) => process.stdout.write(s), (s) => process.stderr.write(s)).then(
    (code) => {
      process.exitCode = code;
    },
    (e) => {
      process.stderr.write(`generate: ${(e as Error).stack ?? e}\n`);
      process.exitCode = 1;
    },
  );
}
