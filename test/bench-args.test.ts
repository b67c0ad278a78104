// The bench's command line (bench/args.ts): `--options` items and the model-card presets,
// `--logits`, and the table of an option run (bench/report.ts): every option column prints its
// fallback rows at every batch and, with PyTorch, its PyTorch pipeline next to it.

import { ArgError, OPTION_PRESETS, parseArgs, parseOptionSet } from '../bench/args';
import { shapeTable } from '../bench/report';
import { BOUND_SLACK, boundOf } from '../bench/run';
import type { BenchReport, BatchResult } from '../bench/run';

function argError(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(ArgError);
    return (e as Error).message;
  }
  throw new Error('expected an ArgError');
}

describe('--preset', () => {
  test('the small heads of issue 23 beside the tuned ones, and an unknown name lists them all', () => {
    const args = parseArgs(['--preset', 'llama3.2-1b,qwen3-0.6b,qwen3-4b,gemma3-1b,gpt2']);
    expect((args.shapes ?? []).map((s) => [s.name, s.vocab, s.hidden])).toEqual([
      ['llama3.2-1b', 128256, 2048],
      ['qwen3-0.6b', 151936, 1024],
      ['qwen3-4b', 151936, 2560],
      ['gemma3-1b', 262144, 1152],
      ['gpt2', 50257, 768],
    ]);
    expect((parseArgs(['--preset', 'all']).shapes ?? []).map((s) => s.name)).toContain('gpt2');
    expect(argError(() => parseArgs(['--preset', 'qwen3-0.5b']))).toMatch(
      /^--preset: unknown model "qwen3-0\.5b" \(did you mean qwen3-0\.6b\?\); expected one of .*gemma3-1b, gpt2 or all$/,
    );
  });
});

