// Summary statistics of per-iteration timings.

export interface Summary {
  /** Number of timed iterations. */
  n: number;
  medianUs: number;
  p10Us: number;
  p90Us: number;
  minUs: number;
  maxUs: number;
  meanUs: number;
}

/**
 * The statistic a table reports per point (--stat): the median (default; robust to a slow call)
 * or the mean (what a server pays on average: a cost that comes in k of C rotation inputs counts
 * k / C of it, where a median shows it only when k > C / 2).
 */
export type CenterStat = 'median' | 'mean';
export const CENTER_STATS: readonly CenterStat[] = ['median', 'mean'];

export function centerUs(s: Summary, stat: CenterStat): number {
  return stat === 'mean' ? s.meanUs : s.medianUs;
}

/** Linear-interpolated quantile of sorted data (q in [0, 1]). */
export function quantileSorted(sorted: ArrayLike<number>, q: number): number {
  const n = sorted.length;
  if (n === 0) return NaN;
  const pos = (n - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.min(n - 1, lo + 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

export function summarize(samplesUs: ArrayLike<number>): Summary {
  const sorted = Float64Array.from(samplesUs).sort();
  let sum = 0;
  for (const x of sorted) sum += x;
  return {
    n: sorted.length,
    medianUs: quantileSorted(sorted, 0.5),
    p10Us: quantileSorted(sorted, 0.1),
    p90Us: quantileSorted(sorted, 0.9),
    minUs: sorted.length ? sorted[0] : NaN,
    maxUs: sorted.length ? sorted[sorted.length - 1] : NaN,
    meanUs: sorted.length ? sum / sorted.length : NaN,
  };
}
