// The samplers: validate (options.ts), hand the spec to the native side, turn row statuses into
// errors naming the row.
import type { Device } from './device';
import { raw, rangeError, typeError } from './errors';
import { native, NativeSpec } from './native';
import { buildSpec, checkTensor, ReferenceOptions, SampleOptions } from './options';
import { buildPartialSpec, PartialState, samplePartial, SHARD_KEYS, ShardOptions } from './parallel';
import { SampleResult, toResult } from './result';
import { Tensor } from './tensor';

export type { SampleResult } from './result';

/**
 * Samples tokens straight from the LM-head product H · Wᵀ, without materializing the logits.
 * H: [B, D], W: [V, D] (nn.Linear layout), one float dtype, one device.
 */
export function sampleFused(H: Tensor, W: Tensor, options: ShardOptions): Promise<PartialState>;
export function sampleFused(H: Tensor, W: Tensor, options?: SampleOptions): Promise<SampleResult>;
export async function sampleFused(
  H: Tensor, W: Tensor, options?: SampleOptions | ShardOptions,
): Promise<SampleResult | PartialState> {
  // A vocabulary shard (W holds tokens [vocabOffset, vocabOffset + V)): its partial state (parallel.ts).
  if (options !== null && typeof options === 'object' && 'partial' in options) return samplePartial(H, W, options);
  const { spec, deviceLists } = buildSpec(H, W, options, 'fused');
  return toResult(await native.sample(spec), deviceLists);
}

/**
 * sampleFused writing the tokens into `out`, an i32 tensor of B * numSamples elements on the same
 * device: no copy back to the host, so an engine can feed the next step from device memory.
 * Resolves once the work is done (the caller need not wait for it to enqueue more work on the same stream).
 */
export async function sampleFusedInto(out: Tensor, H: Tensor, W: Tensor, options?: SampleOptions): Promise<void> {
  const { spec, operands, numSamples, deviceLists } = buildSpec(H, W, options, 'fused');
  const target = checkTensor('out', out);
  if (target.dtype !== 'i32') throw typeError('out', "an 'i32' tensor", raw(`${target}`));
  if (target.size !== operands.batch * numSamples) {
    throw rangeError('out', `an 'i32' tensor of ${operands.batch * numSamples} elements (B * numSamples)`, raw(`${target}`));
  }
  if (!target.device.sameAs(operands.device)) throw typeError('out', `a tensor on ${operands.device}`, raw(`${target}`));
  spec.out = target.handle('out');
  toResult(await native.sample(spec), deviceLists);
}

/**
 * The materializing reference: logits [B, V] in memory, then 'inverse-cdf' (default) or 'gumbel'
 * (the fused sampler's own noise, so the tokens agree with sampleFused).
 */
export async function sampleReference(H: Tensor, W: Tensor, options?: ReferenceOptions): Promise<SampleResult> {
  const { spec, deviceLists } = buildSpec(H, W, options, 'reference');
  return toResult(await native.sample(spec), deviceLists);
}

export type SamplerKind = 'fused' | 'reference-gumbel' | 'reference-inverse-cdf';

/**
 * Benchmark support: times `iters` calls after `warmup`, rotating over `inputs` (so the cache does
 * not hold W across calls). Microseconds per call: CUDA events around each launch on the GPU
 * (no host synchronization inside the loop), a steady clock around each call on the CPU.
 */
export async function timeSampler(
  kind: SamplerKind,
  inputs: { H: Tensor; W: Tensor }[],
  options: SampleOptions,
  timing: { warmup: number; iters: number },
): Promise<Float64Array> {
  if (!Array.isArray(inputs) || inputs.length === 0) throw typeError('inputs', 'a non-empty array of {H, W}', inputs);
  if (kind !== 'fused' && kind !== 'reference-gumbel' && kind !== 'reference-inverse-cdf') {
    throw typeError('kind', "'fused', 'reference-gumbel' or 'reference-inverse-cdf'", kind);
  }
  const method = kind === 'reference-gumbel' ? 'gumbel' : 'inverse-cdf';
  const sampler = kind === 'fused' ? 'fused' : 'reference';
  const opts = sampler === 'reference' ? { ...options, method } : options;
  // A shard's partial state (ShardOptions): each call rewrites one state tensor.
  const shard = sampler === 'fused' && 'partial' in opts ? buildPartialSpec(inputs[0].H, inputs[0].W, opts as ShardOptions) : null;
  const { spec } = shard ?? buildSpec(inputs[0].H, inputs[0].W, opts, sampler);
  const pairs = inputs.map(({ H, W }, i) => {
    const { spec: s } = buildSpec(H, W, opts, sampler, shard ? SHARD_KEYS : []);
    if (s.batch !== spec.batch || s.vocab !== spec.vocab || s.dim !== spec.dim || s.dtype !== spec.dtype) {
      throw rangeError(`inputs[${i}]`, 'the shape and dtype of inputs[0]', raw(`H [${s.batch}, ${s.dim}], W [${s.vocab}, ${s.dim}] ${W.dtype}`));
    }
    return { hidden: s.hidden!, weight: s.weight! };
  });
  const { warmup, iters } = timing;
  if (!Number.isInteger(warmup) || warmup < 0) throw rangeError('warmup', 'an integer >= 0', warmup);
  if (!Number.isInteger(iters) || iters < 1) throw rangeError('iters', 'an integer >= 1', iters);
  try {
    return await native.timeSampler(spec as NativeSpec, pairs, warmup, iters);
  } finally {
    shard?.partial.dispose();
  }
}

/** Read bandwidth of device memory in bytes per second (16-byte loads over `bytes`); CUDA only. */
export async function measureReadBandwidth(device: Device, bytes: number, iters: number): Promise<number> {
  if (device?.kind !== 'cuda') throw typeError('device', 'a CUDA device', device?.kind ?? device);
  if (!Number.isSafeInteger(bytes) || bytes < 1 << 20) throw rangeError('bytes', 'an integer >= 1 MiB', bytes);
  if (!Number.isInteger(iters) || iters < 1) throw rangeError('iters', 'an integer >= 1', iters);
  return native.readBandwidth(device.ordinal, bytes, iters);
}
