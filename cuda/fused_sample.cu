// launch_fused_sample: the LM-head GEMM + Gumbel-max sampler that never materializes [B, V].
//
// Options beyond temperature (filters, logprobs, masks) go to launch_fused_filtered (filters.cu).
// Otherwise three kernels:
//   1. clear_winners_kernel zeroes one 64-bit winner word per (row, sample) (a kernel rather than a
//      memset so that the GEMM can be launched programmatically after it);
//   2. the GEMM with the sampling epilogue (dispatch.cuh picks kernel and tile): each vocabulary
//      tile's logits are computed on chip, perturbed with the Philox Gumbel noise of noise.h, and
//      each (row, sample) winner is merged into its word with an order-preserving atomicMax (score
//      ties go to the smaller index, as candidate_better says);
//   3. finalize_kernel unpacks the words into tokens and row statuses.
// Workspace: [B, numSamples] 64-bit words, stream-ordered (cudaMallocAsync / cudaFreeAsync).
#include <cuda_runtime.h>

#include "dispatch.cuh"
#include "internal_launchers.h"
#include "include/launchers.h"

namespace flashsample {
namespace cuda {
namespace {

// 0 = no candidate. Lets the GEMM grid (launched programmatically after it) start at once: the
// GEMM waits for this grid's completion before its first winner write.
__global__ void clear_winners_kernel(unsigned long long* __restrict__ winners, int64_t n) {
  detail::griddep_launch_dependents();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) winners[i] = 0ull;
}

__global__ void finalize_kernel(const unsigned long long* __restrict__ winners, int64_t batch,
                                int32_t num_samples, int32_t* __restrict__ tokens,
                                int32_t* __restrict__ row_status) {
  detail::griddep_wait();  // launched programmatically: the GEMM grid's winners are complete
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= batch * num_samples) return;
  const unsigned long long w = winners[i];
  tokens[i] = detail::packed_token(w);
  if (row_status != nullptr && i % num_samples == 0)
    row_status[i / num_samples] = w == 0ull ? kRowNoCandidate : kRowOk;
}

}  // namespace

bool filtered_gemm_supported(const SampleParams& p) {
  return p.num_samples == 1 && detail::filtered_gemm_usable(p);
}

cudaError_t launch_filtered_gemm(const SampleParams& p, unsigned long long* winners,
                                 const detail::FilterArgs& f, cudaStream_t stream) {
  cudaError_t err = detail::check_params(p);
  if (err != cudaSuccess) return err;
  detail::GemmArgs a = detail::gemm_args(p);
  a.winners = winners;
  return detail::launch_filtered_gemm(p, a, f, stream);
}

cudaError_t launch_fused_sample(const SampleParams& p, cudaStream_t stream) {
  // Filters, logprobs and masks: the chunked candidate pass of filters.cu.
  if (has_filters(p)) return launch_fused_filtered(p, stream);
  cudaError_t err = detail::check_params(p);
  if (err != cudaSuccess) return err;

  const int64_t n = p.batch * p.num_samples;
  unsigned long long* winners = nullptr;
  err = cudaMallocAsync(reinterpret_cast<void**>(&winners), n * sizeof(unsigned long long), stream);
  if (err != cudaSuccess) return err;
  // Three kernels; on compute capability 9.0 the second and third are launched programmatically
  // (each may start while the one before it still runs and waits for it with griddepcontrol.wait),
  // which hides the zeroing and the finalize kernel's launch gap under the GEMM: ~3-5 us a call
  // on the H200. The GEMM takes the programmatic launch only where its kernel waits (the
  // warp-specialized kernels; launch_persistent ignores it for the others).
  const bool programmatic = detail::programmatic_launch_supported();
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  clear_winners_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(winners, n);
  err = cudaGetLastError();
  if (err == cudaSuccess) {
    detail::GemmArgs a = detail::gemm_args(p);
    a.winners = winners;
    a.programmatic_launch = programmatic;
    err = detail::launch_gemm<detail::Epi::kSampleOne>(p, a, stream);
  }
  if (err == cudaSuccess) {
    err = detail::launch_kernel(finalize_kernel, dim3(static_cast<unsigned>(blocks)), dim3(threads), 0, stream,
                                programmatic, winners, p.batch, p.num_samples, p.tokens, p.row_status);
  }
  const cudaError_t free_err = cudaFreeAsync(winners, stream);
  return err != cudaSuccess ? err : free_err;
}

}  // namespace cuda
}  // namespace flashsample
