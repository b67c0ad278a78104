// The public API's contract: every bad input rejects or throws with a message naming the argument,
// ownership (dispose, Symbol.dispose), real asynchrony, and the process never crashes.

import * as lib from '../lib/index';
import { open, gpuStatus, sampleFused, sampleFusedInto, sampleReference, Tensor } from '../lib/index';
import { failure, makeTensor, plantLogits, zipfLogits, cudaStatus } from './helpers';

const cpu = open('cpu');
const B = 3;
const V = 111;
const D = 8;

function operands(dtype: 'f32' | 'f16' | 'bf16' = 'bf16') {
  return plantLogits(cpu, dtype, [zipfLogits(V, 1, 1), zipfLogits(V, 1, 2), zipfLogits(V, 1, 3)], { D });
}

/** The call fails (sync throw or rejection) with an error of `type` whose message matches `re`. */
async function expectFailure(fn: () => unknown, re: RegExp, type?: ErrorConstructor | TypeErrorConstructor | RangeErrorConstructor) {
  const e = await failure(fn);
  expect(e).toBeInstanceOf(Error);
  expect(e.message).toMatch(re);
  if (type) expect(e).toBeInstanceOf(type);
  return e;
}

describe('exports', () => {
  test('the draft API is exported', () => {
    for (const name of [
      'open', 'gpuStatus', 'Tensor', 'Device', 'sampleFused', 'sampleFusedInto', 'sampleReference', 'timeSampler',
      'measureReadBandwidth', 'encodeBF16', 'decodeBF16', 'encodeF16', 'decodeF16', 'philox4x32_10',
    ]) {
      expect({ name, type: typeof (lib as Record<string, unknown>)[name] }).toEqual({ name, type: 'function' });
    }
  });

  test('gpuStatus() reports a boolean, a reason and counts; open("cpu") is a cpu device', () => {
    const s = gpuStatus();
    expect(typeof s.usable).toBe('boolean');
    expect(typeof s.reason).toBe('string');
    expect(typeof s.deviceCount).toBe('number');
    expect(typeof s.compiledWithCuda).toBe('boolean');
    if (!s.usable) expect(s.reason.length).toBeGreaterThan(0);
    expect(cpu.kind).toBe('cpu');
    expect(cpu.ordinal).toBe(0);
    expect(cpu.name).toMatch(/cpu/);
    const auto = open('auto');
    expect(auto.kind).toBe(s.usable ? 'cuda' : 'cpu');
    expect(open().kind).toBe(auto.kind);
  });
});

describe('devices', () => {
  test("unknown device 'tpu' is rejected naming the device", async () => {
    await expectFailure(() => open('tpu' as never), /device/);
    await expectFailure(() => open('tpu' as never), /tpu/);
  });

  const st = cudaStatus();
  (st.usable ? test.skip : test)(`open('cuda') without a usable GPU throws "no usable GPU"${st.usable ? ' (skipped: a GPU is usable)' : ''}`, async () => {
    await expectFailure(() => open('cuda'), /no usable GPU/);
    await expectFailure(() => open('cuda:0'), /no usable GPU/);
  });

  (st.usable ? test : test.skip)(`open('cuda:99') names the device index${st.usable ? '' : ` (skipped: ${st.reason})`}`, async () => {
    await expectFailure(() => open('cuda:99' as never), /device/);
  });
});

describe('tensors', () => {
  test('data length vs shape names data and the expected count', async () => {
    await expectFailure(() => cpu.tensor(new Float32Array(5), [2, 3], 'f32'), /data.*6/);
  });
  test('unknown dtype names dtype', async () => {
    await expectFailure(() => cpu.tensor(new Float32Array(4), [4], 'f64' as never), /dtype/, TypeError);
  });
  test('data of the wrong array type for the dtype names data', async () => {
    await expectFailure(() => cpu.tensor(new Int32Array(4), [4], 'f32'), /data/, TypeError);
    await expectFailure(() => cpu.tensor(new Float32Array(4), [4], 'i32'), /data/, TypeError);
    await expectFailure(() => cpu.tensor([1, 2, 3, 4] as never, [4], 'f32'), /data/, TypeError);
  });
  test('bad shapes name shape', async () => {
    await expectFailure(() => cpu.tensor(new Float32Array(4), [-4], 'f32'), /shape/);
    await expectFailure(() => cpu.tensor(new Float32Array(4), [2.5, 2] as never, 'f32'), /shape/);
    await expectFailure(() => cpu.tensor(new Float32Array(4), 'four' as never, 'f32'), /shape/);
  });

  test('dispose twice is harmless; a disposed tensor throws a clear error when used', async () => {
    const t = cpu.tensor(new Float32Array(4), [4], 'f32');
    expect(t.disposed).toBe(false);
    t.dispose();
    t.dispose();
    expect(t.disposed).toBe(true);
    await expectFailure(() => t.toArray(), /dispos/);
    const p = operands();
    p.W.dispose();
    await expectFailure(() => sampleFused(p.H, p.W), /W.*dispos|dispos.*W/);
    await expectFailure(() => sampleReference(p.H, p.W), /W.*dispos|dispos.*W/);
    p.dispose();
  });

  test('Symbol.dispose disposes (using-declarations work)', () => {
    const t = cpu.tensor(new Float32Array(4), [4], 'f32');
    const sym = (Symbol as { dispose?: symbol }).dispose ?? Symbol.for('Symbol.dispose');
    expect(typeof (t as unknown as Record<symbol, unknown>)[sym]).toBe('function');
    (t as unknown as Record<symbol, () => void>)[sym]();
    expect(t.disposed).toBe(true);
  });

  test('Tensor.fromDevicePointer on the cpu device is rejected naming the device', async () => {
    await expectFailure(() => Tensor.fromDevicePointer(cpu, 4096n, [4], 'f32'), /device/);
  });
});

