// Vocabulary shards on the CUDA backend (docs/SEMANTICS.md §6): a shard's partial state
// (include/partial.h) and the merge of several (include/merge.h).
//
// Plain sampling (no filters, no logprobs) is the fused kernels' own: launch_fused_sample offers
// the shard's entries as global ids and finalize_partial_kernel writes the winners. With filters
// or logprobs, launch_partial_sample materializes the shard's fp32 logits [B, V_shard] with the
// fused path's own GEMM (store epilogue, launch_logits_store); partial_slices_kernel then cuts each
// row into slices of kSliceValues (one block each: the slice's winners, statistics and best keys)
// and partial_rows_kernel merges a row's slices into its state (the one-pass filtered epilogue's
// candidates are the next step). launch_merge_partials runs merge.h's row merge, one row per
// thread.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "check_params.h"
#include "include/launchers.h"
#include "include/merge.h"
#include "include/partial.h"
#include "internal_launchers.h"
#include "kernels/common.cuh"
#include "kernels/listed.cuh"
#include "kernels/row_select.cuh"
#include "launch.cuh"

namespace flashsample {
namespace cuda {
namespace {

constexpr int kRowThreads = 512;  // the row kernel's block: one per row
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

// A row is cut into slices of kSliceValues values, one block of kSliceThreads each (4 quads a
// thread); the row kernel then merges its slices. One block per row over the whole shard row (12
// passes over it, a Philox per value) cost ~7 µs per 1000 values (llama3-8b, TP 1: 1190 µs a
// shard call at B = 1 against plain's 239).
constexpr int kSliceThreads = 512;
constexpr int kSliceQuads = 4;  // quads a thread
constexpr int kSliceValues = kSliceThreads * kSliceQuads * 4;
// The row kernel keeps its slices' keys and its sort in shared memory up to this (else global).
constexpr size_t kRowSmemMax = 160 * 1024;

// What slice s of row b leaves for the row kernel (rows of `slices` entries each).
struct SliceStats {
  double z_max;  // max of logit / T over the slice's finite values (-Inf: none)
  double sum;    // Σ exp(logit / T - z_max) over them
  long long finite, inf;
};
struct SliceOut {
  Pick* winners;              // [B, slices, numSamples]: each sample's Gumbel winner over the slice
  SliceStats* stats;          // [B, slices]
  unsigned long long* keys;   // [B, slices, slice_keys]: the slice's min(n, capacity) best keys
                              // (unordered), then zeros
  int32_t slices, slice_keys;
};

// The take-th largest nonzero key (take >= 1, at most the nonzero keys) by radix selection, 8 bits
// a pass over the keys that for_each_key(f) hands this thread (f(key) for each, the same number of
// calls on every lane of a warp): exact, since keys are distinct. A warp whose counted lanes share
// their digit adds to its bucket once: the leading digits of a row's keys are mostly equal, and one
// shared atomic a key serialized on that bucket. It stops once every key under the chosen digits is
// wanted (their minimum is the threshold): with distinct logits after 4 passes at most, not 8.
template <class ForEachKey>
__device__ unsigned long long radix_select(ForEachKey&& for_each_key, long long take) {
  __shared__ unsigned int hist[256];
  __shared__ unsigned long long s_prefix;
  __shared__ long long s_remaining;
  __shared__ bool s_whole;  // every key under the prefix is wanted: the threshold is their minimum
  if (threadIdx.x == 0) {
    s_prefix = 0ull;
    s_remaining = take;
    s_whole = false;
  }
  int shift = 56;
  for (; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0u;
    __syncthreads();
    const unsigned long long high = shift == 56 ? 0ull : ~0ull << (shift + 8);
    const unsigned long long prefix = s_prefix;
    const long long remaining = s_remaining;
    for_each_key([&](unsigned long long k) {
      const bool in = k != 0ull && (k & high) == prefix;
      const unsigned int digit = static_cast<unsigned int>((k >> shift) & 255u);
      const unsigned int lanes = __ballot_sync(0xffffffffu, in);
      if (lanes == 0u) return;
      const unsigned int lo = __reduce_min_sync(0xffffffffu, in ? digit : 256u);
      const unsigned int hi = __reduce_max_sync(0xffffffffu, in ? digit : 0u);
      if (lo == hi) {  // the common case: one atomic for the warp
        if ((threadIdx.x & 31) == static_cast<unsigned int>(__ffs(lanes) - 1)) atomicAdd(&hist[lo], __popc(lanes));
      } else if (in) {
        atomicAdd(&hist[digit], 1u);
      }
    });
    __syncthreads();
    // the digit at which the count from the top reaches `remaining`
    const unsigned int mine = threadIdx.x < 256 ? hist[255 - threadIdx.x] : 0u;
    unsigned int total;
    const unsigned int above = detail::block_exclusive_scan(mine, total);
    if (threadIdx.x < 256 && above < remaining && above + mine >= remaining) {
      s_prefix = prefix | (static_cast<unsigned long long>(255 - threadIdx.x) << shift);
      s_remaining = remaining - above;
      s_whole = above + mine == remaining;
    }
    __syncthreads();
    if (s_whole) break;  // (block-uniform) distinct logits: after the logit's bits, at the latest
  }
  if (shift <= 0) return s_prefix;
  // the smallest key under the prefix (the lowest `shift` bits still open)
  const unsigned long long high = ~0ull << shift, prefix = s_prefix;
  unsigned long long least = ~0ull;
  for_each_key([&](unsigned long long k) {
    if (k != 0ull && (k & high) == prefix && k < least) least = k;
  });
  return ~detail::block_reduce(~least, detail::Max(), 0ull);
}

// Slice s of row b (block s + slices b): each sample's winner, the statistics and the best keys, from
// the shard's raw logits (bias included). The noise is the global ids' (vocab_offset % 4 == 0: a
// local quad is a global one), as the unsharded call's.
__global__ void __launch_bounds__(kSliceThreads, 2)
    partial_slices_kernel(const float* __restrict__ logits, SampleParams p, PartialCall c, SliceOut out) {
  const int64_t b = blockIdx.x / out.slices, V = p.vocab, base = c.vocab_offset;
  const int s = static_cast<int>(blockIdx.x % out.slices), tid = threadIdx.x;
  const int64_t at = b * out.slices + s;
  const float* row = logits + b * V;
  const float temperature = p.temperature[b];
  const bool greedy = !(temperature > 0.0f);
  const float inv_temperature = greedy ? 0.0f : 1.0f / temperature;  // make_candidate's float factor
  const uint64_t seed = p.seed[b], offset = p.offset[b];
  const uint32_t stream = p.per_row_seed ? 0u : static_cast<uint32_t>(b);

  // this thread's quads q0 + tid + kSliceThreads i; NaN: nothing to draw (masked, -Inf, past V)
  const int64_t q0 = static_cast<int64_t>(s) * (kSliceValues / 4);
  float l[kSliceQuads][4];
  float raw[kSliceQuads][4];
#pragma unroll
  for (int i = 0; i < kSliceQuads; ++i)
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      const int64_t v = 4 * (q0 + tid + kSliceThreads * i) + o;
      raw[i][o] = v < V ? row[v] : 0.0f;
    }
#pragma unroll
  for (int i = 0; i < kSliceQuads; ++i)
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      const int64_t v = 4 * (q0 + tid + kSliceThreads * i) + o;
      l[i][o] = v < V ? detail::candidate_value(p, b, v, raw[i][o]) : NAN;
    }

