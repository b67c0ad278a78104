// The README's table of errors (issue 6, "every bad input"), checked row by row: every error message
// in the table's second column is a key of `cases` below, and the calls of that case must fail with
// exactly that type and message (a message ending in "…" is a prefix). A row added to the README
// without a case here, or a case whose message the README lost, fails the first test. Rows that need
// a GPU are skipped with the reason where none is usable; `open('cuda')` without a GPU is skipped
// where one is.

import * as fs from 'fs';
import * as path from 'path';
import * as vm from 'vm';
import { gumbelFromBits, mergePartials, nccl, philox4x32_10, sampleFusedTP, type Communicator, open, sampleFused, sampleFusedInto, sampleReference, Tensor, timeSampler, type Device, PartialState, type SampleOptions, type Sampler, type SamplerConfig } from '../lib/index';
import { cudaStatus, failure, rng, runJsonNode } from './helpers';

const cpu = open('cpu');
const gpuState = cudaStatus();

// ------------------------------------------------------------------------------------------------
// The table, read from the README
// ------------------------------------------------------------------------------------------------

function readmeErrors(): string[] {
  const text = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8');
  const start = text.indexOf('### Errors');
  if (start < 0) throw new Error('README.md has no "### Errors" section');
  const rest = text.slice(start);
  const end = rest.search(/\n## /);
  const section = end < 0 ? rest : rest.slice(0, end);
  const messages: string[] = [];
  for (const line of section.split('\n')) {
    if (!line.startsWith('|') || /^\|\s*-/.test(line)) continue;
    const cells = line.split(/(?<!\\)\|/).slice(1, -1);
    if (cells.length < 2 || cells[0].trim() === 'input') continue;
    for (const m of cells[1].matchAll(/`([^`]+)`/g)) {
      if (/^(TypeError|RangeError|Error): /.test(m[1])) messages.push(m[1]);
    }
  }
  return messages;
}

// ------------------------------------------------------------------------------------------------
// Inputs: every case builds what it needs; the tensors are disposed after each test
// ------------------------------------------------------------------------------------------------

const made: Tensor[] = [];
function keep<T extends Tensor>(t: T): T {
  made.push(t);
  return t;
}
afterEach(() => {
  while (made.length) made.pop()!.dispose();
});

function values(n: number, seed: number): Float32Array {
  const r = rng(seed);
  return Float32Array.from({ length: n }, () => r() * 2 - 1);
}
const tensor = (dev: Device, shape: number[], dtype: 'f32' | 'f16' | 'bf16' = 'bf16', seed = 1) =>
  keep(dev.tensor(values(shape.reduce((a, b) => a * b, 1), seed), shape, dtype));
/** An i32 CPU tensor of these values (a list given as tensors). */
const i32Tensor = (a: number[]) => keep(cpu.tensor(Int32Array.from(a), [a.length], 'i32'));

/** B = 3 rows, V = 111 tokens, D = 8 on the CPU, bf16. */
function operands(dev: Device = cpu, dtype: 'f32' | 'f16' | 'bf16' = 'bf16') {
  return { H: tensor(dev, [3, 8], dtype, 1), W: tensor(dev, [111, 8], dtype, 2) };
}

/** A one-shard merge (V = 111, CPU) of a partial state whose header words `edit` changed:
 *  magic 0, version 1, batch 2, max_batch 3, num_samples 4, capacity 5, flags 14, row_bytes 15. */
async function mergeAltered(options: SampleOptions, edit: (header: Int32Array) => void) {
  const { H, W } = operands();
  const a = await sampleFused(H, W, { ...options, partial: true, vocabOffset: 0, vocabSize: 111 });
  const words = (await a.state.toRawArray()) as Int32Array;
  a.dispose();
  edit(words);
  const state = keep(cpu.tensor(words, [words.length], 'i32'));
  return mergePartials([new PartialState({ ...a, state })], options);
}

function gpu(): Device {
  return open('cuda');
}

// A sharded sampler (createSampler's tp) of a one-rank communicator, made once.
const shardedConfig: SamplerConfig = { maxBatch: 4, vocab: 1000, hidden: 8, dtype: 'f32' };
let commMade: Promise<Communicator> | undefined;
function sharedComm(): Promise<Communicator> {
  commMade ??= nccl.initRank(nccl.createUniqueId(), 1, 0, 'cuda:0');
  return commMade;
}
afterAll(async () => (commMade ? (await commMade).dispose() : undefined));
async function sharded(config: Partial<SamplerConfig>, tp: Record<string, unknown>): Promise<Sampler> {
  const comm = await sharedComm();
  return gpu().createSampler({ ...shardedConfig, ...config, tp: { comm, vocabOffset: 0, vocabSize: 1000, ...tp } as never });
}

/** open('cpu') in a child process with this environment (read at load): its error, rethrown here. */
function openCpuIn(env: Record<string, string>): void {
  const lib = JSON.stringify(path.join(__dirname, '..', 'dist', 'lib', 'index.js'));
  const script = `try { require(${lib}).open('cpu'); console.log('{}'); } ` +
    'catch (e) { console.log(JSON.stringify({ name: e.name, message: e.message })); }';
  const out = runJsonNode(['-e', script], env) as { name?: string; message?: string };
  if (out.message === undefined) return;
  throw out.name === 'TypeError' ? new TypeError(out.message) : new Error(out.message);
}

type Run = () => unknown;
interface Case {
  /** 'gpu': needs a usable GPU; 'nccl': a usable GPU and libnccl; 'no-gpu': only where none is usable. */
  needs?: 'gpu' | 'nccl' | 'no-gpu';
  /** Each call must fail with the message (a sync throw or a rejection). */
  runs: Run[];
}

const cases: Record<string, Case> = {
  [`TypeError: device: expected 'cpu', 'cuda', 'cuda:N' or 'auto', got "tpu"`]: {
    runs: [() => open('tpu' as never)],
  },
  [`TypeError: FLASHSAMPLE_CPU_ISA: expected 'avx512', 'avx2' or 'baseline' (or unset), got "avx-2"`]: {
    runs: [() => openCpuIn({ FLASHSAMPLE_CPU_ISA: 'avx-2' })],
  },
  [`Error: device: cannot open 'cuda': no usable GPU: …`]: {
    needs: 'no-gpu',
    runs: [() => open('cuda')],
  },
  [`RangeError: device: expected a CUDA device index below …`]: {
    needs: 'gpu',
    runs: [() => open('cuda:99' as never)],
  },
  [`RangeError: data: expected 12 elements for shape [3, 4], got Float32Array(10)`]: {
    runs: [() => cpu.tensor(new Float32Array(10), [3, 4], 'f32')],
  },
  [`RangeError: data: expected 12 elements for shape [3, 4], got Float32Array(13)`]: {
    runs: [() => cpu.tensor(new Float32Array(13), [3, 4], 'f32')],
  },
  [`TypeError: data: expected a Float32Array for dtype 'f32', got Int32Array(12)`]: {
    runs: [() => cpu.tensor(new Int32Array(12), [3, 4], 'f32')],
  },
  [`TypeError: shape: expected a non-empty array of non-negative integers, got []`]: {
    runs: [() => cpu.tensor(new Float32Array(1), [], 'f32'), () => cpu.empty([], 'f32')],
  },
  [`RangeError: shape: expected a non-empty array of non-negative integers, got [3, -4]`]: {
    runs: [() => cpu.tensor(new Float32Array(12), [3, -4], 'f32'), () => cpu.empty([3, -4], 'i32')],
  },
  [`RangeError: shape: expected a non-empty array of non-negative integers, got [1.5, 8]`]: {
    runs: [() => cpu.tensor(new Float32Array(12), [1.5, 8], 'f32')],
  },
  [`RangeError: shape: expected at most 2^50 elements in all, got [1099511627776, 1048576]`]: {
    runs: [() => cpu.empty([2 ** 40, 2 ** 20], 'f32')],
  },
  [`TypeError: dtype: expected one of 'f32', 'f16', 'bf16', 'i32', 'u64', got "f64"`]: {
    runs: [() => cpu.tensor(new Float32Array(4), [4], 'f64' as never), () => cpu.empty([4], 'f64' as never)],
  },
  [`Error: out of host memory allocating 4503599627370496 bytes`]: {
    // 4 PiB: beyond the 47-bit user address space of x86-64 and arm64 Linux, so it fails everywhere.
    runs: [() => cpu.empty([2 ** 50], 'f32')],
  },
  [`Error: cudaMallocFromPoolAsync failed: cudaErrorMemoryAllocation (out of memory)`]: {
    needs: 'gpu',
    runs: [() => gpu().empty([25_000_000_000], 'u64')], // 200 GB
  },
  [`TypeError: H: expected a Tensor (from Device.tensor), got an object`]: {
    runs: [
      () => sampleFused({} as never, operands().W),
      () => sampleReference({ shape: [3, 8], dtype: 'bf16' } as never, operands().W),
    ],
  },
  [`TypeError: W: expected a Tensor (from Device.tensor), got a Tensor that this copy of flashsample did not create`]: {
    runs: [
      // an object made from the prototype: instanceof says Tensor, but it has no native memory
      () => sampleFused(operands().H, Object.create(Tensor.prototype)),
      // a Tensor of another copy of the package (its own class, also named Tensor)
      () => {
        class Tensor {
          shape = [111, 8];
          dtype = 'bf16';
          disposed = false;
        }
        return sampleFused(operands().H, new Tensor() as never);
      },
    ],
  },
  [`TypeError: H: the tensor has been disposed`]: {
    runs: [
      () => {
        const { H, W } = operands();
        H.dispose();
        return sampleFused(H, W);
      },
      () => {
        const { H, W } = operands();
        H.dispose();
        return sampleReference(H, W, { method: 'gumbel' });
      },
    ],
  },
  [`TypeError: tensor: the tensor has been disposed`]: {
    runs: [
      () => {
        const t = cpu.tensor(new Float32Array(4), [4], 'f32');
        t.dispose();
        return t.toArray();
      },
    ],
  },
  [`RangeError: H: expected shape [B, D], got [4]`]: {
    runs: [() => sampleFused(tensor(cpu, [4]), operands().W)],
  },
  [`RangeError: W: expected shape [V, 64] (D of H), got [100, 32]`]: {
    runs: [() => sampleFused(tensor(cpu, [2, 64]), tensor(cpu, [100, 32]))],
  },
  [`RangeError: H: expected a batch size in [1, 65535], got 0`]: {
    runs: [() => sampleFused(tensor(cpu, [0, 8]), operands().W)],
  },
  [`RangeError: W: expected a vocabulary size in [1, 2^31 - 2], got 0`]: {
    runs: [() => sampleFused(operands().H, tensor(cpu, [0, 8]))],
  },
  [`RangeError: H: expected a hidden size D >= 1, got 0`]: {
    runs: [() => sampleFused(tensor(cpu, [3, 0]), tensor(cpu, [111, 0]))],
  },
  [`RangeError: H: expected a batch size in [1, 65535], got 65536`]: {
    runs: [() => sampleFused(tensor(cpu, [65536, 1]), tensor(cpu, [5, 1]))],
  },
  [`RangeError: W: expected a vocabulary size in [1, 2^31 - 2], got 2147483647`]: {
    // D = 0 keeps the tensors empty; the vocabulary is checked before the hidden size
    runs: [() => sampleFused(tensor(cpu, [1, 0]), tensor(cpu, [2 ** 31 - 1, 0]))],
  },
  [`TypeError: H: expected a float dtype ('f32', 'f16' or 'bf16'), got 'i32'`]: {
    runs: [() => sampleFused(keep(cpu.tensor(new Int32Array(24), [3, 8], 'i32')), keep(cpu.tensor(new Int32Array(888), [111, 8], 'i32')))],
  },
  [`TypeError: W: expected the dtype of H ('bf16'), got 'f16'`]: {
    runs: [() => sampleFused(tensor(cpu, [3, 8], 'bf16'), tensor(cpu, [111, 8], 'f16'))],
  },
  [`TypeError: W: expected a tensor on the device of H (cpu), got one on cuda:0`]: {
    needs: 'gpu',
    runs: [() => sampleFused(tensor(cpu, [3, 8], 'f32'), tensor(gpu(), [111, 8], 'f32'))],
  },
  [`TypeError: bias: expected a tensor on cpu, got Tensor(f32[100] on cuda:0)`]: {
    needs: 'gpu',
    runs: [() => sampleFused(tensor(cpu, [3, 8], 'f32'), tensor(cpu, [100, 8], 'f32'), { bias: tensor(gpu(), [100], 'f32') })],
  },
  [`TypeError: devicePointer: only CUDA tensors have one`]: {
    runs: [() => operands().H.devicePointer],
  },
  [`TypeError: options: expected an object, got 42`]: {
    runs: [() => sampleFused(operands().H, operands().W, 42 as never)],
  },
  [`TypeError: options: unknown option "temprature"; did you mean "temperature"? …`]: {
    runs: [
      () => sampleFused(operands().H, operands().W, { temprature: 0.5 } as never),
      () => sampleReference(operands().H, operands().W, { temprature: 0.5 } as never),
    ],
  },
  [`RangeError: temperature: expected a finite number >= 0, got NaN`]: {
    runs: [() => sampleFused(operands().H, operands().W, { temperature: NaN })],
  },
  [`RangeError: temperature[2]: expected a finite number >= 0, got -Infinity`]: {
    runs: [() => sampleFused(operands().H, operands().W, { temperature: new Float32Array([1, 0, -Infinity]) })],
  },
  [`TypeError: temperature: expected a number or a Float32Array of length 3, got "1"`]: {
    runs: [() => sampleFused(operands().H, operands().W, { temperature: '1' as never })],
  },
  [`RangeError: numSamples: expected an integer in [1, 65536], got 1.5`]: {
    runs: [() => sampleFused(operands().H, operands().W, { numSamples: 1.5 })],
  },
  [`RangeError: numSamples: expected batch * numSamples below 2^31 (batch is 65535), got 65536`]: {
    runs: [() => sampleFused(tensor(cpu, [65535, 1]), tensor(cpu, [5, 1]), { numSamples: 65536 })],
  },
  [`RangeError: seed: expected a bigint in [0, 2^64), got 18446744073709551616n`]: {
    runs: [() => sampleFused(operands().H, operands().W, { seed: 2n ** 64n })],
  },
  [`RangeError: offset: expected an integer in [0, 2^53) (use a bigint for larger values), got -1`]: {
    runs: [() => sampleFused(operands().H, operands().W, { offset: -1 })],
  },
  [`TypeError: seed: expected a number, a bigint, a BigUint64Array of length 3 or a u64 tensor, got "7"`]: {
    runs: [() => sampleFused(operands().H, operands().W, { seed: '7' as never })],
  },
  [`RangeError: seed: expected a BigUint64Array of length 3 (one per row), got BigUint64Array(2)`]: {
    runs: [() => sampleFused(operands().H, operands().W, { seed: new BigUint64Array(2) })],
  },
  [`RangeError: topP: expected a Float32Array of length 3 (one per row), got Float32Array(4)`]: {
    runs: [() => sampleFused(operands().H, operands().W, { topP: new Float32Array(4).fill(0.5) })],
  },
  [`RangeError: topK: expected an Int32Array of length 3 (one per row), got Int32Array(4)`]: {
    runs: [() => sampleFused(operands().H, operands().W, { topK: new Int32Array(4) })],
  },
  [`RangeError: offset: expected a u64 tensor of 3 elements (one per row), got Tensor(u64[2] on cpu)`]: {
    runs: [() => sampleFused(operands().H, operands().W, { offset: keep(cpu.tensor(new BigUint64Array(2), [2], 'u64')) })],
  },
  [`RangeError: seed: expected a u64 tensor of 3 elements (one per row), got Tensor(u64[4] on cpu)`]: {
    runs: [() => sampleFused(operands().H, operands().W, { seed: keep(cpu.tensor(new BigUint64Array(4), [4], 'u64')) })],
  },
  [`RangeError: topP: expected a number in (0, 1], got 0`]: {
    runs: [() => sampleFused(operands().H, operands().W, { topP: 0 })],
  },
  [`RangeError: topK: expected an integer in [0, 2147483647], got 2.5`]: {
    runs: [() => sampleFused(operands().H, operands().W, { topK: 2.5 })],
  },
  [`RangeError: topK: expected an integer in [0, 2147483647], got 2147483648`]: {
    runs: [() => sampleFused(operands().H, operands().W, { topK: 2 ** 31 })],
  },
  [`RangeError: topLogprobs: expected an integer in [0, 1024], got 1025`]: {
    runs: [() => sampleFused(operands().H, operands().W, { topLogprobs: 1025 })],
  },
  [`TypeError: softcap: expected a finite number >= 0, got "1"`]: {
    runs: [() => sampleFused(operands().H, operands().W, { softcap: '1' as never })],
  },
  [`TypeError: logprobs: expected a boolean, got 1`]: {
    runs: [() => sampleFused(operands().H, operands().W, { logprobs: 1 as never })],
  },
  [`TypeError: logprobsMode: expected 'processed' or 'raw', got "logits"`]: {
    runs: [
      () => sampleFused(operands().H, operands().W, { logprobsMode: 'logits' as never }),
      () => cpu.createSampler({ maxBatch: 4, vocab: 100, hidden: 8, dtype: 'f32', logprobsMode: 'logits' as never }),
    ],
  },
  [`RangeError: partials[0]: made without the raw section that logprobsMode 'raw' needs, or with another topLogprobs (give the shards the merge's options)`]: {
    runs: [
      async () => {
        const { H, W } = operands();
        const a = await sampleFused(H, W, { partial: true, vocabOffset: 0, vocabSize: 111, logprobs: true });
        return mergePartials([a], { logprobs: true, logprobsMode: 'raw' });
      },
      async () => {  // (a shard and a merge on the GPU, where one is usable)
        const { H, W } = operands(gpuState.usable ? gpu() : cpu);
        const a = await sampleFused(H, W, { partial: true, vocabOffset: 0, vocabSize: 111, topLogprobs: 2 });
        return mergePartials([a], { topLogprobs: 2, logprobsMode: 'raw' });
      },
    ],
  },
  [`RangeError: bias: expected shape [111], got [112]`]: {
    runs: [() => sampleFused(operands().H, operands().W, { bias: tensor(cpu, [112]) })],
  },
  [`TypeError: bias: expected dtype 'bf16' (the dtype of W), got 'f32'`]: {
    runs: [() => sampleFused(operands().H, operands().W, { bias: tensor(cpu, [111], 'f32') })],
  },
  [`RangeError: allowedTokens: expected a Uint32Array of 12 words (B * ceil(V / 32)), got Uint32Array(3)`]: {
    runs: [() => sampleFused(operands().H, operands().W, { allowedTokens: new Uint32Array(3) })],
  },
  [`RangeError: allowedTokens: expected a Uint32Array of 12 words (B * ceil(V / 32)), got Uint32Array(13)`]: {
    runs: [() => sampleFused(operands().H, operands().W, { allowedTokens: new Uint32Array(13) })],
  },
  [`RangeError: allowedTokens: expected an i32 tensor of 12 words (B * ceil(V / 32)), got Tensor(i32[13] on cpu)`]: {
    runs: [() => sampleFused(operands().H, operands().W, { allowedTokens: keep(cpu.tensor(new Int32Array(13).fill(-1), [13], 'i32')) })],
  },
  [`RangeError: out: expected an 'i32' tensor of 12 elements (B * numSamples), got Tensor(i32[3] on cpu)`]: {
    runs: [() => sampleFusedInto(keep(cpu.empty([3], 'i32')), operands().H, operands().W, { numSamples: 4 })],
  },
  [`RangeError: out: expected an 'i32' tensor of 12 elements (B * numSamples), got Tensor(i32[13] on cpu)`]: {
    runs: [() => sampleFusedInto(keep(cpu.empty([13], 'i32')), operands().H, operands().W, { numSamples: 4 })],
  },
  // The bench's timing entry (timeSampler)
  [`TypeError: kind: expected 'fused', 'reference-gumbel' or 'reference-inverse-cdf', got "magic"`]: {
    runs: [() => timeSampler('magic' as never, [operands()], {}, { warmup: 0, iters: 1 })],
  },
  [`TypeError: inputs: expected a non-empty array of {H, W}, got []`]: {
    runs: [() => timeSampler('fused', [], {}, { warmup: 0, iters: 1 })],
  },
  [`RangeError: inputs[1]: expected the shape and dtype of inputs[0], got H [3, 8], W [100, 8] bf16`]: {
    runs: [() => timeSampler('fused', [operands(), { H: operands().H, W: tensor(cpu, [100, 8], 'bf16', 2) }], {}, { warmup: 0, iters: 1 })],
  },
  [`RangeError: warmup: expected an integer >= 0, got -1`]: {
    runs: [() => timeSampler('fused', [operands()], {}, { warmup: -1, iters: 1 })],
  },
  [`RangeError: iters: expected an integer >= 1, got 0`]: {
    runs: [() => timeSampler('fused', [operands()], {}, { warmup: 0, iters: 0 })],
  },
  [`TypeError: method: expected 'inverse-cdf' or 'gumbel', got "magic"`]: {
    runs: [() => sampleReference(operands().H, operands().W, { method: 'magic' as never })],
  },
  [`RangeError: row 2: no token can be drawn: …`]: {
    runs: [
      () => {
        const mask = new Uint32Array(12).fill(0xffffffff);
        mask.fill(0, 8, 12); // row 2: nothing allowed
        const { H, W } = operands();
        return sampleFused(H, W, { allowedTokens: mask });
      },
      () => {
        const mask = new Uint32Array(12).fill(0xffffffff);
        mask.fill(0, 8, 12);
        const { H, W } = operands();
        return sampleReference(H, W, { allowedTokens: mask, method: 'gumbel' });
      },
    ],
  },
  [`RangeError: ptr: expected a non-null 64-bit device address, got 0n`]: {
    runs: [() => Tensor.fromDevicePointer(cpu, 0n, [4], 'f32')],
  },
  [`RangeError: ptr: expected a 16-byte aligned address (vectorized loads), got 4098n`]: {
    runs: [() => Tensor.fromDevicePointer(cpu, 4098n, [4], 'f32')],
  },
  [`RangeError: ptr: expected a 16-byte aligned address (vectorized loads), got 4104n`]: {
    runs: [() => Tensor.fromDevicePointer(cpu, 4104n, [4], 'f32')],  // (8-byte aligned only)
  },
  [`RangeError: ptr: expected a non-null 64-bit device address, got 18446744073709551616n`]: {
    runs: [() => Tensor.fromDevicePointer(cpu, 1n << 64n, [4], 'f32')],
  },
  [`TypeError: counter: expected an array of 4 words, got [1, 2, 3, 4, 5]`]: {
    runs: [() => philox4x32_10([1, 2, 3, 4, 5] as never, [1, 2])],
  },
  [`TypeError: key: expected an array of 2 words, got [1, 2, 3]`]: {
    runs: [() => philox4x32_10([1, 2, 3, 4], [1, 2, 3] as never)],
  },
  [`RangeError: counter[3]: expected a 32-bit unsigned integer, got 4294967296`]: {
    runs: [() => philox4x32_10([1, 2, 3, 2 ** 32], [1, 2])],
  },
  [`RangeError: bits: expected a 32-bit unsigned integer, got 4294967296`]: {
    runs: [() => gumbelFromBits(2 ** 32)],
  },
  [`TypeError: ptr: expected a bigint device address, got 4096`]: {
    runs: [() => Tensor.fromDevicePointer(cpu, 4096 as never, [4], 'f32')],
  },
  [`TypeError: device: expected a 'cuda' device, got cpu`]: {
    runs: [() => Tensor.fromDevicePointer(cpu, 4096n, [4], 'f32')],
  },
  [`Error: ptr: the pointer is not device memory …`]: {
    needs: 'gpu',
    runs: [
      () => {
        // the address of host memory (a CPU tensor's, 64-byte aligned), handed over as if on the GPU
        const host = tensor(cpu, [64], 'f32');
        return Tensor.fromDevicePointer(gpu(), host.handle('host').pointer, [64], 'f32');
      },
    ],
  },
  [`TypeError: stream: expected a bigint cudaStream_t handle, got 5`]: {
    runs: [() => sampleFused(operands().H, operands().W, { stream: 5 as never })],
  },
  [`RangeError: stream: expected a cudaStream_t handle in [0, 2^64), got -1n`]: {
    runs: [() => sampleFused(operands().H, operands().W, { stream: -1n })],
  },
  [`RangeError: stream: expected a cudaStream_t handle in [0, 2^64), got 18446744073709551616n`]: {
    runs: [() => sampleFused(operands().H, operands().W, { stream: 2n ** 64n })],
  },
  [`TypeError: stream: a CUDA stream needs tensors on a 'cuda' device, got tensors on cpu`]: {
    runs: [() => sampleFused(operands().H, operands().W, { stream: 0n })],
  },
  // The engine's way in (lib/sampler.ts)
  [`RangeError: maxBatch: expected an integer in [1, 65535], got 0`]: {
    runs: [() => cpu.createSampler({ maxBatch: 0, vocab: 100, hidden: 8, dtype: 'f32' })],
  },
  [`RangeError: maxBatch: expected an integer in [1, 65535], got 65536`]: {
    runs: [() => cpu.createSampler({ maxBatch: 65536, vocab: 100, hidden: 8, dtype: 'f32' })],
  },
  [`TypeError: createSampler: unknown option "logprob"; did you mean "logprobs"? …`]: {
    runs: [() => cpu.createSampler({ maxBatch: 4, vocab: 100, hidden: 8, dtype: 'f32', logprob: true } as never)],
  },
  [`TypeError: topP: this sampler was created without 'topP' in filters (createSampler({ filters }))`]: {
    runs: [() => sampler(cpu, { filters: ['topK'] }).setRows(0, { topP: new Float32Array([0.9]) })],
  },
  [`RangeError: rows: expected 1 .. 1 rows from row 3 (maxBatch is 4), got 2 rows`]: {
    runs: [() => sampler(cpu).setRows(3, { temperature: new Float32Array(2) })],
  },
  [`RangeError: bannedTokens.rowOffsets: expected an 'i32' tensor on cpu of 4 elements, got Tensor(i32[2] on cpu)`]: {
    runs: [
      () => {
        const { H, W } = operands(cpu);
        return sampleFused(H, W, { bannedTokens: { rowOffsets: keep(cpu.tensor(new Int32Array(2), [2], 'i32')), tokenIds: keep(cpu.tensor(new Int32Array(1), [1], 'i32')) } });
      },
    ],
  },
  [`RangeError: bannedTokens.rowOffsets: expected an 'i32' tensor on cpu of 4 elements, got Tensor(i32[5] on cpu)`]: {
    runs: [
      () => {
        const { H, W } = operands(cpu);
        return sampleFused(H, W, { bannedTokens: { rowOffsets: i32Tensor([0, 0, 0, 1, 1]), tokenIds: i32Tensor([5]) } });
      },
    ],
  },
  [`RangeError: penaltyTokens: row 1 holds a token id outside [0, V), a repeated id, a non-finite bias, a negative count or offsets out of order (tensor lists are checked on the device)`]: {
    runs: [
      () => {
        const { H, W } = operands(cpu);
        return sampleFused(H, W, { penaltyTokens: { rowOffsets: i32Tensor([0, 1, 2, 2]), tokenIds: i32Tensor([5, 111]), outputCounts: i32Tensor([1, 1]), inPrompt: i32Tensor([0, 0]) } });
      },
    ],
  },
  [`RangeError: penaltyCapacity: expected an integer in [0, 65536], got 70000`]: {
    runs: [() => sampler(cpu, { penaltyCapacity: 70000 })],
  },
  [`RangeError: penaltyCapacity: expected 0 with numSamples > 1 (a row has one output to count), got 8`]: {
    runs: [() => sampler(cpu, { penaltyCapacity: 8, numSamples: 2 })],
  },
  [`TypeError: repetitionPenalty: this sampler was created without a penalty table (createSampler({ penaltyCapacity }))`]: {
    runs: [() => sampler(cpu).setRows(0, { repetitionPenalty: new Float32Array([1.2]) })],
  },
  [`TypeError: setPenaltyTokens: this sampler was created without a penalty table (createSampler({ penaltyCapacity }))`]: {
    runs: [() => sampler(cpu).setPenaltyTokens(0, penaltyTokens([[1]]))],
  },
  [`TypeError: setLogitBias: this sampler was created without a logit-bias table (createSampler({ logitBiasCapacity }))`]: {
    runs: [() => sampler(cpu, { penaltyCapacity: 2 }).setLogitBias(0, { rowOffsets: new Int32Array([0, 1]), tokenIds: new Int32Array([1]), values: new Float32Array([1]) })],
  },
  [`TypeError: minTokens: this sampler was created without a banned-token table (createSampler({ bannedCapacity }))`]: {
    runs: [() => sampler(cpu).setRows(0, { minTokens: new Int32Array([2]) })],
  },
  [`RangeError: minTokens[0]: expected an integer >= 0 (the steps the banned tokens still apply), got -1`]: {
    runs: [() => sampler(cpu, { bannedCapacity: 2 }).setRows(0, { minTokens: new Int32Array([-1]) })],
  },
  [`RangeError: bannedCapacity: expected 0 with numSamples > 1 (a row has one output to count), got 2`]: {
    runs: [() => sampler(cpu, { bannedCapacity: 2, numSamples: 2 })],
  },
  [`RangeError: bannedTokens.rowOffsets[1]: expected at most 1 tokens in row 0 (the sampler's bannedCapacity), got 2 tokens`]: {
    runs: [() => sampler(cpu, { bannedCapacity: 1 }).setBannedTokens(0, { rowOffsets: new Int32Array([0, 2]), tokenIds: new Int32Array([3, 4]) })],
  },
  [`Error: setBannedTokens: cannot run during graph capture …`]: {
    needs: 'gpu',
    runs: [
      () => {
        const s = sampler(gpu(), { bannedCapacity: 2 });
        return gpu().captureGraph(() => s.setBannedTokens(0, { rowOffsets: new Int32Array([0, 1]), tokenIds: new Int32Array([1]) }));
      },
    ],
  },
  [`TypeError: recordTokens: this sampler was created without a penalty or banned-token table (createSampler({ penaltyCapacity, bannedCapacity }))`]: {
    runs: [() => sampler(cpu).enqueue({ H: tensor(cpu, [3, 8], 'f32'), W: tensor(cpu, [100, 8], 'f32'), out: keep(cpu.empty([3], 'i32')), recordTokens: true })],
  },
  [`RangeError: repetitionPenalty[0]: expected a finite number > 0 (1 = off), got 0`]: {
    runs: [() => sampler(cpu, { penaltyCapacity: 2 }).setRows(0, { repetitionPenalty: new Float32Array([0]) })],
  },
  [`RangeError: topP[0]: expected a number in (0, 1] (1 = off), got 0`]: {
    runs: [() => sampler(cpu, { filters: ['topP'] }).setRows(0, { topP: new Float32Array([0]) })],
  },
  [`RangeError: minP[0]: expected a number in [0, 1) (0 = off), got 1`]: {
    runs: [() => sampler(cpu, { filters: ['minP'] }).setRows(0, { minP: new Float32Array([1]) })],
  },
  [`RangeError: temperature[0]: expected a finite number >= 0 (0 = greedy), got Infinity`]: {
    runs: [() => sampler(cpu).setRows(0, { temperature: new Float32Array([Infinity]) })],
  },
  [`RangeError: batch: expected at most the 3 rows of H, got 4`]: {
    runs: [() => sampler(cpu).enqueue({ H: tensor(cpu, [3, 8], 'f32'), W: tensor(cpu, [100, 8], 'f32'), out: keep(cpu.empty([4], 'i32')), batch: 4 })],
  },
  [`RangeError: allowedTokens: expected an 'i32' tensor of at least 12 elements (B * ceil(V / 32) words), got Tensor(i32[9] on cpu)`]: {
    // V = 100: four words a row, the last partial
    runs: [() => sampler(cpu, { allowedTokens: true }).enqueue({ H: tensor(cpu, [3, 8], 'f32'), W: tensor(cpu, [100, 8], 'f32'), out: keep(cpu.empty([3], 'i32')), allowedTokens: keep(cpu.tensor(new Int32Array(9).fill(-1), [9], 'i32')) })],
  },
  [`RangeError: bias: expected shape [100], got [101]`]: {
    runs: [() => sampler(cpu).enqueue({ H: tensor(cpu, [3, 8], 'f32'), W: tensor(cpu, [100, 8], 'f32'), out: keep(cpu.empty([3], 'i32')), bias: tensor(cpu, [101], 'f32') })],
  },
  [`RangeError: penaltyTokens.rowOffsets[1]: expected at most 2 tokens in row 0 (the sampler's penaltyCapacity), got 3 tokens`]: {
    runs: [() => sampler(cpu, { penaltyCapacity: 2 }).setPenaltyTokens(0, penaltyTokens([[1, 2, 3]]))],
  },
  [`RangeError: penaltyTokens.rowOffsets: expected an Int32Array of 2 .. 2 values (rows from row 3, maxBatch 4, + 1), got Int32Array(3)`]: {
    runs: [() => sampler(cpu, { penaltyCapacity: 2 }).setPenaltyTokens(3, penaltyTokens([[1], [2]]))],
  },
  [`RangeError: first: expected an integer in [0, 3] (maxBatch is 4), got 4`]: {
    runs: [() => sampler(cpu, { penaltyCapacity: 2 }).setPenaltyTokens(4, penaltyTokens([[1]]))],
  },
  [`Error: setPenaltyTokens: cannot run during graph capture …`]: {
    needs: 'gpu',
    runs: [
      () => {
        const s = sampler(gpu(), { penaltyCapacity: 2 });
        return gpu().captureGraph(() => s.setPenaltyTokens(0, penaltyTokens([[1]])));
      },
    ],
  },
  [`RangeError: H: expected at most maxBatch = 4 rows, got [5, 8]`]: {
    runs: [() => sampler(cpu).enqueue({ H: tensor(cpu, [5, 8], 'f32'), W: tensor(cpu, [100, 8], 'f32'), out: keep(cpu.empty([5], 'i32')) })],
  },
  [`RangeError: W: expected shape [100, 8] (the sampler's vocab and hidden size), got [111, 8]`]: {
    runs: [() => sampler(cpu).enqueue({ H: tensor(cpu, [3, 8], 'f32'), W: tensor(cpu, [111, 8], 'f32'), out: keep(cpu.empty([3], 'i32')) })],
  },
  [`TypeError: logprobsOut: expected an 'f32' tensor of at least 3 elements (the sampler was created with logprobs), got undefined`]: {
    runs: [() => sampler(cpu, { logprobs: true }).enqueue({ H: tensor(cpu, [3, 8], 'f32'), W: tensor(cpu, [100, 8], 'f32'), out: keep(cpu.empty([3], 'i32')) })],
  },
  [`TypeError: logprobsOut: this sampler was created without logprobs (createSampler({ logprobs: true }))`]: {
    runs: [
      () => {
        const out = keep(cpu.empty([3], 'i32'));
        return sampler(cpu).enqueue({ H: tensor(cpu, [3, 8], 'f32'), W: tensor(cpu, [100, 8], 'f32'), out, logprobsOut: out });
      },
    ],
  },
  [`TypeError: enqueue: the sampler has been disposed`]: {
    runs: [
      () => {
        const s = sampler(cpu);
        s.dispose();
        return s.enqueue({ H: tensor(cpu, [3, 8], 'f32'), W: tensor(cpu, [100, 8], 'f32'), out: keep(cpu.empty([3], 'i32')) });
      },
    ],
  },
  [`TypeError: launch: the graph has been disposed`]: {
    needs: 'gpu',
    runs: [
      () => {
        const g = gpu().captureGraph(() => undefined);
        g.dispose();
        return g.launch();
      },
    ],
  },
  [`TypeError: captureGraph: CUDA graphs need a 'cuda' device, got cpu`]: {
    runs: [() => cpu.captureGraph(() => undefined)],
  },
  [`TypeError: createStream: streams need a 'cuda' device, got cpu`]: {
    runs: [() => cpu.createStream()],
  },
  [`TypeError: fn: expected a synchronous function (it returned a promise): the capture ends when fn returns`]: {
    needs: 'gpu',
    runs: [() => gpu().captureGraph(async () => undefined)],
  },
  [`Error: tensor: cannot allocate device memory during graph capture (captureGraph): allocate tensors before the capture`]: {
    needs: 'gpu',
    runs: [() => gpu().captureGraph(() => gpu().empty([4], 'f32')), () => gpu().captureGraph(() => gpu().tensor(new Float32Array(4), [4], 'f32'))],
  },
  [`Error: setRows: cannot run during graph capture …`]: {
    needs: 'gpu',
    runs: [
      () => {
        const s = sampler(gpu());
        return gpu().captureGraph(() => s.setRows(0, { temperature: new Float32Array([1]) }));
      },
    ],
  },
  [`Error: sampleFused: cannot run during graph capture …`]: {
    needs: 'gpu',
    runs: [
      () => {
        const { H, W } = operands(gpu());
        let call: Promise<unknown> | undefined;
        gpu()
          .captureGraph(() => {
            call = sampleFused(H, W);
          })
          .dispose();
        return call;
      },
    ],
  },
  [`Error: enqueue: stream is not the stream being captured (pass captureGraph's stream, or none)`]: {
    needs: 'gpu',
    runs: [
      () => {
        const dev = gpu();
        const s = sampler(dev);
        const stream = dev.createStream();
        const args = { H: tensor(dev, [3, 8], 'f32'), W: tensor(dev, [100, 8], 'f32'), out: keep(dev.empty([3], 'i32')), stream };
        try {
          return dev.captureGraph(() => s.enqueue(args));
        } finally {
          dev.destroyStream(stream);
        }
      },
    ],
  },
  // Logit bias, bans and penalties (B = 3, V = 111)
  [`RangeError: bannedTokens.tokenIds[1]: expected a token id in [0, 111) (row 0), got 111`]: {
    runs: [() => sampleFused(operands().H, operands().W, { bannedTokens: { rowOffsets: Int32Array.from([0, 2, 2, 2]), tokenIds: Int32Array.from([5, 111]) } })],
  },
  [`RangeError: logitBias.tokenIds[1]: expected a token id not listed before in row 0, got 5`]: {
    runs: [
      () =>
        sampleFused(operands().H, operands().W, {
          logitBias: { rowOffsets: Int32Array.from([0, 2, 2, 2]), tokenIds: Int32Array.from([5, 5]), values: new Float32Array(2) },
        }),
    ],
  },
  [`RangeError: bannedTokens.rowOffsets[2]: expected a value >= rowOffsets[1] = 2 (non-decreasing), got 1`]: {
    runs: [() => sampleFused(operands().H, operands().W, { bannedTokens: { rowOffsets: Int32Array.from([0, 2, 1, 2]), tokenIds: Int32Array.from([5, 6]) } })],
  },
  [`RangeError: bannedTokens.rowOffsets[3]: expected the length of tokenIds (2), got 3`]: {
    runs: [() => sampleFused(operands().H, operands().W, { bannedTokens: { rowOffsets: Int32Array.from([0, 1, 2, 3]), tokenIds: Int32Array.from([5, 6]) } })],
  },
  [`RangeError: bannedTokens.rowOffsets[3]: expected the length of tokenIds (2), got 1`]: {
    runs: [() => sampleFused(operands().H, operands().W, { bannedTokens: { rowOffsets: new Int32Array([0, 0, 0, 1]), tokenIds: new Int32Array([5, 6]) } })],
  },
  [`RangeError: bannedTokens.rowOffsets: expected an Int32Array of length 4 (B + 1), got Int32Array(5)`]: {
    runs: [() => sampleFused(operands().H, operands().W, { bannedTokens: { rowOffsets: new Int32Array([0, 0, 0, 1, 1]), tokenIds: new Int32Array([5]) } })],
  },
  [`RangeError: penaltyTokens.outputCounts[0]: expected a count >= 0, got -1`]: {
    runs: [
      () =>
        sampleFused(operands().H, operands().W, {
          penaltyTokens: { rowOffsets: Int32Array.from([0, 1, 1, 1]), tokenIds: Int32Array.from([5]), outputCounts: Int32Array.from([-1]), inPrompt: new Uint8Array(1) },
        }),
    ],
  },
  [`RangeError: repetitionPenalty: expected a finite number > 0, got 0`]: {
    runs: [
      () =>
        sampleFused(operands().H, operands().W, {
          penaltyTokens: { rowOffsets: Int32Array.from([0, 1, 1, 1]), tokenIds: Int32Array.from([5]), outputCounts: Int32Array.from([1]), inPrompt: new Uint8Array(1) },
          repetitionPenalty: 0,
        }),
    ],
  },
  [`TypeError: presencePenalty: needs penaltyTokens (the tokens it applies to, with their counts)`]: {
    runs: [() => sampleFused(operands().H, operands().W, { presencePenalty: 0.5 })],
  },
  // Vocabulary shards (B = 3, a shard of 111 rows)
  [`RangeError: vocabOffset: expected a multiple of 4 (one Philox block serves an aligned quad of tokens; pad shards to multiples of 4), got 2`]: {
    runs: [() => sampleFused(operands().H, operands().W, { partial: true, vocabOffset: 2, vocabSize: 200 })],
  },
  [`RangeError: vocabOffset: expected an integer in [0, 89] (vocabOffset + 111 rows of W <= vocabSize), got 92`]: {
    runs: [() => sampleFused(operands().H, operands().W, { partial: true, vocabOffset: 92, vocabSize: 200 })],
  },
  [`RangeError: vocabSize: expected an integer in [111, 2147483646] (the unsharded vocabulary, >= the rows of W), got 100`]: {
    runs: [() => sampleFused(operands().H, operands().W, { partial: true, vocabOffset: 0, vocabSize: 100 })],
  },
  [`RangeError: vocabSize: expected an integer in [111, 2147483646] (the unsharded vocabulary, >= the rows of W), got 2147483647`]: {
    runs: [() => sampleFused(operands().H, operands().W, { partial: true, vocabOffset: 0, vocabSize: 2 ** 31 - 1 })],
  },
  [`RangeError: partials[1]: made with other per-row options than the merge's (temperature, seed, offset, numSamples, topK, topP, minP, logprobs, topLogprobs or filterOrder differ)`]: {
    runs: [
      async () => {
        const { H, W } = operands();
        const W112 = tensor(cpu, [112, 8], 'bf16', 3);
        const a = await sampleFused(H, W112, { partial: true, vocabOffset: 0, vocabSize: 223, seed: 1n });
        const b = await sampleFused(H, W, { partial: true, vocabOffset: 112, vocabSize: 223, seed: 2n });
        return mergePartials([a, b], { seed: 1n });
      },
    ],
  },
  [`RangeError: partials: the shards do not cover the vocabulary [0, 200) exactly once (partials[0] overlaps another or leaves a gap)`]: {
    runs: [
      async () => {
        const { H, W } = operands();
        const a = await sampleFused(H, W, { partial: true, vocabOffset: 0, vocabSize: 200 });
        const b = await sampleFused(H, W, { partial: true, vocabOffset: 88, vocabSize: 200 });
        return mergePartials([a, b]);
      },
    ],
  },
  [`RangeError: partials[1]: made for another batch size than partials[0] (3 rows)`]: {
    runs: [
      async () => {
        const { H, W } = operands();
        const a = await sampleFused(H, keep(tensor(cpu, [112, 8], 'bf16', 3)), { partial: true, vocabOffset: 0, vocabSize: 223 });
        const b = await sampleFused(keep(tensor(cpu, [2, 8], 'bf16', 4)), W, { partial: true, vocabOffset: 112, vocabSize: 223 });
        return mergePartials([a, b]);
      },
    ],
  },
  [`RangeError: partials[1]: made with another numSamples than the merge's options`]: {
    runs: [
      async () => {
        const { H, W } = operands();
        const a = await sampleFused(H, keep(tensor(cpu, [112, 8], 'bf16', 3)), { partial: true, vocabOffset: 0, vocabSize: 223, numSamples: 3 });
        const b = await sampleFused(H, W, { partial: true, vocabOffset: 112, vocabSize: 223, numSamples: 2 });
        return mergePartials([a, b], { numSamples: 3 });
      },
    ],
  },
  [`RangeError: partials[1]: made for another vocabulary size than partials[0] (223)`]: {
    runs: [
      async () => {
        const { H, W } = operands();
        const a = await sampleFused(H, keep(tensor(cpu, [112, 8], 'bf16', 3)), { partial: true, vocabOffset: 0, vocabSize: 223 });
        const b = await sampleFused(H, W, { partial: true, vocabOffset: 112, vocabSize: 224 });
        return mergePartials([a, b]);
      },
    ],
  },
  // States that reach a merge from elsewhere (another process's bytes, another version's layout):
  // the header is checked before anything of a row is read.
  [`TypeError: partials[0]: not a partial state (its header's magic or version is wrong)`]: {
    runs: [
      () => mergeAltered({}, (h) => (h[0] ^= 1)),  // magic
      () => mergeAltered({}, (h) => (h[1] = 2)),  // version
    ],
  },
  [`TypeError: partials[0]: its header does not match its size (not a partial state of this layout)`]: {
    runs: [
      () => mergeAltered({}, (h) => (h[15] += 8)),  // row_bytes
      () => mergeAltered({}, (h) => (h[2] = h[3] + 1)),  // batch above max_batch
      () => mergeAltered({}, (h) => (h[5] = 1 << 30)),  // capacity past the block
    ],
  },
  [`RangeError: partials[0]: made without the statistics that filters and logprobs need (give the shards the merge's options)`]: {
    runs: [
      () => mergeAltered({ topK: 5 }, (h) => (h[14] &= ~1)),  // flags: kPartialStats cleared
      () => mergeAltered({ logprobs: true }, (h) => (h[14] &= ~1)),
    ],
  },
  [`TypeError: softcap: applies to a shard's own rows of W: give it to sampleFused(H, Wshard, { partial: true, ... })`]: {
    runs: [
      async () => {
        const { H, W } = operands();
        return mergePartials([await sampleFused(H, W, { partial: true, vocabOffset: 0, vocabSize: 111 })], { softcap: 2 });
      },
    ],
  },
  [`TypeError: partials[0]: expected a partial state (sampleFused with partial: true), got an object`]: {
    runs: [() => mergePartials([{} as PartialState])],
  },
  // NCCL (validated before the library is loaded: the same everywhere)
  [`TypeError: id: expected a Uint8Array of 128 bytes (nccl.createUniqueId()), got Uint8Array(12)`]: {
    runs: [() => nccl.initRank(new Uint8Array(12), 2, 0, 0)],
  },
  [`RangeError: rank: expected an integer in [0, 1], got 2`]: {
    runs: [() => nccl.initRank(new Uint8Array(128), 2, 2, 0)],
  },
  [`RangeError: timeoutMs: expected an integer number of milliseconds in [1, 2^31 - 1], got 0`]: {
    runs: [() => nccl.initRank(new Uint8Array(128), 1, 0, 0, { timeoutMs: 0 })],
  },
  [`TypeError: comm: expected a Communicator (nccl.initRank or nccl.initAll), got an object`]: {
    runs: [() => sampleFusedTP({} as Communicator, operands().H, operands().W, { vocabOffset: 0, vocabSize: 111 })],
  },
  [`TypeError: listIds: expected 'local' or 'global', got "ids"`]: {
    runs: [() => sampleFused(operands().H, operands().W, { partial: true, vocabOffset: 0, vocabSize: 111, listIds: 'ids' } as never)],
  },
  [`TypeError: tp: a sharded sampler needs a 'cuda' device, got cpu`]: {
    runs: [() => cpu.createSampler({ ...shardedConfig, tp: { comm: {} as Communicator, vocabOffset: 0, vocabSize: 1000 } })],
  },
  [`TypeError: tp.comm: the communicator was aborted or disposed`]: {
    needs: 'nccl',
    runs: [async () => {
      const comm = await nccl.initRank(nccl.createUniqueId(), 1, 0, 'cuda:0');
      comm.dispose();
      return gpu().createSampler({ ...shardedConfig, tp: { comm, vocabOffset: 0, vocabSize: 1000 } });
    }],
  },
  [`TypeError: tp.comm: expected a Communicator (nccl.initRank), got an object`]: {
    needs: 'gpu',
    runs: [() => gpu().createSampler({ ...shardedConfig, tp: { comm: {} as Communicator, vocabOffset: 0, vocabSize: 1000 } })],
  },
  [`TypeError: tp.comm: one of nccl.initAll's 2 communicators, driven from one thread: a sharded sampler needs one process per GPU (nccl.initRank); use sampleFusedTP(comms, shards) here`]: {
    needs: 'nccl',
    // (one GPU here: a communicator of this process's rank, counted as one of initAll's two)
    runs: [async () => {
      const comm = await sharedComm();
      const Ctor = comm.constructor as new (handle: unknown, timeoutMs: number, localRanks: number) => Communicator;
      return gpu().createSampler({ ...shardedConfig, tp: { comm: new Ctor(comm.handle, 30_000, 2), vocabOffset: 0, vocabSize: 1000 } });
    }],
  },
  [`RangeError: tp.vocabOffset: expected a multiple of 4 (one Philox block serves an aligned quad of tokens; pad shards to multiples of 4), got 2`]: {
    needs: 'nccl',
    runs: [async () => sharded({}, { vocabOffset: 2, vocabSize: 1002 })],
  },
  [`RangeError: tp.vocabOffset: expected an integer in [0, 0] (vocabOffset + vocab 1000 <= vocabSize), got 4`]: {
    needs: 'nccl',
    runs: [async () => sharded({}, { vocabOffset: 4 })],
  },
  [`RangeError: tp.maxShardVocab: expected at least this shard's vocab 1000 (the most rows any rank's shard holds; every rank the same), got 999`]: {
    needs: 'nccl',
    runs: [async () => sharded({}, { maxShardVocab: 999 })],
  },
  [`RangeError: tp.rowsPassRows: expected an integer in [0, 4] (at most maxBatch), got 5`]: {
    needs: 'nccl',
    runs: [async () => sharded({}, { rowsPassRows: 5 })],
  },
  [`Error: stream: expected a stream that createStream made on this device and not yet destroyed`]: {
    needs: 'gpu',
    runs: [() => gpu().destroyStream(12345n)],
  },
};

/** A sampler of maxBatch 4 for V = 100, D = 8, f32, disposed after the test. */
function sampler(dev: Device, extra: Partial<SamplerConfig> = {}): Sampler {
  const s = dev.createSampler({ maxBatch: 4, vocab: 100, hidden: 8, dtype: 'f32', ...extra });
  samplers.push(s);
  return s;
}
const samplers: Sampler[] = [];
/** setPenaltyTokens' argument for rows of prompt tokens. */
function penaltyTokens(rows: number[][]) {
  const ids = rows.flat();
  return {
    rowOffsets: Int32Array.from({ length: rows.length + 1 }, (_, b) => rows.slice(0, b).flat().length),
    tokenIds: Int32Array.from(ids),
    outputCounts: new Int32Array(ids.length),
    inPrompt: new Uint8Array(ids.length).fill(1),
  };
}
afterEach(() => {
  while (samplers.length) samplers.pop()!.dispose();
});

// ------------------------------------------------------------------------------------------------
// The tests
// ------------------------------------------------------------------------------------------------

/** `Type: message` of a failure; the type by constructor name (native errors come from Node's
 *  realm, not jest's, so instanceof would not do). */
function render(e: Error): string {
  return `${e?.constructor?.name}: ${e?.message}`;
}

function matches(got: string, documented: string): boolean {
  return documented.endsWith('…') ? got.startsWith(documented.slice(0, -1)) : got === documented;
}

test('every error in the README table has a case here, and every case is in the table', () => {
  const documented = readmeErrors();
  expect(documented.length).toBeGreaterThan(40);
  expect(new Set(documented).size).toBe(documented.length); // each message once
  expect([...documented].sort()).toEqual(Object.keys(cases).sort());
});

describe('README error table', () => {
  for (const [message, c] of Object.entries(cases)) {
    const skip =
      (c.needs === 'gpu' || c.needs === 'nccl') && !gpuState.usable
        ? `needs a GPU: ${gpuState.reason}`
        : c.needs === 'nccl' && !nccl.status().loaded
          ? `needs libnccl: ${nccl.status().error}`
        : c.needs === 'no-gpu' && gpuState.usable
          ? 'a GPU is usable here'
          : '';
    if (skip) {
      test.skip(`${message} — skipped: ${skip}`, () => undefined);
      continue;
    }
    test(message, async () => {
      for (const run of c.runs) {
        const got = render(await failure(run));
        if (!matches(got, message)) expect(got).toEqual(message); // fails, showing both
      }
    });
  }

  test('after all of these errors the library still samples', async () => {
    const { H, W } = operands();
    const a = await sampleFused(H, W, { seed: 9n, numSamples: 2 });
    const b = await sampleReference(H, W, { seed: 9n, numSamples: 2, method: 'gumbel' });
    expect(Array.from(a.tokens)).toEqual(Array.from(b.tokens));
    for (const t of a.tokens) expect(t >= 0 && t < 111).toBe(true);
  });

  (gpuState.usable ? test : test.skip)(
    `after a device out-of-memory error the next call on the GPU works${gpuState.usable ? '' : ` — skipped: needs a GPU: ${gpuState.reason}`}`,
    async () => {
      const dev = gpu();
      await failure(() => dev.empty([25_000_000_000], 'u64'));
      const { H, W } = operands(dev);
      const r = await sampleFused(H, W, { seed: 9n });
      expect(r.tokens.length).toBe(3);
      for (const t of r.tokens) expect(t >= 0 && t < 111).toBe(true);
    },
  );
});

describe('inputs that must be accepted', () => {
  test('typed arrays from another realm (a vm context) work like local ones', async () => {
    const foreign = vm.runInNewContext('({ f32: (n) => new Float32Array(n), u64: (n) => new BigUint64Array(n), u32: (n) => new Uint32Array(n) })') as {
      f32: (n: number) => Float32Array;
      u64: (n: number) => BigUint64Array;
      u32: (n: number) => Uint32Array;
    };
    expect(foreign.f32(1)).not.toBeInstanceOf(Float32Array); // really from another realm
    const local = { H: values(24, 1), W: values(888, 2) };
    const h = foreign.f32(24);
    h.set(local.H);
    const w = foreign.f32(888);
    w.set(local.W);
    const seeds = foreign.u64(3);
    seeds.set([1n, 2n, 3n]);
    const temps = foreign.f32(3);
    temps.set([0.5, 1, 2]);
    const mask = foreign.u32(12);
    mask.fill(0xffffffff);
    const H1 = keep(cpu.tensor(h, [3, 8], 'bf16'));
    const W1 = keep(cpu.tensor(w, [111, 8], 'bf16'));
    const H2 = keep(cpu.tensor(local.H, [3, 8], 'bf16'));
    const W2 = keep(cpu.tensor(local.W, [111, 8], 'bf16'));
    const a = await sampleFused(H1, W1, { seed: seeds, temperature: temps, allowedTokens: mask, numSamples: 8 });
    const b = await sampleFused(H2, W2, {
      seed: new BigUint64Array([1n, 2n, 3n]),
      temperature: new Float32Array([0.5, 1, 2]),
      allowedTokens: new Uint32Array(12).fill(0xffffffff),
      numSamples: 8,
    });
    expect(Array.from(a.tokens)).toEqual(Array.from(b.tokens));
  });

  test('empty tensors can be made (shape [0, 8]); only the samplers reject them', () => {
    const t = keep(cpu.empty([0, 8], 'f32'));
    expect(t.size).toBe(0);
    expect(keep(cpu.tensor(new Float32Array(0), [0], 'f32')).size).toBe(0);
  });
});
