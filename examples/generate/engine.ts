// The decode loop: continuous batching over the TypeScript forward pass (model.ts), with
// flashsample's fused LM-head sampler as the head.
//
// Every step feeds one token of every active request through the forward pass: a request still in
// its prompt feeds its next prompt token (prefill, token by token, through the same forward), a
// request past it feeds the token it sampled last. The rows whose fed token is the last one they
// know (the prompt's last token, or the last sampled one) go to the head together: their final
// hidden states [S, dim] are uploaded with tensorAsync and sampled with sampleFused in one call,
// each row with its own temperature, top-p, top-k, seed, and offset = the position of the token
// being drawn. A request leaves at BOS or EOS (not printed, as in run.c), at its max tokens or
// when its KV cache is full (seq_len); a waiting request takes its place at the next step.
//
// A request's tokens do not depend on the others: its hidden states are batch-invariant
// (model.ts), and flashsample's per-row seed makes its draw depend on its own seed and offset
// alone, not on its row in the batch or on the batch size.

import { sampleFused, type Device, type FloatDType, type Tensor } from '../../lib/index';
import type { Config } from './checkpoint';
import { Model, type KVCache } from './model';
import { BOS, EOS, Tokenizer } from './tokenizer';

export interface SamplingParams {
  /** >= 0; 0 = greedy. */
  temperature: number;
  /** (0, 1]; 1 = off. */
  topP: number;
  /** >= 0; 0 = off. */
  topK: number;
  seed: bigint;
}

export interface RequestSpec extends SamplingParams {
  id: number;
  /** Text (encoded with BOS and the dummy prefix), or the prompt's token ids as they are. */
  prompt: string | readonly number[];
  /** The most tokens to generate (not counting the prompt). */
  maxTokens: number;
}

export type FinishReason = 'eos' | 'bos' | 'max-tokens' | 'context';

export interface RequestResult {
  id: number;
  promptTokens: number[];
  /** Generated tokens (the ending BOS / EOS not included). */
  tokens: number[];
  reason: FinishReason;
  /** Decoded prompt and generated text. */
  promptText: string;
  text: string;
}

export interface StepInfo {
  /** Rows through the forward pass (active requests). */
  rows: number;
  /** Rows sampled (requests past their prompt). */
  sampled: number;
  forwardMs: number;
  sampleMs: number;
}

export interface Hooks {
  /** A request entered the batch; `prompt` is its decoded prompt. */
  onStart?(id: number, prompt: Uint8Array): void;
  /** A request produced a token; `piece` is what it decodes to. */
  onToken?(id: number, token: number, piece: Uint8Array): void;
  onDone?(result: RequestResult): void;
  onStep?(info: StepInfo): void;
}

export interface Stats {
  requests: number;
  steps: number;
  promptTokens: number;
  generatedTokens: number;
  /** Sum of rows over the steps (forward rows), and of sampled rows. */
  forwardRows: number;
  sampledRows: number;
  wallMs: number;
  /** Time inside steps: the forward pass, the head (upload + sampleFused), and both with the bookkeeping. */
  forwardMs: number;
  sampleMs: number;
  stepMs: number;
}

/** The LM head: the classifier [vocab, dim] as a flashsample tensor, created once. */
export class Head {
  readonly device: Device;
  readonly dtype: FloatDType;
  readonly W: Tensor;
  readonly vocab: number;
  readonly dim: number;

  constructor(device: Device, classifier: Float32Array, vocab: number, dim: number, dtype: FloatDType) {
    this.device = device;
    this.dtype = dtype;
    this.vocab = vocab;
    this.dim = dim;
    this.W = device.tensor(classifier, [vocab, dim], dtype);
  }

