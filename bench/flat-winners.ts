#!/usr/bin/env node
// Where the best Gumbel candidates of each flat row of the model-like mode fall against its top-p
// nucleus, in float64 on the CPU, for the bench's own inputs (its rotation copies) and seed. A flat
// row's nucleus outgrows the candidates, so the fused path decides it by the winner check
// (cuda/filters.cu, check_winners): the first of the row's four best Gumbel candidates that the
// nucleus holds is the argmax over the nucleus, and a row whose four all lie past the cut takes
// the extra pass. This says, for each flat row of a bench cell, which candidate the nucleus holds
// first, so which rows take the extra pass, and why (the draw of that seed, not the code). Uses
// the addon's noise function (lib/noise.ts); no GPU. The bench's timed calls rotate over H_COPIES
// inputs with one seed, so a row that takes the extra pass in one copy's call need not in the
// others': --copies says how many of a cell's calls pay it, which is what its median sees.
//
//   node dist/bench/flat-winners.js --preset llama3-8b --batch 128 --temperature 1,0.6 --top-p 0.9
//   node dist/bench/flat-winners.js --batch 64 --temperature 0.6 --copies 8
//
// Flags: --preset NAME (llama3-8b), --batch B (64), --temperature T[,T...] (1,0.6), --top-p P (0.9),
// --seed S (1234, the bench's), --offset O (0, the bench's), --copies N (1: the first rotation
// copy, whose call the bench's "fb rows" count; the bench times H_COPIES). Exit code 2 on a bad flag.

import { H_COPIES } from './inputs';
import { BENCH_H_SEED, BENCH_W_SEED, decodeHost, isFlatRow, keptCounts, logitsInputs, rowLogits } from './logits';
import { findPreset } from './presets';
import { gumbelFromBits, philox4x32_10 } from '../lib/noise';

// The candidates the winner check weighs (cuda/filters.cu: kCheckDraws).
const CHECK_DRAWS = 4;

function fail(msg: string): never {
  process.stderr.write(`flat-winners: ${msg}\n`);
  process.exit(2);
}

interface Args {
  preset: string;
  batch: number;
  temperatures: number[];
  topP: number;
  seed: bigint;
  offset: bigint;
  copies: number;
}

function parse(argv: string[]): Args {
  const o: Args = { preset: 'llama3-8b', batch: 64, temperatures: [1, 0.6], topP: 0.9, seed: 1234n, offset: 0n, copies: 1 };
  const num = (flag: string, s: string | undefined, ok: (x: number) => boolean, what: string): number => {
    const x = s !== undefined && s.trim() !== '' ? Number(s) : NaN;
    if (!ok(x)) fail(`${flag}: expected ${what}, got ${JSON.stringify(s)}`);
    return x;
  };
  const u64 = (flag: string, s: string | undefined): bigint => {
    if (s === undefined || !/^[0-9]+$/.test(s) || BigInt(s) >= 1n << 64n) fail(`${flag}: expected an integer in [0, 2^64), got ${JSON.stringify(s)}`);
    return BigInt(s);
  };
  for (let i = 0; i < argv.length; i++) {
    const f = argv[i];
    switch (f) {
      case '--preset':
        o.preset = argv[++i] ?? '';
        if (!findPreset(o.preset)) fail(`--preset: expected a preset of bench/presets.ts, got ${JSON.stringify(o.preset)}`);
        break;
      case '--batch':
        o.batch = num(f, argv[++i], (x) => Number.isInteger(x) && x >= 1 && x <= 65535, 'an integer in [1, 65535]');
        break;
      case '--temperature':
        o.temperatures = (argv[++i] ?? '').split(',').map((s) => num(f, s, (x) => x > 0 && Number.isFinite(x), 'positive numbers, comma-separated'));
        break;
      case '--top-p':
        o.topP = num(f, argv[++i], (x) => x > 0 && x < 1, 'a number in (0, 1)');
        break;
      case '--seed':
        o.seed = u64(f, argv[++i]);
        break;
      case '--offset':
        o.offset = u64(f, argv[++i]);
        break;
      case '--copies':
        o.copies = num(f, argv[++i], (x) => Number.isInteger(x) && x >= 1 && x <= 64, `an integer in [1, 64] (the bench times ${H_COPIES})`);
        break;
      default:
        fail(`unknown flag ${JSON.stringify(f)}`);
    }
  }
  return o;
}

// The noise of docs/SEMANTICS.md §3 for row b (one seed for the call: stream b), sample 0.
function rowNoise(V: number, b: number, seed: bigint, offset: bigint): Float64Array {
  const key: [number, number] = [Number(seed & 0xffffffffn), Number(seed >> 32n)];
  const g = new Float64Array(V);
  for (let q = 0; 4 * q < V; q++) {
    const x = philox4x32_10([q, (b << 16) >>> 0, Number(offset & 0xffffffffn), Number(offset >> 32n)], key);
    for (let o = 0; o < 4 && 4 * q + o < V; o++) g[4 * q + o] = gumbelFromBits(x[o]);
  }
  return g;
}

