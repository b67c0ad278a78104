// Plain-text tables for the terminal: right-aligned numbers, left-aligned first column optional.

export interface Column {
  title: string;
  /** 'right' by default (numbers). */
  align?: 'left' | 'right';
}

/** Display width of a string: code points (µ, ×, — and – count as one column). */
function width(s: string): number {
  return [...s].length;
}

function pad(s: string, w: number, align: 'left' | 'right'): string {
  const fill = ' '.repeat(Math.max(0, w - width(s)));
  return align === 'left' ? s + fill : fill + s;
}

export function formatTable(columns: Column[], rows: string[][], indent = '  '): string {
  const widths = columns.map((c, i) => Math.max(width(c.title), ...rows.map((r) => width(r[i] ?? ''))));
  const line = (cells: string[]): string =>
    indent + cells.map((cell, i) => pad(cell ?? '', widths[i], columns[i].align ?? 'right')).join('  ').trimEnd();
  const out = [line(columns.map((c) => c.title)), indent + widths.map((w) => '─'.repeat(w)).join('  ')];
  for (const r of rows) out.push(line(r));
  return out.join('\n');
}

export const DASH = '—';

/** Microseconds: one decimal below 10 ms, whole microseconds above. */
export function fmtUs(us: number | null | undefined): string {
  if (us === null || us === undefined || !Number.isFinite(us)) return DASH;
  return us < 10_000 ? us.toFixed(1) : us.toFixed(0);
}

export function fmtRatio(r: number | null | undefined): string {
  if (r === null || r === undefined || !Number.isFinite(r)) return DASH;
  return `${r.toFixed(r < 10 ? 2 : 1)}×`;
}

export function fmtRate(x: number | null | undefined, digits = 2): string {
  if (x === null || x === undefined || !Number.isFinite(x)) return DASH;
  return x.toFixed(digits);
}

/** Shortens a message for a table cell; the full text goes in a note under the table. */
export function clip(s: string, max: number): string {
  const one = s.replace(/\s+/g, ' ').trim();
  return width(one) <= max ? one : [...one].slice(0, max - 1).join('') + '…';
}