  /** Draws one token per row of `hidden` ([rows, dim]) with that row's parameters. */
  async sample(
    hidden: Float32Array,
    rows: number,
    p: { temperature: Float32Array; topP: Float32Array; topK: Int32Array; seed: BigUint64Array; offset: BigUint64Array },
  ): Promise<Int32Array> {
    const H = await this.device.tensorAsync(hidden.subarray(0, rows * this.dim), [rows, this.dim], this.dtype);
    try {
      const { tokens } = await sampleFused(H, this.W, {
        temperature: p.temperature,
        topP: p.topP,
        topK: p.topK,
        seed: p.seed,
        offset: p.offset,
      });
      return tokens;
    } finally {
      H.dispose();
    }
  }

  dispose(): void {
    this.W.dispose();
  }
}

interface Active {
  spec: RequestSpec;
  tokens: number[]; // prompt, then the generated tokens
  promptLength: number;
  pos: number; // the position fed at the next step
  cache: KVCache;
  pieces: Uint8Array[];
}

/** Encodes and checks every request before any work starts (errors name the request). */
export function prepareRequests(config: Config, tokenizer: Tokenizer, requests: readonly RequestSpec[]): number[][] {
  const ids = new Set<number>();
  return requests.map((r) => {
    if (ids.has(r.id)) throw new RangeError(`request ${r.id}: expected request ids to be unique, got ${r.id} twice`);
    ids.add(r.id);
    const tokens = typeof r.prompt === 'string' ? tokenizer.encode(r.prompt) : [...r.prompt];
    if (tokens.length === 0) throw new RangeError(`request ${r.id}: expected a prompt of at least one token, got none`);
    for (const t of tokens) {
      if (!(Number.isInteger(t) && t >= 0 && t < config.vocabSize)) {
        throw new RangeError(`request ${r.id}: expected prompt tokens in [0, ${config.vocabSize}), got ${t}`);
      }
    }
    if (tokens.length > config.seqLen) {
      throw new RangeError(`request ${r.id}: the prompt has ${tokens.length} tokens, more than the checkpoint's seq_len (${config.seqLen})`);
    }
    if (!(Number.isInteger(r.maxTokens) && r.maxTokens >= 1)) {
      throw new RangeError(`request ${r.id}: expected maxTokens to be an integer >= 1, got ${r.maxTokens}`);
    }
    return tokens;
  });
}

/**
 * Runs every request to its end, at most `batch` at a time, in the order given (a waiting request
 * joins when one leaves). Resolves with the results in the order of `requests`, and the timings.
 */