  // The slice's largest finite value (its first index) and its counts.
  float l_max = -INFINITY;
  long long finite = 0, inf = 0;
#pragma unroll
  for (int i = 0; i < kSliceQuads; ++i)
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      const float x = l[i][o];
      if (x != x) continue;
      if (x == INFINITY) {
        ++inf;
      } else {
        ++finite;
        l_max = fmaxf(l_max, x);
      }
    }
  l_max = block_reduce(l_max, Max(), -INFINITY);
  finite = block_reduce(finite, Sum(), 0ll);
  inf = block_reduce(inf, Sum(), 0ll);
  uint32_t at_max = 0xffffffffu;
#pragma unroll
  for (int i = 0; i < kSliceQuads; ++i)
#pragma unroll
    for (int o = 3; o >= 0; --o)
      if (l[i][o] == l_max && finite > 0) at_max = min(at_max, static_cast<uint32_t>(4 * (q0 + tid + kSliceThreads * i) + o));
  at_max = block_reduce(at_max, detail::Min(), 0xffffffffu);

  // Each sample's winner. That value's score is a real candidate's, so quads_update_pruned skips the
  // values whose noise bits cannot lift them above it (exact; the logarithms run for few values).
  const detail::RowParams rp{inv_temperature, greedy, seed, offset, stream};
  const int draws = greedy ? 1 : p.num_samples;
  for (int j = 0; j < draws; ++j) {
    float thr[1] = {-INFINITY}, bs[1] = {-INFINITY};
    uint32_t bk[1] = {kNoToken};
    if (!greedy && finite > 0) {
      const uint32_t token = static_cast<uint32_t>(base + at_max);
      thr[0] = make_candidate(l_max, inv_temperature, false,
                              gumbel_noise(seed, offset, stream, static_cast<uint32_t>(j), token), token).score;
    }
    const int64_t vend[1] = {base + V};
#pragma unroll
    for (int i = 0; i < kSliceQuads; ++i) {
      const float lq[1][4] = {{l[i][0], l[i][1], l[i][2], l[i][3]}};
      const detail::RowParams rq[1] = {rp};
      detail::quads_update_pruned<1, true>(lq, rq, static_cast<uint32_t>(j), base + 4 * (q0 + tid + kSliceThreads * i),
                                           vend, true, thr, bs, bk);
    }
    Pick best = block_best(Pick{bs[0], bk[0], 0.0f});
    if (tid == 0) {
      if (best.key != kNoToken) {  // its logit, for the merged logprob
        const int64_t v = static_cast<int64_t>(best.key & 0x7fffffffu) - base;
        best.logit = detail::candidate_value(p, b, v, row[v]);
      }
      out.winners[at * p.num_samples + j] = best;
    }
  }
  if (!c.stats || greedy) return;

