// dtype helpers: f32 / f16 / bf16 encode and decode (round to nearest even, NaN, Inf, subnormals),
// and tensor round trips per dtype on every device.

import { encodeBF16, decodeBF16, encodeF16, decodeF16, type DType } from '../lib/index';
import { toBF16Bits, fromBF16Bits, toF16Bits, fromF16Bits, bitsF32, f32Bits, rng, describeDevices, typedKind
} from './helpers';

const f32 = (...xs: number[]) => Float32Array.from(xs);
const hex = (a: unknown) => Array.from(a as ArrayLike<number>, (x) => '0x' + x.toString(16).padStart(4, '0'));

describe('bf16', () => {
  test('exact values encode to their bits and decode back', () => {
    const xs = f32(0, 1, -1, 2, 0.5, 1.5, -3.25, 65280, 2 ** -126, 2 ** 127, 3.0e38);
    const bits = encodeBF16(xs);
    expect(typedKind(bits)).toBe('Uint16Array');
    expect(hex(bits.slice(0, 8))).toEqual(hex([0x0000, 0x3f80, 0xbf80, 0x4000, 0x3f00, 0x3fc0, 0xc050, 0x477f]));
    expect(Array.from(decodeBF16(encodeBF16(xs.slice(0, 9))))).toEqual(Array.from(xs.slice(0, 9)));
  });

  test('round to nearest, ties to even (on the float32 bit pattern)', () => {
    // 1 + 2^-8 is the midpoint between 1 (0x3f80, even) and 1 + 2^-7 (0x3f81): ties to even → 0x3f80.
    // 1 + 3·2^-8 is the midpoint between 0x3f81 (odd) and 0x3f82 (even) → 0x3f82.
    // 1 + 2^-8 + 2^-20 is above the midpoint → 0x3f81; 1 + 2^-8 − 2^-20 below → 0x3f80.
    const xs = f32(1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, 1 + 2 ** -8 - 2 ** -20, -(1 + 3 * 2 ** -8));
    expect(hex(encodeBF16(xs))).toEqual(hex([0x3f80, 0x3f82, 0x3f81, 0x3f80, 0xbf82]));
  });

  test('NaN stays NaN (quiet), ±Inf and ±0 are kept, overflow by rounding goes to Inf', () => {
    const xs = f32(NaN, Infinity, -Infinity, -0, bitsF32(0x7f7fffff) /* max f32 */);
    const bits = encodeBF16(xs);
    expect(bits[0] & 0x7f80).toBe(0x7f80);
    expect(bits[0] & 0x7f).not.toBe(0);
    expect(Number.isNaN(decodeBF16(bits)[0])).toBe(true);
    expect(hex(bits.slice(1))).toEqual(hex([0x7f80, 0xff80, 0x8000, 0x7f80]));
    // a signalling NaN payload in the low bits only must not turn into Inf
    const snan = new Float32Array(new Uint32Array([0x7f800001]).buffer);
    expect(Number.isNaN(decodeBF16(encodeBF16(snan))[0])).toBe(true);
    expect(Object.is(decodeBF16(new Uint16Array([0x8000]))[0], -0)).toBe(true);
  });

  test('subnormals round trip and round correctly', () => {
    const xs = f32(bitsF32(0x00010000), bitsF32(0x00008000), bitsF32(0x00018000), bitsF32(0x00000001));
    // 0x00008000 is the tie between 0 and 0x0001 → even 0; 0x00018000 tie between 1 and 2 → 2
    expect(hex(encodeBF16(xs))).toEqual(hex([0x0001, 0x0000, 0x0002, 0x0000]));
    expect(decodeBF16(new Uint16Array([0x0001]))[0]).toBe(2 ** -133);
  });

  test('every one of the 65536 bit patterns decodes like the test model, and re-encodes to itself (NaN: to a NaN)', () => {
    const all = new Uint16Array(65536).map((_, i) => i);
    const dec = decodeBF16(all);
    const enc = encodeBF16(dec);
    for (let i = 0; i < 65536; i++) {
      const want = fromBF16Bits(i);
      if (Number.isNaN(want)) {
        expect(Number.isNaN(dec[i])).toBe(true);
        expect(Number.isNaN(fromBF16Bits(enc[i]))).toBe(true);
      } else if (!(Object.is(dec[i], want) && enc[i] === i)) {
        throw new Error(`bf16 0x${i.toString(16)}: decoded ${dec[i]} (want ${want}), re-encoded 0x${enc[i].toString(16)}`);
      }
    }
  });

  test('200k random float32 values encode like the test model', () => {
    const r = rng(3);
    const xs = new Float32Array(200000);
    const u = new Uint32Array(xs.buffer);
    for (let i = 0; i < xs.length; i++) u[i] = Math.floor(r() * 4294967296) >>> 0;
    const got = encodeBF16(xs);
    for (let i = 0; i < xs.length; i++) {
      if (Number.isNaN(xs[i])) continue;
      if (got[i] !== toBF16Bits(xs[i])) throw new Error(`bf16 of 0x${f32Bits(xs[i]).toString(16)}: 0x${got[i].toString(16)} != 0x${toBF16Bits(xs[i]).toString(16)}`);
    }
  });
});

