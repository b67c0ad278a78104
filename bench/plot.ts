// A small hand-written SVG writer for the benchmark plot: latency against batch size, log-x and
// log-y, one line per method plus the floor (dashed), one panel per shape. No dependencies.

export interface Point {
  x: number;
  y: number;
}

export interface Series {
  label: string;
  points: Point[];
  /** 'solid' (default); 'dashed' and 'dotted' tell families apart; 'floor': black, dashed, no markers. */
  style?: 'solid' | 'dashed' | 'dotted' | 'floor';
}

export interface Panel {
  title: string;
  subtitle?: string;
  xLabel: string;
  yLabel: string;
  series: Series[];
}

const PALETTE = [
  '#d62728', // fused: red, drawn first and on top
  '#1f77b4',
  '#2ca02c',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#17becf',
  '#bcbd22',
  '#ff7f0e',
  '#7f7f7f',
  '#393b79',
  '#637939',
  '#ad494a',
  '#3182bd',
  '#31a354',
  '#756bb1',
  '#e6550d',
  '#843c39',
];
const DASHES: Record<string, string | undefined> = { solid: undefined, dashed: '7 3', dotted: '2 3', floor: '6 4' };

const WIDTH = 1040;
const PANEL_HEIGHT = 440;
const MARGIN = { left: 78, right: 310, top: 56, bottom: 56 };

export function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' })[c] ?? c);
}

/** Tiny element builder: attributes in insertion order, numbers rounded to 0.1 px. */
function el(name: string, attrs: Record<string, string | number>, body?: string): string {
  const a = Object.entries(attrs)
    .map(([k, v]) => `${k}="${typeof v === 'number' ? String(Math.round(v * 10) / 10) : escapeXml(v)}"`)
    .join(' ');
  const open = a === '' ? name : `${name} ${a}`;
  return body === undefined ? `<${open}/>` : `<${open}>${body}</${name}>`;
}

function text(x: number, y: number, s: string, attrs: Record<string, string | number> = {}): string {
  return el('text', { x, y, ...attrs }, escapeXml(s));
}

/** Ticks for a log axis: 1-2-5 per decade within [lo, hi]; falls back to the ends if none. */
export function logTicks(lo: number, hi: number): number[] {
  const ticks: number[] = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
    for (const m of [1, 2, 5]) {
      const t = m * 10 ** e;
      if (t >= lo * 0.999 && t <= hi * 1.001) ticks.push(t);
    }
  }
  return ticks.length >= 2 ? ticks : [lo, hi];
}

function formatTick(v: number): string {
  if (v >= 1e6) return `${v / 1e6}M`;
  if (v >= 1e4) return `${v / 1e3}k`;
  return String(Number(v.toPrecision(3)));
}

