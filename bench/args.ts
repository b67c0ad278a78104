// Command-line parsing for flashsample-bench. Pure: no I/O, no process.exit; every problem is an
// ArgError whose message names the flag, what was expected and what came (the CLI prints it and
// exits with code 2).

import { PRESETS, Shape, customShape, findPreset } from './presets';
import { CENTER_STATS, CenterStat } from './stats';

export type BenchDType = 'bf16' | 'f16' | 'f32';
export type BenchDevice = 'auto' | 'cpu' | 'cuda' | `cuda:${number}`;
export type BenchSampler = 'fused' | 'reference-gumbel' | 'reference-inverse-cdf';

/** How the bench makes H and W (bench/logits.ts; bench/TUNING.md, "Logits modes"). */
export type LogitsMode = 'gaussian' | 'model';
export const LOGITS_MODES: readonly LogitsMode[] = ['gaussian', 'model'];

export const ALL_SAMPLERS: readonly BenchSampler[] = ['fused', 'reference-gumbel', 'reference-inverse-cdf'];
export const GPU_DEFAULT_BATCHES: readonly number[] = [1, 2, 4, 8, 16, 32, 64, 128, 256];
export const CPU_DEFAULT_BATCHES: readonly number[] = [1, 4];
/** Batch limit of the noise counter layout (docs/SEMANTICS.md §3). */
export const MAX_BATCH = 65535;

/** One set of sampling options timed as an extra fused column (`--options`). */
export interface OptionSet {
  /** As written on the command line, e.g. 'topk50+topp0.9'. */
  readonly label: string;
  readonly topK?: number;
  readonly topP?: number;
  readonly minP?: number;
  readonly logprobs?: boolean;
  readonly topLogprobs?: number;
  readonly softcap?: number;
  readonly temperature?: number;
  /** An allowed-token bitmask with about half of the vocabulary allowed. */
  readonly mask?: boolean;
  /** Tokens listed per row (logit bias, a ban, penalties: bench/inputs.ts listedLists). */
  readonly listed?: number;
  /** The same list for every row (else distinct per row, the worst case). */
  readonly listedShared?: boolean;
  /** vLLM's filter order (min-p before top-k and top-p); else Hugging Face's. */
  readonly filterOrder?: 'vllm';
  /** logprobs / topLogprobs of the raw distribution (logprobsMode 'raw'). */
  readonly logprobsMode?: 'raw';
  /** Draws per row (numSamples). */
  readonly numSamples?: number;
}

/** The sampling defaults of model cards, usable as `--options` items (alone or joined by '+'). */
export const OPTION_PRESETS: Readonly<Record<string, { temperature: number; topK?: number; topP: number; source: string }>> = {
  llama3: { temperature: 0.6, topP: 0.9, source: 'Meta Llama 3 / 3.1 generation_config.json' },
  qwen3: { temperature: 0.6, topK: 20, topP: 0.95, source: 'Qwen3 generation_config.json (thinking mode)' },
  gemma3: { temperature: 1, topK: 64, topP: 0.95, source: 'Google Gemma 3 generation_config.json' },
};
export const OPTION_PRESET_NAMES = Object.keys(OPTION_PRESETS);

export type BenchMode = 'sample' | 'step' | 'tp';

export interface BenchArgs {
  help: boolean;
  /** 'sample' (default): the samplers and option columns; 'step': the engine's decode step (bench/step.ts);
   *  'tp': a head sharded by vocabulary (bench/tp.ts). */
  mode: BenchMode;
  /** --mode tp: the degrees (default 1,2,4,8). */
  tpDegrees: number[];
  /** Explicit shapes; null = the device's default. */
  shapes: Shape[] | null;
  /** null = the device's default. */
  batches: number[] | null;
  /** null = the device's default (bf16). */
  dtype: BenchDType | null;
  device: BenchDevice;
  /** null = the device's default. */
  iters: number | null;
  warmup: number | null;
  /** What --mode sample's tables report per point: 'median' (default) or 'mean'. */
  stat: CenterStat;
  json: string | null;
  plot: string | null;
  samplers: BenchSampler[];
  baselines: boolean;
  optionSets: OptionSet[];
  /** How H and W are made: 'gaussian' (every logit ~ std logitStd) or 'model' (bench/logits.ts). */
  logits: LogitsMode;
  /** Standard deviation of the random logits (gaussian mode). */
  logitStd: number;
  /** Overrides for the two ceilings (bytes/s, FLOP/s); null = measure. */
  readBandwidth: number | null;
  matrixRate: number | null;
  python: string;
}

