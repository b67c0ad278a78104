// Tensor parallelism across GPUs (issue 19): run where the process sees 2 or more GPUs and NCCL
// loads (scripts/tp-session.sh on nvidia-h200-x2/x4/x8); skipped otherwise, with the reason.
// - TP-2/4/8 through nccl.initAll (one process driving its GPUs): sampleFusedTP's tokens equal
//   sampleFused's on one GPU, for plain sampling, filters, logprobs (1e-5; raw 1e-4) and numSamples > 1;
// - one process per GPU (test/tp-rank.js), the unique id handed over by the parent: every rank
//   returns the one-GPU tokens, through sampleFusedTP and through a sharded sampler's captured
//   graph; a sharded sampler refuses initAll's communicators;
// - a rank that exits after joining: the others fail within their timeout, naming it, no hang.

import { gpuStatus, nccl, open, sampleFused, sampleFusedTP, type SampleOptions } from '../lib/index';
import { runRanks } from './helpers';
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { headOf, shardBounds, optionsOf } = require('./tp-head.js') as {
  headOf: (V: number, D: number, B: number) => { h: Uint16Array; w: Uint16Array };
  shardBounds: (V: number, ranks: number) => [number, number][];
  optionsOf: (options: SampleOptions, B: number) => SampleOptions;
};

process.env.NCCL_NVLS_ENABLE = '0';  // NVLink multicast stays off (the GPU machines forbid it)

const gpus = (() => {
  try {
    return gpuStatus().usable ? gpuStatus().deviceCount : 0;
  } catch {
    return 0;
  }
})();
const loaded = nccl.status().loaded;
const degrees = [2, 4, 8].filter((n) => n <= gpus);
const why = gpus < 2 ? `needs 2 or more GPUs, this process sees ${gpus}` : `NCCL not loaded: ${nccl.status().error}`;
const run = degrees.length > 0 && loaded;

const V = 50000, D = 256, B = 5;
const CASES: [string, SampleOptions][] = [
  ['plain', { temperature: 0.8, numSamples: 4 }],
  ['filters and logprobs', { topK: 50, topP: 0.9, minP: 0.02, logprobs: true, topLogprobs: 3 }],
  ['greedy rows and top-p', { temperature: new Float32Array([0, 1, 0.7, 0, 1.2]), topP: 0.8, numSamples: 3 }],
  ["top-p, logprobsMode 'raw'", { topP: 0.9, logprobs: true, topLogprobs: 5, logprobsMode: 'raw' }],
];

(run ? describe : describe.skip)(`NCCL across GPUs${run ? '' : ` — skipped: ${why}`}`, () => {
  let head: { h: Uint16Array; w: Uint16Array };
  beforeAll(() => {
    head = headOf(V, D, B);
  });
  const one = () => {
    const dev = open('cuda:0');
    return { H: dev.tensor(head.h, [B, D], 'bf16'), W: dev.tensor(head.w, [V, D], 'bf16') };
  };

  for (const n of degrees) {
    test.each(CASES)(`TP-${n}, one process driving ${n} GPUs: the one-GPU tokens (%s)`, async (_label, raw) => {
      const options = optionsOf(raw, B);
      const { H, W } = one();
      const want = await sampleFused(H, W, options);
      const comms = await nccl.initAll(Array.from({ length: n }, (_, i) => i));
      try {
        const shards = shardBounds(V, n).map(([offset, rows], i) => {
          const dev = open(`cuda:${i}`);
          return { H: dev.tensor(head.h, [B, D], 'bf16'), W: dev.tensor(head.w.subarray(offset * D, (offset + rows) * D), [rows, D], 'bf16'), vocabOffset: offset };
        });
        const results = await sampleFusedTP(comms, shards, { ...options, vocabSize: V });
        // (raw: one GPU recomputes a drawn token's raw logit as a float64 dot product, the shards
        // read it from their GEMM's fp32 sums)
        const tol = options.logprobsMode === 'raw' ? 1e-4 : 1e-5;
        for (const r of results) {
          expect(Array.from(r.tokens)).toEqual(Array.from(want.tokens));
          if (want.logprobs) for (let i = 0; i < want.logprobs.length; i++) expect(Math.abs(r.logprobs![i] - want.logprobs[i])).toBeLessThan(tol);
          if (want.topTokens) expect(Array.from(r.topTokens!)).toEqual(Array.from(want.topTokens));
        }
        for (const s of shards) {
          s.H.dispose();
          s.W.dispose();
        }
      } finally {
        for (const c of comms) c.dispose();
        H.dispose();
        W.dispose();
      }
    });

    test.each([false, true])(`TP-${n}, one process per GPU: every rank returns the one-GPU tokens (a sharded sampler's graph: %s)`, async (sampler) => {
      const raw: SampleOptions = { topK: 40, topP: 0.95, logprobs: true, numSamples: 1 };
      const { H, W } = one();
      const want = await sampleFused(H, W, optionsOf(raw, B));
      H.dispose();
      W.dispose();
      const outputs = await runRanks(n, { V, D, B, options: raw, sampler }, 120_000);
      for (const o of outputs) {
        expect(o.error).toBeUndefined();
        expect(o.tokens).toEqual(Array.from(want.tokens));
        for (let i = 0; i < want.logprobs!.length; i++) expect(Math.abs(o.logprobs![i] - want.logprobs![i])).toBeLessThan(1e-5);
      }
    });

    test(`TP-${n}: a sharded sampler refuses nccl.initAll's communicators (one thread, several GPUs)`, async () => {
      const comms = await nccl.initAll(Array.from({ length: n }, (_, i) => i));
      try {
        expect(() => open('cuda:0').createSampler({ maxBatch: 2, vocab: 100, hidden: 8, dtype: 'f32', tp: { comm: comms[0], vocabOffset: 0, vocabSize: 100 * n } }))
          .toThrow(/^tp\.comm: one of nccl\.initAll's \d+ communicators, driven from one thread: a sharded sampler needs one process per GPU/);
      } finally {
        for (const c of comms) c.dispose();
      }
    });
  }

  test('a rank that exits after joining: the other fails within its timeout, no hang', async () => {
    const start = Date.now();
    const outputs = await runRanks(2, { V, D, B, options: {}, exitAfterInit: 1, timeoutMs: 10_000 }, 90_000);
    expect(outputs[1].error).toMatch(/exited with 3/);
    expect(outputs[0].error).toMatch(/allGather|NCCL|timed out/);
    expect(Date.now() - start).toBeLessThan(90_000);
  });
});
