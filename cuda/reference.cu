// launch_reference_sample: the materializing reference. The logits [B, V] are written in fp32 to a
// stream-ordered workspace by the same GEMM main loop as the fused path (store epilogue: the
// logits are the fused path's logits bit for bit), then one block per row draws by `method`:
//   kGumbel     argmax of make_candidate(logit, 1/T, T == 0, g, v) with noise.h's noise;
//   kInverseCdf float64 max-subtracted softmax, cumulative sum in index order (per-thread chunks
//               in index order, then the chunk prefix), u = (x + 0.5) 2^-32 with
//               x = Philox4x32-10((j, stream, offset_lo, offset_hi), key).x[0], first index whose
//               cumulative mass exceeds u * total. +Inf logits present: uniform among them (each
//               +Inf logit has weight 1, every other weight 0). T = 0: greedy argmax.
#include <cuda_runtime.h>

#include "internal_launchers.h"
#include "dispatch.cuh"
#include "include/launchers.h"
#include "kernels/row_select.cuh"

namespace flashsample {
namespace cuda {
namespace {

constexpr int kRowThreads = 512;

// Block-wide argmax of a candidate (row_select.cuh's, shared with filters.cu); every thread gets it.
__device__ __forceinline__ void block_best(float& score, uint32_t& key) {
  const detail::Pick best = detail::block_best(detail::Pick{score, key, 0.0f});
  score = best.score;
  key = best.key;
}

__device__ __forceinline__ int32_t token_of(uint32_t key) {
  return key == kNoToken ? -1 : static_cast<int32_t>(key & 0x7fffffffu);
}

__global__ void __launch_bounds__(kRowThreads)
    gumbel_rows_kernel(const float* __restrict__ logits, SampleParams p) {
  const int64_t b = blockIdx.x, V = p.vocab;
  const float* row = logits + b * V;
  const detail::RowParams rp =
      detail::load_row_params(p.temperature, p.seed, p.offset, p.per_row_seed, b);
  for (int s = 0; s < p.num_samples; ++s) {
    float best_s = -INFINITY;
    uint32_t best_k = kNoToken;
    for (int64_t vq = 4 * static_cast<int64_t>(threadIdx.x); vq < V; vq += 4 * blockDim.x) {
      float l[4];
#pragma unroll
      for (int o = 0; o < 4; ++o) l[o] = vq + o < V ? row[vq + o] : 0.0f;
      float cs;
      uint32_t ck;
      detail::best_of_quad(l, rp, static_cast<uint32_t>(s), vq, V, cs, ck);
      if (candidate_better(cs, ck, best_s, best_k)) {
        best_s = cs;
        best_k = ck;
      }
    }
    block_best(best_s, best_k);
    if (threadIdx.x == 0) {
      p.tokens[b * p.num_samples + s] = token_of(best_k);
      if (s == 0 && p.row_status != nullptr)
        p.row_status[b] = best_k == kNoToken ? kRowNoCandidate : kRowOk;
    }
  }
}

__global__ void __launch_bounds__(kRowThreads)
    inverse_cdf_rows_kernel(const float* __restrict__ logits, SampleParams p) {
  __shared__ double s_prefix[kRowThreads + 1];
  __shared__ float s_max[32];
  __shared__ int s_inf[32], s_any[32];
  const int64_t b = blockIdx.x, V = p.vocab;
  const float* row = logits + b * V;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  const float temperature = p.temperature[b];
  const uint64_t seed = p.seed[b], offset = p.offset[b];
  const uint32_t stream = p.per_row_seed ? 0u : static_cast<uint32_t>(b);

  if (temperature == 0.0f) {  // greedy: the largest logit, +Inf first, ties to the smaller index
    float best_s = -INFINITY;
    uint32_t best_k = kNoToken;
    for (int64_t v = tid; v < V; v += blockDim.x) {
      const Candidate c = make_candidate(row[v], 0.0f, true, 0.0f, static_cast<uint32_t>(v));
      if (candidate_better(c.score, c.key, best_s, best_k)) {
        best_s = c.score;
        best_k = c.key;
      }
    }
    block_best(best_s, best_k);
    if (tid == 0) {
      for (int s = 0; s < p.num_samples; ++s) p.tokens[b * p.num_samples + s] = token_of(best_k);
      if (p.row_status != nullptr) p.row_status[b] = best_k == kNoToken ? kRowNoCandidate : kRowOk;
    }
    return;
  }

  // Pass 1: the largest finite logit, whether any +Inf, whether any candidate at all.
  float mx = -INFINITY;
  int n_inf = 0, any = 0;
  for (int64_t v = tid; v < V; v += blockDim.x) {
    const float l = row[v];
    if (l == INFINITY) n_inf = 1;
    else if (l == l && l != -INFINITY) {
      any = 1;
      mx = fmaxf(mx, l);
    }
  }
#pragma unroll
  for (int x = 1; x < 32; x <<= 1) {
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, x));
    n_inf |= __shfl_xor_sync(0xffffffffu, n_inf, x);
    any |= __shfl_xor_sync(0xffffffffu, any, x);
  }
  if (lane == 0) {
    s_max[warp] = mx;
    s_inf[warp] = n_inf;
    s_any[warp] = any;
  }
  __syncthreads();
  mx = -INFINITY;
  n_inf = any = 0;
  for (int w = 0; w < nwarps; ++w) {
    mx = fmaxf(mx, s_max[w]);
    n_inf |= s_inf[w];
    any |= s_any[w];
  }
  if (!n_inf && !any) {
    if (tid == 0) {
      for (int s = 0; s < p.num_samples; ++s) p.tokens[b * p.num_samples + s] = -1;
      if (p.row_status != nullptr) p.row_status[b] = kRowNoCandidate;
    }
    return;
  }
  const bool inf_mode = n_inf != 0;
  const double m = mx, t = temperature;
  auto weight = [&](float l) -> double {
    if (inf_mode) return l == INFINITY ? 1.0 : 0.0;
    if (l != l || l == -INFINITY) return 0.0;
    return exp((static_cast<double>(l) - m) / t);
  };

