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
}

function runChild(isa: string | undefined): ChildResult {
  // (undefined: the variable unset, the widest path)
  const parsed = runJsonChild('products-child.js', { FLASHSAMPLE_CPU_ISA: isa });
  if ((parsed as { error?: string }).error !== undefined) {
    throw new Error(`products-child.js: ${(parsed as { error: string }).error}`);
  }
  return parsed as ChildResult;
}

// What the CPU offers, for the test's name only (Linux; elsewhere unknown).
function cpuFlags(): string {
  try {
    const flags = /^flags\s*:(.*)$/m.exec(fs.readFileSync('/proc/cpuinfo', 'utf8'))?.[1].split(/\s+/) ?? [];
    return ['avx512f', 'avx2'].filter((f) => flags.includes(f)).join(', ') || 'neither AVX2 nor AVX-512';
  } catch {
    return 'flags unknown';
  }
}

describe(`cpu product kernels (this CPU: ${cpuFlags()})`, () => {
  test('the widest path, AVX2 and the baseline give the same outputs to the bit, 288 calls each', () => {
    const widest = runChild(undefined);
    expect(widest.cases).toBe(288);
    for (const isa of ['avx2', 'baseline']) {
      const capped = runChild(isa);
      expect({ isa, ...capped }).toEqual({ isa, ...widest });
    }
  });
});