export class ArgError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ArgError';
  }
}

export const USAGE = `Usage: flashsample-bench [flags]

Times flashsample's fused sampler (H · Wᵀ → Gumbel-max token, logits never materialized) against
its materializing references and PyTorch baselines, next to the memory/compute floor of each shape.

Shape
  --preset NAME[,NAME...]   model LM-head shapes (or 'all'); default llama3-8b on the GPU
${PRESETS.map((p) => `                              ${p.name.padEnd(12)} ${String(p.vocab).padStart(6)} × ${String(p.hidden).padEnd(5)} ${p.source}`).join('\n')}
  --vocab V --hidden D      a custom shape (added to the presets given, if any)
  --batch LIST              batch sizes, e.g. 1,8,64 or 1,2,4,...,256 ('...' continues the
                            ratio or step of the sizes before it); default 1,2,4,...,256 on
                            the GPU, 1,4 on the CPU
  --dtype bf16|f16|f32      dtype of H and W (default bf16)

Run
  --mode sample|step|tp     sample (default): the table below; step: an engine's decode step
                            per --options set (default plain): createSampler once, then the
                            host time of enqueue, eager and CUDA-graph step times against the
                            kernels' own (CUDA events); default batches 1,64,256 on the GPU;
                            tp: a head sharded by vocabulary over --tp GPUs (CUDA): one
                            rank's shard against one GPU, and where the process has the GPUs
                            the sampleFusedTP step and its NCCL exchange (FLASHSAMPLE_NCCL_LIB
                            names libnccl); default batches 1,16,64,256
  --tp LIST                 --mode tp degrees (default 1,2,4,8)
  --device auto|cpu|cuda|cuda:N   (default auto: the GPU when one is usable)
  --iters N                 timed calls per point (default 100 on the GPU, 10 on the CPU)
  --warmup N                untimed calls first (default 10 on the GPU, 2 on the CPU)
  --stat median|mean        what each table cell reports (default median); mean: a cost that
                            comes in k of the C inputs the timed calls rotate over counts k / C
                            of it (give --iters a multiple of C, 8 on most presets)
  --samplers LIST           of fused,reference-gumbel,reference-inverse-cdf (default all three)
  --options LIST            extra fused columns, one per option set, each with its PyTorch
                            counterpart and the rows that needed the extra pass: plain,
                            topk50, topp0.9, minp0.05, logprobs, toplogprobs5, mask,
                            listed512 (512 tokens a row, distinct per row, under logit
                            bias, a ban and penalties; listedshared512: one list for every
                            row), softcap30, temp0.7, or a model card's defaults: llama3 (temp0.6
                            + topp0.9), qwen3 (temp0.6 + topk20 + topp0.95), gemma3 (topk64
                            + topp0.95, T 1); combine with '+', e.g. topk50+topp0.9,
                            llama3+logprobs; vllm: vLLM's filter order (min-p first), e.g.
                            llama3+minp0.05+vllm; raw: logprobsMode 'raw', e.g.
                            llama3+logprobs+raw; samples<n>: n draws a row (numSamples),
                            e.g. samples4, topk50+samples4
  --no-baselines            skip the PyTorch baselines (the matrix-rate ceiling is still measured)
  --python PATH             interpreter for bench/baselines/torch_baselines.py (default python3)
  --logits gaussian|model   gaussian (default): every logit ~ uniform-product sum of std
                            --logit-std; model: model-like rows, a few hot tokens 12–20
                            logits above a bulk of std 2, every 20th row flat (std 1, no hot
                            tokens); numbers in bench/TUNING.md, "Logits modes"
  --logit-std X             std of the gaussian mode's logits (default 4)
  --read-bw TB/s            use this read bandwidth instead of measuring it
  --matrix-rate TFLOP/s     use this matrix rate instead of measuring it

Output
  --json FILE               everything: ceilings, per-shape per-batch per-method median/p10/p90,
                            environment (GPU, date, command line)
  --plot FILE.svg           latency vs batch (log-x) per method and the floor, one panel per shape
  -h, --help                this text

Floor of a shape at batch B = max(V·D·bytes / read bandwidth, 2·B·V·D / matrix rate).
Exit codes: 0 ok, 1 a run failed, 2 bad arguments.`;

