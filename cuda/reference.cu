// launch_reference_sample: the materializing reference. The logits [B, V] are written in fp32 by
// the same GEMM main loop as the fused path (launch_logits_store: the fused path's logits bit for
// bit), then one block per row decides the whole row by `method` (filters.cu, whole_rows_kernel and
// decide_row, whatever the options):
//   kGumbel     argmax of make_candidate(value, 1/T, T == 0, g, v) over the kept values, with
//               noise.h's noise;
//   kInverseCdf float64 max-subtracted softmax of the kept values, cumulative sum in index order
//               (per-thread chunks in index order, then the chunk prefix), u = (x + 0.5) 2^-32 with
//               x = Philox4x32-10((j, stream, offset_lo, offset_hi), key).x[0], first index whose
//               cumulative mass exceeds u * total. +Inf values present: uniform among them (each
//               has weight 1, every other weight 0). T = 0: greedy argmax.
#include <cuda_runtime.h>

#include "internal_launchers.h"
#include "dispatch.cuh"
#include "include/launchers.h"

namespace flashsample {
namespace cuda {

cudaError_t launch_reference_sample(const SampleParams& p, ReferenceMethod method,
                                    cudaStream_t stream) {
  if (method != ReferenceMethod::kGumbel && method != ReferenceMethod::kInverseCdf)
    return cudaErrorInvalidValue;
  return launch_reference_rows(p, method, stream);
}

cudaError_t launch_logits_store(const SampleParams& p, int64_t v_begin, int64_t v_count,
                                float* logits, cudaStream_t stream) {
  cudaError_t err = detail::check_params(p);
  if (err != cudaSuccess) return err;
  if (logits == nullptr || v_begin < 0 || v_count < 1 || v_begin + v_count > p.vocab)
    return cudaErrorInvalidValue;
  // The vocabulary slice is a smaller LM head: W and bias offset by v_begin rows.
  SampleParams q = p;
  q.weight = static_cast<const char*>(p.weight) + v_begin * p.dim * dtype_bytes(p.dtype);
  if (p.bias != nullptr) q.bias = static_cast<const char*>(p.bias) + v_begin * dtype_bytes(p.dtype);
  q.vocab = v_count;
  detail::GemmArgs a = detail::gemm_args(q);
  a.logits = logits;
  return detail::launch_gemm<detail::Epi::kStore>(q, a, stream);
}

}  // namespace cuda
}  // namespace flashsample
