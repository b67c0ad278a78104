// Big and odd shapes (issue 6): the largest batch the counter layout allows, batches far beyond a
// tile, hidden sizes that are no multiple of any vector width, a vocabulary of one. Correct, or a
// clear error naming the limit; fused and the Gumbel reference agree token for token.
import { sampleFused, sampleReference, type Device } from '../lib/index';
import { agreement, describeDevices, failure, rng } from './helpers';

function randomOperands(dev: Device, B: number, V: number, D: number, seed: number) {
  const r = rng(seed);
  const h = new Float32Array(B * D);
  for (let i = 0; i < h.length; i++) h[i] = r() * 2 - 1;
  const w = new Float32Array(V * D);
  for (let i = 0; i < w.length; i++) w[i] = (r() * 2 - 1) * 3;
  return { H: dev.tensor(h, [B, D], 'bf16'), W: dev.tensor(w, [V, D], 'bf16') };
}

describeDevices((name, dev) => {
  test.each([
    // [B, V, D]
    [4096, 97, 16],
    [65535, 5, 8], // the largest batch: the row is the upper 16 bits of Philox counter word 1
    [7, 1, 3], // a vocabulary of one: always token 0
    [5, 333, 1],
    [3, 1000, 67], // D not a multiple of 8 (the tensor-core path's 16-byte rows): the SIMT path
  ])('B=%i V=%i D=%i: tokens in range, fused == reference(gumbel)', async (B, V, D) => {
    const { H, W } = randomOperands(dev(), B, V, D, B + V + D);
    try {
      const o = { seed: 5n, offset: 2n, temperature: 0.9 };
      const f = await sampleFused(H, W, o);
      const g = await sampleReference(H, W, { ...o, method: 'gumbel' });
      expect(f.tokens.length).toBe(B);
      let outside = 0;
      for (const t of f.tokens) if (!(t >= 0 && t < V)) outside++;
      expect(outside).toBe(0);
      if (V === 1) expect(Array.from(new Set(f.tokens))).toEqual([0]);
      expect(agreement(f.tokens, g.tokens)).toBeGreaterThanOrEqual(name === 'cpu' ? 1 : 0.999);
    } finally {
      H.dispose();
      W.dispose();
    }
  });

  test('B = 65536 is rejected with the limit named', async () => {
    const { H, W } = randomOperands(dev(), 65536, 2, 1, 1);
    try {
      const e = await failure(() => sampleFused(H, W));
      expect(e).toBeInstanceOf(RangeError);
      expect(e.message).toMatch(/^H: expected a batch size in \[1, 65535\], got 65536/);
    } finally {
      H.dispose();
      W.dispose();
    }
  });
});