const FLAGS_WITH_VALUE = [
  '--preset', '--vocab', '--hidden', '--batch', '--dtype', '--device', '--iters', '--warmup', '--json',
  '--plot', '--samplers', '--options', '--python', '--logits', '--logit-std', '--read-bw', '--matrix-rate',
  '--mode', '--tp', '--stat',
] as const;
const FLAGS_WITHOUT_VALUE = ['--no-baselines', '--help', '-h'] as const;
const ALIASES: Record<string, string> = { '--model': '--preset', '--batches': '--batch', '--sampler': '--samplers' };

function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diag = row[0];
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const next = Math.min(row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] === b[j - 1] ? 0 : 1));
      diag = row[j];
      row[j] = next;
    }
  }
  return row[b.length];
}

function suggest(word: string, candidates: readonly string[]): string {
  let best = '';
  let bestDistance = Infinity;
  for (const c of candidates) {
    const d = editDistance(word, c);
    if (d < bestDistance) {
      best = c;
      bestDistance = d;
    }
  }
  return bestDistance <= Math.max(2, Math.floor(word.length / 3)) ? ` (did you mean ${best}?)` : '';
}

function show(value: string): string {
  return value === '' ? 'an empty string' : JSON.stringify(value);
}

function parseInteger(flag: string, text: string, min: number, max: number): number {
  const t = text.trim();
  const n = /^[0-9]+$/.test(t) ? Number(t) : NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    throw new ArgError(`${flag}: expected an integer from ${min} to ${max}, got ${show(text)}`);
  }
  return n;
}

function parseNumber(flag: string, text: string, what: string, ok: (x: number) => boolean): number {
  const t = text.trim();
  const n = t === '' ? NaN : Number(t);
  if (!Number.isFinite(n) || !ok(n)) throw new ArgError(`${flag}: expected ${what}, got ${show(text)}`);
  return n;
}

function splitList(flag: string, text: string): string[] {
  const items = text.split(',').map((s) => s.trim());
  if (items.length === 0 || items.some((s) => s === '')) {
    throw new ArgError(`${flag}: expected a comma-separated list with no empty items, got ${show(text)}`);
  }
  return items;
}

/** '1,2,4,8' or with an ellipsis, '1,2,4,...,256': continues the ratio, or the step, of the sizes before it. */
function parseBatches(text: string): number[] {
  const items = splitList('--batch', text);
  const batch = (s: string): number => {
    const n = /^[0-9]+$/.test(s) ? Number(s) : NaN;
    if (!Number.isSafeInteger(n) || n < 1 || n > MAX_BATCH) {
      throw new ArgError(`--batch: expected batch sizes from 1 to ${MAX_BATCH}, got ${show(s)} in ${show(text)}`);
    }
    return n;
  };
  const batches: number[] = [];
  for (let i = 0; i < items.length; i++) {
    if (items[i] !== '...' && items[i] !== '…') {
      batches.push(batch(items[i]));
      continue;
    }
    if (i < 2 || i + 1 >= items.length || items[i - 1] === '...' || items[i + 1] === '...') {
      throw new ArgError(`--batch: '...' needs two sizes before it and one after, e.g. 1,2,4,...,256; got ${show(text)}`);
    }
    const a = batches[batches.length - 2];
    const b = batches[batches.length - 1];
    const end = batch(items[i + 1]);
    // Geometric when the sizes before it are (1,2,4 / 8,16), else arithmetic (2,4,6 / 1,3).
    const c = batches.length >= 3 ? batches[batches.length - 3] : null;
    const geometric = b > a && b % a === 0 && (c === null ? b === 2 * a : a % c === 0 && a / c === b / a);
    if (b <= a || end < b) {
      throw new ArgError(`--batch: '...' continues an increasing list up to a larger size, got ${show(text)}`);
    }
    for (let x = geometric ? b * (b / a) : b + (b - a); x < end; x = geometric ? x * (b / a) : x + (b - a)) batches.push(x);
  }
  return [...new Set(batches)].sort((a, b) => a - b);
}

function parseShapes(text: string): Shape[] {
  if (text.trim().toLowerCase() === 'all') return [...PRESETS];
  return splitList('--preset', text).map((name) => {
    const p = findPreset(name);
    if (!p) {
      const names = PRESETS.map((q) => q.name);
      throw new ArgError(
        `--preset: unknown model ${show(name)}${suggest(name.toLowerCase(), names)}; expected one of ${names.join(', ')} or all`,
      );
    }
    return p;
  });
}

