// The CPU backend's product and exp kernels (cpu/cpu_logits.cc, cpu/cpu_exp.cc) keep one order of
// additions whatever the ISA: each path, capped by FLASHSAMPLE_CPU_ISA in a process of its own
// (read once, at load), must give the same tokens, logprobs and top logprobs to the bit
// (test/products-child.js). On a CPU without AVX-512 or AVX2 a capped path is the one below it, and
// the comparison is narrower there.

import * as fs from 'fs';
import { runJsonChild } from './helpers';

interface ChildResult {
  hash: string;
  cases: number;
  isa: string;
}

function runChild(isa: string | undefined): ChildResult {
  // (undefined: the variable unset, the widest path)
  const parsed = runJsonChild('products-child.js', { FLASHSAMPLE_CPU_ISA: isa });
  if ((parsed as { error?: string }).error !== undefined) {
    throw new Error(`products-child.js: ${(parsed as { error: string }).error}`);
  }
  return parsed as ChildResult;
}

// What the CPU offers (Linux; elsewhere unknown, and the test does not name the ISA it expects).
function cpuFlagList(): string[] | undefined {
  try {
    return /^flags\s*:(.*)$/m.exec(fs.readFileSync('/proc/cpuinfo', 'utf8'))?.[1].split(/\s+/);
  } catch {
    return undefined;
  }
}
const flags = cpuFlagList();

function cpuFlags(): string {
  if (flags === undefined) return 'flags unknown';
  return ['avx512f', 'avx2'].filter((f) => flags.includes(f)).join(', ') || 'neither AVX2 nor AVX-512';
}

// The ISA a cap leaves in force: the widest the CPU has at or below it. The x86 kernels are built
// by GCC on x86-64 only (cpu/cpu_internal.h); elsewhere every path is the baseline.
function expectedIsa(cpu: string[], cap: string | undefined): string {
  if (process.arch !== 'x64' || cap === 'baseline') return 'baseline';
  if (cap === undefined && cpu.includes('avx512f')) return 'avx512';
  return cpu.includes('avx2') ? 'avx2' : 'baseline';
}

describe(`cpu product kernels (this CPU: ${cpuFlags()})`, () => {
  test('the widest path, AVX2 and the baseline give the same outputs to the bit, 288 calls each', () => {
    const widest = runChild(undefined);
    expect(widest.cases).toBe(288);
    const inForce = [widest.isa];
    for (const isa of ['avx2', 'baseline']) {
      const capped = runChild(isa);
      expect({ isa, hash: capped.hash, cases: capped.cases }).toEqual({ isa, hash: widest.hash, cases: widest.cases });
      inForce.push(capped.isa);
    }
    // The cap is in force (a renamed variable would leave every run on the widest path).
    if (flags !== undefined) expect(inForce).toEqual([undefined, 'avx2', 'baseline'].map((cap) => expectedIsa(flags, cap)));
  });
});