describe('sampler arguments', () => {
  let p: ReturnType<typeof operands>;
  beforeAll(() => {
    p = operands();
  });
  afterAll(() => p.dispose());

  test('samplers return Promises', async () => {
    const a = sampleFused(p.H, p.W);
    const b = sampleReference(p.H, p.W);
    expect(a).toBeInstanceOf(Promise);
    expect(b).toBeInstanceOf(Promise);
    const [ra, rb] = await Promise.all([a, b]);
    expect(ra.tokens.length).toBe(B);
    expect(rb.tokens.length).toBe(B);
    expect(ra.fallbackRows).toBe(0);
  });

  test('a non-tensor H or W is a TypeError naming it', async () => {
    await expectFailure(() => sampleFused({} as never, p.W), /\bH\b/, TypeError);
    await expectFailure(() => sampleFused(p.H, new Float32Array(8) as never), /\bW\b/, TypeError);
    await expectFailure(() => sampleReference(null as never, p.W), /\bH\b/, TypeError);
  });

  test('shape mismatch (D of W differs from D of H) names W and the shapes', async () => {
    const W2 = cpu.tensor(new Float32Array(V * 4), [V, 4], 'bf16');
    try {
      await expectFailure(() => sampleFused(p.H, W2), /W/);
      await expectFailure(() => sampleReference(p.H, W2), /W/);
    } finally {
      W2.dispose();
    }
  });

  test('H or W that is not 2-D names it', async () => {
    const h1 = cpu.tensor(new Float32Array(8), [8], 'bf16');
    try {
      await expectFailure(() => sampleFused(h1, p.W), /\bH\b/);
      await expectFailure(() => sampleFused(p.H, h1), /\bW\b/);
    } finally {
      h1.dispose();
    }
  });

  test('mismatched dtypes of H and W, or a non-float dtype, name the argument', async () => {
    const Wf = makeTensor(cpu, 'f32', new Float64Array(V * D), [V, D]);
    const Hi = cpu.tensor(new Int32Array(B * D), [B, D], 'i32');
    try {
      await expectFailure(() => sampleFused(p.H, Wf), /W.*dtype|dtype.*W/);
      await expectFailure(() => sampleFused(Hi, p.W), /\bH\b/);
    } finally {
      Wf.dispose();
      Hi.dispose();
    }
  });

  test('temperature: negative, NaN, Infinity, a string, a wrong-length array all name temperature', async () => {
    for (const t of [-1, NaN, Infinity]) {
      await expectFailure(() => sampleFused(p.H, p.W, { temperature: t }), /temperature/, RangeError);
    }
    await expectFailure(() => sampleFused(p.H, p.W, { temperature: '1' as never }), /temperature/, TypeError);
    await expectFailure(() => sampleFused(p.H, p.W, { temperature: new Float32Array(2) }), /temperature.*3|3.*temperature/);
    await expectFailure(() => sampleFused(p.H, p.W, { temperature: new Float32Array([1, NaN, 1]) }), /temperature/);
    await expectFailure(() => sampleFused(p.H, p.W, { temperature: [1, 1, 1] as never }), /temperature/);
  });

  test('numSamples: 0, −1, 1.5, NaN, 65537, a string name numSamples; 65536 is allowed', async () => {
    for (const n of [0, -1, 1.5, NaN, 65537, 1e9]) {
      await expectFailure(() => sampleFused(p.H, p.W, { numSamples: n }), /numSamples/);
    }
    await expectFailure(() => sampleFused(p.H, p.W, { numSamples: '2' as never }), /numSamples/);
    const one = plantLogits(cpu, 'bf16', [zipfLogits(8, 1, 1)], { D: 8 });
    try {
      const r = await sampleFused(one.H, one.W, { numSamples: 65536 });
      expect(r.tokens.length).toBe(65536);
    } finally {
      one.dispose();
    }
  });

  test('seed and offset: negative, ≥ 2^64, fractional, NaN, wrong-length arrays name the argument', async () => {
    for (const name of ['seed', 'offset'] as const) {
      const re = new RegExp(name);
      for (const bad of [-1, -1n, 2n ** 64n, 1.5, NaN, 2 ** 64]) {
        await expectFailure(() => sampleFused(p.H, p.W, { [name]: bad }), re);
      }
      await expectFailure(() => sampleFused(p.H, p.W, { [name]: new BigUint64Array(2) }), re);
      await expectFailure(() => sampleFused(p.H, p.W, { [name]: '7' as never }), re, TypeError);
      await expectFailure(() => sampleReference(p.H, p.W, { [name]: new BigUint64Array(4) }), re);
      // the largest values are fine
      await expect(sampleFused(p.H, p.W, { [name]: 2n ** 64n - 1n })).resolves.toBeDefined();
    }
  });

  test('per-row filter arrays of the wrong length name the argument', async () => {
    await expectFailure(() => sampleFused(p.H, p.W, { topK: new Int32Array(2) }), /topK/);
    await expectFailure(() => sampleFused(p.H, p.W, { topP: new Float32Array(4) }), /topP/);
    await expectFailure(() => sampleFused(p.H, p.W, { minP: new Float32Array(1) }), /minP/);
    await expectFailure(() => sampleFused(p.H, p.W, { allowedTokens: new Uint32Array(3) }), /allowedTokens/);
  });

  test('filter values out of range name the argument', async () => {
    await expectFailure(() => sampleFused(p.H, p.W, { topK: -1 }), /topK/);
    await expectFailure(() => sampleFused(p.H, p.W, { topK: 2.5 }), /topK/);
    for (const v of [0, -0.1, 1.5, NaN]) await expectFailure(() => sampleFused(p.H, p.W, { topP: v }), /topP/);
    for (const v of [-0.1, 1, NaN]) await expectFailure(() => sampleFused(p.H, p.W, { minP: v }), /minP/);
    for (const v of [-1, NaN, Infinity]) await expectFailure(() => sampleFused(p.H, p.W, { softcap: v }), /softcap/);
    await expectFailure(() => sampleFused(p.H, p.W, { logprobs: 1 as never }), /logprobs/);
    await expectFailure(() => sampleFused(p.H, p.W, { topLogprobs: -1 }), /topLogprobs/);
    await expectFailure(() => sampleFused(p.H, p.W, { topLogprobs: 1.5 }), /topLogprobs/);
  });

  test('bias of the wrong length, dtype or kind names bias', async () => {
    const b1 = makeTensor(cpu, 'bf16', new Float64Array(V + 1), [V + 1]);
    const b2 = makeTensor(cpu, 'f32', new Float64Array(V), [V]);
    try {
      await expectFailure(() => sampleFused(p.H, p.W, { bias: b1 }), /bias/);
      await expectFailure(() => sampleFused(p.H, p.W, { bias: b2 }), /bias/);
      await expectFailure(() => sampleFused(p.H, p.W, { bias: new Float32Array(V) as never }), /bias/, TypeError);
    } finally {
      b1.dispose();
      b2.dispose();
    }
  });

  test('a misspelled option is rejected and the message suggests the right name', async () => {
    const e = await expectFailure(() => sampleFused(p.H, p.W, { temprature: 0.5 } as never), /temprature/);
    expect(e.message).toMatch(/temperature/);
    const e2 = await expectFailure(() => sampleReference(p.H, p.W, { numSample: 2 } as never), /numSample/);
    expect(e2.message).toMatch(/numSamples/);
    const e3 = await expectFailure(() => sampleReference(p.H, p.W, { methd: 'gumbel' } as never), /methd/);
    expect(e3.message).toMatch(/method/);
    // method is a reference-only option
    await expectFailure(() => sampleFused(p.H, p.W, { method: 'gumbel' } as never), /method/);
  });

  test('unknown reference method names method', async () => {
    await expectFailure(() => sampleReference(p.H, p.W, { method: 'magic' as never }), /method/);
  });

  test('options that are not an object name options', async () => {
    await expectFailure(() => sampleFused(p.H, p.W, 42 as never), /options/, TypeError);
  });

  test('stream on the cpu device is rejected naming stream', async () => {
    await expectFailure(() => sampleFused(p.H, p.W, { stream: 0n }), /stream/);
  });

  test('sampleFusedInto writes the tokens of sampleFused into an i32 tensor; a wrong out is rejected', async () => {
    const out = cpu.empty([B * 4], 'i32');
    const small = cpu.empty([B], 'i32');
    const wrongType = cpu.empty([B * 4], 'f32');
    try {
      const o = { seed: 3n, numSamples: 4 };
      await expect(sampleFusedInto(out, p.H, p.W, o)).resolves.toBeUndefined();
      const want = await sampleFused(p.H, p.W, o);
      expect(Array.from((await out.toArray()) as Int32Array)).toEqual(Array.from(want.tokens));
      await expectFailure(() => sampleFusedInto(small, p.H, p.W, o), /out/);
      await expectFailure(() => sampleFusedInto(wrongType, p.H, p.W, o), /out/);
      await expectFailure(() => sampleFusedInto({} as never, p.H, p.W, o), /out/);
    } finally {
      out.dispose();
      small.dispose();
      wrongType.dispose();
    }
  });

  test('u64 tensors of per-row seeds and offsets equal the same BigUint64Arrays', async () => {
    const arr = new BigUint64Array([5n, 6n, 2n ** 63n]);
    const t = cpu.tensor(arr, [3], 'u64');
    const offsets = new BigUint64Array([9n, 2n ** 40n + 3n, 0n]);
    const ot = cpu.tensor(offsets, [3], 'u64');
    try {
      const a = await sampleFused(p.H, p.W, { seed: arr, numSamples: 16 });
      const b = await sampleFused(p.H, p.W, { seed: t, numSamples: 16 });
      expect(Array.from(b.tokens)).toEqual(Array.from(a.tokens));
      const c = await sampleFused(p.H, p.W, { seed: arr, offset: offsets, numSamples: 16 });
      const d = await sampleFused(p.H, p.W, { seed: arr, offset: ot, numSamples: 16 });
      expect(Array.from(d.tokens)).toEqual(Array.from(c.tokens));
      expect(Array.from(c.tokens)).not.toEqual(Array.from(a.tokens)); // the offsets are read at all
      const t2 = cpu.tensor(new BigUint64Array(2), [2], 'u64');
      await expectFailure(() => sampleFused(p.H, p.W, { seed: t2 }), /seed/);
      t2.dispose();
    } finally {
      t.dispose();
      ot.dispose();
    }
  });

  test('errors from bad inputs leave the library usable (the process never crashes)', async () => {
    const bads: unknown[] = [undefined, null, 0, 'x', [], {}, NaN, -1, 2n ** 70n, new Float32Array(1)];
    for (const x of bads) {
      for (const key of ['temperature', 'seed', 'offset', 'numSamples', 'topK', 'topP', 'bias', 'allowedTokens']) {
        if (x === undefined) continue;
        await failure(() => sampleFused(p.H, p.W, { [key]: x } as never)).catch(() => undefined);
      }
      await failure(() => sampleFused(x as never, p.W)).catch(() => undefined);
    }
    const r = await sampleFused(p.H, p.W, { seed: 1n });
    expect(r.tokens.length).toBe(B);
  });
});