function parseSamplers(text: string): BenchSampler[] {
  const out: BenchSampler[] = [];
  for (const s of splitList('--samplers', text)) {
    const alias: Record<string, BenchSampler> = { gumbel: 'reference-gumbel', 'inverse-cdf': 'reference-inverse-cdf' };
    const kind = (ALL_SAMPLERS as readonly string[]).includes(s) ? (s as BenchSampler) : alias[s];
    if (!kind) {
      throw new ArgError(
        `--samplers: unknown sampler ${show(s)}${suggest(s, ALL_SAMPLERS)}; expected some of ${ALL_SAMPLERS.join(',')}`,
      );
    }
    if (!out.includes(kind)) out.push(kind);
  }
  return out;
}

/** Parses one `--options` item such as 'topk50+topp0.9' or 'plain'. */
export function parseOptionSet(text: string): OptionSet {
  const flag = '--options';
  const set: { -readonly [K in keyof OptionSet]: OptionSet[K] } = { label: text };
  const parts = text.split('+').map((s) => s.trim());
  for (const part of parts) {
    const preset = OPTION_PRESETS[part.toLowerCase()];
    if (preset !== undefined) {
      const given: [keyof OptionSet, number | undefined, string][] = [
        ['temperature', preset.temperature, 'temperature'],
        ['topK', preset.topK, 'topk'],
        ['topP', preset.topP, 'topp'],
      ];
      for (const [key, value, what] of given) {
        if (value === undefined) continue;
        if (set[key] !== undefined) {
          throw new ArgError(`${flag}: ${show(text)} sets ${what} twice (${part.toLowerCase()} sets ${what} ${value})`);
        }
        (set as Record<string, unknown>)[key] = value;
      }
      continue;
    }
    const m = /^([a-z]+)(.*)$/.exec(part.toLowerCase());
    const name = m ? m[1] : part;
    const arg = m ? m[2] : '';
    const example: Record<string, string> = {
      topk: '50', topp: '0.9', minp: '0.05', toplogprobs: '5', softcap: '30', temp: '0.7', listed: '512', listedshared: '512',
      samples: '4',
    };
    const need = (what: string): void => {
      if (arg === '') throw new ArgError(`${flag}: ${show(part)} needs a value (${what}), e.g. ${name}${example[name]}`);
    };
    const twice = (key: keyof OptionSet): void => {
      if (set[key] !== undefined) {
        const by = parts.find((p) => OPTION_PRESETS[p.toLowerCase()] !== undefined);
        throw new ArgError(`${flag}: ${show(text)} sets ${name} twice${by ? ` (${by.toLowerCase()} sets ${name} too)` : ''}`);
      }
    };
    switch (name) {
      case 'plain':
        if (arg !== '' || parts.length > 1) throw new ArgError(`${flag}: 'plain' stands alone, got ${show(text)}`);
        break;
      case 'topk':
        need('an integer k >= 1');
        twice('topK');
        set.topK = parseInteger(flag, arg, 1, 2 ** 31 - 1);
        break;
      case 'topp':
        need('a probability 0 < p <= 1');
        twice('topP');
        set.topP = parseNumber(flag, arg, `top-p in (0, 1] in ${show(part)}`, (x) => x > 0 && x <= 1);
        break;
      case 'minp':
        need('a fraction 0 <= m < 1');
        twice('minP');
        set.minP = parseNumber(flag, arg, `min-p in [0, 1) in ${show(part)}`, (x) => x >= 0 && x < 1);
        break;
      case 'logprobs':
        if (arg !== '') throw new ArgError(`${flag}: 'logprobs' takes no value, got ${show(part)}`);
        set.logprobs = true;
        break;
      case 'toplogprobs':
        need('an integer n >= 1');
        twice('topLogprobs');
        set.topLogprobs = parseInteger(flag, arg, 1, 1024);
        break;
      case 'mask':
        if (arg !== '') throw new ArgError(`${flag}: 'mask' takes no value, got ${show(part)}`);
        set.mask = true;
        break;
      case 'vllm':
        if (arg !== '') throw new ArgError(`${flag}: 'vllm' takes no value, got ${show(part)}`);
        set.filterOrder = 'vllm';
        break;
      case 'raw':
        if (arg !== '') throw new ArgError(`${flag}: 'raw' takes no value, got ${show(part)}`);
        set.logprobsMode = 'raw';
        break;
      case 'listed':
      case 'listedshared':
        need('a count n >= 1 of tokens listed per row');
        if (set.listed !== undefined) throw new ArgError(`${flag}: ${show(text)} sets listed twice`);
        set.listed = parseInteger(flag, arg, 1, 1 << 20);
        set.listedShared = name === 'listedshared';
        break;
      case 'softcap':
        need('a cap c > 0');
        twice('softcap');
        set.softcap = parseNumber(flag, arg, `a softcap > 0 in ${show(part)}`, (x) => x > 0);
        break;
      case 'samples':
        need('an integer n >= 1 of draws per row');
        twice('numSamples');
        set.numSamples = parseInteger(flag, arg, 1, 1024);
        break;
      case 'temp':
        need('a temperature T >= 0');
        twice('temperature');
        set.temperature = parseNumber(flag, arg, `a temperature >= 0 in ${show(part)}`, (x) => x >= 0);
        break;
      default: {
        const names = ['plain', 'topk', 'topp', 'minp', 'logprobs', 'toplogprobs', 'mask', 'vllm', 'raw', 'listed', 'listedshared', 'softcap', 'temp', 'samples'];
        const hint = suggest(part.toLowerCase(), OPTION_PRESET_NAMES) || suggest(name, names);
        throw new ArgError(
          `${flag}: unknown option ${show(part)}${hint}; expected plain, topk<k>, topp<p>, minp<m>, ` +
            `logprobs, toplogprobs<n>, mask, vllm, raw, listed<n>, listedshared<n>, softcap<c>, temp<T>, samples<n> or a preset (${OPTION_PRESET_NAMES.join(', ')}), joined by '+'`,
        );
      }
    }
  }
  return set;
}

