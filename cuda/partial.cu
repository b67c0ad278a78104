// Vocabulary shards on the CUDA backend (docs/SEMANTICS.md §6): a shard's partial state
// (include/partial.h) and the merge of several (include/merge.h).
//
// Plain sampling (no filters, no logprobs) is the fused kernels' own: launch_fused_sample offers
// the shard's entries as global ids and finalize_partial_kernel writes the winners. With filters
// or logprobs, launch_partial_sample takes the one-pass filtered GEMM where it pays
// (launch_shard_one_pass in filters.cu, then partial_candidates_kernel writes each row's state
// from its tile summaries, winner and candidates); otherwise it materializes the shard's fp32
// logits [B, V_shard] with the fused path's own GEMM (store epilogue, launch_logits_store),
// partial_slices_kernel cuts each row into slices of kSliceValues (one block each: the slice's
// winners, statistics and best keys) and partial_rows_kernel merges a row's slices into its
// state. launch_merge_partials runs merge.h's row merge, a block per row.
//
// logprobsMode 'raw' (SEMANTICS §4, §6): partial_raw_kernel writes each row's raw section from the
// shard's logits, stored by either path (their statistics, the winners' and candidates' raw logits,
// the shard's best raw keys), the rows pass's segments carry the rows' raw logits after their
// values (decide_raw_rows_kernel reads them), and the merge adds merge_write_raw.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "check_params.h"
#include "include/launchers.h"
#include "include/merge.h"
#include "include/partial.h"
#include "internal_launchers.h"
#include "kernels/candidates.cuh"
#include "kernels/common.cuh"
#include "kernels/listed.cuh"
#include "kernels/row_select.cuh"
#include "launch.cuh"