describe('f16', () => {
  test('exact values encode to their bits and decode back', () => {
    const xs = f32(0, 1, -1, 2, 0.5, 65504, -65504, 2 ** -14, 2 ** -24, 1 + 2 ** -10);
    expect(hex(encodeF16(xs))).toEqual(hex([0x0000, 0x3c00, 0xbc00, 0x4000, 0x3800, 0x7bff, 0xfbff, 0x0400, 0x0001, 0x3c01]));
    expect(Array.from(decodeF16(encodeF16(xs)))).toEqual(Array.from(xs));
  });

  test('round to nearest, ties to even', () => {
    // 1 + 2^-11: tie between 0x3c00 (even) and 0x3c01 → 0x3c00; 1 + 3·2^-11: tie 0x3c01/0x3c02 → 0x3c02
    // 65519 → 65504 (below the midpoint 65520); 65520 → Inf (the midpoint rounds to even = Inf)
    const xs = f32(1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -11 + 2 ** -20, 65519, 65520, 1e6, -1e6);
    expect(hex(encodeF16(xs))).toEqual(hex([0x3c00, 0x3c02, 0x3c01, 0x7bff, 0x7c00, 0x7c00, 0xfc00]));
  });

  test('subnormals: smallest, ties, underflow to zero, rounding up into the normals', () => {
    // 2^-25 is the tie between 0 and 2^-24 → 0; 3·2^-25 tie between 1 and 2 units → 2 units;
    // 2^-14 − 2^-25 (tie between 0x03ff and 0x0400) → 0x0400; 2^-26 → 0; −2^-24 → 0x8001
    const xs = f32(2 ** -25, 3 * 2 ** -25, 2 ** -14 - 2 ** -25, 2 ** -26, -(2 ** -24), 1023 * 2 ** -24);
    expect(hex(encodeF16(xs))).toEqual(hex([0x0000, 0x0002, 0x0400, 0x0000, 0x8001, 0x03ff]));
    expect(decodeF16(new Uint16Array([0x0001, 0x03ff, 0x8001]))).toEqual(f32(2 ** -24, 1023 * 2 ** -24, -(2 ** -24)));
  });

  test('NaN stays NaN, ±Inf, −0', () => {
    const bits = encodeF16(f32(NaN, Infinity, -Infinity, -0));
    expect(bits[0] & 0x7c00).toBe(0x7c00);
    expect(bits[0] & 0x3ff).not.toBe(0);
    expect(hex(bits.slice(1))).toEqual(hex([0x7c00, 0xfc00, 0x8000]));
    const dec = decodeF16(new Uint16Array([0x7e00, 0x7c01, 0xfc00, 0x8000]));
    expect(Number.isNaN(dec[0]) && Number.isNaN(dec[1])).toBe(true);
    expect(dec[2]).toBe(-Infinity);
    expect(Object.is(dec[3], -0)).toBe(true);
  });

  test('every one of the 65536 bit patterns decodes like the test model, and re-encodes to itself', () => {
    const all = new Uint16Array(65536).map((_, i) => i);
    const dec = decodeF16(all);
    const enc = encodeF16(dec);
    for (let i = 0; i < 65536; i++) {
      const want = fromF16Bits(i);
      if (Number.isNaN(want)) {
        expect(Number.isNaN(dec[i])).toBe(true);
        expect(Number.isNaN(fromF16Bits(enc[i]))).toBe(true);
      } else if (!(Object.is(dec[i], want) && enc[i] === i)) {
        throw new Error(`f16 0x${i.toString(16)}: decoded ${dec[i]} (want ${want}), re-encoded 0x${enc[i].toString(16)}`);
      }
    }
  });

  test('200k random float32 values (all exponents) encode like the test model', () => {
    const r = rng(4);
    const xs = new Float32Array(200000);
    for (let i = 0; i < xs.length; i++) xs[i] = (r() - 0.5) * 2 ** Math.floor(r() * 60 - 35);
    const got = encodeF16(xs);
    for (let i = 0; i < xs.length; i++) {
      if (got[i] !== toF16Bits(xs[i])) throw new Error(`f16 of ${xs[i]}: 0x${got[i].toString(16)} != 0x${toF16Bits(xs[i]).toString(16)}`);
    }
  });
});

