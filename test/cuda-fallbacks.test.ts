// The dispatch table's fallback rows on a compute capability 9.0 GPU (cuda/dispatch.cuh): every
// tensor-core kernel that the H200 does not pick by itself, reached through the escape hatches,
// which are read once per process, so each runs test/fallback-child.js in a process of its own.
//   FLASHSAMPLE_NO_TENSOR_MAPS: the 9.0 table's way to the mma.sync kernels where tensor maps
//     cannot be encoded (one sample, several unpruned), and the chunked filtered path;
//   FLASHSAMPLE_NO_WGMMA: the mma.sync kernels of compute capability 8.x (compiled for 9.0).
// Every case's tokens must equal reference(gumbel)'s (at most one in a thousand may differ) and
// the logprobs of equal tokens agree within 1e-5.

import { spawnSync } from 'child_process';
import { cudaStatus, runJsonChild } from './helpers';

interface CaseResult {
  name: string;
  tokens: number;
  differing: number;
  worstLogprob: number;
}

const st = cudaStatus();
const suite = st.usable ? describe : describe.skip;

// The child's CUDA context can fail to be created while the suite's other workers hold the GPU's
// memory ("cudaSetDevice failed: cudaErrorMemoryAllocation"): that one error, before any case
// ran, is retried after a pause; every other result stands.
const CONTEXT_OOM = /cudaSetDevice failed: cudaErrorMemoryAllocation/;

interface ChildResult {
  cases: CaseResult[];
  escapeHatches: { noWgmma: boolean; noTensorMaps: boolean };
}

function runChild(env: Record<string, string>, attempts = 3): ChildResult {
  const parsed = runJsonChild('fallback-child.js', env);
  if (!Array.isArray((parsed as { cases?: unknown }).cases)) {
    const error = (parsed as { error?: string }).error ?? '';
    if (attempts > 1 && CONTEXT_OOM.test(error)) {
      spawnSync('sleep', ['3']);
      return runChild(env, attempts - 1);
    }
    throw new Error(`fallback-child.js: ${JSON.stringify(parsed)}`);
  }
  return parsed as ChildResult;
}

suite(st.usable ? 'cuda fallbacks' : `cuda fallbacks — skipped: ${st.reason}`, () => {
  for (const [hatch, env] of [
    ['FLASHSAMPLE_NO_TENSOR_MAPS (mma.sync from the wgmma table)', { FLASHSAMPLE_NO_TENSOR_MAPS: '1' }],
    ['FLASHSAMPLE_NO_WGMMA (mma.sync)', { FLASHSAMPLE_NO_WGMMA: '1' }],
  ] as const) {
    test(`${hatch}: one and several samples, B 1 ... 130, filters: fused = reference(gumbel)`, () => {
      const { cases: results, escapeHatches } = runChild(env);
      // The hatch is in force where the dispatch reads it (a renamed variable would leave every
      // case on the wgmma kernels, and they would still agree with the reference).
      expect(escapeHatches).toEqual({ noWgmma: 'FLASHSAMPLE_NO_WGMMA' in env, noTensorMaps: 'FLASHSAMPLE_NO_TENSOR_MAPS' in env });
      expect(results.length).toBe(11);
      for (const c of results) {
        expect({ name: c.name, differing: c.differing <= Math.floor(c.tokens / 1000) ? 'ok' : c.differing })
          .toEqual({ name: c.name, differing: 'ok' });
        expect({ name: c.name, logprobs: c.worstLogprob < 1e-5 ? 'ok' : c.worstLogprob })
          .toEqual({ name: c.name, logprobs: 'ok' });
      }
    });
  }
});
