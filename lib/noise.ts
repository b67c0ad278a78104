// The noise function, exported from the very native code the kernels compile (cuda/include/noise.h).
import { rangeError, typeError } from './errors';
import { native } from './native';

function u32(name: string, x: unknown): number {
  if (typeof x !== 'number' || !Number.isInteger(x) || x < 0 || x > 0xffffffff) {
    throw rangeError(name, 'a 32-bit unsigned integer', x);
  }
  return x;
}

/** Philox4x32-10 (Salmon et al. 2011) of a 4-word counter and a 2-word key. */
export function philox4x32_10(
  counter: readonly [number, number, number, number],
  key: readonly [number, number],
): [number, number, number, number] {
  if (!Array.isArray(counter) || counter.length !== 4) throw typeError('counter', 'an array of 4 words', counter);
  if (!Array.isArray(key) || key.length !== 2) throw typeError('key', 'an array of 2 words', key);
  const r = native.philox(
    u32('counter[0]', counter[0]), u32('counter[1]', counter[1]), u32('counter[2]', counter[2]),
    u32('counter[3]', counter[3]), u32('key[0]', key[0]), u32('key[1]', key[1]),
  );
  return [r[0], r[1], r[2], r[3]];
}

/** The standard Gumbel value that a 32-bit Philox output maps to (accurate log1p, then log). */
export function gumbelFromBits(bits: number): number {
  return native.gumbel(u32('bits', bits));
}