  // Statistics in float64: z_max = max logit / T (one division: it is monotone, so this is the max
  // of logit / T the CPU backend computes), the sum's terms exp(logit (1 / T) - z_max).
  const double t = static_cast<double>(temperature), inv_t = 1.0 / t;
  const double z_max = static_cast<double>(l_max) / t;
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < kSliceQuads; ++i)
#pragma unroll
    for (int o = 0; o < 4; ++o)
      if (l[i][o] == l[i][o] && l[i][o] != INFINITY) sum += exp(static_cast<double>(l[i][o]) * inv_t - z_max);
  sum = block_reduce(sum, Sum(), 0.0);
  if (tid == 0) out.stats[at] = SliceStats{z_max, sum, finite, inf};
  if (out.slice_keys == 0) return;

  // The slice's best min(n, slice_keys) keys (unordered: the row kernel sorts what it keeps).
  unsigned long long key[kSliceQuads][4];
#pragma unroll
  for (int i = 0; i < kSliceQuads; ++i)
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      const int64_t v = 4 * (q0 + tid + kSliceThreads * i) + o;
      key[i][o] = l[i][o] == l[i][o] ? partial_key(l[i][o], static_cast<uint32_t>(base + v)) : 0ull;
    }
  const long long n = finite + inf;
  const long long take = n < out.slice_keys ? n : out.slice_keys;
  const unsigned long long threshold = take < n ? radix_select([&](auto&& f) {
#pragma unroll
    for (int i = 0; i < kSliceQuads; ++i)
#pragma unroll
      for (int o = 0; o < 4; ++o) f(key[i][o]);
  }, take) : 1ull;
  uint32_t mine = 0u;
#pragma unroll
  for (int i = 0; i < kSliceQuads; ++i)
#pragma unroll
    for (int o = 0; o < 4; ++o) mine += key[i][o] >= threshold ? 1u : 0u;
  uint32_t kept;
  uint32_t pos = detail::block_exclusive_scan(mine, kept);
  unsigned long long* dst = out.keys + at * out.slice_keys;
#pragma unroll
  for (int i = 0; i < kSliceQuads; ++i)
#pragma unroll
    for (int o = 0; o < 4; ++o)
      if (key[i][o] >= threshold) dst[pos++] = key[i][o];
  for (int64_t i = kept + tid; i < out.slice_keys; i += kSliceThreads) dst[i] = 0ull;
}