describeDevices((devName, dev) => {
  describe('tensor round trips', () => {
    const r = rng(11);
    const values = Float32Array.from({ length: 1000 }, () => (r() - 0.5) * 100);
    values[0] = 0;
    values[1] = -0;
    values[2] = Infinity;
    values[3] = -Infinity;
    values[4] = 2 ** -140; // f32 subnormal

    test('f32: toArray returns the same bits', async () => {
      const t = dev().tensor(values, [10, 100], 'f32');
      try {
        expect(t.shape).toEqual([10, 100]);
        expect(t.dtype).toBe('f32');
        const back = (await t.toArray()) as Float32Array;
        expect(typedKind(back)).toBe('Float32Array');
        expect(Array.from(back)).toEqual(Array.from(values));
        expect(Object.is(back[1], -0)).toBe(true);
        const raw = (await t.toRawArray()) as Float32Array;
        expect(Array.from(raw)).toEqual(Array.from(values));
      } finally {
        t.dispose();
      }
    });

    // The addon converts Float32Array data itself (binding/half_encode.h, split over threads above
    // 2^20 values): it must give the bits of the JS encoders for every class of input — all
    // exponents, ties at both precisions, subnormals of both, NaN payloads, ±Inf, overflow.
    test('tensorAsync makes the same tensors as tensor() (every dtype), and rejects what tensor() throws on', async () => {
      const r3 = rng(13);
      const xs = Float32Array.from({ length: 3000 }, () => (r3() - 0.5) * 1000);
      const cases: [Float32Array | Uint16Array | Int32Array | BigUint64Array, DType][] = [
        [xs, 'f32'], [xs, 'f16'], [xs, 'bf16'],
        [Uint16Array.from(xs, (x) => toBF16Bits(x)), 'bf16'],
        [Int32Array.from(xs, (x) => Math.trunc(x)), 'i32'],
        [BigUint64Array.from(xs, (x) => BigInt(Math.abs(Math.trunc(x)))), 'u64'],
      ];
      for (const [data, dtype] of cases) {
        const a = dev().tensor(data, [30, 100], dtype);
        const b = await dev().tensorAsync(data, [30, 100], dtype);
        try {
          expect(b.shape).toEqual([30, 100]);
          expect(b.dtype).toBe(dtype);
          expect(Array.from((await b.toRawArray()) as ArrayLike<number | bigint>)).toEqual(
            Array.from((await a.toRawArray()) as ArrayLike<number | bigint>),
          );
        } finally {
          a.dispose();
          b.dispose();
        }
      }
      const thrown = (fn: () => unknown) => {
        try {
          fn();
        } catch (e) {
          return (e as Error).message;
        }
        return 'no error';
      };
      for (const [data, shape, dtype] of [
        [xs, [3, 7], 'f32'],
        [xs, [3000], 'f64'],
        [new Int32Array(4), [4], 'f32'],
        [xs, [-1, 3000], 'f32'],
      ] as [Float32Array, number[], DType][]) {
        const want = thrown(() => dev().tensor(data, shape, dtype));
        expect(want).not.toBe('no error');
        await expect(dev().tensorAsync(data, shape, dtype)).rejects.toThrow(want);
      }
    });

    test('f16 and bf16 tensors from a Float32Array hold exactly the bits of encodeF16 / encodeBF16 (3M values)', async () => {
      const n = 3 * 2 ** 20 + 77;
      const xs = new Float32Array(n);
      const bits = new Uint32Array(xs.buffer);
      const r2 = rng(12);
      for (let i = 0; i < n; i++) {
        const kind = i % 4;
        if (kind === 0) bits[i] = Math.floor(r2() * 2 ** 32) >>> 0; // any pattern: NaNs, Inf, subnormals
        else if (kind === 1) xs[i] = (r2() - 0.5) * 2 ** Math.floor(r2() * 80 - 40);
        else if (kind === 2) bits[i] = ((Math.floor(r2() * 2 ** 16) << 16) | 0x8000) >>> 0; // bf16 ties
        else bits[i] = ((Math.floor(r2() * 2 ** 19) << 13) | 0x1000) >>> 0; // f16 ties
      }
      for (const dtype of ['f16', 'bf16'] as const) {
        const want = dtype === 'f16' ? encodeF16(xs) : encodeBF16(xs);
        const t = dev().tensor(xs, [n], dtype);
        try {
          const raw = (await t.toRawArray()) as Uint16Array;
          let bad = -1;
          for (let i = 0; i < n && bad < 0; i++) if (raw[i] !== want[i]) bad = i;
          if (bad >= 0) {
            throw new Error(`${dtype} of 0x${bits[bad].toString(16)}: tensor holds 0x${raw[bad].toString(16)}, encoder gives 0x${want[bad].toString(16)}`);
          }
        } finally {
          t.dispose();
        }
      }
    });

    for (const dtype of ['f16', 'bf16'] as const) {
      const enc = dtype === 'f16' ? toF16Bits : toBF16Bits;
      const dec = dtype === 'f16' ? fromF16Bits : fromBF16Bits;

      test(`${dtype}: a Float32Array is rounded to nearest even; toArray decodes, toRawArray gives the bits`, async () => {
        const t = dev().tensor(values, [1000], dtype);
        try {
          const bits = Uint16Array.from(values, (x) => enc(x));
          const raw = (await t.toRawArray()) as Float32Array;
          expect(typedKind(raw)).toBe('Uint16Array');
          expect(hex(raw)).toEqual(hex(bits));
          const back = (await t.toArray()) as Float32Array;
          expect(typedKind(back)).toBe('Float32Array');
          expect(Array.from(back)).toEqual(Array.from(bits, (b) => dec(b)));
        } finally {
          t.dispose();
        }
      });

      test(`${dtype}: a Uint16Array is taken as raw bits, NaN patterns included`, async () => {
        const bits = new Uint16Array(4096).map((_, i) => (i * 16 + 7) & 0xffff);
        bits[0] = dtype === 'f16' ? 0x7e00 : 0x7fc0;
        const t = dev().tensor(bits, [64, 64], dtype);
        try {
          expect(hex(await t.toRawArray())).toEqual(hex(bits));
          const back = (await t.toArray()) as Float32Array;
          expect(Number.isNaN(back[0])).toBe(true);
          for (let i = 1; i < bits.length; i++) {
            const want = dec(bits[i]);
            if (!(Object.is(back[i], want) || (Number.isNaN(want) && Number.isNaN(back[i])))) {
              throw new Error(`${dtype} 0x${bits[i].toString(16)} -> ${back[i]}, want ${want}`);
            }
          }
        } finally {
          t.dispose();
        }
      });
    }

    test('i32 and u64 tensors round trip', async () => {
      const ints = Int32Array.from([0, 1, -1, 2147483647, -2147483648, 42]);
      const t = dev().tensor(ints, [6], 'i32');
      const big = BigUint64Array.from([0n, 1n, 2n ** 64n - 1n, 2n ** 63n, 0x123456789abcdefn]);
      const u = dev().tensor(big, [5], 'u64');
      try {
        expect(Array.from((await t.toArray()) as Int32Array)).toEqual(Array.from(ints));
        expect(Array.from(await u.toArray() as BigUint64Array)).toEqual(Array.from(big));
      } finally {
        t.dispose();
        u.dispose();
      }
    });

    test('empty(shape, dtype) has the shape and dtype asked for', async () => {
      const t = dev().empty([3, 5], 'i32');
      try {
        expect(t.shape).toEqual([3, 5]);
        expect(t.dtype).toBe('i32');
        expect((await t.toArray()).length).toBe(15);
      } finally {
        t.dispose();
      }
    });
  });
});