namespace flashsample {
namespace cuda {
namespace {

constexpr int kRowThreads = 512;  // the row kernel's block: one per row
constexpr int kMergeThreads = 256;  // the merge's block (one per row)

using detail::block_best;
using detail::block_reduce;
using detail::load_raw_slice;
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
  int32_t raw_top;  // logprobsMode 'raw': the raw keys a row (include/partial.h); -1: no raw section
};
PartialCall partial_call(const SampleParams& p, bool stats) {
  return PartialCall{p.partial_max_batch, p.partial_capacity, p.options_hash, p.vocab_offset,
                     p.vocab_total > 0 ? p.vocab_total : p.vocab, stats,
                     reports_raw_logprobs(p) ? p.top_logprobs : -1};
}

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

// Where this lane's selected item goes in a list that *count fills (every lane of the warp calls;
// one shared atomic a warp, the selected lanes in lane order). Lanes not selected get 0.
__device__ __forceinline__ unsigned int warp_append_slot(unsigned int* count, bool sel) {
  const unsigned int ballot = __ballot_sync(0xffffffffu, sel);
  if (ballot == 0u) return 0u;
  const int lane = threadIdx.x & 31, leader = __ffs(ballot) - 1;
  unsigned int at = 0u;
  if (lane == leader) at = atomicAdd(count, static_cast<unsigned int>(__popc(ballot)));
  return __shfl_sync(0xffffffffu, at, leader) + __popc(ballot & ((1u << lane) - 1u));
}

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
                      base, V, c.vocab_total, c.stats, c.raw_top);
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
    for (int64_t i = tid; i < warp_slots; i += kRowThreads) {
      const unsigned long long k = i < slots ? keys[i] : 0ull;
      const bool sel = k != 0ull && k >= threshold;
      const unsigned int at = warp_append_slot(&s_count, sel);
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

// ---- logprobsMode 'raw' ------------------------------------------------------------------------
// The raw keys a row reports at most (topLogprobs' bound, lib/options.ts MAX_TOP_LOGPROBS): a power
// of two, so block_sort_desc sorts them where they are gathered.
constexpr int kMaxRawKeys = 1024;

// A row's raw distribution (SEMANTICS §4: the softcapped logits, every token, T = 1), in float64 as
// the CPU's tile_mass: the max and Σ exp(x - max) over the finite values, the +Inf count, and the
// drawable values (finite or +Inf).
struct RawStats {
  double z_max, sum;
  long long inf, valid;
};

// The statistics of the values each_value(fn) hands this thread as fn(global id, x) (x NaN: none;
// every lane of a warp the same number of calls).
template <class EachValue>
__device__ RawStats raw_stats(EachValue&& each_value) {
  float m = -INFINITY;
  long long inf = 0, valid = 0;
  each_value([&](uint32_t, float x) {
    if (x == INFINITY) ++inf;
    else if (x > -INFINITY) m = fmaxf(m, x);  // (NaN: neither)
    valid += x > -INFINITY ? 1 : 0;
  });
  m = block_reduce(m, Max(), -INFINITY);
  inf = block_reduce(inf, Sum(), 0ll);
  valid = block_reduce(valid, Sum(), 0ll);
  const double z_max = static_cast<double>(m);
  double sum = 0.0;
  if (m > -INFINITY)  // (block-uniform)
    each_value([&](uint32_t, float x) {
      if (x > -INFINITY && x < INFINITY) sum += exp(static_cast<double>(x) - z_max);
    });
  sum = block_reduce(sum, Sum(), 0.0);
  return RawStats{z_max, sum, inf, valid};
}

// Appends to dst, in no order, the best `take` (>= 1) of the nonzero keys each_key(fn) hands out
// (`available` >= take of them; every lane of a warp the same calls); *s_count counts them. Keys
// are distinct (they hold their ids), so the radix selection's threshold admits exactly `take`.
template <class EachKey>
__device__ void append_best_keys(EachKey&& each_key, int take, long long available, unsigned long long* dst,
                                 unsigned int* s_count) {
  const unsigned long long threshold = take < available ? radix_select(each_key, take) : 1ull;
  if (threadIdx.x == 0) *s_count = 0u;
  __syncthreads();
  each_key([&](unsigned long long k) {
    const bool sel = k != 0ull && k >= threshold;
    const unsigned int slot = warp_append_slot(s_count, sel);
    if (sel) dst[slot] = k;
  });
}

// The best min(valid, n) keys partial_key(x, id) of those values (valid: how many have x > -Inf; n
// <= kMaxRawKeys), sorted descending into s_keys; returns their count.
template <class EachValue>
__device__ int raw_top_keys(EachValue&& each_value, long long valid, int n, unsigned long long* s_keys,
                            unsigned int* s_count) {
  const int take = static_cast<int>(valid < n ? valid : n);
  if (take == 0) return 0;  // (block-uniform)
  auto each_key = [&](auto&& fn) {
    each_value([&](uint32_t id, float x) { fn(x > -INFINITY ? partial_key(x, id) : 0ull); });
  };
  append_best_keys(each_key, take, valid, s_keys, s_count);
  __syncthreads();
  detail::block_sort_desc(s_keys, take);
  __syncthreads();
  return take;
}

// A shard's raw section is computed over slices of kRawSliceValues values, a block each with every
// load issued before any is used, then merged a block a row: one block a row over the row itself
// left its passes bound by one SM's latency (the unsharded raw path's, ~50 µs a row at V = 128256).
constexpr int kRawSliceThreads = 256;
constexpr int kRawSliceLoads = 16;
constexpr int64_t kRawSliceValues = kRawSliceThreads * kRawSliceLoads;

struct RawSliceStats {
  float max;           // of the slice's finite raw values (-Inf: none)
  int32_t inf, valid;  // its +Inf values; its drawable ones (finite or +Inf)
  double sum;          // Σ exp(x - max) over its finite values, float64
};
struct RawSlices {
  RawSliceStats* stats;      // [batch, slices]
  unsigned long long* keys;  // [batch, slices, n]: each slice's best min(n, valid) keys (unordered), zeros after
  int32_t slices, n;
};

// Slice blockIdx.x of row blockIdx.y: the shard's stored logits (bias included) softcapped, their
// statistics and best keys partial_key(x, global id).
__global__ void __launch_bounds__(kRawSliceThreads)
    raw_slices_kernel(const float* __restrict__ logits, SampleParams p, int64_t base, RawSlices out) {
  __shared__ unsigned int s_count;
  const int64_t b = blockIdx.y, V = p.vocab, lo = static_cast<int64_t>(blockIdx.x) * kRawSliceValues;
  const int64_t at = b * out.slices + blockIdx.x;
  float x[kRawSliceLoads];
  uint32_t thread_inf, thread_finite;
  float m;
  load_raw_slice<kRawSliceThreads>(logits + b * V + lo, V - lo, p.softcap, x, thread_inf, thread_finite, m);
  m = block_reduce(m, Max(), -INFINITY);
  const int32_t inf = block_reduce(static_cast<int32_t>(thread_inf), Sum(), 0);
  const int32_t valid = block_reduce(static_cast<int32_t>(thread_inf + thread_finite), Sum(), 0);
  double sum = 0.0;
  if (m > -INFINITY)  // (block-uniform)
#pragma unroll
    for (int k = 0; k < kRawSliceLoads; ++k)
      if (x[k] > -INFINITY && x[k] < INFINITY) sum += exp(static_cast<double>(x[k]) - static_cast<double>(m));
  sum = block_reduce(sum, Sum(), 0.0);
  if (threadIdx.x == 0) out.stats[at] = RawSliceStats{m, inf, valid, sum};
  if (out.n == 0) return;
  const int take = valid < out.n ? valid : out.n;  // (block-uniform)
  unsigned long long* const dst = out.keys + at * out.n;
  if (take > 0) {
    auto each_key = [&](auto&& fn) {
#pragma unroll
      for (int k = 0; k < kRawSliceLoads; ++k)
        fn(x[k] > -INFINITY ? partial_key(x[k], static_cast<uint32_t>(base + lo + threadIdx.x + k * kRawSliceThreads))
                            : 0ull);
    };
    append_best_keys(each_key, take, valid, dst, &s_count);
  }
  for (int i = take + static_cast<int>(threadIdx.x); i < out.n; i += kRawSliceThreads) dst[i] = 0ull;
}

// Row b's raw section (kPartialRaw), after its winners and candidate keys were written: the row's
// slices merged in slice order (each sum rescaled in float64 to the row's max), its best c.raw_top
// keys among the slices' (which hold them: a slice's n best hold its share of the row's n best),
// and each winner's and candidate key's raw logit read from the stored logits (the CPU's
// write_partial_raw).
__global__ void __launch_bounds__(kRowThreads)
    partial_raw_kernel(const float* __restrict__ logits, SampleParams p, PartialCall c, RawSlices in) {
  __shared__ unsigned long long s_keys[kMaxRawKeys];
  __shared__ unsigned int s_count;
  const int64_t b = blockIdx.x, V = p.vocab, base = c.vocab_offset;
  const int R = in.slices, n = in.n;
  PartialHeader h;
  init_partial_header(&h, static_cast<int32_t>(p.batch), c.max_batch, p.num_samples, c.capacity, c.options_hash,
                      base, V, c.vocab_total, c.stats, c.raw_top);
  const PartialRowView out = partial_row(p.partial, h, b);
  const RawSliceStats* const stats = in.stats + b * R;
  float m = -INFINITY;
  long long inf = 0, valid = 0, listed = 0;
  for (int s = threadIdx.x; s < R; s += kRowThreads) {
    m = fmaxf(m, stats[s].max);
    inf += stats[s].inf;
    valid += stats[s].valid;
    listed += stats[s].valid < n ? stats[s].valid : n;
  }
  m = block_reduce(m, Max(), -INFINITY);
  inf = block_reduce(inf, Sum(), 0ll);
  valid = block_reduce(valid, Sum(), 0ll);
  listed = block_reduce(listed, Sum(), 0ll);
  const double z_max = static_cast<double>(m);
  double sum = 0.0;
  for (int s = threadIdx.x; s < R; s += kRowThreads)
    if (stats[s].sum > 0.0) sum += stats[s].sum * exp(static_cast<double>(stats[s].max) - z_max);
  sum = block_reduce(sum, Sum(), 0.0);
  const int take = static_cast<int>(valid < n ? valid : n);
  if (take > 0) {  // (block-uniform)
    const unsigned long long* const keys = in.keys + b * static_cast<int64_t>(R) * n;
    const int64_t slots = static_cast<int64_t>(R) * n, span = (slots + 31) / 32 * 32;  // warp-uniform calls
    auto each_key = [&](auto&& fn) {
      for (int64_t i = threadIdx.x; i < span; i += kRowThreads) fn(i < slots ? keys[i] : 0ull);
    };
    append_best_keys(each_key, take, listed, s_keys, &s_count);
    __syncthreads();
    detail::block_sort_desc(s_keys, take);
    __syncthreads();
    for (int i = threadIdx.x; i < take; i += kRowThreads) out.raw_keys[i] = s_keys[i];
  }
  const float* const row = logits + b * V;
  auto raw_of = [&](uint32_t global) {
    const int64_t local = static_cast<int64_t>(global) - base;
    return local >= 0 && local < V ? softcap_logit(row[local], p.softcap) : NAN;
  };
  for (int j = threadIdx.x; j < p.num_samples; j += kRowThreads)
    out.winner_raw[j] = out.winners[j].key == kNoToken ? 0.0f : raw_of(out.winners[j].key & 0x7fffffffu);
  const int32_t count = out.row->num_candidates < 0 ? 0 : out.row->num_candidates > c.capacity ? c.capacity
                                                                                                  : out.row->num_candidates;
  for (int32_t i = threadIdx.x; i < count; i += kRowThreads) out.key_raw[i] = raw_of(partial_key_index(out.keys[i]));
  if (threadIdx.x == 0) *out.raw = PartialRawRow{z_max, sum, static_cast<int64_t>(inf), take, 0};
}

// The rows pass's decision, after its draw (logprobsMode 'raw'): row value_rows[i]'s raw
// log-probabilities from the raw logits that every shard's segment carries after its values, the
// drawn tokens' and the topLogprobs best (the CPU's write_raw_row). Rows whose segments are not one
// round's were left undecided; with `live`, only the first *live rows.
__global__ void __launch_bounds__(kRowThreads) decide_raw_rows_kernel(SampleParams p, const int32_t* live) {
  __shared__ unsigned long long s_keys[kMaxRawKeys];
  __shared__ unsigned int s_count;
  __shared__ bool s_ok;
  const int64_t i = blockIdx.x, rows = p.value_row_count, pitch = p.value_pitch;
  if (live != nullptr && i >= *live) return;
  if (threadIdx.x == 0) s_ok = row_values_segments_ok(p.row_values, rows, pitch, p.value_segments, p.vocab, true);
  __syncthreads();
  if (!s_ok) return;
  const int64_t b = p.value_rows[i];
  auto raw_row = [&](int32_t r) {
    const RowValuesHeader* h = row_values_segment(p.row_values, rows, pitch, r, true);
    return reinterpret_cast<const float*>(h + 1) + (rows + i) * pitch;
  };
  auto each_value = [&](auto&& fn) {
    for (int32_t r = 0; r < p.value_segments; ++r) {
      const RowValuesHeader& h = *row_values_segment(p.row_values, rows, pitch, r, true);
      const float* x = raw_row(r);
      const int64_t span = (h.vocab_size + 31) / 32 * 32;  // every lane of a warp the same calls
      for (int64_t v = threadIdx.x; v < span; v += kRowThreads)
        fn(static_cast<uint32_t>(h.vocab_offset + v), v < h.vocab_size ? x[v] : NAN);
    }
  };
  const RawStats st = raw_stats(each_value);
  const double lse = st.z_max + log(st.sum);
  auto logprob = [&](float x) -> float {  // +Inf logits share the mass; -Inf and NaN: probability 0
    if (st.inf > 0) return x == INFINITY ? static_cast<float>(-log(static_cast<double>(st.inf))) : -INFINITY;
    return x > -INFINITY && x < INFINITY ? static_cast<float>(static_cast<double>(x) - lse) : -INFINITY;
  };
  const int32_t S = p.num_samples;
  if (p.logprobs != nullptr)
    for (int32_t j = threadIdx.x; j < S; j += kRowThreads) {
      const int32_t t = p.tokens[b * S + j];
      if (t < 0) continue;
      float x = NAN;
      for (int32_t r = 0; r < p.value_segments; ++r) {
        const RowValuesHeader& h = *row_values_segment(p.row_values, rows, pitch, r, true);
        if (t >= h.vocab_offset && t < h.vocab_offset + h.vocab_size) x = raw_row(r)[t - h.vocab_offset];
      }
      p.logprobs[b * S + j] = logprob(x);
    }
  const int n = p.top_logprobs;
  if (n <= 0) return;
  // with +Inf logits only they are kept: they are the largest keys, so the first ones
  const int take = raw_top_keys(each_value, st.inf > 0 ? st.inf : st.valid, n, s_keys, &s_count);
  for (int k = threadIdx.x; k < n; k += kRowThreads) {
    p.top_tokens[b * n + k] = k < take ? static_cast<int32_t>(partial_key_index(s_keys[k])) : -1;
    p.top_token_logprobs[b * n + k] = k < take ? logprob(partial_key_logit(s_keys[k])) : -INFINITY;
  }
}

// Keys a row of the one-pass shard path holds (sorted in shared memory): larger capacities, which
// only the merge's later rounds ask, materialize (a one-pass prefix rarely holds more).
constexpr int kCandidateKeysMax = 2048;
// The row's complete prefix is staged in dynamic shared memory up to this many keys (128 KB), so
// that the radix selection's passes (up to 8 with bf16's tied logits) read shared memory: over the
// candidates in global memory they took ~37 µs a row (ncu, TP 2 llama3-8b). A larger prefix (a flat
// min-p row's) is selected from global memory.
constexpr int kStagedKeys = 16384;
constexpr size_t kStagedSmem = kStagedKeys * sizeof(unsigned long long);
// Which shards take the one-pass path (A/B against materializing, llama3-8b / 70b, llama3+logprobs
// and top-k 50, H200, 2026-12-04): it wins at B = 1 on every shard (-2 to -27 %) and at every B on
// shards of >= 263 M weights (TP 2 of llama3-8b, TP 4 of llama3-70b: -1 to -30 %), and loses at B >=
// 64 on shards of 131 M (TP 4 of 8b, TP 8 of 70b: +2 to +27 %; TP 8 of 8b +8 to +43 %): a CTA's
// first tile of a row (its θ, its appends) is most of a small shard's epilogue.
constexpr int64_t kOnePassShardBatch = 16;
constexpr int64_t kOnePassShardWeights = int64_t{200} << 20;  // V_shard x D

// Row b of the partial state from the one-pass filtered GEMM (FilterArgs::shard): the statistics
// from its tile summaries (merged as the decision merges them), sample 0's winner (the epilogue
// offered global ids) with its logit from its tile's summary, and the best min(n, capacity) keys
// of the complete prefix the epilogue gathered (candidates at or above the largest θ used and above
// the largest dropped value; filter_epilogue.cuh): a prefix of the shard's order, complete when it
// holds every drawable value.
__global__ void __launch_bounds__(detail::kRowBlockThreads)
    partial_candidates_kernel(SampleParams p, PartialCall c, const __grid_constant__ detail::FilterArgs f,
                              const unsigned long long* __restrict__ winners) {
  extern __shared__ __align__(16) unsigned long long s_staged[];  // kStagedKeys
  __shared__ unsigned long long s_sorted[kCandidateKeysMax];
  __shared__ detail::CandidateSlices cs;
  __shared__ unsigned int s_count;
  const int64_t b = blockIdx.x, base = c.vocab_offset;
  const int tid = threadIdx.x;
  PartialHeader h;
  init_partial_header(&h, static_cast<int32_t>(p.batch), c.max_batch, p.num_samples, c.capacity, c.options_hash,
                      base, p.vocab, c.vocab_total, c.stats, c.raw_top);
  if (b == 0 && tid == 0) *static_cast<PartialHeader*>(p.partial) = h;
  const PartialRowView out = partial_row(p.partial, h, b);
  const float temperature = p.temperature[b];
  const bool greedy = !(temperature > 0.0f);
  const detail::TileSummary* ts = f.tiles + b * f.num_vtiles;

  // bit 63 of a packed winner: the +Inf tier (finalize_partial_kernel's key)
  const unsigned long long w = __ldcg(winners + b);
  const uint32_t key = w == 0ull ? kNoToken
                                 : static_cast<uint32_t>(detail::packed_token(w)) | (static_cast<uint32_t>(w >> 63) << 31);
  if (tid == 0) {
    float logit = 0.0f;
    if (key != kNoToken) {
      const uint32_t local = (key & 0x7fffffffu) - static_cast<uint32_t>(base);
      const detail::TileSummary& t = ts[local / 128];
      if ((t.best_key & 0x7fffffffu) == local) logit = t.best_logit;
    }
    const PartialWinner pw{detail::packed_score(w), key, logit, 0u};
    for (int j = 0; j < p.num_samples; ++j) out.winners[j] = pw;
  }
  if (greedy) {
    if (tid == 0) *out.row = PartialRow{-INFINITY, 0.0, 0, 0, 0, 1};
    return;
  }

  const double inv_t = 1.0 / static_cast<double>(temperature);
  const detail::RowSummary rs = detail::block_summary(ts, f.num_vtiles, inv_t);
  const long long inf = rs.posinf, finite = rs.valid - rs.posinf;
  // z_max as partial_slices_kernel computes it; the sum is the summaries' (SEMANTICS §6: rounding)
  const double z_max = finite > 0 ? static_cast<double>(rs.m) / static_cast<double>(temperature) : -INFINITY;
  const double sum = finite > 0 ? rs.z : 0.0;

  const int32_t top_k = p.top_k != nullptr ? p.top_k[b] : 0;
  const float top_p = p.top_p != nullptr ? p.top_p[b] : 1.0f, min_p = p.min_p != nullptr ? p.min_p[b] : 0.0f;
  long long prefix = 0, take = 0;
  if (c.capacity > 0 && detail::row_gathers_candidates(top_k, top_p, min_p, p.top_logprobs, greedy)) {
    const uint32_t used = __ldcg(f.theta_used + b), dropped = __ldcg(f.max_dropped + b);
    float level = used == 0u ? -INFINITY : detail::from_ordered_bits(used);
    if (dropped != 0u) level = fmaxf(level, detail::from_ordered_bits(dropped));  // (ties: strictly above)
    detail::load_candidate_slices(f, b, cs);
    const float* val = f.cand_val + b * static_cast<int64_t>(f.cap);
    const uint32_t* idx = f.cand_idx + b * static_cast<int64_t>(f.cap);
    // fn(key) for each candidate, 0 for those outside the prefix (every lane the same calls)
    auto each_candidate = [&](auto&& fn) {
      const int64_t batch = detail::kPrefixRounds * static_cast<int64_t>(blockDim.x);  // quads
      for (int64_t q = 0; q < cs.quads; q += batch) {
        float x[detail::kPrefixRounds][4];
        uint32_t v[detail::kPrefixRounds][4];
        detail::load_prefix_batch(val, idx, cs, q, x, v);
#pragma unroll
        for (int r = 0; r < detail::kPrefixRounds; ++r)
#pragma unroll
          for (int o = 0; o < 4; ++o)
            fn(x[r][o] >= level && detail::ordered_bits(x[r][o]) > dropped
                   ? detail::order_key(x[r][o], static_cast<uint32_t>(base + v[r][o]))
                   : 0ull);
      }
    };
    // appends the selected keys at s_count, up to `room`
    auto append = [&](unsigned long long* dst, int room, unsigned long long k, bool sel) {
      const unsigned int at = warp_append_slot(&s_count, sel);
      if (sel && at < static_cast<unsigned int>(room)) dst[at] = k;
    };
    if (tid == 0) s_count = 0u;
    __syncthreads();
    each_candidate([&](unsigned long long k) { append(s_staged, kStagedKeys, k, k != 0ull); });
    __syncthreads();
    prefix = s_count;
    const bool staged = prefix <= kStagedKeys;  // (block-uniform)
    auto each_key = [&](auto&& fn) {
      if (staged) {
        const int n32 = (static_cast<int>(prefix) + 31) & ~31;
        for (int i = tid; i < n32; i += blockDim.x) fn(i < prefix ? s_staged[i] : 0ull);
      } else {
        each_candidate(fn);
      }
    };
    take = prefix < c.capacity ? prefix : c.capacity;
    if (take > 0) {
      const unsigned long long threshold = take < prefix ? radix_select(each_key, take) : 1ull;
      __syncthreads();
      if (tid == 0) s_count = 0u;
      __syncthreads();
      each_key([&](unsigned long long k) { append(s_sorted, kCandidateKeysMax, k, k != 0ull && k >= threshold); });
      __syncthreads();
      detail::block_sort_desc(s_sorted, static_cast<int>(take));
      for (int64_t i = tid; i < take; i += blockDim.x) out.keys[i] = s_sorted[i];
    }
  }
  if (tid == 0) {
    *out.row = PartialRow{z_max, sum, static_cast<int64_t>(finite), static_cast<int64_t>(inf),
                          static_cast<int32_t>(take), take == prefix && prefix == finite + inf ? 1 : 0};
  }
}

// merge_write_raw (merge.h) for a row the block drew: the drawn tokens' scans of their shard's
// candidates shared by the block's threads (one thread's scan waits on an L2 load a key: ~0.3 µs,
// so a token a thousand keys deep in a top-p prefix would cost the row ~300 µs).
__device__ void merge_write_raw_block(const SampleParams& p, const PartialSet& set, int64_t b) {
  __shared__ MergedRaw s_raw;
  __shared__ float s_x;
  if (threadIdx.x == 0) s_raw = merged_raw(set, b);
  __syncthreads();  // (also: thread 0's tokens are written)
  const MergedRaw r = s_raw;
  const int32_t S = p.num_samples;
  if (p.logprobs != nullptr)
    for (int32_t j = 0; j < S; ++j) {
      const int32_t t = p.tokens[b * S + j];  // (block-uniform)
      if (t < 0) continue;
      if (threadIdx.x == 0) s_x = NAN;
      __syncthreads();
      const float x = merged_raw_logit(set, b, t, static_cast<int32_t>(threadIdx.x), static_cast<int32_t>(blockDim.x));
      if (x == x) s_x = x;  // (one key holds t; a winner every thread finds: the same value)
      __syncthreads();
      if (threadIdx.x == 0) p.logprobs[b * S + j] = s_x != s_x ? NAN : merged_raw_logprob(r, s_x);
    }
  if (threadIdx.x == 0) merge_write_raw_top(p, set, b, r);
}

// A block per row runs merge.h's steps: setup on one thread, the prefix placed and its chunks'
// masses a thread per key and chunk, the decision on one thread, each sample's pick over the kept
// keys a thread per key (one thread a row walked every kept key: 50 ms at B = 64 for model-like
// flat rows' 50 K-key nuclei, llama3-8b TP 1). `call` is the merge call; `p` is the same but, for
// logprobsMode 'raw', without the processed log-probabilities, which merge_write_raw replaces.
__global__ void __launch_bounds__(kMergeThreads)
    merge_rows_kernel(SampleParams p, SampleParams call, PartialSet set, MergeScratch scratch,
                      int32_t* __restrict__ status) {
  __shared__ MergeRow r;
  __shared__ MergedKept kept;
  __shared__ int32_t s_error;
  __shared__ bool s_go;
  const int64_t b = blockIdx.x;
  const int tid = threadIdx.x;
  const bool raw = reports_raw_logprobs(call);
  if (tid == 0) {
    int32_t which = 0;
    s_error = check_partials(call, set, call.options_hash, has_filters(call), &which, raw ? call.top_logprobs : -1);
    if (b == 0) {
      status[0] = s_error;
      status[1] = which;
      status[2] = s_error == kPartialOk ? largest_shard(set) : 0;
    }
    s_go = s_error == kPartialOk && merge_row_setup(p, set, b, scratch, &r);
  }
  __syncthreads();
  if (!s_go) {
    // (an engine's sharded step reads no status word: its rows say that the states did not fit)
    if (tid == 0 && s_error != kPartialOk) merged_point_row(p, b, kRowShardMismatch, -1);
    else if (tid == 0 && raw) merge_write_raw(call, set, b);  // (setup wrote the row)
    return;
  }
  merge_place(r, tid, blockDim.x);
  __syncthreads();
  merge_weights(r, tid, blockDim.x);
  __syncthreads();
  merge_chunk_masses(r, tid, blockDim.x);
  __syncthreads();
  if (tid == 0) {
    kept = merge_decide(p, r, b);
    if (merge_undecided(r, kept)) merged_point_row(p, b, kRowUndecided, -1);
  }
  __syncthreads();
  if (merge_undecided(r, kept)) return;
  for (int32_t j = 0; j < p.num_samples; ++j) {
    MergedPick best{-INFINITY, kNoToken, 0.0f};
    if (merge_draws_keys(r, kept)) {
      best = merge_pick(p, r, b, j, kept.size, tid, blockDim.x);
      const Pick q = block_best(Pick{best.score, best.key, best.logit});
      best = MergedPick{q.score, q.key, q.logit};
    }
    if (tid == 0) merge_write_sample(p, set, r, b, kept, j, best);
  }
  for (int32_t i = tid; i < p.top_logprobs; i += blockDim.x) merge_write_top(p, r, b, kept, i);
  if (raw) merge_write_raw_block(call, set, b);
  if (tid == 0 && p.row_status != nullptr) p.row_status[b] = kRowOk;
}

// An engine's sharded step, after the merge: its first `max_rows` undecided rows (row_status
// kRowUndecided), in batch order, into rows[] (-1 past them) and flags[b] = `flag` (the flagged
// logits' input: 2 where the shard's pass may have stored tiles), their count in flags[batch]. One
// warp; the same on every rank, which merged the same states.
__global__ void list_undecided_rows_kernel(const int32_t* __restrict__ row_status, int64_t batch, int32_t max_rows,
                                           int32_t flag, int32_t* flags, int32_t* rows) {
  const int lane = threadIdx.x;
  int32_t n = 0;
  for (int64_t first = 0; first < batch; first += 32) {
    const int64_t b = first + lane;
    const bool undecided = b < batch && row_status[b] == kRowUndecided;
    const unsigned mask = __ballot_sync(0xffffffffu, undecided);
    const int32_t at = n + __popc(mask & ((1u << lane) - 1u));
    const bool listed = undecided && at < max_rows;
    if (b < batch) flags[b] = listed ? flag : 0;
    if (listed) rows[at] = static_cast<int32_t>(b);
    n += __popc(mask);
  }
  const int32_t count = n < max_rows ? n : max_rows;
  for (int32_t i = count + lane; i < max_rows; i += 32) rows[i] = -1;
  if (lane == 0) flags[batch] = count;
}

// The rows pass, a shard's side: the candidate values of rows value_rows[y] (NaN: not drawable) into
// its segment of p.row_values, after the header that block (0, 0) writes; with `live`, only the
// first *live rows (the others' slots are left as they are).
__global__ void shard_row_values_kernel(const float* __restrict__ logits, SampleParams p, const int32_t* live) {
  const int64_t i = blockIdx.y, V = p.vocab;
  const bool raw = reports_raw_logprobs(p);
  auto* header = static_cast<RowValuesHeader*>(p.row_values);
  if (i == 0 && blockIdx.x == 0 && threadIdx.x == 0)
    *header = RowValuesHeader{raw ? kRowValuesRawMagic : kRowValuesMagic, static_cast<int32_t>(p.value_row_count),
                              p.vocab_offset, V, p.value_pitch};
  if (live != nullptr && i >= *live) return;
  const int64_t b = p.value_rows[i];
  float* out = reinterpret_cast<float*>(header + 1) + i * p.value_pitch;
  // logprobsMode 'raw': the rows' raw logits (softcapped; no mask, no lists) after the values' rows
  float* raw_out = raw ? out + p.value_row_count * p.value_pitch : nullptr;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < V;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = logits[b * V + v];
    out[v] = detail::candidate_value(p, b, v, x);
    if (raw) raw_out[v] = softcap_logit(x, p.softcap);
  }
}

// shard_row_values_kernel over the value rows: up to 64 blocks of 256 a row.
cudaError_t launch_shard_row_values(const float* logits, const SampleParams& p, const int32_t* live,
                                    cudaStream_t stream) {
  const int64_t blocks = (p.vocab + 255) / 256;
  const dim3 grid(static_cast<unsigned>(blocks < 64 ? blocks : 64), static_cast<unsigned>(p.value_row_count));
  shard_row_values_kernel<<<grid, 256, 0, stream>>>(logits, p, live);
  return cudaGetLastError();
}

}  // namespace

