// One small call per option set, each step printed before it runs: a compute-sanitizer target
// whose host memory stays bounded (racecheck's grows with the problem: 4.6 GB at B 3 × V 1000,
// 38 GB at B 64 × V 32000; the one-pass suite's B 2048 × V 128256 cases, likely past a 125 GB
// machine, ended twice with rc 9 and no summary), and a run that dies names the call it died in.
// On the GPU machine:
//   compute-sanitizer --tool racecheck --racecheck-report all node scripts/sanitize-probe.js 64 32000 128
// Arguments: B, V, D (default 8 1000 64); PROBE_DEVICE=cpu runs it on the CPU backend.
const { open, sampleFused } = require('../dist/lib/index.js');
const B = Number(process.argv[2] ?? 8), V = Number(process.argv[3] ?? 1000), D = Number(process.argv[4] ?? 64);
(async () => {
  const dev = open(process.env.PROBE_DEVICE ?? 'cuda');
  let s = 1;
  const rnd = () => { s = (s * 1103515245 + 12345) >>> 0; return s / 2 ** 32 - 0.5; };
  const H = dev.tensor(Float32Array.from({ length: B * D }, rnd), [B, D], 'bf16');
  const W = dev.tensor(Float32Array.from({ length: V * D }, () => 4 * rnd()), [V, D], 'bf16');
  const sets = [['plain', {}], ['logprobs', { logprobs: true }], ['topk5', { topK: 5 }], ['topp0.9', { topP: 0.9 }],
    ['minp0.05', { minP: 0.05 }], ['llama3', { temperature: 0.6, topP: 0.9 }], ['topp0.99 T4', { temperature: 4, topP: 0.99 }],
    ['qwen3+toplogprobs5', { temperature: 0.6, topK: 20, topP: 0.95, logprobs: true, topLogprobs: 5 }],
    ['vllm topp0.9+minp1e-6', { topP: 0.9, minP: 1e-6, filterOrder: 'vllm' }], ['topk2000', { topK: 2000 }],
    ['samples4 topk50', { numSamples: 4, topK: 50 }], ['softcap30 topp0.9', { softcap: 30, topP: 0.9 }]];
  for (const [name, o] of sets) {
    const t0 = Date.now();
    process.stdout.write(`B=${B} V=${V} D=${D} ${name}: `);
    const { tokens } = await sampleFused(H, W, { seed: 7n, offset: 0, ...o });
    console.log(`ok ${Date.now() - t0} ms, token0 ${tokens[0]}`);
  }
})().catch((e) => { console.log(`error: ${e.message}`); process.exit(3); });