export async function generate(
  model: Model,
  tokenizer: Tokenizer,
  head: Head,
  requests: readonly RequestSpec[],
  opts: { batch: number } & Hooks,
): Promise<{ results: RequestResult[]; stats: Stats }> {
  const { config } = model;
  const { dim } = config;
  if (!(Number.isInteger(opts.batch) && opts.batch >= 1 && opts.batch <= 65535)) {
    throw new RangeError(`batch: expected an integer in [1, 65535], got ${opts.batch}`);
  }
  if (head.vocab !== config.vocabSize || head.dim !== dim) {
    throw new RangeError(`head: expected [${config.vocabSize}, ${dim}] (the model's vocab and dim), got [${head.vocab}, ${head.dim}]`);
  }
  const prompts = prepareRequests(config, tokenizer, requests);
  const results: RequestResult[] = new Array(requests.length);
  const stats: Stats = {
    requests: requests.length,
    steps: 0,
    promptTokens: 0,
    generatedTokens: 0,
    forwardRows: 0,
    sampledRows: 0,
    wallMs: 0,
    forwardMs: 0,
    sampleMs: 0,
    stepMs: 0,
  };
  const B = Math.min(opts.batch, requests.length);
  const hidden = new Float32Array(B * dim);
  const sampledHidden = new Float32Array(B * dim);
  const temperature = new Float32Array(B);
  const topP = new Float32Array(B);
  const topK = new Int32Array(B);
  const seed = new BigUint64Array(B);
  const offset = new BigUint64Array(B);

  let next = 0;
  let active: Active[] = [];
  const indexOf = new Map<number, number>(requests.map((r, i) => [r.id, i]));
  const finish = (a: Active, reason: FinishReason) => {
    const result: RequestResult = {
      id: a.spec.id,
      promptTokens: a.tokens.slice(0, a.promptLength),
      tokens: a.tokens.slice(a.promptLength),
      reason,
      promptText: tokenizer.decodeAll(a.tokens.slice(1, a.promptLength), a.tokens[0]),
      text: Buffer.concat(a.pieces).toString('utf8'),
    };
    results[indexOf.get(a.spec.id)!] = result;
    opts.onDone?.(result);
  };

  const t0 = performance.now();
  while (active.length > 0 || next < requests.length) {
    // Admit waiting requests into the free rows.
    while (active.length < B && next < requests.length) {
      const spec = requests[next];
      const tokens = prompts[next];
      next++;
      stats.promptTokens += tokens.length;
      active.push({ spec, tokens, promptLength: tokens.length, pos: 0, cache: model.newCache(), pieces: [] });
      // The prompt as run.c echoes it: each token decoded after the one before it.
      opts.onStart?.(spec.id, Buffer.from(tokenizer.decodeAll(tokens.slice(1), tokens[0]), 'utf8'));
    }

    const s0 = performance.now();
    model.forward(
      active.map((a) => ({ cache: a.cache, token: a.tokens[a.pos], pos: a.pos })),
      hidden,
    );
    const s1 = performance.now();

    // The rows that draw a token: their fed token is the last one they know.
    const drawing: number[] = [];
    for (let i = 0; i < active.length; i++) {
      const a = active[i];
      if (a.pos !== a.tokens.length - 1) continue;
      const row = drawing.length;
      drawing.push(i);
      sampledHidden.set(hidden.subarray(i * dim, (i + 1) * dim), row * dim);
      temperature[row] = a.spec.temperature;
      topP[row] = a.spec.topP;
      topK[row] = a.spec.topK;
      seed[row] = a.spec.seed;
      offset[row] = BigInt(a.pos + 1); // the position of the token being drawn
    }
    let drawn: Int32Array | null = null;
    const S = drawing.length;
    if (S > 0) {
      drawn = await head.sample(sampledHidden, S, {
        temperature: temperature.subarray(0, S),
        topP: topP.subarray(0, S),
        topK: topK.subarray(0, S),
        seed: seed.subarray(0, S),
        offset: offset.subarray(0, S),
      });
    }
    const s2 = performance.now();

    const done = new Set<Active>();
    for (const a of active) a.pos++;
    drawing.forEach((i, row) => {
      const a = active[i];
      const token = drawn![row];
      if (token === BOS || token === EOS) {
        done.add(a);
        finish(a, token === EOS ? 'eos' : 'bos');
        return;
      }
      const piece = tokenizer.decode(a.tokens[a.tokens.length - 1], token);
      a.tokens.push(token);
      a.pieces.push(piece);
      stats.generatedTokens++;
      opts.onToken?.(a.spec.id, token, piece);
      const generated = a.tokens.length - a.promptLength;
      if (generated >= a.spec.maxTokens) {
        done.add(a);
        finish(a, 'max-tokens');
      } else if (a.pos >= config.seqLen) {
        done.add(a);
        finish(a, 'context');
      }
    });
    const rows = active.length;
    if (done.size > 0) active = active.filter((a) => !done.has(a));
    const s3 = performance.now();

    stats.steps++;
    stats.forwardRows += rows;
    stats.sampledRows += S;
    stats.forwardMs += s1 - s0;
    stats.sampleMs += s2 - s1;
    stats.stepMs += s3 - s0;
    opts.onStep?.({ rows, sampled: S, forwardMs: s1 - s0, sampleMs: s2 - s1 });
  }
  stats.wallMs = performance.now() - t0;
  return { results, stats };
}