bool partial_params_ok(const SampleParams& p) {
  const int64_t total = p.vocab_total > 0 ? p.vocab_total : p.vocab;
  return p.partial != nullptr && p.vocab_offset >= 0 && p.vocab_offset % 4 == 0 && p.vocab_offset + p.vocab <= total &&
         p.partial_capacity >= 0 && p.partial_capacity <= kMaxPartialCapacity && p.partial_max_batch >= p.batch &&
         (p.row_values == nullptr ||
          (p.value_rows != nullptr && p.value_row_count >= 1 && p.value_row_count <= p.batch && p.value_pitch >= p.vocab));
}

cudaError_t launch_partial_from_candidates(const SampleParams& p, const detail::FilterArgs& f,
                                           const unsigned long long* winners, cudaStream_t stream) {
  const PartialCall c = partial_call(p, true);
  int per_sm = 0;
  cudaError_t err = detail::prepare_kernel(partial_candidates_kernel, detail::kRowBlockThreads,
                                           static_cast<int>(kStagedSmem), &per_sm);
  if (err != cudaSuccess) return err;
  partial_candidates_kernel<<<static_cast<unsigned>(p.batch), detail::kRowBlockThreads, kStagedSmem, stream>>>(
      p, c, f, winners);
  return cudaGetLastError();
}