describe('--options', () => {
  test('the three model-card presets', () => {
    expect(parseOptionSet('llama3')).toEqual({ label: 'llama3', temperature: 0.6, topP: 0.9 });
    expect(parseOptionSet('qwen3')).toEqual({ label: 'qwen3', temperature: 0.6, topK: 20, topP: 0.95 });
    expect(parseOptionSet('gemma3')).toEqual({ label: 'gemma3', temperature: 1, topK: 64, topP: 0.95 });
    expect(Object.keys(OPTION_PRESETS)).toEqual(['llama3', 'qwen3', 'gemma3']);
  });

  test('presets in a list with the other items, and joined with options they do not set', () => {
    const args = parseArgs(['--options', 'plain,llama3,qwen3,gemma3,logprobs,topk50,topp0.9,minp0.05']);
    expect(args.optionSets.map((s) => s.label)).toEqual(['plain', 'llama3', 'qwen3', 'gemma3', 'logprobs', 'topk50', 'topp0.9', 'minp0.05']);
    expect(args.optionSets[4]).toEqual({ label: 'logprobs', logprobs: true });
    expect(args.optionSets[7]).toEqual({ label: 'minp0.05', minP: 0.05 });
    expect(parseOptionSet('llama3+logprobs')).toEqual({ label: 'llama3+logprobs', temperature: 0.6, topP: 0.9, logprobs: true });
    expect(parseOptionSet('Gemma3+minp0.05')).toEqual({ label: 'Gemma3+minp0.05', temperature: 1, topK: 64, topP: 0.95, minP: 0.05 });
    expect(parseOptionSet('llama3+topk50')).toMatchObject({ temperature: 0.6, topK: 50, topP: 0.9 });
  });

  test('unknown names: an ArgError with a suggestion and the list of names', () => {
    expect(argError(() => parseOptionSet('llama'))).toBe(
      `--options: unknown option "llama" (did you mean llama3?); expected plain, topk<k>, topp<p>, minp<m>, logprobs, ` +
        `toplogprobs<n>, mask, vllm, raw, listed<n>, listedshared<n>, softcap<c>, temp<T>, samples<n> or a preset (llama3, qwen3, gemma3), joined by '+'`,
    );
    expect(argError(() => parseOptionSet('llama3.1'))).toMatch(/unknown option "llama3.1" \(did you mean llama3\?\)/);
    expect(argError(() => parseOptionSet('qwen2'))).toMatch(/unknown option "qwen2" \(did you mean qwen3\?\)/);
    expect(argError(() => parseOptionSet('gemma'))).toMatch(/did you mean gemma3\?/);
    expect(argError(() => parseOptionSet('minq0.05'))).toMatch(/unknown option "minq0.05" \(did you mean minp\?\)/);
    expect(argError(() => parseArgs(['--options', 'plain,mistral']))).toMatch(/^--options: unknown option "mistral"; expected plain/);
  });

  test('a preset and an option that set the same thing, or two presets: an ArgError naming both', () => {
    expect(argError(() => parseOptionSet('llama3+temp0.7'))).toBe('--options: "llama3+temp0.7" sets temp twice (llama3 sets temp too)');
    expect(argError(() => parseOptionSet('topp0.8+llama3'))).toBe(
      '--options: "topp0.8+llama3" sets topp twice (llama3 sets topp 0.9)',
    );
    expect(argError(() => parseOptionSet('qwen3+topk5'))).toMatch(/sets topk twice \(qwen3 sets topk too\)/);
    expect(argError(() => parseOptionSet('llama3+qwen3'))).toMatch(/sets temperature twice \(qwen3 sets temperature 0.6\)/);
    expect(argError(() => parseOptionSet('plain+llama3'))).toMatch(/'plain' stands alone/);
    expect(argError(() => parseArgs(['--options', 'llama3,llama3']))).toBe('--options: "llama3" is listed twice');
  });

  test('the existing items parse as before', () => {
    expect(parseOptionSet('topk50+topp0.9')).toEqual({ label: 'topk50+topp0.9', topK: 50, topP: 0.9 });
    expect(parseOptionSet('toplogprobs5+mask+softcap30+temp0.7')).toEqual({
      label: 'toplogprobs5+mask+softcap30+temp0.7',
      topLogprobs: 5,
      mask: true,
      softcap: 30,
      temperature: 0.7,
    });
    expect(argError(() => parseOptionSet('topk'))).toMatch(/"topk" needs a value/);
    // vLLM's filter order, joined with the filters it reorders
    expect(parseOptionSet('llama3+minp0.05+vllm')).toEqual({ label: 'llama3+minp0.05+vllm', temperature: 0.6, topP: 0.9, minP: 0.05, filterOrder: 'vllm' });
    expect(argError(() => parseOptionSet('minp0.1+vllm1'))).toBe(`--options: 'vllm' takes no value, got "vllm1"`);
    expect(parseOptionSet('llama3+logprobs+raw')).toEqual({ label: 'llama3+logprobs+raw', temperature: 0.6, topP: 0.9, logprobs: true, logprobsMode: 'raw' });
    expect(argError(() => parseOptionSet('logprobs+raw2'))).toBe(`--options: 'raw' takes no value, got "raw2"`);
    expect(argError(() => parseOptionSet('topp1.5'))).toMatch(/top-p in \(0, 1\]/);
    // numSamples draws a row
    expect(parseOptionSet('topk50+samples4')).toEqual({ label: 'topk50+samples4', topK: 50, numSamples: 4 });
    expect(argError(() => parseOptionSet('samples'))).toMatch(/"samples" needs a value \(an integer n >= 1 of draws per row\), e.g\. samples4/);
    expect(argError(() => parseOptionSet('samples0'))).toMatch(/^--options: /);
    expect(argError(() => parseOptionSet('samples2+samples3'))).toMatch(/sets samples twice/);
  });
});

describe('--logits', () => {
  test('gaussian by default (std 4), model on request', () => {
    expect(parseArgs([]).logits).toBe('gaussian');
    expect(parseArgs([]).logitStd).toBe(4);
    expect(parseArgs(['--logits', 'model']).logits).toBe('model');
    expect(parseArgs(['--logits=model-like']).logits).toBe('model');
    expect(parseArgs(['--logits', 'gaussian', '--logit-std', '2.5'])).toMatchObject({ logits: 'gaussian', logitStd: 2.5 });
  });

  test('bad values and --logit-std with the model mode are ArgErrors', () => {
    expect(argError(() => parseArgs(['--logits', 'modle']))).toBe('--logits: expected gaussian or model, got "modle" (did you mean model?)');
    expect(argError(() => parseArgs(['--logit-std', '3', '--logits', 'model']))).toMatch(
      /^--logit-std: sets the std of --logits gaussian; the model mode has fixed numbers/,
    );
    expect(argError(() => parseArgs(['--logits']))).toBe('--logits: missing value; see --help');
  });
});

