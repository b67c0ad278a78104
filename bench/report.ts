// Turns a BenchReport into the terminal text, the SVG plot and the --json file.

import type { BenchReport, MethodResult, ShapeResult } from './run';
import { BOUND_SLACK, optionMethodId, torchOptionMethodId } from './run';
import { DASH, clip, fmtRatio, fmtRate, fmtUs, formatTable, Column } from './table';
import { Panel, Series, renderPlot } from './plot';
import { H_COPIES } from './inputs';
import { CenterStat, centerUs } from './stats';

const SAMPLER_TITLES: Record<string, string> = {
  fused: 'fused µs',
  'reference-gumbel': 'ref-gumbel',
  'reference-inverse-cdf': 'ref-icdf',
};
const SPEEDUP_TITLES: Record<string, string> = {
  'reference-gumbel': '×ref-gumbel',
  'reference-inverse-cdf': '×ref-icdf',
};
const CELL_ERROR_WIDTH = 36;

function fmtCeiling(value: number | null, unit: 'bw' | 'rate'): string {
  if (value === null) return DASH;
  const t = value / 1e12;
  const digits = t >= 100 ? 0 : t >= 1 ? 2 : 4;
  return `${t.toFixed(digits)} ${unit === 'bw' ? 'TB/s' : 'TFLOP/s'}`;
}

function fmtBytes(b: number): string {
  return b >= 1e9 ? `${(b / 1e9).toFixed(2)} GB` : `${(b / 1e6).toFixed(1)} MB`;
}

/** Lines printed once, before the tables. */
export function describeRun(r: BenchReport): string {
  const c = r.ceilings;
  const lines = [
    `flashsample-bench  ${r.date}`,
    `device: ${r.environment.device}${r.environment.deviceKind === 'cpu' ? ' — the CPU backend' : ''}`,
  ];
  const gpu = r.environment.gpu;
  if (r.environment.deviceKind === 'cpu' && 'usable' in gpu && !gpu.usable) lines.push(`  (no GPU used: ${gpu.reason})`);
  lines.push(
    `timing: ${r.config.dtype}, ${r.config.iters} timed calls after ${r.config.warmup} warm-up per point, ` +
      `inputs rotated over copies of W totalling > ${r.config.l2RotationBytes / 1e6} MB and ${H_COPIES} or more H; ` +
      `${statOf(r)} µs (p10–p90)`,
  );
  if (r.config.logits === 'model') {
    const m = r.config.modelLogits;
    lines.push(
      `logits: model-like — per row 1–63 hot tokens ${m?.hotMin ?? 12}–${m?.hotMax ?? 20} above a bulk of std ${m?.bulkStd ?? 2}, ` +
        `every ${m?.flatEvery ?? 20}th row flat (no hot tokens); numbers in bench/TUNING.md, "Logits modes"`,
    );
  } else {
    lines.push(`logits: gaussian, std ${r.config.logitStd} (bench/TUNING.md, "Logits modes")`);
  }
  if (r.environment.deviceKind === 'cuda') {
    lines.push(`ceilings: read bandwidth ${fmtCeiling(c.readBandwidth.value, 'bw')} ${c.readBandwidth.note}`);
    lines.push(`          matrix rate ${fmtCeiling(c.matrixRate.value, 'rate')} ${c.matrixRate.note}`);
    lines.push('floor(B) = max(V·D·bytes / read bandwidth, 2·B·V·D / matrix rate)');
    lines.push(
      `launch: ${r.launchUs === null ? 'not measured' : `${fmtUs(r.launchUs)} µs`} (a plain fused call on a 128 × 64 head: the fixed costs of a call)`,
    );
    lines.push(
      `bound: within ${BOUND_SLACK}× of floor + launch, the larger term (memory, matrix or launch); beyond it, ` +
        'epilogue (the per-logit work and the pipeline), with fused / (floor + launch)',
    );
  } else {
    lines.push('floor: not computed — the ceilings are GPU measurements; this is a CPU run');
  }
  const b = r.baselines;
  if (!b.requested) lines.push('baselines: off (--no-baselines)');
  else if (b.available) {
    const t = r.environment.torch;
    lines.push(`baselines: PyTorch ${t?.torch ?? '?'} (CUDA ${t?.cuda ?? '?'}, Python ${t?.python ?? '?'}) on ${t?.gpu ?? '?'}`);
  } else lines.push(`baselines: ${b.reason ?? 'unavailable'}`);
  return lines.join('\n');
}

/** What the report's cells hold (--stat); a report written before the flag holds medians. */
function statOf(r: BenchReport): CenterStat {
  return r.config.stat ?? 'median';
}

function center(r: BenchReport, m: MethodResult | undefined): number | null {
  return m?.stats ? centerUs(m.stats, statOf(r)) : null;
}