cudaError_t launch_partial_raw(const SampleParams& p, const float* logits, Scratch& scratch, cudaStream_t stream) {
  if (!reports_raw_logprobs(p)) return cudaSuccess;
  if (p.top_logprobs > kMaxRawKeys || logits == nullptr) return cudaErrorInvalidValue;
  RawSlices slices;
  slices.slices = static_cast<int32_t>((p.vocab + kRawSliceValues - 1) / kRawSliceValues);
  slices.n = p.top_logprobs;
  slices.keys = nullptr;
  const size_t count = static_cast<size_t>(p.batch) * static_cast<size_t>(slices.slices);
  cudaError_t err = scratch.take(count * sizeof(RawSliceStats), &slices.stats);
  if (err == cudaSuccess && slices.n > 0)
    err = scratch.take(count * static_cast<size_t>(slices.n) * sizeof(unsigned long long), &slices.keys);
  if (err == cudaSuccess) {
    const dim3 grid(static_cast<unsigned>(slices.slices), static_cast<unsigned>(p.batch));
    raw_slices_kernel<<<grid, kRawSliceThreads, 0, stream>>>(logits, p, p.vocab_offset, slices);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) {
    partial_raw_kernel<<<static_cast<unsigned>(p.batch), kRowThreads, 0, stream>>>(logits, p, partial_call(p, true),
                                                                                  slices);
    err = cudaGetLastError();
  }
  const cudaError_t freed_keys = scratch.give_back(slices.keys);
  const cudaError_t freed = scratch.give_back(slices.stats);
  return err != cudaSuccess ? err : freed_keys != cudaSuccess ? freed_keys : freed;
}

