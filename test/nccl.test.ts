// The NCCL communicator (issue 18): libnccl loaded at run time, and sampleFusedTP end to end with
// the real NCCL on one GPU (one rank through initRank, one through initAll): the same tokens as
// sampleFused, the rows pass for undecided rows (their values all-gathered), a rank that never joins timing out, and the
// argument errors. The multi-GPU runs are issue 19's (scripts/tp-session.sh).

import { execFileSync } from 'child_process';
import * as path from 'path';
import { Communicator, nccl, open, sampleFused, sampleFusedTP, type SampleOptions } from '../lib/index';
import { failure, flatLogits, makeTensor, ncclStatus, rng, runRanks, zipfLogits } from './helpers';

const status = nccl.status();
const { runs, skipWhy } = ncclStatus();

describe('loading libnccl', () => {
  test('status() says which library was loaded, or every path it tried and why', () => {
    if (status.loaded) {
      expect(status.version).toBeGreaterThanOrEqual(21700);
      expect(status.path.length).toBeGreaterThan(0);
    } else {
      expect(status.error).toMatch(/^NCCL: (cannot load libnccl: tried |this build of flashsample has no CUDA backend)/);
      expect(() => nccl.createUniqueId()).toThrow(status.error);
    }
  });

  test('FLASHSAMPLE_NCCL_LIB names the library; a wrong path is an error naming it', () => {
    const root = path.join(__dirname, '..');
    const out = execFileSync(process.execPath, ['-e', "console.log(JSON.stringify(require('./dist/lib/index.js').nccl.status()))"], {
      cwd: root,
      env: { ...process.env, FLASHSAMPLE_NCCL_LIB: '/nonexistent/libnccl.so.2' },
    }).toString();
    const s = JSON.parse(out);
    expect(s.loaded).toBe(false);
    expect(s.error).toMatch(/tried \/nonexistent\/libnccl\.so\.2 \(|no CUDA backend/);
  });

  test.each([
    [() => nccl.initRank(new Uint8Array(12), 2, 0, 0), TypeError, /id: expected a Uint8Array of 128 bytes/],
    [() => nccl.initRank(new Uint8Array(128), 0, 0, 0), RangeError, /nranks: expected an integer in \[1, 65536\]/],
    [() => nccl.initRank(new Uint8Array(128), 2, 2, 0), RangeError, /rank: expected an integer in \[0, 1\]/],
    [() => nccl.initRank(new Uint8Array(128), 1, 0, open('cpu')), TypeError, /device: expected a 'cuda' device/],
    [() => nccl.initRank(new Uint8Array(128), 1, 0, 0, { timeoutMs: 0 }), RangeError, /timeoutMs: expected an integer number of milliseconds/],
    [() => nccl.initAll([]), TypeError, /devices: expected a non-empty array of CUDA devices/],
  ])('bad arguments fail clearly (%#)', async (call, kind, message) => {
    const e = await failure(call);
    expect(e).toBeInstanceOf(kind);
    expect(e.message).toMatch(message);
  });
});

(runs ? describe : describe.skip)(`NCCL on one GPU${runs ? '' : ` — skipped: ${skipWhy}`}`, () => {
  const V = 5000, B = 3, D = 16;
  const dev = () => open('cuda:0');
  let comm: Communicator;
  let H: ReturnType<typeof makeTensor>, W: ReturnType<typeof makeTensor>;
  beforeAll(async () => {
    comm = await nccl.initRank(nccl.createUniqueId(), 1, 0, 'cuda:0');
    // One-hot H, W's column b holds row b's logits: a flat row (a large nucleus) and two peaked.
    const rows = [flatLogits(V, 1, 1), zipfLogits(V, 1.2, 2), zipfLogits(V, 0.8, 3)];
    const r = rng(5);
    const w = new Float32Array(V * D).map(() => (r() - 0.5) * 2);
    rows.forEach((row, b) => row.forEach((x, v) => (w[v * D + b] = x)));
    const h = new Float32Array(B * D);
    for (let b = 0; b < B; b++) h[b * D + b] = 1;
    H = makeTensor(dev(), 'bf16', h, [B, D]);
    W = makeTensor(dev(), 'bf16', w, [V, D]);
  });
  afterAll(() => {
    comm?.dispose();
    H?.dispose();
    W?.dispose();
  });

  test('a communicator of one rank', () => {
    expect([comm.rank, comm.size, comm.device.kind, comm.closed]).toEqual([0, 1, 'cuda', false]);
  });

  test.each<[string, SampleOptions]>([
    ['plain', { temperature: 0.7, seed: 3n, numSamples: 4 }],
    ['top-k with logprobs', { topK: 30, logprobs: true, topLogprobs: 4, seed: 4n }],
    ['top-p and min-p', { topP: 0.9, minP: 0.001, seed: 5n, logprobs: true }],
    ["top-k, logprobsMode 'raw'", { topK: 30, logprobs: true, topLogprobs: 4, logprobsMode: 'raw', seed: 4n }],
  ])('sampleFusedTP through NCCL draws sampleFused\'s tokens: %s', async (_label, options) => {
    const want = await sampleFused(H, W, options);
    const got = await sampleFusedTP(comm, H, W, { ...options, vocabOffset: 0, vocabSize: V });
    expect(got.undecidedRows.length).toBe(0);
    expect(Array.from(got.tokens)).toEqual(Array.from(want.tokens));
    if (want.logprobs) {
      for (let i = 0; i < want.logprobs.length; i++) expect(Math.abs(got.logprobs![i] - want.logprobs[i])).toBeLessThan(1e-5);
    }
    if (want.topTokens) expect(Array.from(got.topTokens!)).toEqual(Array.from(want.topTokens));
  });

  test.each(['processed', 'raw'] as const)('rows 16 candidates cannot settle take the rows pass over NCCL (logprobsMode %s)', async (mode) => {
    const options: SampleOptions = { topP: 0.95, seed: 6n, logprobs: true, topLogprobs: 3, logprobsMode: mode };
    const want = await sampleFused(H, W, options);
    const got = await sampleFusedTP(comm, H, W, { ...options, vocabOffset: 0, vocabSize: V, candidates: 16 });
    expect(got.undecidedRows.length).toBe(0);
    expect(Array.from(got.rowsPassRows)).toContain(0);  // (the flat row at least)
    expect(Array.from(got.tokens)).toEqual(Array.from(want.tokens));
    for (let i = 0; i < want.logprobs!.length; i++) expect(Math.abs(got.logprobs![i] - want.logprobs![i])).toBeLessThan(1e-5);
    expect(Array.from(got.topTokens!)).toEqual(Array.from(want.topTokens!));
  });

  test('initAll: a process driving its GPUs, one shard per communicator', async () => {
    const comms = await nccl.initAll([0]);
    const options: SampleOptions = { topK: 8, seed: 7n, numSamples: 3 };
    const want = await sampleFused(H, W, options);
    const [got] = await sampleFusedTP(comms, [{ H, W, vocabOffset: 0 }], { ...options, vocabSize: V });
    expect(Array.from(got.tokens)).toEqual(Array.from(want.tokens));
    comms[0].dispose();
    expect(comms[0].closed).toBe(true);
    await expect(sampleFusedTP(comms, [{ H, W, vocabOffset: 0 }], { vocabSize: V })).rejects.toThrow(
      /comm: the communicator was aborted or disposed|comms\[0\]: the communicator was aborted or disposed/,
    );
  });

  test('a rank that never joins: initRank times out, aborted, within the timeout', async () => {
    const start = Date.now();
    const e = await failure(() => nccl.initRank(nccl.createUniqueId(), 2, 0, 'cuda:0', { timeoutMs: 3000 }));
    expect(e.message).toMatch(/initRank: timed out after 3000 ms waiting for the other 1 ranks to join \(rank 0 of 2 on cuda:0\); the communicator was aborted/);
    expect(Date.now() - start).toBeLessThan(30_000);
  });

  test.each([false, true])('one process per GPU: a rank in its own process, the unique id handed over by the parent (a sharded sampler\'s graph: %s)', async (sampler) => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { headOf, optionsOf } = require('./tp-head.js') as {
      headOf: (V: number, D: number, B: number) => { h: Uint16Array; w: Uint16Array };
      optionsOf: (options: SampleOptions, B: number) => SampleOptions;
    };
    const [V2, D2, B2] = [5000, 64, 3];
    const head = headOf(V2, D2, B2);
    const options: SampleOptions = { topK: 20, logprobs: true };
    const dev0 = dev();
    const H2 = dev0.tensor(head.h, [B2, D2], 'bf16');
    const W2 = dev0.tensor(head.w, [V2, D2], 'bf16');
    const want = await sampleFused(H2, W2, optionsOf(options, B2));
    H2.dispose();
    W2.dispose();
    const [out] = await runRanks(1, { V: V2, D: D2, B: B2, options, sampler }, 60_000);
    expect(out.error).toBeUndefined();
    expect(out.tokens).toEqual(Array.from(want.tokens));
  });

  test('a shard on another device than the communicator is an error naming it', async () => {
    const cpuH = makeTensor(open('cpu'), 'bf16', new Float32Array(B * D), [B, D]);
    const e = await failure(() => sampleFusedTP(comm, cpuH, W, { vocabOffset: 0, vocabSize: V }));
    expect(e).toBeInstanceOf(TypeError);
    expect(e.message).toMatch(/^H: expected a tensor on cuda:0 \(the communicator's device\)/);
    cpuH.dispose();
  });
});