function renderPanel(panel: Panel, top: number): string {
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const plotH = PANEL_HEIGHT - MARGIN.top - MARGIN.bottom;
  const x0 = MARGIN.left;
  const y0 = top + MARGIN.top;
  const out: string[] = [];
  out.push(text(x0, top + 24, panel.title, { 'font-size': 16, 'font-weight': 'bold' }));
  if (panel.subtitle) out.push(text(x0, top + 42, panel.subtitle, { 'font-size': 12, fill: '#555' }));

  const pts = panel.series.flatMap((s) => s.points).filter((p) => p.x > 0 && p.y > 0 && Number.isFinite(p.y));
  if (pts.length === 0) {
    out.push(text(x0 + plotW / 2, y0 + plotH / 2, 'no data', { 'text-anchor': 'middle', fill: '#888' }));
    return out.join('\n');
  }
  const xs = [...new Set(pts.map((p) => p.x))].sort((a, b) => a - b);
  let xLo = xs[0];
  let xHi = xs[xs.length - 1];
  if (xLo === xHi) {
    xLo /= 2;
    xHi *= 2;
  }
  let yLo = Math.min(...pts.map((p) => p.y));
  let yHi = Math.max(...pts.map((p) => p.y));
  yLo /= 1.25;
  yHi *= 1.25;
  const lx = (x: number): number => x0 + ((Math.log(x) - Math.log(xLo)) / (Math.log(xHi) - Math.log(xLo))) * plotW;
  const ly = (y: number): number => y0 + plotH - ((Math.log(y) - Math.log(yLo)) / (Math.log(yHi) - Math.log(yLo))) * plotH;

  // Frame, grid, ticks.
  out.push(el('rect', { x: x0, y: y0, width: plotW, height: plotH, fill: 'none', stroke: '#333' }));
  for (const t of xs) {
    const x = lx(t);
    out.push(el('line', { x1: x, y1: y0, x2: x, y2: y0 + plotH, stroke: '#e5e5e5' }));
    out.push(text(x, y0 + plotH + 16, formatTick(t), { 'text-anchor': 'middle', 'font-size': 11 }));
  }
  for (const t of logTicks(yLo, yHi)) {
    const y = ly(t);
    out.push(el('line', { x1: x0, y1: y, x2: x0 + plotW, y2: y, stroke: '#e5e5e5' }));
    out.push(text(x0 - 6, y + 4, formatTick(t), { 'text-anchor': 'end', 'font-size': 11 }));
  }
  out.push(text(x0 + plotW / 2, y0 + plotH + 38, panel.xLabel, { 'text-anchor': 'middle', 'font-size': 12 }));
  out.push(
    text(x0 - 56, y0 + plotH / 2, panel.yLabel, {
      'text-anchor': 'middle',
      'font-size': 12,
      transform: `rotate(-90 ${x0 - 56} ${y0 + plotH / 2})`,
    }),
  );

  // Series (drawn in reverse so the first, the fused sampler, ends on top) and the legend.
  const drawn: string[] = [];
  panel.series.forEach((s, i) => {
    const style = s.style ?? 'solid';
    const floor = style === 'floor';
    const color = floor ? '#000' : PALETTE[i % PALETTE.length];
    const dash = DASHES[style];
    const p = s.points.filter((q) => q.x > 0 && q.y > 0 && Number.isFinite(q.y)).sort((a, b) => a.x - b.x);
    const parts: string[] = [];
    if (p.length > 1) {
      parts.push(
        el('polyline', {
          points: p.map((q) => `${Math.round(lx(q.x) * 10) / 10},${Math.round(ly(q.y) * 10) / 10}`).join(' '),
          fill: 'none',
          stroke: color,
          'stroke-width': floor ? 1.5 : 2,
          ...(dash ? { 'stroke-dasharray': dash } : {}),
        }),
      );
    }
    if (!floor || p.length === 1) {
      for (const q of p) parts.push(el('circle', { cx: lx(q.x), cy: ly(q.y), r: 3, fill: color }, el('title', {}, escapeXml(`${s.label}: B=${q.x}, ${q.y.toFixed(1)} µs`))));
    }
    drawn.unshift(el('g', { class: 'series' }, parts.join('')));
    const ly0 = y0 + 8 + i * 20;
    const lx0 = x0 + plotW + 16;
    out.push(
      el('line', { x1: lx0, y1: ly0, x2: lx0 + 24, y2: ly0, stroke: color, 'stroke-width': 2, ...(dash ? { 'stroke-dasharray': dash } : {}) }),
    );
    out.push(text(lx0 + 30, ly0 + 4, s.label, { 'font-size': 12 }));
  });
  out.push(...drawn);
  return out.join('\n');
}

/** The whole SVG document: the panels stacked vertically. */
export function renderPlot(panels: Panel[], footer?: string): string {
  const height = Math.max(1, panels.length) * PANEL_HEIGHT + (footer ? 24 : 0);
  const body = panels.map((p, i) => renderPanel(p, i * PANEL_HEIGHT)).join('\n');
  const foot = footer ? text(MARGIN.left, height - 8, footer, { 'font-size': 11, fill: '#555' }) : '';
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="Helvetica, Arial, sans-serif">`,
    el('rect', { x: 0, y: 0, width: WIDTH, height, fill: '#fff' }),
    body,
    foot,
    '</svg>',
    '',
  ].join('\n');
}