cudaError_t launch_partial_sample(const SampleParams& call, cudaStream_t stream) {
  cudaError_t err = detail::check_params(call);
  if (err != cudaSuccess) return err;
  if (!partial_params_ok(call)) return cudaErrorInvalidValue;
  const bool raw = reports_raw_logprobs(call);  // logprobsMode 'raw': the raw section from the stored logits
  if (raw && call.top_logprobs > kMaxRawKeys) return cudaErrorInvalidValue;
  // One pass over the shard's W where its candidates can serve: one sample a row (the epilogue
  // draws one), at most kCandidateKeysMax keys, and a shard whose first-tile costs the GEMM
  // amortizes (kOnePassShardWeights) or a small batch. The rows pass materializes.
  if (call.row_values == nullptr && call.num_samples == 1 && call.partial_capacity <= kCandidateKeysMax &&
      (call.batch <= kOnePassShardBatch || call.vocab * call.dim >= kOnePassShardWeights)) {
    err = launch_shard_one_pass(call, stream);
    if (err != cudaErrorNotSupported) return err;
  }
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
  const bool rows_pass = call.row_values != nullptr;  // (its values only: no slices, no sort)
  err = build_listed_table(call, scratch, &p, &listed, stream);
  if (err == cudaSuccess) err = scratch.take(B * static_cast<size_t>(p.vocab) * sizeof(float), &logits);
  if (err == cudaSuccess && !rows_pass) err = scratch.take(layout.bytes, &slice_space);
  if (err == cudaSuccess && !rows_pass && !in_shared) err = scratch.take(B * static_cast<size_t>(sort_stride) * 8u, &sort_space);
  int per_sm = 0;  // (the limit raised once to the largest the rows may ask)
  if (err == cudaSuccess && !rows_pass && in_shared)
    err = detail::prepare_kernel(partial_rows_kernel, kRowThreads, static_cast<int>(kRowSmemMax), &per_sm);
  if (err == cudaSuccess) err = launch_logits_store(p, 0, p.vocab, logits, stream);
  if (err == cudaSuccess && rows_pass) {
    err = launch_shard_row_values(logits, p, nullptr, stream);
  } else if (err == cudaSuccess) {
    const PartialCall c = partial_call(call, has_filters(call));
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
    if (err == cudaSuccess) err = launch_partial_raw(p, logits, scratch, stream);
  }
  cudaError_t freed = cudaSuccess;
  for (void* region : {static_cast<void*>(sort_space), static_cast<void*>(slice_space), static_cast<void*>(logits),
                       listed}) {
    const cudaError_t e = scratch.give_back(region);
    if (freed == cudaSuccess) freed = e;
  }
  return err != cudaSuccess ? err : freed;
}

