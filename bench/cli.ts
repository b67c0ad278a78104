#!/usr/bin/env node
// flashsample-bench: times the fused sampler against the materializing references and PyTorch,
// next to the memory/compute floor of real LM-head shapes. `--help` for usage.
// This file is the only place that decides exit codes: 0 ok, 1 a run failed, 2 bad arguments.

import { existsSync, statSync, writeFileSync } from 'fs';
import * as path from 'path';
import { open } from '../lib/index';
import type { Device } from '../lib/index';
import { ArgError, BenchArgs, CPU_DEFAULT_BATCHES, GPU_DEFAULT_BATCHES, USAGE, parseArgs } from './args';
import { CPU_DEFAULT_SHAPE, GPU_DEFAULT_PRESET, PRESETS } from './presets';
import { Progress } from './progress';
import { describeRun, plotSvg, reportJson, shapeTable } from './report';
import { message, run } from './run';
import { runStep, stepTable, type ModePlan } from './step';
import { runTp, tpTable } from './tp';

const NAME = 'flashsample-bench';

const CPU_DEFAULTS = { iters: 10, warmup: 2 };
const GPU_DEFAULTS = { iters: 100, warmup: 10 };

function checkOutputPath(flag: string, file: string): void {
  const dir = path.dirname(path.resolve(file));
  if (!existsSync(dir) || !statSync(dir).isDirectory()) {
    throw new ArgError(`${flag}: the folder ${JSON.stringify(dir)} of ${JSON.stringify(file)} does not exist`);
  }
  if (existsSync(file) && statSync(file).isDirectory()) {
    throw new ArgError(`${flag}: ${JSON.stringify(file)} is a folder, expected a file name`);
  }
}

async function main(argv: string[]): Promise<number> {
  let args: BenchArgs;
  try {
    args = parseArgs(argv);
    if (args.help) {
      process.stdout.write(USAGE + '\n');
      return 0;
    }
    if (args.json !== null) checkOutputPath('--json', args.json);
    if (args.plot !== null) checkOutputPath('--plot', args.plot);
  } catch (e) {
    if (e instanceof ArgError) {
      process.stderr.write(`${NAME}: ${e.message}\nRun '${NAME} --help' for usage.\n`);
      return 2;
    }
    throw e;
  }

  let device: Device;
  try {
    device = open(args.device);
  } catch (e) {
    process.stderr.write(`${NAME}: ${message(e)} (--device ${args.device})\n`);
    return 1;
  }
  const cpu = device.kind === 'cpu';
  const defaults = cpu ? CPU_DEFAULTS : GPU_DEFAULTS;
  const gpuDefault = PRESETS.find((p) => p.name === GPU_DEFAULT_PRESET);
  const shapes = args.shapes ?? [cpu || !gpuDefault ? CPU_DEFAULT_SHAPE : gpuDefault];
  const progress = new Progress();

  if (args.mode === 'tp' || args.mode === 'step') {
    if (args.mode === 'tp' && device.kind !== 'cuda') {
      process.stderr.write(`${NAME}: --mode tp: needs a CUDA device (the shards run on GPUs, the exchange over NCCL)\n`);
      return 1;
    }
    const plan: ModePlan = {
      shapes,
      batches: args.batches ?? (args.mode === 'tp' ? [1, 16, 64, 256] : cpu ? [...CPU_DEFAULT_BATCHES] : [1, 64, 256]),
      dtype: args.dtype ?? 'bf16',
      optionSets: args.optionSets.length ? args.optionSets : [{ label: 'plain' }],
      iters: args.iters ?? defaults.iters,
      warmup: args.warmup ?? defaults.warmup,
      logits: args.logits,
      logitStd: args.logitStd,
      onProgress: (text) => progress.update(text),
    };
    const [rows, table] =
      args.mode === 'tp'
        ? await runTp({ ...plan, degrees: args.tpDegrees }).then((r) => [r, tpTable(r)] as const)
        : await runStep({ ...plan, device }).then((r) => [r, stepTable(r)] as const);
    progress.clear();
    process.stdout.write(`${NAME} --mode ${args.mode} on ${device.name} (${new Date().toISOString().slice(0, 10)})\n${table}\n`);
    if (args.json !== null) {
      writeFileSync(args.json, JSON.stringify({ mode: args.mode, device: device.name, date: new Date().toISOString(), rows }, null, 2) + '\n');
      process.stderr.write(`${NAME}: wrote ${args.json}\n`);
    }
    return rows.length > 0 && rows.every((r) => r.error !== undefined) ? 1 : 0;
  }

  const report = await run({
    args,
    device,
    shapes,
    batches: args.batches ?? [...(cpu ? CPU_DEFAULT_BATCHES : GPU_DEFAULT_BATCHES)],
    dtype: args.dtype ?? 'bf16',
    iters: args.iters ?? defaults.iters,
    warmup: args.warmup ?? defaults.warmup,
    progress,
    onCeilings: (r) => {
      progress.clear();
      process.stdout.write(describeRun(r) + '\n\n');
    },
    onShape: (s, r) => {
      progress.clear();
      process.stdout.write(shapeTable(r, s) + '\n\n');
    },
  });

  let failed = false;
  if (args.json !== null) {
    try {
      writeFileSync(args.json, reportJson(report));
      process.stderr.write(`${NAME}: wrote ${args.json}\n`);
    } catch (e) {
      process.stderr.write(`${NAME}: --json ${args.json}: ${message(e)}\n`);
      failed = true;
    }
  }
  if (args.plot !== null) {
    try {
      writeFileSync(args.plot, plotSvg(report));
      process.stderr.write(`${NAME}: wrote ${args.plot}\n`);
    } catch (e) {
      process.stderr.write(`${NAME}: --plot ${args.plot}: ${message(e)}\n`);
      failed = true;
    }
  }
  if (report.shapes.length > 0 && report.shapes.every((s) => s.error !== undefined)) failed = true;
  return failed ? 1 : 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    // Flush stdout before leaving: a native addon may hold the loop open after the work is done.
    process.stdout.write('', () => process.exit(code));
  },
  (e: unknown) => {
    process.stderr.write(`${NAME}: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  },
);