  // Pass 2: per-thread contiguous chunks in index order, then the prefix of the chunk sums.
  const int64_t chunk = (V + blockDim.x - 1) / blockDim.x;
  const int64_t lo = tid * chunk, hi = lo + chunk < V ? lo + chunk : V;
  double sum = 0.0;
  for (int64_t v = lo; v < hi; ++v) sum += weight(row[v]);
  s_prefix[tid + 1] = sum;
  __syncthreads();
  if (tid == 0) {
    s_prefix[0] = 0.0;
    for (int i = 1; i <= static_cast<int>(blockDim.x); ++i) s_prefix[i] += s_prefix[i - 1];
  }
  __syncthreads();
  const double total = s_prefix[blockDim.x];
  const double before = s_prefix[tid], after = s_prefix[tid + 1];  // after = before + sum

  for (int s = 0; s < p.num_samples; ++s) {
    const Philox4 r = philox4x32_10(static_cast<uint32_t>(s), stream, static_cast<uint32_t>(offset),
                                    static_cast<uint32_t>(offset >> 32),
                                    static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
    const double u = (static_cast<double>(r.x[0]) + 0.5) * 0x1p-32;
    const double target = u * total;
    if (sum > 0.0 && before <= target && target < after) {
      double local = 0.0;
      int64_t token = -1;
      for (int64_t v = lo; v < hi; ++v) {
        const double w = weight(row[v]);
        if (w > 0.0) {
          local += w;
          token = v;
          if (before + local > target) break;
        }
      }
      p.tokens[b * p.num_samples + s] = static_cast<int32_t>(token);
    }
  }
  if (tid == 0 && p.row_status != nullptr) p.row_status[b] = kRowOk;
}

}  // namespace

cudaError_t launch_reference_sample(const SampleParams& p, ReferenceMethod method,
                                    cudaStream_t stream) {
  if (has_filters(p)) return launch_reference_filtered(p, method, stream);
  cudaError_t err = detail::check_params(p);
  if (err != cudaSuccess) return err;
  if (method != ReferenceMethod::kGumbel && method != ReferenceMethod::kInverseCdf)
    return cudaErrorInvalidValue;

  float* logits = nullptr;
  const size_t bytes = static_cast<size_t>(p.batch) * static_cast<size_t>(p.vocab) * sizeof(float);
  err = cudaMallocAsync(reinterpret_cast<void**>(&logits), bytes, stream);
  if (err != cudaSuccess) return err;
  detail::GemmArgs a = detail::gemm_args(p);
  a.logits = logits;
  err = detail::launch_gemm<detail::Epi::kStore>(p, a, stream);
  if (err == cudaSuccess) {
    const unsigned rows = static_cast<unsigned>(p.batch);
    if (method == ReferenceMethod::kGumbel)
      gumbel_rows_kernel<<<rows, kRowThreads, 0, stream>>>(logits, p);
    else
      inverse_cdf_rows_kernel<<<rows, kRowThreads, 0, stream>>>(logits, p);
    err = cudaGetLastError();
  }
  const cudaError_t free_err = cudaFreeAsync(logits, stream);
  return err != cudaSuccess ? err : free_err;
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