cudaError_t launch_rows_pass_values(const SampleParams& p, const int32_t* row_status, int32_t* flags, float* logits,
                                    cudaStream_t stream) {
  if (p.row_values == nullptr || p.value_rows == nullptr || p.value_row_count < 1 || p.value_row_count > p.batch ||
      p.value_pitch < p.vocab || row_status == nullptr || flags == nullptr || logits == nullptr ||
      p.hidden == nullptr || p.weight == nullptr)
    return cudaErrorInvalidValue;
  Scratch scratch(p, stream);
  SampleParams q;  // p with the listed tokens' table, which the values apply (raw logits have none)
  void* listed = nullptr;
  cudaError_t err = build_listed_table(p, scratch, &q, &listed, stream);
  if (err != cudaSuccess) return err;
  // Tiles the shard's one pass stored (p.shard_stored_tiles, into `logits`) are read back, not W.
  const bool stored = p.shard_stored_tiles != nullptr && p.shard_row_logits == logits;
  list_undecided_rows_kernel<<<1, 32, 0, stream>>>(row_status, p.batch, static_cast<int32_t>(p.value_row_count),
                                                   stored ? 2 : 1, flags, const_cast<int32_t*>(p.value_rows));
  err = cudaGetLastError();
  if (err == cudaSuccess)
    err = launch_flagged_logits(scratch.rest(p), flags, flags + p.batch, logits, stored ? p.shard_stored_tiles : nullptr,
                                stream);
  if (err == cudaSuccess) err = launch_shard_row_values(logits, q, flags + p.batch, stream);
  const cudaError_t freed = scratch.give_back(listed);
  return err != cudaSuccess ? err : freed;
}

