#!/usr/bin/env node
// Measures a logits mode of the bench on the CPU, in float64: the numbers that define the
// model-like mode in bench/TUNING.md ("Logits modes"). No addon, no GPU.
//
//   node dist/bench/logits-stats.js --logits model --vocab 128256 --hidden 512 --rows 256
//   node dist/bench/logits-stats.js --logits gaussian --logit-std 4 --vocab 128256 --hidden 512 --rows 64
//
// Flags: --logits gaussian|model (default model), --vocab V (128256), --hidden D (512), --rows B
// (256), --dtype bf16|f16|f32 (bf16), --logit-std X (gaussian only, default 4), --json (print the
// stats as JSON instead of the text). Exit code 2 on a bad flag.

import type { BenchDType } from './args';
import { LOGITS_MODES, LogitsMode, LogitsStats, measureLogits } from './logits';
import { formatTable } from './table';

function fail(msg: string): never {
  process.stderr.write(`logits-stats: ${msg}\n`);
  process.exit(2);
}

function parse(argv: string[]): { mode: LogitsMode; vocab: number; hidden: number; rows: number; dtype: BenchDType; logitStd: number; json: boolean } {
  const o = { mode: 'model' as LogitsMode, vocab: 128256, hidden: 512, rows: 256, dtype: 'bf16' as BenchDType, logitStd: 4, json: false };
  const int = (flag: string, s: string | undefined, min: number): number => {
    const n = s !== undefined && /^[0-9]+$/.test(s) ? Number(s) : NaN;
    if (!Number.isSafeInteger(n) || n < min) fail(`${flag}: expected an integer >= ${min}, got ${JSON.stringify(s)}`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const f = argv[i];
    switch (f) {
      case '--logits': {
        const m = argv[++i];
        if (!(LOGITS_MODES as readonly string[]).includes(m)) fail(`--logits: expected ${LOGITS_MODES.join(' or ')}, got ${JSON.stringify(m)}`);
        o.mode = m as LogitsMode;
        break;
      }
      case '--vocab':
        o.vocab = int(f, argv[++i], 1);
        break;
      case '--hidden':
        o.hidden = int(f, argv[++i], 1);
        break;
      case '--rows':
        o.rows = int(f, argv[++i], 1);
        break;
      case '--dtype': {
        const d = argv[++i];
        if (d !== 'bf16' && d !== 'f16' && d !== 'f32') fail(`--dtype: expected bf16, f16 or f32, got ${JSON.stringify(d)}`);
        o.dtype = d;
        break;
      }
      case '--logit-std': {
        const x = Number(argv[++i]);
        if (!(x > 0 && x <= 100)) fail(`--logit-std: expected a number > 0 and <= 100, got ${JSON.stringify(argv[i])}`);
        o.logitStd = x;
        break;
      }
      case '--json':
        o.json = true;
        break;
      default:
        fail(`unknown flag ${JSON.stringify(f)}; see the head of bench/logits-stats.ts`);
    }
  }
  return o;
}

export function statsText(s: LogitsStats, seconds?: number): string {
  const pct = (x: number): string => `${(100 * x).toFixed(1)} %`;
  const head =
    `${s.mode} logits, V=${s.vocab} D=${s.hidden} ${s.dtype}, ${s.rows} rows` +
    (s.topics !== null ? `, ${s.topics} topics, ${s.flatRows} flat rows (${pct(s.flatRows / s.rows)})` : '') +
    (seconds !== undefined ? `  [${seconds.toFixed(1)} s]` : '');
  const lines = [head];
  const fmt = (x: number | null): string => (x === null ? '—' : x.toFixed(2));
  lines.push(
    s.topics !== null
      ? `  row logit std (median): rows with hot tokens ${fmt(s.bulkStd.topic)}, flat rows ${fmt(s.bulkStd.flat)}`
      : `  row logit std (median): ${fmt(s.bulkStd.topic)}`,
  );
  if (s.topGap) lines.push(`  largest logit above the row mean, rows with hot tokens: ${fmt(s.topGap.min)} to ${fmt(s.topGap.max)}`);
  lines.push(
    formatTable(
      [{ title: 'kept tokens per row', align: 'left' }, { title: 'p10' }, { title: 'median' }, { title: 'p90' }, { title: 'p95' }, { title: 'max' }, { title: '<= 20' }, { title: '<= 1024' }, { title: '> 1024' }, { title: 'max, hot rows' }, { title: 'min, flat rows' }],
      s.probes.map((p) => [
        p.name, String(p.p10), String(p.median), String(p.p90), String(p.p95), String(p.max), pct(p.le20), pct(p.le1024), pct(p.gt1024),
        p.topicMax === null ? '—' : String(p.topicMax), p.flatMin === null ? '—' : String(p.flatMin),
      ]),
    ),
  );
  return lines.join('\n');
}

if (require.main === module) {
  const o = parse(process.argv.slice(2));
  const t0 = Date.now();
  let stats: LogitsStats;
  try {
    stats = measureLogits({ mode: o.mode, vocab: o.vocab, hidden: o.hidden, rows: o.rows, dtype: o.dtype, logitStd: o.logitStd });
  } catch (e) {
    fail(e instanceof Error ? e.message : String(e));
  }
  const secs = (Date.now() - t0) / 1000;
  if (o.json) process.stdout.write(JSON.stringify({ ...stats, seconds: secs }) + '\n');
  else process.stdout.write(statsText(stats, secs) + '\n');
}