/** The table for one shape, with notes (full error messages) under it. */
export function shapeTable(r: BenchReport, s: ShapeResult): string {
  const cpu = r.environment.deviceKind === 'cpu';
  const sh = s.shape;
  const head =
    `${sh.name} — ${sh.source}: V=${sh.vocab} D=${sh.hidden} ${s.dtype}, W ${fmtBytes(s.wBytes)} × ${s.copies} copies rotated` +
    (cpu ? '  [CPU]' : '');
  if (s.error) return `${head}\n  failed: ${s.error}`;

  const notes: string[] = [];
  const noteFor = (msg: string): string => {
    let i = notes.indexOf(msg);
    if (i < 0) {
      notes.push(msg);
      i = notes.length - 1;
    }
    return `[${i + 1}]`;
  };
  const errCell = (msg: string): string => `${clip(msg, CELL_ERROR_WIDTH)} ${noteFor(msg)}`;
  const cellUs = (m: MethodResult | undefined): number | null => center(r, m);
  const cell = (m: MethodResult | undefined): string => (m?.error ? errCell(m.error) : fmtUs(cellUs(m)));

  const samplers = r.config.samplers;
  const hasFused = samplers.includes('fused');
  const cols: Column[] = [{ title: 'B' }];
  for (const k of samplers) {
    cols.push({ title: SAMPLER_TITLES[k] });
    if (k === 'fused') cols.push({ title: 'p10–p90' });
  }
  if (!cpu) cols.push({ title: 'floor µs' });
  if (hasFused && !cpu) cols.push({ title: 'fused/floor' }, { title: 'bound' });
  if (hasFused) for (const k of samplers) if (SPEEDUP_TITLES[k]) cols.push({ title: SPEEDUP_TITLES[k] });
  if (hasFused) cols.push({ title: cpu ? 'GB/s' : 'TB/s' }, { title: cpu ? 'GFLOP/s' : 'TFLOP/s' });
  const baselineIds = !cpu && r.baselines.requested ? r.baselines.ids : [];
  for (const id of baselineIds) cols.push({ title: r.baselines.titles[id] ?? id });
  if (hasFused && baselineIds.includes('multinomial')) cols.push({ title: '×multinom' });
  // Per option set: fused µs (cost over plain fused) (rows of that call that needed the extra
  // pass / B), then its PyTorch pipeline and how much faster fused is than it.
  const torchOptions = new Set(!cpu && r.baselines.requested && r.baselines.available ? r.baselines.options : []);
  for (const set of r.config.optionSets) {
    cols.push({ title: `fused[${set.label}] µs (fb rows)` });
    if (torchOptions.has(set.label)) cols.push({ title: `torch[${set.label}] µs` }, { title: '×torch' });
  }

  const rows: string[][] = [];
  for (const br of s.batches) {
    const m = br.methods;
    const fused = cellUs(m.fused);
    const row: string[] = [String(br.batch)];
    for (const k of samplers) {
      row.push(cell(m[k]));
      if (k === 'fused') {
        const st = m.fused?.stats;
        row.push(st ? `${fmtUs(st.p10Us)}–${fmtUs(st.p90Us)}` : DASH);
      }
    }
    if (!cpu) row.push(fmtUs(br.floorUs));
    if (hasFused && !cpu) {
      row.push(fused !== null && br.floorUs ? fmtRatio(fused / br.floorUs) : DASH);
      const bd = br.bound ?? null;
      row.push(bd === null ? DASH : bd.bound === 'epilogue' ? `epilogue ${fmtRatio(bd.ratio)}` : bd.bound);
    }
    if (hasFused) {
      for (const k of samplers) {
        if (!SPEEDUP_TITLES[k]) continue;
        const ref = cellUs(m[k]);
        row.push(ref !== null && fused ? fmtRatio(ref / fused) : DASH);
      }
      const secs = fused ? fused * 1e-6 : null;
      const scale = cpu ? 1e9 : 1e12;
      row.push(secs ? fmtRate(s.wBytes / secs / scale, cpu ? 1 : 2) : DASH);
      row.push(secs ? fmtRate((2 * br.batch * sh.vocab * sh.hidden) / secs / scale, 1) : DASH);
    }
    for (const id of baselineIds) row.push(cell(m[`torch:${id}`]));
    if (hasFused && baselineIds.includes('multinomial')) {
      const t = cellUs(m['torch:multinomial']);
      row.push(t !== null && fused ? fmtRatio(t / fused) : DASH);
    }
    for (const set of r.config.optionSets) {
      const om = m[optionMethodId(set)];
      const t = cellUs(om);
      if (!om || om.error) {
        row.push(om?.error ? errCell(om.error) : DASH);
      } else {
        let text = fmtUs(t);
        if (t !== null && fused) {
          const pct = Math.round(((t - fused) / fused) * 100);
          text += ` ${pct >= 0 ? '+' : ''}${pct}%`;
        }
        const calls = om.rotationCalls !== undefined ? `; ${om.fallbackCalls ?? '?'}/${om.rotationCalls} calls` : '';
        text += ` (${om.fallbackRows ?? '?'}/${br.batch}${calls})`;
        row.push(text);
      }
      if (torchOptions.has(set.label)) {
        const tm = m[torchOptionMethodId(set)];
        row.push(cell(tm));
        const tt = cellUs(tm);
        row.push(tt !== null && t ? fmtRatio(tt / t) : DASH);
      }
    }
    rows.push(row);
  }

  const out = [head, formatTable(cols, rows)];
  if (!cpu && r.baselines.requested && !r.baselines.available) out.push(`  torch columns: ${r.baselines.reason ?? 'unavailable'}`);
  if (r.config.optionSets.length > 0) {
    out.push(
      `  fused[...] µs (fb rows): ${statOf(r)} µs, cost over plain fused, (N/B): N of the B rows needed the extra pass ` +
        `(fallbackRows of one untimed call on the first rotation copy's inputs); on CUDA (N/B; k/C calls): ` +
        `k of the C rotation copies' untimed calls sent a row to it (` +
        (statOf(r) === 'mean' ? 'the mean holds k/C of its cost)' : 'the median holds its cost when k > C/2)'),
    );
    if (torchOptions.size > 0) {
      out.push('  torch[...]: PyTorch matmul + the same options (pipelines below); ×torch: torch µs / fused µs');
      for (const label of r.baselines.options) out.push(`    ${label}: ${r.baselines.optionPipelines[label] ?? '?'}`);
    }
  }
  notes.forEach((n, i) => out.push(`  [${i + 1}] ${n}`));
  return out.join('\n');
}

