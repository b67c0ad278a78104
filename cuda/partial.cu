// Vocabulary shards on the CUDA backend (docs/SEMANTICS.md §6): a shard's partial state
// (include/partial.h) and the merge of several (include/merge.h).
//
// Plain sampling (no filters, no logprobs) is the fused kernels' own: launch_fused_sample offers
// the shard's entries as global ids and finalize_partial_kernel writes the winners. With filters
// or logprobs, launch_partial_sample materializes the shard's fp32 logits [B, V_shard] with the
// fused path's own GEMM (store epilogue, launch_logits_store), then one block per row writes the
// row's winners, statistics and its `capacity` best keys, sorted: correct first, at the
// reference path's cost (the filtered epilogue's candidates are the next step).
// launch_merge_partials runs merge.h's row merge, one row per thread.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "check_params.h"
#include "include/launchers.h"
#include "include/merge.h"
#include "include/partial.h"
#include "internal_launchers.h"
#include "kernels/listed.cuh"
#include "kernels/row_select.cuh"

namespace flashsample {
namespace cuda {
namespace {

constexpr int kRowThreads = 512;
constexpr int kMergeThreads = 32;  // rows per block of the merge (one row per thread)

using detail::block_best;
using detail::block_reduce;
using detail::Max;
using detail::Pick;
using detail::Sum;

int64_t pow2_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// The header fields the rows kernel writes (the rest come from the call).
struct PartialCall {
  int32_t max_batch, capacity;
  uint64_t options_hash;
  int64_t vocab_offset, vocab_total;
  bool stats;
};

// Row b of the partial state from the shard's raw logits (bias included). sort_space: per row
// pow2_at_least(capacity) keys of scratch for the block's bitonic sort.
__global__ void __launch_bounds__(kRowThreads)
    partial_rows_kernel(const float* __restrict__ logits, SampleParams p, PartialCall c,
                        unsigned long long* __restrict__ sort_space, int64_t sort_stride) {
  const int64_t b = blockIdx.x, V = p.vocab, base = c.vocab_offset;
  const int tid = threadIdx.x;
  const float* row = logits + b * V;
  PartialHeader h;
  init_partial_header(&h, static_cast<int32_t>(p.batch), c.max_batch, p.num_samples, c.capacity, c.options_hash,
                      base, V, c.vocab_total, c.stats);
  if (b == 0 && tid == 0) *static_cast<PartialHeader*>(p.partial) = h;
  const PartialRowView out = partial_row(p.partial, h, b);
  const float temperature = p.temperature[b];
  const bool greedy = !(temperature > 0.0f);
  const float inv_temperature = greedy ? 0.0f : 1.0f / temperature;  // make_candidate's float factor
  const uint64_t seed = p.seed[b], offset = p.offset[b];
  const uint32_t stream = p.per_row_seed ? 0u : static_cast<uint32_t>(b);

  // Each sample's Gumbel winner over the shard (greedy: the argmax, once), global ids and noise.
  const int draws = greedy ? 1 : p.num_samples;
  for (int j = 0; j < draws; ++j) {
    Pick best{-INFINITY, kNoToken, 0.0f};
    for (int64_t v = tid; v < V; v += blockDim.x) {
      const float l = detail::candidate_value(p, b, v, row[v]);
      if (l != l) continue;
      const uint32_t token = static_cast<uint32_t>(base + v);
      const float g = greedy ? 0.0f : gumbel_noise(seed, offset, stream, static_cast<uint32_t>(j), token);
      const Candidate cand = make_candidate(l, inv_temperature, greedy, g, token);
      if (candidate_better(cand.score, cand.key, best.score, best.key)) best = Pick{cand.score, cand.key, l};
    }
    best = block_best(best);
    if (tid == 0) {
      const PartialWinner w{best.score, best.key, best.logit, 0u};
      if (greedy)
        for (int s = 0; s < p.num_samples; ++s) out.winners[s] = w;
      else
        out.winners[j] = w;
    }
  }
  if (tid == 0) *out.row = PartialRow{-INFINITY, 0.0, 0, 0, 0, 1};
  if (!c.stats || greedy) return;

  // Statistics in float64: z = logit / T, as the CPU backend computes them.
  const double t = static_cast<double>(temperature);
  double z_max = -INFINITY;
  long long finite = 0, inf = 0;
  for (int64_t v = tid; v < V; v += blockDim.x) {
    const float l = detail::candidate_value(p, b, v, row[v]);
    if (l != l) continue;
    if (l == INFINITY) {
      ++inf;
    } else {
      ++finite;
      z_max = fmax(z_max, static_cast<double>(l) / t);
    }
  }
  z_max = block_reduce(z_max, Max(), -static_cast<double>(INFINITY));
  finite = block_reduce(finite, Sum(), 0ll);
  inf = block_reduce(inf, Sum(), 0ll);
  double sum = 0.0;
  for (int64_t v = tid; v < V; v += blockDim.x) {
    const float l = detail::candidate_value(p, b, v, row[v]);
    if (l == l && l != INFINITY) sum += exp(static_cast<double>(l) / t - z_max);
  }
  sum = block_reduce(sum, Sum(), 0.0);

  // The `take` best keys: the take-th largest key by radix selection (8 bits a pass), then every
  // key at or above it, then a bitonic sort (descending) in sort_space.
  const int64_t n = finite + inf;
  const int64_t take = n < c.capacity ? n : c.capacity;
  __shared__ unsigned int hist[256];
  __shared__ unsigned long long s_prefix;
  __shared__ long long s_remaining;
  __shared__ unsigned int s_count;
  if (tid == 0) {
    s_prefix = 0ull;
    s_remaining = take;
    s_count = 0u;
  }
  __syncthreads();
  if (take > 0 && take < n) {
    for (int shift = 56; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0u;
      __syncthreads();
      const unsigned long long high = shift == 56 ? 0ull : ~0ull << (shift + 8);
      const unsigned long long prefix = s_prefix;
      for (int64_t v = tid; v < V; v += blockDim.x) {
        const float l = detail::candidate_value(p, b, v, row[v]);
        if (l != l) continue;
        const unsigned long long k = partial_key(l, static_cast<uint32_t>(base + v));
        if ((k & high) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (tid == 0) {
        long long above = 0;
        for (int d = 255; d >= 0; --d) {
          if (above + hist[d] >= s_remaining) {
            s_prefix |= static_cast<unsigned long long>(d) << shift;
            s_remaining -= above;
            break;
          }
          above += hist[d];
        }
      }
      __syncthreads();
    }
  }
  const unsigned long long threshold = take < n ? s_prefix : 0ull;
  unsigned long long* keys = sort_space + b * sort_stride;
  if (take > 0) {
    for (int64_t v = tid; v < V; v += blockDim.x) {
      const float l = detail::candidate_value(p, b, v, row[v]);
      if (l != l) continue;
      const unsigned long long k = partial_key(l, static_cast<uint32_t>(base + v));
      if (k >= threshold) keys[atomicAdd(&s_count, 1u)] = k;
    }
    int64_t padded = 1;  // <= sort_stride: take <= capacity
    while (padded < take) padded <<= 1;
    for (int64_t i = take + tid; i < padded; i += blockDim.x) keys[i] = 0ull;
    __syncthreads();
    for (int64_t k = 2; k <= padded; k <<= 1) {
      for (int64_t j = k >> 1; j > 0; j >>= 1) {
        for (int64_t i = tid; i < padded; i += blockDim.x) {
          const int64_t partner = i ^ j;
          if (partner > i) {
            const unsigned long long a = keys[i], e = keys[partner];
            const bool descending = (i & k) == 0;
            if (descending ? a < e : a > e) {
              keys[i] = e;
              keys[partner] = a;
            }
          }
        }
        __syncthreads();
      }
    }
    for (int64_t i = tid; i < take; i += blockDim.x) out.keys[i] = keys[i];
  }
  if (tid == 0) {
    *out.row = PartialRow{z_max, sum, static_cast<int64_t>(finite), static_cast<int64_t>(inf),
                          static_cast<int32_t>(take), take == n ? 1 : 0};
  }
}

__global__ void __launch_bounds__(kMergeThreads)
    merge_rows_kernel(SampleParams p, PartialSet set, int32_t* __restrict__ status) {
  int32_t which = 0;
  const int32_t error = check_partials(p, set, p.options_hash, has_filters(p), &which);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    status[0] = error;
    status[1] = which;
    status[2] = error == kPartialOk ? largest_shard(set) : 0;
  }
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (error == kPartialOk && b < p.batch) merge_partial_row(p, set, b);
}

}  // namespace

bool partial_params_ok(const SampleParams& p) {
  const int64_t total = p.vocab_total > 0 ? p.vocab_total : p.vocab;
  return p.partial != nullptr && p.vocab_offset >= 0 && p.vocab_offset % 4 == 0 && p.vocab_offset + p.vocab <= total &&
         p.partial_capacity >= 0 && p.partial_capacity <= kMaxPartialCapacity && p.partial_max_batch >= p.batch;
}

cudaError_t launch_partial_sample(const SampleParams& call, cudaStream_t stream) {
  cudaError_t err = detail::check_params(call);
  if (err != cudaSuccess) return err;
  if (!partial_params_ok(call)) return cudaErrorInvalidValue;
  if (call.raw_logprobs != 0) return cudaErrorNotSupported;  // (lib/parallel.ts refuses it first)
  const int64_t total = call.vocab_total > 0 ? call.vocab_total : call.vocab;
  Scratch scratch(call, stream);
  SampleParams p;
  void* listed = nullptr;
  float* logits = nullptr;
  unsigned long long* sort_space = nullptr;
  const int64_t stride = pow2_at_least(call.partial_capacity > 0 ? call.partial_capacity : 1);
  err = build_listed_table(call, scratch, &p, &listed, stream);
  if (err == cudaSuccess)
    err = scratch.take(static_cast<size_t>(p.batch) * static_cast<size_t>(p.vocab) * sizeof(float), &logits);
  if (err == cudaSuccess)
    err = scratch.take(static_cast<size_t>(p.batch) * static_cast<size_t>(stride) * 8u, &sort_space);
  if (err == cudaSuccess) err = launch_logits_store(p, 0, p.vocab, logits, stream);
  if (err == cudaSuccess) {
    const PartialCall c{call.partial_max_batch, call.partial_capacity, call.options_hash, call.vocab_offset, total,
                        has_filters(call)};
    partial_rows_kernel<<<static_cast<unsigned>(p.batch), kRowThreads, 0, stream>>>(logits, p, c, sort_space, stride);
    err = cudaGetLastError();
  }
  const cudaError_t freed_sort = scratch.give_back(sort_space);
  const cudaError_t freed = scratch.give_back(logits);
  const cudaError_t freed_listed = scratch.give_back(listed);
  if (err != cudaSuccess) return err;
  return freed_sort != cudaSuccess ? freed_sort : freed != cudaSuccess ? freed : freed_listed;
}

cudaError_t launch_merge_partials(const SampleParams& p, const PartialSet& set, int32_t* status,
                                  cudaStream_t stream) {
  if (set.count < 1 || set.count > kMaxShards || status == nullptr || p.tokens == nullptr || p.batch < 1 ||
      p.temperature == nullptr || p.seed == nullptr || p.offset == nullptr)
    return cudaErrorInvalidValue;
  const unsigned blocks = static_cast<unsigned>((p.batch + kMergeThreads - 1) / kMergeThreads);
  merge_rows_kernel<<<blocks, kMergeThreads, 0, stream>>>(p, set, status);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace flashsample