describe('asynchrony', () => {
  test('a large sample runs off the JS thread: a setImmediate callback runs before it resolves', async () => {
    // B=4 × 65536 samples × V=256: 6.7e7 (sample, vocabulary) pairs, hundreds of milliseconds on the CPU.
    // A blocking call wrapped in a Promise would finish before setImmediate is even scheduled.
    const V2 = 256;
    const big = plantLogits(cpu, 'bf16', Array.from({ length: 4 }, () => zipfLogits(V2, 1, 9)), { D: 8 });
    try {
      const order: string[] = [];
      const pending = sampleFused(big.H, big.W, { numSamples: 65536, seed: 1n }).then(() => order.push('sample'));
      await new Promise<void>((resolve) => setImmediate(() => {
        order.push('immediate');
        resolve();
      }));
      await pending;
      expect(order).toEqual(['immediate', 'sample']);
    } finally {
      big.dispose();
    }
  });

  test('many concurrent calls all resolve, each with its own result', async () => {
    const p = operands('f32');
    try {
      const calls = Array.from({ length: 16 }, (_, i) => sampleFused(p.H, p.W, { seed: BigInt(i), numSamples: 64 }));
      const results = await Promise.all(calls);
      for (let i = 0; i < calls.length; i++) {
        const again = await sampleFused(p.H, p.W, { seed: BigInt(i), numSamples: 64 });
        expect({ i, tokens: Array.from(results[i].tokens) }).toEqual({ i, tokens: Array.from(again.tokens) });
      }
    } finally {
      p.dispose();
    }
  });

  test('disposing a tensor while a call that uses it is in flight does not crash the call', async () => {
    const p = operands('f32');
    const pending = sampleFused(p.H, p.W, { numSamples: 4096, seed: 2n });
    p.dispose();
    const r = await pending.catch((e: Error) => e);
    if (r instanceof Error) expect(r.message).toMatch(/dispos/);
    else expect(r.tokens.length).toBe(B * 4096);
  });
});