function main(): void {
  const a = parse(process.argv.slice(2));
  const shape = findPreset(a.preset)!;
  const { vocab: V, hidden: D } = shape;
  const rows = Array.from({ length: a.batch }, (_, b) => b).filter(isFlatRow);
  if (rows.length === 0) fail(`--batch ${a.batch}: no flat row (every 20th row, from row 19)`);
  const inputs = logitsInputs('model', V, D, 'bf16', 4, BENCH_W_SEED);
  const noise = rows.map((b) => rowNoise(V, b, a.seed, a.offset));  // one seed for every call
  console.log(`${shape.name} B = ${a.batch}, model-like, seed ${a.seed} offset ${a.offset}, top-p ${a.topP}: flat rows ${rows.join(', ')}`);
  let out = 0;
  let outAll = 0;
  // per temperature: the calls with a winner outside its nucleus, and with all four candidates
  // outside (the check's extra pass)
  const callsOut = a.temperatures.map(() => 0);
  const callsOutAll = a.temperatures.map(() => 0);
  for (let copy = 0; copy < a.copies; copy++) {
    if (a.copies > 1) console.log(`copy ${copy} (H seed ${BENCH_H_SEED + copy}):`);
    const logits = rowLogits(inputs.w, decodeHost(inputs.h(a.batch, BENCH_H_SEED + copy), 'bf16'), rows, V, D, 'bf16');
    const rowOut = a.temperatures.map(() => false);
    const rowOutAll = a.temperatures.map(() => false);
    rows.forEach((b, i) => {
      const l = logits[i];
      const g = noise[i];
      const order = Array.from({ length: V }, (_, v) => v).sort((x, y) => l[y] - l[x] || x - y);
      const m = l[order[0]];
      const nuclei = keptCounts(l, a.temperatures.map((T) => ({ name: `T ${T}`, temperature: T, topP: a.topP })));
      const cells = a.temperatures.map((T, t) => {
        let z = 0;
        for (let v = 0; v < V; v++) z += Math.exp((l[v] - m) / T);
        // the row's kCheckDraws best Gumbel candidates, in score order (ties to the smaller index)
        const score = (v: number) => l[v] / T + g[v];
        const best: number[] = [];
        for (let v = 0; v < V; v++) {
          let at = best.length;
          while (at > 0 && (score(v) > score(best[at - 1]))) at--;
          if (at < CHECK_DRAWS) {
            best.splice(at, 0, v);
            if (best.length > CHECK_DRAWS) best.pop();
          }
        }
        // the mass before each candidate in the order
        const before = new Map<number, number>();
        let above = 0;
        for (const v of order) {
          if (best.includes(v)) before.set(v, above);
          if (before.size === best.length) break;
          above += Math.exp((l[v] - m) / T);
        }
        const kept = nuclei[t];
        const first = best.findIndex((v) => before.get(v)! < a.topP * z);
        if (first !== 0) {
          out++;
          rowOut[t] = true;
        }
        if (first < 0) {
          outAll++;
          rowOutAll[t] = true;
        }
        const win = best[0];
        const said = first === 0 ? 'inside' : first > 0 ? `OUTSIDE; candidate ${first + 1} (${best[first]}) inside, the check keeps it` : `OUTSIDE, and the next ${CHECK_DRAWS - 1} (extra pass)`;
        return `T ${T}: nucleus ${kept}, winner ${win}, mass before it ${(before.get(win)! / z).toFixed(4)} ${said}`;
      });
      console.log(`  row ${b}: ${cells.join(' | ')}`);
    });
    a.temperatures.forEach((_, t) => {
      if (rowOut[t]) callsOut[t]++;
      if (rowOutAll[t]) callsOutAll[t]++;
    });
  }
  const n = rows.length * a.temperatures.length * a.copies;
  console.log(`winners outside the nucleus: ${out} of ${n} (expected ${((1 - a.topP) * n).toFixed(1)}: each lies outside with probability ${+(1 - a.topP).toFixed(4)})`);
  console.log(`rows whose ${CHECK_DRAWS} best candidates all lie outside (the check's extra pass): ${outAll} of ${n} (expected ${(Math.pow(1 - a.topP, CHECK_DRAWS) * n).toFixed(4)})`);
  if (a.copies > 1)
    a.temperatures.forEach((T, t) =>
      console.log(`T ${T}: calls with a winner outside ${callsOut[t]} of ${a.copies}, with an extra pass (all ${CHECK_DRAWS} outside) ${callsOutAll[t]} of ${a.copies}`),
    );
}

main();
