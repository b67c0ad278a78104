// Runs bench/baselines/torch_baselines.py (PyTorch, CUDA) in a child process: shapes go in as
// JSON arguments, one JSON report comes back on stdout, progress lines come back on stderr.

import { spawn } from 'child_process';
import { existsSync } from 'fs';
import * as path from 'path';
import type { BenchDType, LogitsMode } from './args';
import type { Shape } from './presets';

/** Baseline ids as torch_baselines.py names them, with the column titles the table uses. */
export const BASELINE_TITLES: Record<string, string> = {
  matmul: 'torch mm',
  multinomial: 'mm+multinom',
  gumbel: 'mm+gumbel',
  'exp-race': 'mm+exp-race',
  topk: 'mm+topk',
  topp: 'mm+topp',
};
export const CORE_BASELINES = ['matmul', 'multinomial', 'gumbel', 'exp-race'] as const;

export interface TimingStats {
  median_us: number;
  p10_us: number;
  p90_us: number;
  min_us: number;
  max_us: number;
  mean_us: number;
  n: number;
}
export type BaselineCell = TimingStats | { error: string };

export interface MatrixRateEntry {
  flops_per_s?: number;
  tflops?: number;
  size?: number;
  median_us?: number;
  method?: string;
  error?: string;
}

/** What torch_baselines.py prints (see its docstring). */
export interface TorchReport {
  available: boolean;
  reason: string | null;
  python?: string;
  torch?: string | null;
  cuda?: string | null;
  gpu?: string | null;
  matrix_rate?: Record<string, MatrixRateEntry> | null;
  top_k?: number;
  top_p?: number;
  logits?: LogitsMode;
  /** Option-set label -> the pipeline it runs, in words. */
  options?: Record<string, string>;
  results: {
    shape: string;
    vocab: number;
    hidden: number;
    batch: number;
    copies: number;
    baselines: Record<string, BaselineCell>;
    /** Per option-set label (--option-sets). */
    options?: Record<string, BaselineCell>;
  }[];
}

export interface TorchRequest {
  python: string;
  shapes: readonly Shape[];
  batches: readonly number[];
  dtype: BenchDType;
  iters: number;
  warmup: number;
  /** Baseline ids to time; empty = only the matrix-rate ceiling. */
  baselines: readonly string[];
  matrixRate: boolean;
  topK: number;
  topP: number;
  logitStd: number;
  /** The bench's logits mode; the model mode's topic plan comes from logitsSeed. */
  logits: LogitsMode;
  logitsSeed: number;
  /** torch_baselines.py --option-sets entries (run.ts torchOptionSet). */
  optionSets: readonly Record<string, string | number | boolean>[];
  deviceIndex: number;
  /** Called with each stderr line of the child (its progress). */
  onLine?: (line: string) => void;
}

export function findBaselineScript(): string | null {
  const candidates = [
    path.resolve(__dirname, '..', '..', 'bench', 'baselines', 'torch_baselines.py'), // dist/bench/*.js
    path.resolve(__dirname, 'baselines', 'torch_baselines.py'), // bench/*.ts run in place
  ];
  return candidates.find((p) => existsSync(p)) ?? null;
}

function unavailable(reason: string): TorchReport {
  return { available: false, reason, results: [] };
}

/** Never rejects: every failure becomes `{ available: false, reason }`. */
export function runTorchBaselines(req: TorchRequest): Promise<TorchReport> {
  const script = findBaselineScript();
  if (script === null) return Promise.resolve(unavailable('bench/baselines/torch_baselines.py not found next to the CLI'));
  const argv = [
    script,
    '--batches', req.batches.join(','),
    '--dtype', req.dtype,
    '--iters', String(req.iters),
    '--warmup', String(req.warmup),
    '--baselines', req.baselines.join(','),
    '--top-k', String(req.topK),
    '--top-p', String(req.topP),
    '--logit-std', String(req.logitStd),
    '--logits', req.logits,
    '--logits-seed', String(req.logitsSeed),
    '--device-index', String(req.deviceIndex),
  ];
  if (req.optionSets.length > 0) argv.push('--option-sets', JSON.stringify(req.optionSets));
  if (req.shapes.length > 0) {
    argv.push('--shapes', JSON.stringify(req.shapes.map((s) => ({ name: s.name, vocab: s.vocab, hidden: s.hidden }))));
  }
  if (!req.matrixRate) argv.push('--no-matrix-rate');

  return new Promise((resolve) => {
    let settled = false;
    const finish = (r: TorchReport): void => {
      if (!settled) {
        settled = true;
        resolve(r);
      }
    };
    const child = spawn(req.python, argv, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, PYTHONUNBUFFERED: '1', PYTHONDONTWRITEBYTECODE: '1' },
    });
    let stdout = '';
    let stderrTail = '';
    let pending = '';
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk: string) => {
      stderrTail = (stderrTail + chunk).slice(-4000);
      pending += chunk;
      let nl: number;
      while ((nl = pending.indexOf('\n')) >= 0) {
        const line = pending.slice(0, nl).replace(/\r$/, '');
        pending = pending.slice(nl + 1);
        if (line.trim() !== '') req.onLine?.(line);
      }
    });
    child.on('error', (err: NodeJS.ErrnoException) => {
      finish(unavailable(err.code === 'ENOENT' ? `${req.python} not found` : `${req.python}: ${err.message}`));
    });
    child.on('close', (code, signal) => {
      const lastLine = stdout.trim().split('\n').pop() ?? '';
      try {
        const parsed = JSON.parse(lastLine) as TorchReport;
        if (typeof parsed !== 'object' || parsed === null || !Array.isArray(parsed.results)) throw new Error('not a report');
        finish(parsed);
      } catch {
        const why = signal ? `killed by ${signal}` : `exit code ${code}`;
        const lastErr = stderrTail.trim().split('\n').filter((l) => l.trim() !== '').pop() ?? 'no output';
        finish(unavailable(`torch_baselines.py failed (${why}): ${lastErr}`));
      }
    });
  });
}

export function isStats(cell: BaselineCell | undefined): cell is TimingStats {
  return cell !== undefined && typeof (cell as TimingStats).median_us === 'number';
}