const METHOD_LABELS: Record<string, string> = {
  fused: 'fused (flashsample)',
  'reference-gumbel': 'reference, gumbel',
  'reference-inverse-cdf': 'reference, inverse-CDF',
  'torch:matmul': 'PyTorch matmul alone',
  'torch:multinomial': 'PyTorch mm+softmax+multinomial',
  'torch:gumbel': 'PyTorch mm+gumbel argmax',
  'torch:exp-race': 'PyTorch mm+exponential race',
};

export function plotSvg(r: BenchReport): string {
  const panels: Panel[] = r.shapes.map((s) => {
    const series: Series[] = [];
    const ids = [
      ...r.config.samplers,
      ...r.config.optionSets.map(optionMethodId),
      ...r.baselines.ids.map((id) => `torch:${id}`),
      ...r.config.optionSets.filter((o) => r.baselines.options.includes(o.label)).map(torchOptionMethodId),
    ];
    for (const id of ids) {
      const points = s.batches
        .map((b) => ({ x: b.batch, y: center(r, b.methods[id]) ?? NaN }))
        .filter((p) => Number.isFinite(p.y));
      if (points.length === 0) continue;
      const label =
        METHOD_LABELS[id] ??
        (id.startsWith('torch:') ? `PyTorch ${r.baselines.titles[id.slice(6)] ?? id.slice(6)}` : id.startsWith('torch[') ? `PyTorch ${id.slice(5)}` : id);
      const style = id.startsWith('torch') ? 'dashed' : id.startsWith('fused[') ? 'dotted' : 'solid';
      series.push({ label, points, style });
    }
    const floor = s.batches.filter((b) => b.floorUs !== null).map((b) => ({ x: b.batch, y: b.floorUs as number }));
    if (floor.length > 0) series.push({ label: 'floor', points: floor, style: 'floor' });
    return {
      title: `${s.shape.name} (${s.shape.source}) — ${s.shape.vocab} × ${s.shape.hidden} ${s.dtype}`,
      subtitle: s.error ? `failed: ${s.error}` : `${r.environment.device}; ${statOf(r)} of ${r.config.iters} calls`,
      xLabel: 'batch size B (log)',
      yLabel: 'latency µs (log)',
      series,
    };
  });
  const c = r.ceilings;
  const footer =
    r.environment.deviceKind === 'cuda'
      ? `floor = max(V·D·bytes / ${fmtCeiling(c.readBandwidth.value, 'bw')}, 2·B·V·D / ${fmtCeiling(c.matrixRate.value, 'rate')}); ${r.date}`
      : `CPU run, no floor; ${r.date}`;
  return renderPlot(panels, footer);
}

export function reportJson(r: BenchReport): string {
  return JSON.stringify(r, (_k, v) => (typeof v === 'bigint' ? v.toString() : typeof v === 'number' && !Number.isFinite(v) ? null : v), 2) + '\n';
}