// Row b of the partial state from its slices: the winners and statistics merged in slice order,
// the row's min(n, capacity) best keys selected from the slices' and sorted (descending). With
// in_shared, the slices' keys and the sort lie in dynamic shared memory; otherwise the keys are
// read where the slices left them and sorted in sort_space (sort_stride keys a row).
__global__ void __launch_bounds__(kRowThreads)
    partial_rows_kernel(SampleParams p, PartialCall c, SliceOut in, unsigned long long* __restrict__ sort_space,
                        int64_t sort_stride, bool in_shared) {
  extern __shared__ __align__(16) unsigned long long s_work[];
  const int64_t b = blockIdx.x, V = p.vocab, base = c.vocab_offset;
  const int tid = threadIdx.x;
  PartialHeader h;
  init_partial_header(&h, static_cast<int32_t>(p.batch), c.max_batch, p.num_samples, c.capacity, c.options_hash,
                      base, V, c.vocab_total, c.stats);
  if (b == 0 && tid == 0) *static_cast<PartialHeader*>(p.partial) = h;
  const PartialRowView out = partial_row(p.partial, h, b);
  const bool greedy = !(p.temperature[b] > 0.0f);
  const int slices = in.slices;
  const int64_t first = b * slices;

  const int draws = greedy ? 1 : p.num_samples;
  for (int j = 0; j < draws; ++j) {
    Pick best{-INFINITY, kNoToken, 0.0f};
    for (int s = tid; s < slices; s += kRowThreads) {
      const Pick q = in.winners[(first + s) * p.num_samples + j];
      if (candidate_better(q.score, q.key, best.score, best.key)) best = q;
    }
    best = block_best(best);
    if (tid == 0) {
      const PartialWinner w{best.score, best.key, best.logit, 0u};
      if (greedy)
        for (int k = 0; k < p.num_samples; ++k) out.winners[k] = w;
      else
        out.winners[j] = w;
    }
  }
  if (!c.stats || greedy) {
    if (tid == 0) *out.row = PartialRow{-INFINITY, 0.0, 0, 0, 0, 1};
    return;
  }

  double z_max = -INFINITY;
  long long finite = 0, inf = 0;
  for (int s = tid; s < slices; s += kRowThreads) {
    const SliceStats& q = in.stats[first + s];
    z_max = fmax(z_max, q.z_max);
    finite += q.finite;
    inf += q.inf;
  }
  z_max = block_reduce(z_max, Max(), -static_cast<double>(INFINITY));
  finite = block_reduce(finite, Sum(), 0ll);
  inf = block_reduce(inf, Sum(), 0ll);
  double sum = 0.0;  // the slices' sums rescaled to the row's max (fixed order: slice, then block tree)
  for (int s = tid; s < slices; s += kRowThreads) {
    const SliceStats& q = in.stats[first + s];
    if (q.sum > 0.0) sum += q.sum * exp(q.z_max - z_max);
  }
  sum = block_reduce(sum, Sum(), 0.0);

  const long long n = finite + inf;
  const long long take = n < c.capacity ? n : c.capacity;
  if (take > 0) {
    // the slices' keys (each slice's share of the row's best, zeros after), in shared memory when
    // they fit beside the sort
    const int64_t slots = static_cast<int64_t>(slices) * in.slice_keys;
    const unsigned long long* src = in.keys + first * in.slice_keys;
    const unsigned long long* keys = src;
    unsigned long long* sorted = sort_space + b * sort_stride;
    if (in_shared) {
      constexpr int kBatch = 8;  // loads in flight a thread
      for (int64_t i0 = tid; i0 < slots; i0 += kBatch * kRowThreads) {
        unsigned long long k[kBatch];
#pragma unroll
        for (int r = 0; r < kBatch; ++r) {
          const int64_t i = i0 + r * kRowThreads;
          k[r] = i < slots ? src[i] : 0ull;
        }
#pragma unroll
        for (int r = 0; r < kBatch; ++r) {
          const int64_t i = i0 + r * kRowThreads;
          if (i < slots) s_work[i] = k[r];
        }
      }
      keys = s_work;
      sorted = s_work + slots;
    }
    __syncthreads();
    const int64_t warp_slots = (slots + 31) / 32 * 32;  // every lane of a warp makes the same calls
    const unsigned long long threshold = take < n ? radix_select([&](auto&& f) {
      for (int64_t i = tid; i < warp_slots; i += kRowThreads) f(i < slots ? keys[i] : 0ull);
    }, take) : 1ull;
    __shared__ unsigned int s_count;
    if (tid == 0) s_count = 0u;
    __syncthreads();
    for (int64_t i = tid; i < warp_slots; i += kRowThreads) {  // one shared atomic a warp
      const unsigned long long k = i < slots ? keys[i] : 0ull;
      const bool sel = k != 0ull && k >= threshold;
      const unsigned int ballot = __ballot_sync(0xffffffffu, sel);
      if (ballot == 0u) continue;
      const int lane = tid & 31, leader = __ffs(ballot) - 1;
      unsigned int at = 0u;
      if (lane == leader) at = atomicAdd(&s_count, static_cast<unsigned int>(__popc(ballot)));
      at = __shfl_sync(0xffffffffu, at, leader) + __popc(ballot & ((1u << lane) - 1u));
      if (sel) sorted[at] = k;
    }
    __syncthreads();
    detail::block_sort_desc(sorted, static_cast<int>(take));  // (take <= capacity <= 2^20)
    for (int64_t i = tid; i < take; i += kRowThreads) out.keys[i] = sorted[i];
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
  uint8_t* slice_space = nullptr;
  unsigned long long* sort_space = nullptr;
  const size_t B = static_cast<size_t>(call.batch), S = static_cast<size_t>(call.num_samples);
  SliceOut slices;
  slices.slices = static_cast<int32_t>((call.vocab + kSliceValues - 1) / kSliceValues);
  slices.slice_keys = call.partial_capacity < kSliceValues ? call.partial_capacity : kSliceValues;
  const size_t per_row = static_cast<size_t>(slices.slices);
  RegionLayout layout;
  const size_t win_at = layout.take(B * per_row * S * sizeof(Pick));
  const size_t stats_at = layout.take(B * per_row * sizeof(SliceStats));
  const size_t keys_at = layout.take(B * per_row * static_cast<size_t>(slices.slice_keys) * 8u);
  // the row kernel's keys and sort beside them in shared memory where they fit, else a sort space
  const int64_t most = call.partial_capacity < call.vocab ? call.partial_capacity : call.vocab;
  const int64_t sort_stride = pow2_at_least(most > 0 ? most : 1);
  const size_t row_smem = (per_row * static_cast<size_t>(slices.slice_keys) + static_cast<size_t>(sort_stride)) * 8u;
  const bool in_shared = row_smem <= kRowSmemMax;
  err = build_listed_table(call, scratch, &p, &listed, stream);
  if (err == cudaSuccess) err = scratch.take(B * static_cast<size_t>(p.vocab) * sizeof(float), &logits);
  if (err == cudaSuccess) err = scratch.take(layout.bytes, &slice_space);
  if (err == cudaSuccess && !in_shared) err = scratch.take(B * static_cast<size_t>(sort_stride) * 8u, &sort_space);
  int per_sm = 0;  // (the limit raised once to the largest the rows may ask)
  if (err == cudaSuccess && in_shared)
    err = detail::prepare_kernel(partial_rows_kernel, kRowThreads, static_cast<int>(kRowSmemMax), &per_sm);
  if (err == cudaSuccess) err = launch_logits_store(p, 0, p.vocab, logits, stream);
  if (err == cudaSuccess) {
    const PartialCall c{call.partial_max_batch, call.partial_capacity, call.options_hash, call.vocab_offset, total,
                        has_filters(call)};
    slices.winners = reinterpret_cast<Pick*>(slice_space + win_at);
    slices.stats = reinterpret_cast<SliceStats*>(slice_space + stats_at);
    slices.keys = reinterpret_cast<unsigned long long*>(slice_space + keys_at);
    const int64_t blocks = static_cast<int64_t>(B) * slices.slices;
    partial_slices_kernel<<<static_cast<unsigned>(blocks), kSliceThreads, 0, stream>>>(logits, p, c, slices);
    err = cudaGetLastError();
    if (err == cudaSuccess) {
      partial_rows_kernel<<<static_cast<unsigned>(B), kRowThreads, in_shared ? row_smem : 0, stream>>>(
          p, c, slices, sort_space, sort_stride, in_shared);
      err = cudaGetLastError();
    }
  }
  cudaError_t freed = cudaSuccess;
  for (void* region : {static_cast<void*>(sort_space), static_cast<void*>(slice_space), static_cast<void*>(logits),
                       listed}) {
    const cudaError_t e = scratch.give_back(region);
    if (freed == cudaSuccess) freed = e;
  }
  return err != cudaSuccess ? err : freed;
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
