// Uniform argument errors: every message names the argument, what was expected and what came.

/** Text that describe() shows as is (e.g. a shape `[4]` or a tensor's `Tensor(f32[4] on cpu)`). */
export class Raw {
  constructor(readonly text: string) {}
}
export const raw = (text: string): Raw => new Raw(text);

// %TypedArray%.prototype[Symbol.toStringTag]: the element type's name for a typed array of any
// realm (a vm context, a worker's transferred array), undefined for everything else; a plain
// object cannot fake it, unlike `constructor.name`.
const typedArrayTag = Object.getOwnPropertyDescriptor(
  Object.getPrototypeOf(Uint8Array.prototype),
  Symbol.toStringTag,
)!.get! as (this: unknown) => string | undefined;

interface TypedArrays {
  Uint8Array: Uint8Array;
  Float32Array: Float32Array;
  Uint16Array: Uint16Array;
  Int32Array: Int32Array;
  Uint32Array: Uint32Array;
  BigUint64Array: BigUint64Array;
}

/** `x` is a typed array of that element type, from this realm or another one. */
export function isTyped<K extends keyof TypedArrays>(x: unknown, kind: K): x is TypedArrays[K] {
  return ArrayBuffer.isView(x) && typedArrayTag.call(x) === kind;
}

export function describe(value: unknown): string {
  if (value instanceof Raw) return value.text;
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'number') return Number.isNaN(value) ? 'NaN' : String(value);
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? value.slice(0, 40) + '…' : value);
  if (ArrayBuffer.isView(value)) {
    const length = (value as unknown as { length?: number }).length;
    return `${value.constructor.name}(${length ?? value.byteLength})`;
  }
  if (Array.isArray(value)) {
    const short = value.length <= 8 && value.every((x) => typeof x === 'number' || typeof x === 'string');
    return short ? `[${value.map((x) => (typeof x === 'string' ? JSON.stringify(x) : String(x))).join(', ')}]` : `an array of length ${value.length}`;
  }
  if (typeof value === 'object') {
    const name = (value as object).constructor?.name;
    return name && name !== 'Object' ? `a ${name}` : 'an object';
  }
  return typeof value;
}

/** TypeError for a value of the wrong kind. */
export function typeError(name: string, expected: string, got: unknown): TypeError {
  return new TypeError(`${name}: expected ${expected}, got ${describe(got)}`);
}

/** RangeError for a value of the right kind outside its domain. */
export function rangeError(name: string, expected: string, got: unknown): RangeError {
  return new RangeError(`${name}: expected ${expected}, got ${describe(got)}`);
}

function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diagonal = row[0];
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const above = row[j];
      row[j] = Math.min(row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] === b[j - 1] ? 0 : 1));
      diagonal = above;
    }
  }
  return row[b.length];
}

/** Rejects unknown keys, suggesting the closest known one (better-sqlite3 style). */
export function checkKnownKeys(name: string, object: object, known: readonly string[]): void {
  for (const key of Object.keys(object)) {
    if (known.includes(key)) continue;
    let best = '';
    let bestDistance = Infinity;
    for (const candidate of known) {
      const d = editDistance(key.toLowerCase(), candidate.toLowerCase());
      if (d < bestDistance) {
        bestDistance = d;
        best = candidate;
      }
    }
    const hint = bestDistance <= Math.max(2, Math.floor(key.length / 3)) ? `; did you mean "${best}"?` : '';
    throw new TypeError(`${name}: unknown option "${key}"${hint} (known options: ${known.join(', ')})`);
  }
}