cudaError_t launch_decide_raw_rows(const SampleParams& p, const int32_t* live, cudaStream_t stream) {
  if (!reports_raw_logprobs(p)) return cudaSuccess;
  if (p.top_logprobs > kMaxRawKeys || p.row_values == nullptr || p.value_rows == nullptr || p.value_row_count < 1 ||
      p.tokens == nullptr)
    return cudaErrorInvalidValue;
  decide_raw_rows_kernel<<<static_cast<unsigned>(p.value_row_count), kRowThreads, 0, stream>>>(p, live);
  return cudaGetLastError();
}

cudaError_t launch_merge_partials(const SampleParams& p, const PartialSet& set, int32_t* status,
                                  cudaStream_t stream) {
  if (set.count < 1 || set.count > kMaxShards || status == nullptr || p.tokens == nullptr || p.batch < 1 ||
      p.temperature == nullptr || p.seed == nullptr || p.offset == nullptr)
    return cudaErrorInvalidValue;
  Scratch space(p, stream);
  MergeScratch scratch;
  scratch.stride = merge_scratch_keys(p, set);
  cudaError_t err = space.take(static_cast<size_t>(p.batch * scratch.stride) * 8u, &scratch.merged);
  if (err == cudaSuccess) err = space.take(static_cast<size_t>(p.batch * scratch.stride) * 8u, &scratch.weight);
  if (err == cudaSuccess)
    err = space.take(static_cast<size_t>(p.batch * merge_chunks(scratch.stride)) * 8u, &scratch.chunk_mass);
  if (err == cudaSuccess) {
    SampleParams processed = p;  // logprobsMode 'raw': the merge's draw, then merge_write_raw
    if (reports_raw_logprobs(p)) {
      processed.logprobs = nullptr;
      processed.top_logprobs = 0;
    }
    merge_rows_kernel<<<static_cast<unsigned>(p.batch), kMergeThreads, 0, stream>>>(processed, p, set, scratch, status);
    err = cudaGetLastError();
  }
  const cudaError_t freed = space.give_back(scratch.chunk_mass);
  const cudaError_t freed_weights = space.give_back(scratch.weight);
  const cudaError_t freed_keys = space.give_back(scratch.merged);
  return err != cudaSuccess ? err : freed != cudaSuccess ? freed : freed_weights != cudaSuccess ? freed_weights : freed_keys;
}

}  // namespace cuda
}  // namespace flashsample