describe('--stat', () => {
  test('median by default, mean on request', () => {
    expect(parseArgs([]).stat).toBe('median');
    expect(parseArgs(['--stat', 'mean']).stat).toBe('mean');
    expect(parseArgs(['--stat=MEAN']).stat).toBe('mean');
    expect(parseArgs(['--mode', 'step', '--stat', 'median']).stat).toBe('median');
  });

  test('bad values, and a mean outside --mode sample, are ArgErrors', () => {
    expect(argError(() => parseArgs(['--stat', 'maen']))).toBe('--stat: expected median or mean, got "maen" (did you mean mean?)');
    expect(argError(() => parseArgs(['--stat', 'p90']))).toMatch(/^--stat: expected median or mean, got "p90"/);
    expect(argError(() => parseArgs(['--stat']))).toBe('--stat: missing value; see --help');
    expect(argError(() => parseArgs(['--mode', 'tp', '--stat', 'mean']))).toBe(
      "--stat: applies to --mode sample's tables; --mode tp reports medians",
    );
  });
});

describe('what bounds a point (boundOf)', () => {
  test('within the slack of floor + launch the larger term; beyond it the epilogue', () => {
    // llama3-8b B = 1 on the H200: 241 µs against a 233.5 µs memory floor and ~8 µs of fixed costs
    expect(boundOf(241, 233.5, 1.4, 8)).toEqual({ bound: 'memory', ratio: 241 / 241.5 });
    // B = 256: a 349 µs matrix floor, 485 µs measured
    expect(boundOf(485, 233.5, 349.3, 8)?.bound).toBe('epilogue');
    expect(boundOf(390, 233.5, 349.3, 8)?.bound).toBe('matrix');
    // a GPT-2-sized head at B = 1: 17 µs of floor, 26 µs measured; the fixed costs dominate only
    // when they exceed the floor
    expect(boundOf(26, 17, 0.1, 12)?.bound).toBe('memory');
    expect(boundOf(22, 9, 0.1, 12)?.bound).toBe('launch');
    expect(boundOf(26, 17, 0.1, 0)).toEqual({ bound: 'epilogue', ratio: 26 / 17 });
    // the edge: exactly the slack is still the floor's regime
    expect(boundOf(BOUND_SLACK * 100, 100, 1, 0)?.bound).toBe('memory');
    // the CPU (no floors) or no measurement: nothing to say
    expect(boundOf(100, null, null, 8)).toBeNull();
    expect(boundOf(null, 100, 1, 8)).toBeNull();
  });
});