export function parseArgs(argv: readonly string[]): BenchArgs {
  const args: BenchArgs = {
    help: false,
    mode: 'sample',
    tpDegrees: [1, 2, 4, 8],
    shapes: null,
    batches: null,
    dtype: null,
    device: 'auto',
    iters: null,
    warmup: null,
    stat: 'median',
    json: null,
    plot: null,
    samplers: [...ALL_SAMPLERS],
    baselines: true,
    optionSets: [],
    logits: 'gaussian',
    logitStd: 4,
    readBandwidth: null,
    matrixRate: null,
    python: 'python3',
  };
  let vocab: number | null = null;
  let hidden: number | null = null;
  let presets: Shape[] | null = null;
  let logitStdGiven = false;

  for (let i = 0; i < argv.length; i++) {
    const token = argv[i];
    if (!token.startsWith('-') || token === '-') {
      throw new ArgError(`unexpected argument ${show(token)}: flags start with --; see --help`);
    }
    const eq = token.indexOf('=');
    let flag = eq >= 0 ? token.slice(0, eq) : token;
    flag = ALIASES[flag] ?? flag;
    if ((FLAGS_WITHOUT_VALUE as readonly string[]).includes(flag)) {
      if (eq >= 0) throw new ArgError(`${flag}: takes no value, got ${show(token.slice(eq + 1))}`);
      if (flag === '--no-baselines') args.baselines = false;
      else args.help = true;
      continue;
    }
    if (!(FLAGS_WITH_VALUE as readonly string[]).includes(flag)) {
      throw new ArgError(
        `unknown flag ${flag}${suggest(flag, [...FLAGS_WITH_VALUE, ...FLAGS_WITHOUT_VALUE])}; see --help`,
      );
    }
    let value: string;
    if (eq >= 0) {
      value = token.slice(eq + 1);
    } else {
      if (i + 1 >= argv.length || (argv[i + 1].startsWith('--') && argv[i + 1].length > 2)) {
        throw new ArgError(`${flag}: missing value; see --help`);
      }
      value = argv[++i];
    }
    switch (flag as (typeof FLAGS_WITH_VALUE)[number]) {
      case '--preset':
        presets = parseShapes(value);
        break;
      case '--vocab':
        vocab = parseInteger('--vocab', value, 1, 2 ** 31 - 1);
        break;
      case '--hidden':
        hidden = parseInteger('--hidden', value, 1, 2 ** 20);
        break;
      case '--batch':
        args.batches = parseBatches(value);
        break;
      case '--dtype': {
        const d = value.trim().toLowerCase();
        const map: Record<string, BenchDType> = { bf16: 'bf16', bfloat16: 'bf16', f16: 'f16', fp16: 'f16', float16: 'f16', f32: 'f32', fp32: 'f32', float32: 'f32' };
        if (!map[d]) throw new ArgError(`--dtype: expected bf16, f16 or f32, got ${show(value)}`);
        args.dtype = map[d];
        break;
      }
      case '--device': {
        const d = value.trim().toLowerCase();
        if (d !== 'auto' && d !== 'cpu' && d !== 'cuda' && !/^cuda:[0-9]{1,3}$/.test(d)) {
          throw new ArgError(`--device: expected auto, cpu, cuda or cuda:N, got ${show(value)}`);
        }
        args.device = d as BenchDevice;
        break;
      }
      case '--iters':
        args.iters = parseInteger('--iters', value, 1, 1_000_000);
        break;
      case '--warmup':
        args.warmup = parseInteger('--warmup', value, 0, 1_000_000);
        break;
      case '--json':
        if (value.trim() === '') throw new ArgError('--json: expected a file name, got an empty string');
        args.json = value;
        break;
      case '--plot':
        if (value.trim() === '') throw new ArgError('--plot: expected a file name ending in .svg, got an empty string');
        if (!value.toLowerCase().endsWith('.svg')) {
          throw new ArgError(`--plot: expected a file name ending in .svg, got ${show(value)}`);
        }
        args.plot = value;
        break;
      case '--samplers':
        args.samplers = parseSamplers(value);
        break;
      case '--options': {
        const sets = splitList('--options', value).map(parseOptionSet);
        const labels = new Set<string>();
        for (const s of sets) {
          if (labels.has(s.label)) throw new ArgError(`--options: ${show(s.label)} is listed twice`);
          labels.add(s.label);
        }
        args.optionSets = sets;
        break;
      }
      case '--python':
        if (value.trim() === '') throw new ArgError('--python: expected an interpreter path, got an empty string');
        args.python = value;
        break;
      case '--logits': {
        const m = value.trim().toLowerCase();
        const alias: Record<string, LogitsMode> = { 'model-like': 'model', random: 'gaussian' };
        const mode = (LOGITS_MODES as readonly string[]).includes(m) ? (m as LogitsMode) : alias[m];
        if (!mode) {
          throw new ArgError(`--logits: expected ${LOGITS_MODES.join(' or ')}, got ${show(value)}${suggest(m, LOGITS_MODES)}`);
        }
        args.logits = mode;
        break;
      }
      case '--logit-std':
        args.logitStd = parseNumber('--logit-std', value, 'a number > 0 and <= 100', (x) => x > 0 && x <= 100);
        logitStdGiven = true;
        break;
      case '--read-bw':
        args.readBandwidth = 1e12 * parseNumber('--read-bw', value, 'a bandwidth in TB/s > 0', (x) => x > 0 && x < 1e3);
        break;
      case '--matrix-rate':
        args.matrixRate = 1e12 * parseNumber('--matrix-rate', value, 'a rate in TFLOP/s > 0', (x) => x > 0 && x < 1e5);
        break;
      case '--mode': {
        const m = value.trim().toLowerCase();
        if (m !== 'sample' && m !== 'step' && m !== 'tp') throw new ArgError(`--mode: expected sample, step or tp, got ${show(value)}`);
        args.mode = m;
        break;
      }
      case '--stat': {
        const st = value.trim().toLowerCase();
        if (!(CENTER_STATS as readonly string[]).includes(st)) {
          throw new ArgError(`--stat: expected ${CENTER_STATS.join(' or ')}, got ${show(value)}${suggest(st, CENTER_STATS)}`);
        }
        args.stat = st as CenterStat;
        break;
      }
      case '--tp':
        args.tpDegrees = splitList('--tp', value).map((x) =>
          parseNumber('--tp', x, 'degrees in [1, 64], e.g. 1,2,4', (n) => Number.isInteger(n) && n >= 1 && n <= 64),
        );
        break;
    }
  }

  if ((vocab === null) !== (hidden === null)) {
    throw new ArgError(vocab === null ? '--hidden: needs --vocab as well' : '--vocab: needs --hidden as well');
  }
  if (presets !== null || vocab !== null) {
    const shapes = [...(presets ?? [])];
    if (vocab !== null && hidden !== null) shapes.push(customShape(vocab, hidden));
    args.shapes = shapes;
  }
  if (logitStdGiven && args.logits !== 'gaussian') {
    throw new ArgError(
      `--logit-std: sets the std of --logits gaussian; the ${args.logits} mode has fixed numbers (bench/TUNING.md, "Logits modes")`,
    );
  }
  if (args.stat !== 'median' && args.mode !== 'sample') {
    throw new ArgError(`--stat: applies to --mode sample's tables; --mode ${args.mode} reports medians`);
  }
  if (args.samplers.length === 0 && args.optionSets.length === 0) {
    throw new ArgError('--samplers: nothing to time');
  }
  return args;
}
