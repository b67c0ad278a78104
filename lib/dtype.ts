// f32 <-> f16 / bf16 conversion, round to nearest even, NaN kept NaN (quiet), ±Inf kept.

export type FloatDType = 'f32' | 'f16' | 'bf16';
export type DType = FloatDType | 'i32' | 'u64';

export const DTYPES: readonly DType[] = ['f32', 'f16', 'bf16', 'i32', 'u64'];
export const FLOAT_DTYPES: readonly FloatDType[] = ['f32', 'f16', 'bf16'];

export function bytesPerElement(dtype: DType): number {
  return dtype === 'f16' || dtype === 'bf16' ? 2 : dtype === 'u64' ? 8 : 4;
}

/** The code the native side uses for a float dtype. */
export function dtypeCode(dtype: FloatDType): 0 | 1 | 2 {
  return dtype === 'f32' ? 0 : dtype === 'f16' ? 1 : 2;
}

const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);

export function encodeBF16(values: Float32Array): Uint16Array {
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) {
    const x = bits[i];
    if ((x & 0x7f800000) === 0x7f800000 && (x & 0x007fffff) !== 0) {
      out[i] = (x >>> 16) | 0x0040; // NaN stays a (quiet) NaN
    } else {
      out[i] = (x + 0x7fff + ((x >>> 16) & 1)) >>> 16;
    }
  }
  return out;
}

export function decodeBF16(values: Uint16Array): Float32Array {
  const out = new Float32Array(values.length);
  const bits = new Uint32Array(out.buffer);
  for (let i = 0; i < values.length; i++) bits[i] = values[i] << 16;
  return out;
}

function f32ToF16Bits(value: number): number {
  scratchF32[0] = value;
  const x = scratchU32[0];
  const sign = (x >>> 16) & 0x8000;
  const exponent = (x >>> 23) & 0xff;
  let mantissa = x & 0x7fffff;
  if (exponent === 0xff) return sign | 0x7c00 | (mantissa ? 0x200 | (mantissa >>> 13) : 0);
  let e = exponent - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; // overflow to infinity
  if (e <= 0) {
    // subnormal half (or zero): shift the implicit-one mantissa, round to nearest even
    if (e < -10) return sign;
    mantissa |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    const rest = mantissa & ((1 << shift) - 1);
    let m = mantissa >>> shift;
    if (rest > half || (rest === half && (m & 1))) m++;
    return sign | m;
  }
  const rest = mantissa & 0x1fff;
  let m = mantissa >>> 13;
  if (rest > 0x1000 || (rest === 0x1000 && (m & 1))) {
    m++;
    if (m === 0x400) {
      m = 0;
      e++;
      if (e >= 0x1f) return sign | 0x7c00;
    }
  }
  return sign | (e << 10) | m;
}

export function encodeF16(values: Float32Array): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = f32ToF16Bits(values[i]);
  return out;
}

export function decodeF16(values: Uint16Array): Float32Array {
  const out = new Float32Array(values.length);
  for (let i = 0; i < values.length; i++) {
    const h = values[i];
    const sign = h & 0x8000 ? -1 : 1;
    const exponent = (h >>> 10) & 0x1f;
    const mantissa = h & 0x3ff;
    if (exponent === 0) out[i] = sign * mantissa * 2 ** -24;
    else if (exponent === 0x1f) out[i] = mantissa ? NaN : sign * Infinity;
    else out[i] = sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
  }
  return out;
}