describe('the table of an option run', () => {
  const stats = (us: number) => ({ n: 3, medianUs: us, p10Us: us, p90Us: us, minUs: us, maxUs: us, meanUs: us });
  const batch = (b: number, fb: number, fbCalls?: number): BatchResult => ({
    batch: b,
    floorUs: 230,
    floorMemoryUs: 230,
    floorComputeUs: 1,
    bound: boundOf(b === 1 ? 250 : 300, 230, 1, 8),
    methods: {
      fused: { stats: stats(250) },
      'fused[plain]': { stats: stats(250), fallbackRows: 0 },
      'fused[topp0.9]': {
        stats: stats(500),
        fallbackRows: fb,
        ...(fbCalls !== undefined ? { fallbackCalls: fbCalls, rotationCalls: 8 } : {}),
      },
      'torch[plain]': { stats: stats(400) },
      'torch[topp0.9]': { stats: stats(1000) },
      'torch:matmul': { stats: stats(255) },
    },
  });
  const report = (cuda: boolean, torch: boolean): BenchReport => ({
    tool: 'flashsample-bench',
    date: '2026-12-01',
    command: [],
    environment: {
      device: cuda ? 'NVIDIA H200' : 'cpu',
      deviceKind: cuda ? 'cuda' : 'cpu',
      ordinal: 0,
      gpu: { error: 'none' },
      node: 'v20',
      platform: 'linux x64',
      torch: null,
    },
    config: {
      batches: [1, 64],
      dtype: 'bf16',
      iters: 3,
      warmup: 1,
      samplers: ['fused'],
      optionSets: [{ label: 'plain' }, { label: 'topp0.9', topP: 0.9 }],
      logits: 'model',
      logitStd: 4,
      modelLogits: null,
      l2RotationBytes: 120e6,
    },
    ceilings: { readBandwidth: { value: 4.5e12, measured: true, note: '' }, matrixRate: { value: 7.8e14, measured: true, note: '' } },
    launchUs: 8,
    baselines: {
      requested: true,
      available: torch,
      reason: torch ? null : 'python3 has no torch',
      ids: ['matmul'],
      titles: { matmul: 'torch mm' },
      options: ['plain', 'topp0.9'],
      optionPipelines: { plain: 'matmul + softmax + multinomial', 'topp0.9': 'matmul + sort + top-p 0.9 + softmax + multinomial' },
    },
    shapes: [],
  });
  const shape = {
    shape: { name: 'llama3-8b', vocab: 128256, hidden: 4096, source: 'Meta Llama 3' },
    dtype: 'bf16' as const,
    wBytes: 1.05e9,
    copies: 2,
    batches: [batch(1, 0), batch(64, 3, 5)],
  };

  test('fallback rows at every batch of every option column; PyTorch columns with their speedup', () => {
    const text = shapeTable(report(true, true), shape);
    expect(text).toMatch(/fused\[plain\] µs \(fb rows\)\s+torch\[plain\] µs\s+×torch\s+fused\[topp0.9\] µs \(fb rows\)\s+torch\[topp0.9\] µs\s+×torch/);
    const rows = text.split('\n').filter((l) => /^\s+(1|64)\s/.test(l));
    expect(rows).toHaveLength(2);
    expect(rows[0]).toMatch(/250\.0 \+0% \(0\/1\)\s+400\.0\s+1\.60×\s+500\.0 \+100% \(0\/1\)\s+1000\.0\s+2\.00×$/);
    // the rotation copies' calls where the run counted them (CUDA): 5 of 8 sent a row to the extra pass
    expect(rows[1]).toMatch(/500\.0 \+100% \(3\/64; 5\/8 calls\)\s+1000\.0\s+2\.00×$/);
    expect(text).toMatch(/\(N\/B; k\/C calls\): k of the C rotation copies' untimed calls/);
    expect(text).toMatch(/topp0.9: matmul \+ sort \+ top-p 0.9/);
  });

  test('every GPU row names what bounds it; the header says how', () => {
    const text = shapeTable(report(true, false), shape);
    expect(text).toMatch(/fused\/floor\s+bound/);
    const rows = text.split('\n').filter((l) => /^\s+(1|64)\s/.test(l));
    expect(rows[0]).toMatch(/1\.09×\s+memory\s/);
    expect(rows[1]).toMatch(/1\.09×\s+epilogue 1\.26×\s/);
    expect(shapeTable(report(false, false), shape)).not.toMatch(/bound/);
  });

  test('--stat mean: every cell and the cost over plain from the means, and the note says so', () => {
    const skewed = (median: number, mean: number) => ({ ...stats(median), meanUs: mean });
    const b64 = batch(64, 3, 3);
    b64.methods.fused = { stats: skewed(250, 260) };
    b64.methods['fused[topp0.9]'] = { stats: skewed(500, 650), fallbackRows: 3, fallbackCalls: 3, rotationCalls: 8 };
    const one = { ...shape, batches: [b64] };
    const r = report(true, false);
    const row = (text: string) => text.split('\n').filter((l) => /^\s+64\s/.test(l))[0];
    // the median (default) hides the extra pass that 3 of 8 inputs pay; the mean holds 3/8 of it
    expect(row(shapeTable(r, one))).toMatch(/^\s+64\s+250\.0\s.*500\.0 \+100% \(3\/64; 3\/8 calls\)$/);
    const mean = shapeTable({ ...r, config: { ...r.config, stat: 'mean' } }, one);
    expect(row(mean)).toMatch(/^\s+64\s+260\.0\s.*650\.0 \+150% \(3\/64; 3\/8 calls\)$/);
    expect(mean).toMatch(/fused\[\.\.\.\] µs \(fb rows\): mean µs, .*\(the mean holds k\/C of its cost\)/);
    expect(shapeTable(r, one)).toMatch(/\(the median holds its cost when k > C\/2\)/);
  });

  test('without PyTorch (or on the CPU) the option columns still print their fallback rows', () => {
    for (const r of [report(true, false), report(false, false)]) {
      const text = shapeTable(r, shape);
      expect(text).not.toMatch(/torch\[/);
      expect(text).toMatch(/500\.0 \+100% \(3\/64; 5\/8 calls\)/);
    }
  });
});

describe('--mode tp', () => {
  test('the degrees, 1,2,4,8 by default', () => {
    expect(parseArgs(['--mode', 'tp']).tpDegrees).toEqual([1, 2, 4, 8]);
    const args = parseArgs(['--mode', 'tp', '--tp', '1,2']);
    expect([args.mode, args.tpDegrees]).toEqual(['tp', [1, 2]]);
  });
  test('a degree outside [1, 64] or another mode is an ArgError', () => {
    expect(argError(() => parseArgs(['--tp', '0']))).toMatch(/^--tp: expected degrees in \[1, 64\]/);
    expect(argError(() => parseArgs(['--mode', 'pipeline']))).toBe('--mode: expected sample, step or tp, got "pipeline"');
  });
});
