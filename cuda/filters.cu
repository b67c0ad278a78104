// The filtered samplers (docs/SEMANTICS.md §2, §4, §5): top-k, top-p, min-p, softcap, allowed
// masks, logprobs and topLogprobs, exact, with the same noise as every other path.
//
// One engine decides a row: it sees the row's candidate values either as the whole materialized
// row (reference, fallback) or as the row's top kCandidateCap candidates plus exact whole-row
// statistics gathered by the fused pass. Every set it keeps is a prefix of the order
// (logit desc, index asc), found by radix selection on a 64-bit order key with count weights
// (top-k) or probability-mass weights (top-p) in float64.
//
// One pass (compute capability 9.0, bf16 / f16 16-byte rows; launch_one_pass_filtered): the split
// kernel's filtered epilogue (kernels/filter_epilogue.cuh) writes per-tile summaries and each row's
// candidates; decide_one_pass_kernel decides a row from them (decide_prefix in shared memory, or
// decide_row over the compacted prefix) and draws every sample of a filtered row from its kept
// keys; the rows it cannot decide, and with several samples the rows that keep every token, are
// finished by the extra pass (extra_pass.cu). A vocabulary shard's call takes the same GEMM and
// writes its partial state instead (launch_shard_one_pass; partial.cu).
//
// Chunked pass (every other call): the vocabulary goes through in chunks of kChunkVocab entries.
// Each chunk's [B, chunk] fp32 logits (4 MB at B = 64) are produced by the fused kernel's own GEMM
// main loop and consumed right away while they are still in L2; what survives per row is
// O(kCandidateCap): the online max / sum of exponentials, counts, the running Gumbel winner per
// sample and the candidates.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "check_params.h"
#include "kernels/candidates.cuh"
#include "kernels/convert.cuh"
#include "kernels/listed.cuh"
#include "kernels/row_select.cuh"
#include "internal_launchers.h"
#include "include/launchers.h"
#include "include/noise.h"
#include "include/partial.h"
#include "launch.cuh"

namespace flashsample {
namespace cuda {
namespace {

constexpr int kThreads = detail::kRowBlockThreads;
constexpr int kCandidateCap = 1024;   // documented in docs/SEMANTICS.md §5
constexpr int kSubChunk = 4096;       // chunk entries one row block holds in shared memory at once
constexpr int64_t kChunkVocab = 16384;  // [B, 16384] fp32 = 4 MB at B = 64: stays in the 60 MB L2
constexpr int kMaxTopLogprobs = 1024;

using detail::block_best;
using detail::block_summary;
using detail::CandidateSlices;
using detail::kPrefixRounds;
using detail::load_candidate_slices;
using detail::load_prefix_batch;
using detail::RowSummary;
using detail::slice_at;
using detail::slice_of;
using detail::block_exclusive_scan;
using detail::block_reduce;
using detail::key_index;
using detail::key_value;
using detail::load_raw_slice;
using detail::Max;
using detail::min_p_first_top_k;
using detail::order_key;
using detail::Pick;
using detail::scan_row;
using detail::Sum;
using detail::warp_best;
using detail::write_no_candidate;

using detail::candidate_value;

// ---- the row's elements ---------------------------------------------------------------------------
// Candidate values (NaN = not a candidate) with their vocabulary indices (idx == nullptr: the
// position is the index).
struct Elems {
  const float* val;
  const uint32_t* idx;
  int64_t n;
  __device__ uint32_t index(int64_t i) const {
    return idx ? idx[i] : static_cast<uint32_t>(i);
  }
};

// One digit of a radix selection, after the block has filled `hist` (256 buckets of the digit at
// `shift` among the keys that match `prefix` above it): the largest digit d whose bucket brings the
// weight of the keys above it to `target`, appended to `prefix`; `above` gains the buckets above d.
// Thread 0 decides and every thread reads the result back (the caller's shared s_prefix, s_above).
template <class T>
__device__ void radix_cut_digit(const T* hist, T target, int shift, uint64_t* prefix, T* above,
                                uint64_t* s_prefix, T* s_above) {
  if (threadIdx.x == 0) {
    T a = *above;
    int d = 255;
    for (; d > 0; --d) {
      if (a + hist[d] >= target) break;
      a += hist[d];
    }
    *s_prefix = *prefix | (static_cast<uint64_t>(d) << shift);
    *s_above = a;
  }
  __syncthreads();
  *prefix = *s_prefix;
  *above = *s_above;
  __syncthreads();
}

// The largest key K such that the weight of the selected elements with key >= K reaches
// `target` (radix selection, 8 bits at a time, float64 weights: exact for counts < 2^53).
// The caller guarantees that the total selected weight reaches the target.
template <class Select, class Weight>
__device__ uint64_t radix_select(const Elems& e, Select select, Weight weight, double target) {
  __shared__ double hist[256];
  __shared__ uint64_t s_prefix;
  __shared__ double s_above;
  uint64_t prefix = 0;
  double above = 0.0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0.0;
    __syncthreads();
    // float64 shared-memory atomicAdd is a compare-and-swap loop, and in the first passes most
    // keys share one or two buckets: a warp whose lanes fall into at most 4 buckets adds each
    // bucket's weight once (butterfly sums), otherwise every lane adds its own.
    const int lane = threadIdx.x & 31;
    for (int64_t base = 0; base < e.n; base += blockDim.x) {  // warp-uniform trip count
      const int64_t i = base + threadIdx.x;
      int bucket = 256;  // none
      double w = 0.0;
      if (i < e.n) {
        const float l = e.val[i];
        if (l == l) {
          const uint64_t key = order_key(l, e.index(i));
          if (select(l, key) && (shift == 56 || ((key ^ prefix) >> (shift + 8)) == 0)) {
            bucket = static_cast<int>((key >> shift) & 255);
            w = weight(l);
          }
        }
      }
      const unsigned same = __match_any_sync(0xffffffffu, bucket);
      const unsigned leaders = __ballot_sync(0xffffffffu, bucket != 256 && lane == __ffs(same) - 1);
      if (__popc(leaders) <= 4) {
        unsigned pending = leaders;
        while (pending != 0u) {
          const int leader = __ffs(pending) - 1;
          pending &= pending - 1u;
          const int bl = __shfl_sync(0xffffffffu, bucket, leader);
          double x = bucket == bl ? w : 0.0;
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
          if (lane == leader) atomicAdd(&hist[bl], x);
        }
      } else if (bucket != 256) {
        atomicAdd(&hist[bucket], w);
      }
    }
    __syncthreads();
    radix_cut_digit(hist, target, shift, &prefix, &above, &s_prefix, &s_above);
  }
  return prefix;
}

// radix_select for unit weights over every element: the key of the target-th largest element
// (target <= the number of non-NaN elements). Integer histograms with warp-aggregated atomics: the
// float64 shared-memory atomics of radix_select are compare-and-swap loops, and the first passes
// put almost every key into one or two buckets (the float's sign and exponent), so the fold
// kernel's selections serialized on a single address (H200, 2026-11-30: topk50 at B = 1 took
// 4.0 ms against 274 us plain).
__device__ uint64_t radix_select_count(const Elems& e, uint32_t target) {
  __shared__ uint32_t hist[256];
  __shared__ uint64_t s_prefix;
  __shared__ uint32_t s_above;
  const int lane = threadIdx.x & 31;
  uint64_t prefix = 0;
  uint32_t above = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0u;
    __syncthreads();
    for (int64_t base = 0; base < e.n; base += blockDim.x) {  // warp-uniform trip count
      const int64_t i = base + threadIdx.x;
      int bucket = 256;  // none
      if (i < e.n) {
        const float l = e.val[i];
        if (l == l) {
          const uint64_t key = order_key(l, e.index(i));
          if (shift == 56 || ((key ^ prefix) >> (shift + 8)) == 0)
            bucket = static_cast<int>((key >> shift) & 255);
        }
      }
      const unsigned same = __match_any_sync(0xffffffffu, bucket);
      if (bucket != 256 && lane == __ffs(same) - 1) atomicAdd(&hist[bucket], __popc(same));
    }
    __syncthreads();
    radix_cut_digit(hist, target, shift, &prefix, &above, &s_prefix, &s_above);
  }
  return prefix;
}

struct RowControl {
  int64_t b;
  float temperature;
  int32_t top_k;
  float top_p, min_p;
  uint64_t seed, offset;
  uint32_t stream;
};

__device__ RowControl load_control(const SampleParams& p, int64_t b) {
  RowControl c;
  c.b = b;
  c.temperature = p.temperature[b];
  c.top_k = p.top_k ? p.top_k[b] : 0;
  c.top_p = p.top_p ? p.top_p[b] : 1.0f;
  c.min_p = p.min_p ? p.min_p[b] : 0.0f;
  c.seed = p.seed[b];
  c.offset = p.offset[b];
  c.stream = p.per_row_seed ? 0u : static_cast<uint32_t>(b);
  return c;
}


// Whole-row statistics of the fused pass (mode "candidates").
struct RowStats {
  float max_logit;     // largest finite candidate value
  int32_t overflow;    // more than kCandidateCap candidates were seen
  double z;            // sum of exp((l - max_logit) / T) over finite candidates
  long long valid;     // candidates (finite or +Inf)
  long long posinf;    // +Inf candidates
  int32_t count;       // candidates kept (<= kCandidateCap)
  int32_t pad;
  // Order key of the kCandidateCap-th largest candidate at the last selection (0 before any):
  // a value with a smaller key has kCandidateCap candidates above it, so it can never be kept.
  unsigned long long floor_key;
};

// The draws of an unfiltered row made during the fused pass (one per sample).
struct RowWinners {
  const float* score;
  const uint32_t* key;
  const float* logit;
};

// The kept elements whose order keys reach `threshold` (at most kMaxTopLogprobs of them), ranked,
// the first `take` in order into row b's topTokens / topLogprobs (initialized by the caller). With
// the take-th largest kept key as threshold, exactly `take` are gathered.
template <class Kept, class LogProb>
__device__ void write_top_keys(const SampleParams& p, const Elems& e, int64_t b, Kept kept, int take,
                               uint64_t threshold, LogProb logprob) {
  __shared__ uint64_t s_key[kMaxTopLogprobs];
  __shared__ float s_val[kMaxTopLogprobs];
  __shared__ int s_count;
  const int n = p.top_logprobs;
  if (threadIdx.x == 0) s_count = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < e.n; i += blockDim.x) {
    const float l = e.val[i];
    if (l != l) continue;
    const uint64_t key = order_key(l, e.index(i));
    if (!kept(l, key) || key < threshold) continue;
    const int at = atomicAdd(&s_count, 1);
    if (at < kMaxTopLogprobs) {
      s_key[at] = key;
      s_val[at] = l;
    }
  }
  __syncthreads();
  const int m = s_count < kMaxTopLogprobs ? s_count : kMaxTopLogprobs;
  for (int i = threadIdx.x; i < m; i += blockDim.x) {
    int rank = 0;
    for (int j = 0; j < m; ++j) rank += s_key[j] > s_key[i];
    if (rank < take) {
      p.top_tokens[b * n + rank] = static_cast<int32_t>(key_index(s_key[i]));
      p.top_token_logprobs[b * n + rank] = logprob(s_val[i]);
    }
  }
  __syncthreads();
}

// The n most probable kept tokens, in order, with their log-probabilities.
template <class Kept, class LogProb>
__device__ void write_top_logprobs(const SampleParams& p, const Elems& e, int64_t b, Kept kept,
                                   long long kept_count, LogProb logprob) {
  const int n = p.top_logprobs;
  if (n <= 0) return;
  const int take = static_cast<int>(kept_count < n ? kept_count : n);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    p.top_tokens[b * n + i] = -1;
    p.top_token_logprobs[b * n + i] = -INFINITY;
  }
  if (take == 0) return;
  const uint64_t threshold = radix_select(
      e, kept, [](float) { return 1.0; }, static_cast<double>(take));
  write_top_keys(p, e, b, kept, take, threshold, logprob);
}

// Statistics of a row's elements: largest finite value, valid and +Inf counts, largest order key.
struct ElemStats {
  float max;
  long long valid, posinf;
  uint64_t best_key;
};
__device__ __forceinline__ ElemStats elem_stats(const Elems& e) {
  float local_max = -INFINITY;
  long long local_valid = 0, local_inf = 0;
  uint64_t local_best = 0;
  for (int64_t i = threadIdx.x; i < e.n; i += blockDim.x) {
    const float l = e.val[i];
    if (l != l) continue;
    ++local_valid;
    if (l == INFINITY) ++local_inf;
    else local_max = fmaxf(local_max, l);
    const uint64_t key = order_key(l, e.index(i));
    local_best = key > local_best ? key : local_best;
  }
  ElemStats r;
  r.max = block_reduce(local_max, Max(), -INFINITY);
  r.valid = block_reduce(local_valid, Sum(), 0ll);
  r.posinf = block_reduce(local_inf, Sum(), 0ll);
  r.best_key = block_reduce<uint64_t>(local_best, Max(), uint64_t(0));
  return r;
}

// vLLM's filter order with min-p and top-p on: the top-k to use in Hugging Face's order
// (min_p_first_top_k), from the min-p survivors among the elements; -1 when they cannot decide it.
template <class Weight>
__device__ __forceinline__ int32_t min_p_first_elems_top_k(const Elems& e, const RowControl& c, bool overflow,
                                                           Weight weight) {
  long long local_s = 0;
  float local_min = INFINITY;
  for (int64_t i = threadIdx.x; i < e.n; i += blockDim.x) {
    const float l = e.val[i];
    if (l != l) continue;
    local_min = fminf(local_min, l);
    if (weight(l) >= static_cast<double>(c.min_p)) ++local_s;
  }
  const long long survivors = block_reduce(local_s, Sum(), 0ll);
  const float smallest = -block_reduce(-local_min, Max(), -INFINITY);
  return min_p_first_top_k(c.top_k, survivors, overflow && weight(smallest) >= static_cast<double>(c.min_p));
}

// Raises best to sampled logit l of token v with Gumbel noise g when that candidate is better.
__device__ __forceinline__ void raise_pick(Pick& best, float l, float inv_tf, float g, uint32_t v) {
  const Candidate cand = make_candidate(l, inv_tf, false, g, v);
  if (candidate_better(cand.score, cand.key, best.score, best.key)) best = {cand.score, cand.key, l};
}

// Every sample by the Gumbel-max over the kept elements (the fused pass's noise), with its logprob.
template <class Kept, class LogProb>
__device__ __forceinline__ void draw_gumbel(const SampleParams& p, const Elems& e, const RowControl& c, float T,
                                            Kept kept, LogProb logprob) {
  const int64_t b = c.b;
  const int S = p.num_samples;
  const float inv_tf = 1.0f / T;
  for (int j = 0; j < S; ++j) {
    Pick best{-INFINITY, kNoToken, 0.0f};
    for (int64_t i = threadIdx.x; i < e.n; i += blockDim.x) {
      const float l = e.val[i];
      if (l != l) continue;
      const uint32_t v = e.index(i);
      if (!kept(l, order_key(l, v))) continue;
      raise_pick(best, l, inv_tf, gumbel_noise(c.seed, c.offset, c.stream, static_cast<uint32_t>(j), v), v);
    }
    best = block_best(best);
    if (threadIdx.x == 0) {
      p.tokens[b * S + j] = best.key == kNoToken ? -1 : static_cast<int32_t>(best.key & 0x7fffffffu);
      if (p.logprobs) p.logprobs[b * S + j] = logprob(best.logit);
    }
  }
}

// Every sample by the inverse CDF in index order: each thread owns a contiguous range of the
// (index-ordered) elements; the ranges' masses are scanned once, then each sample is found by the
// one thread whose range holds it.
template <class Kept, class Weight, class LogProb>
__device__ __forceinline__ void draw_inverse_cdf(const SampleParams& p, const Elems& e, const RowControl& c,
                                                 Kept kept, Weight weight, LogProb logprob) {
  const int64_t b = c.b;
  const int S = p.num_samples;
  __shared__ double range_start[kThreads + 1];
  const int64_t per = (e.n + blockDim.x - 1) / blockDim.x;
  const int64_t lo = threadIdx.x * per, hi = lo + per < e.n ? lo + per : e.n;
  double mine = 0.0;
  for (int64_t i = lo; i < hi; ++i) {
    const float l = e.val[i];
    if (l == l && kept(l, order_key(l, e.index(i)))) mine += weight(l);
  }
  __syncthreads();
  range_start[threadIdx.x + 1] = mine;
  if (threadIdx.x == 0) range_start[0] = 0.0;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int t = 1; t <= static_cast<int>(blockDim.x); ++t) range_start[t] += range_start[t - 1];
  __syncthreads();
  const double total = range_start[blockDim.x];
  int last_owner = 0;  // the last thread whose range holds mass
  for (int t = static_cast<int>(blockDim.x) - 1; t >= 0; --t)
    if (range_start[t + 1] > range_start[t]) {
      last_owner = t;
      break;
    }
  for (int j = 0; j < S; ++j) {
    const Philox4 r = philox4x32_10(static_cast<uint32_t>(j), c.stream, static_cast<uint32_t>(c.offset),
                                    static_cast<uint32_t>(c.offset >> 32), static_cast<uint32_t>(c.seed),
                                    static_cast<uint32_t>(c.seed >> 32));
    const double u = (static_cast<double>(r.x[0]) + 0.5) * 0x1p-32;
    const double target = u * total;
    const int t = threadIdx.x;
    const bool owns = mine > 0.0 && target >= range_start[t] &&
                      (target < range_start[t + 1] || t == last_owner);
    if (owns) {
      double cumulative = range_start[t];
      int64_t pick = -1;
      float pick_l = 0.0f;
      for (int64_t i = lo; i < hi; ++i) {
        const float l = e.val[i];
        if (l != l || !kept(l, order_key(l, e.index(i)))) continue;
        cumulative += weight(l);
        pick = i;
        pick_l = l;
        if (cumulative > target) break;
      }
      p.tokens[b * S + j] = static_cast<int32_t>(e.index(pick));
      if (p.logprobs) p.logprobs[b * S + j] = logprob(pick_l);
    }
  }
}

// Decides one row (one block). `stats`/`winners` non-null: the elements are the fused pass's
// candidates; else they are the whole row. Returns false when the candidates cannot prove the
// kept set (the row must fall back); nothing is written then.
__device__ bool decide_row(const SampleParams& p, const Elems& e, const RowControl& c,
                           const RowStats* stats, const RowWinners* winners, bool inverse_cdf) {
  const int64_t b = c.b;
  const int S = p.num_samples;
  const bool from_candidates = stats != nullptr;

  const ElemStats es = elem_stats(e);
  const long long valid = from_candidates ? stats->valid : es.valid;
  const long long posinf = from_candidates ? stats->posinf : es.posinf;
  const float m = from_candidates ? stats->max_logit : es.max;
  if (valid == 0) {
    write_no_candidate(p, b);
    return true;
  }
  if (threadIdx.x == 0 && p.row_status) p.row_status[b] = kRowOk;
  const float T = c.temperature;

  if (T == 0.0f) {  // greedy: the largest key (the candidates always hold it)
    const uint64_t best_key = es.best_key;
    const int32_t token = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(best_key));
    for (int j = threadIdx.x; j < S; j += blockDim.x) {
      p.tokens[b * S + j] = token;
      if (p.logprobs) p.logprobs[b * S + j] = 0.0f;
    }
    if (p.top_logprobs > 0) {
      auto kept = [best_key](float, uint64_t key) { return key == best_key; };
      write_top_logprobs(p, e, b, kept, 1, [](float) { return 0.0f; });
    }
    return true;
  }

  const bool inf_mode = posinf > 0;
  const bool p_on = !inf_mode && c.top_p < 1.0f;
  const bool minp_on = !inf_mode && c.min_p > 0.0f;
  const double inv_t = 1.0 / static_cast<double>(T);
  const double md = static_cast<double>(m);
  auto weight = [=](float l) -> double {
    if (inf_mode) return l == INFINITY ? 1.0 : 0.0;
    return exp((static_cast<double>(l) - md) * inv_t);
  };
  auto valid_sel = [=](float l, uint64_t) { return !inf_mode || l == INFINITY; };
  const bool overflow = from_candidates && stats->overflow != 0;
  int32_t top_k = c.top_k;
  if (p.filter_order == FilterOrder::kMinPFirst && minp_on && p_on) {
    top_k = min_p_first_elems_top_k(e, c, overflow, weight);
    if (top_k < 0) return false;
  }
  const bool k_on = !inf_mode && top_k > 0 && top_k < valid;
  const bool filtered = k_on || p_on || minp_on;

  if (from_candidates && !filtered) {
    // Everything allowed is kept: the fused pass already drew from the whole row.
    const double z = inf_mode ? static_cast<double>(posinf) : stats->z;
    const double log_z = log(z);
    for (int j = threadIdx.x; j < S; j += blockDim.x) {
      const uint32_t key = winners->key[j];
      p.tokens[b * S + j] = key == kNoToken ? -1 : static_cast<int32_t>(key & 0x7fffffffu);
      if (p.logprobs) {
        const float l = winners->logit[j];
        p.logprobs[b * S + j] = static_cast<float>(
            inf_mode ? -log_z : (static_cast<double>(l) - md) * inv_t - log_z);
      }
    }
    if (p.top_logprobs > 0) {
      write_top_logprobs(p, e, b, valid_sel, inf_mode ? posinf : valid, [=](float l) {
        return static_cast<float>(inf_mode ? -log_z : (static_cast<double>(l) - md) * inv_t - log_z);
      });
    }
    return true;
  }

  // top-k
  uint64_t k_threshold = 0;
  if (k_on) {
    if (overflow && top_k > e.n) return false;
    k_threshold = radix_select(e, valid_sel, [](float) { return 1.0; },
                               static_cast<double>(top_k));
  }
  auto in_top_k = [=](float l, uint64_t key) {
    return (!inf_mode || l == INFINITY) && key >= k_threshold;
  };
  // top-p, on the top-k mass: exact from the elements when top-k is on (all top-k tokens are
  // elements). A pass of float64 exponentials: only top-p reads it.
  uint64_t p_threshold = 0;
  if (p_on) {  // block-uniform
    double local_mass = 0.0;
    for (int64_t i = threadIdx.x; i < e.n; i += blockDim.x) {
      const float l = e.val[i];
      if (l != l) continue;
      if (in_top_k(l, order_key(l, e.index(i)))) local_mass += weight(l);
    }
    const double mass_in_elems = block_reduce(local_mass, Sum(), 0.0);
    const double z_top_k = (k_on || !from_candidates) ? mass_in_elems : stats->z;
    const double target = static_cast<double>(c.top_p) * z_top_k;
    if (mass_in_elems >= target) {
      p_threshold = radix_select(e, in_top_k, weight, target);
    } else if (overflow && !k_on) {
      return false;  // the nucleus reaches past the candidates
    }  // else: rounding with p ~ 1: keep all of top-k
  }
  // min-p, when it alone bounds the kept set: the smallest candidate must already fail it.
  if (overflow && minp_on && !k_on && !p_on) {
    float local_min = INFINITY;
    for (int64_t i = threadIdx.x; i < e.n; i += blockDim.x) {
      const float l = e.val[i];
      if (l == l) local_min = fminf(local_min, l);
    }
    const float smallest = -block_reduce(-local_min, Max(), -INFINITY);
    if (weight(smallest) >= static_cast<double>(c.min_p)) return false;
  }

  const uint64_t threshold = k_threshold > p_threshold ? k_threshold : p_threshold;
  const double min_w = minp_on ? static_cast<double>(c.min_p) : 0.0;
  auto kept = [=](float l, uint64_t key) {
    if (inf_mode) return l == INFINITY;
    return key >= threshold && (min_w == 0.0 || exp((static_cast<double>(l) - md) * inv_t) >= min_w);
  };
  // The kept mass and count: only the logprobs and topLogprobs read them (the draws weigh the
  // kept values themselves), so a row without either skips this pass of float64 exponentials.
  double z_kept = 1.0;
  long long kept_count = 0;
  if (p.logprobs != nullptr || p.top_logprobs > 0) {  // block-uniform
    double local_z = 0.0;
    long long local_kept = 0;
    for (int64_t i = threadIdx.x; i < e.n; i += blockDim.x) {
      const float l = e.val[i];
      if (l != l) continue;
      if (kept(l, order_key(l, e.index(i)))) {
        local_z += weight(l);
        ++local_kept;
      }
    }
    z_kept = block_reduce(local_z, Sum(), 0.0);
    kept_count = block_reduce(local_kept, Sum(), 0ll);
  }
  const double log_z = log(z_kept);
  auto logprob = [=](float l) {
    return static_cast<float>(inf_mode ? -log_z : (static_cast<double>(l) - md) * inv_t - log_z);
  };

  if (!inverse_cdf) draw_gumbel(p, e, c, T, kept, logprob);
  else draw_inverse_cdf(p, e, c, kept, weight, logprob);
  if (p.top_logprobs > 0) write_top_logprobs(p, e, b, kept, kept_count, logprob);
  return true;
}

// ---- raw logprobs --------------------------------------------------------------------------------
// logprobsMode 'raw' (SampleParams::raw_logprobs, SEMANTICS §4): the drawn tokens' and the top
// tokens' log-probabilities under softmax of the softcapped raw logits (bias included; before the
// listed tokens' steps, the mask, the temperature and the filters), from a private copy of the raw
// logits [B, V], after the draw. First every slice of kRawSlice values of a row by its own block
// (raw_slice_stats_kernel): its max, +Inf and finite counts, the sum of fp32 exp(x - slice max) in
// float64 and, for topLogprobs n <= kSliceTopMax, its n largest order keys. Then one block a row
// (raw_logprobs_kernel): the slices merged in slice order (each sum rescaled in float64 to the row's
// max: within ~1e-7 of the float64 sum), the drawn tokens' values, and the top tokens: the slices'
// keys ranked, or for larger n the copy turned in place into the distribution's values (NaN where
// the probability is 0), the values within kRawSpan of the max bucketed by their distance to it in
// one pass, the bucket where the count from the top reaches n gathered and ranked (radix selection
// over the row where that bucket is not reached or holds too many).
constexpr int kRawThreads = 1024;
constexpr int kRawBuckets = 2048;
constexpr float kRawSpan = 64.0f;  // logits below max - kRawSpan: no bucket (weight < e^-64)
// A slice is 16 values a thread of 256, all loaded before any is used: one block a row left the
// row's passes bound by one SM's latency (~50 us a row at V = 128256, ncu 2026-12-02). Fixed, so a
// row's sums do not depend on B.
constexpr int kRawSliceThreads = 256;
constexpr int64_t kRawSlice = 16 * kRawSliceThreads;
// Up to this many top tokens (OpenAI's API allows 20): a slice's n largest keys, then a row's n
// largest of its slices' lists (block_top_keys); more go through the row's own bucketing pass.
constexpr int kSliceTopMax = 32;

struct RawSlice {
  float max;       // of the finite and -Inf values (-Inf when none)
  uint32_t inf;    // +Inf values
  uint32_t finite; // finite values
  double z;        // sum of exp(x - max), when inf == 0
};

__host__ __device__ int64_t raw_slices(int64_t vocab) { return (vocab + kRawSlice - 1) / kRawSlice; }
bool raw_top_from_slices(const SampleParams& p) {
  return p.top_logprobs > 0 && p.top_logprobs <= kSliceTopMax &&
         raw_slices(p.vocab) * p.top_logprobs <= kRawSlice;  // a row's lists in one block's keys
}

// raw mode's workspace after the copy of the logits: the slices' statistics, then their top keys
struct RawLayout {
  size_t stats = 0, keys = 0, bytes = 0;
};
RawLayout raw_layout(const SampleParams& p) {
  RawLayout l;
  if (!reports_raw_logprobs(p)) return l;
  RegionLayout layout;
  const size_t slices = static_cast<size_t>(p.batch) * static_cast<size_t>(raw_slices(p.vocab));
  l.stats = layout.take(slices * sizeof(RawSlice));
  if (raw_top_from_slices(p)) l.keys = layout.take(slices * static_cast<size_t>(p.top_logprobs) * sizeof(unsigned long long));
  l.bytes = layout.bytes;
  return l;
}
size_t raw_slices_bytes(const SampleParams& p) { return raw_layout(p).bytes; }

// The n largest keys (n <= `width`) of a warp's pool in shared memory, lane l owning pool[l + 32 k]
// for k < per, by n rounds of a warp maximum; written largest first to out[0, width) by lane 0, 0 past
// the pool's nonzero keys. Keys are distinct (they hold their token index), so one lane owns each
// round's maximum.
__device__ __forceinline__ void warp_top_keys(unsigned long long* pool, int per, int n, unsigned long long* out,
                                              int width) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  unsigned long long mine = 0ull;
  int mine_at = 0;
  auto refresh = [&] {
    mine = 0ull;
    for (int k = 0; k < per; ++k) {
      const int at = lane + 32 * k;
      if (pool[at] > mine) {
        mine = pool[at];
        mine_at = at;
      }
    }
  };
  refresh();
  int r = 0;
  for (; r < n; ++r) {
    unsigned long long best = mine;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const unsigned long long other = __shfl_xor_sync(0xffffffffu, best, o);
      best = other > best ? other : best;
    }
    if (best == 0ull) break;  // warp-uniform
    if (lane == 0) out[r] = best;
    if (mine == best) {
      pool[mine_at] = 0ull;
      refresh();
    }
  }
  if (lane == 0)
    for (; r < width; ++r) out[r] = 0ull;
}

constexpr int kRawKeysPerThread = static_cast<int>(kRawSlice / kRawSliceThreads);
struct TopKeysShared {
  unsigned long long thread_max[kRawSliceThreads];
  unsigned long long bound[kSliceTopMax];
  unsigned long long cand[kRawSliceThreads * kRawKeysPerThread];
  int count;
};

// The n (<= kSliceTopMax) largest of the block's keys (kRawSliceThreads threads, kRawKeysPerThread
// each, 0: none), written largest first to out[0, n), 0 past the nonzero keys. The n-th largest of
// the threads' maxima bounds the n-th largest key from below (n threads hold a key at least that
// large), so only the keys at or above it (about n on a gaussian slice) are gathered and ranked.
__device__ void block_top_keys(const unsigned long long (&key)[kRawKeysPerThread], int n, unsigned long long* out,
                               TopKeysShared& s) {
  unsigned long long mx = 0ull;
#pragma unroll
  for (int k = 0; k < kRawKeysPerThread; ++k) mx = key[k] > mx ? key[k] : mx;
  s.thread_max[threadIdx.x] = mx;
  if (threadIdx.x == 0) s.count = 0;
  __syncthreads();
  if (threadIdx.x < 32) warp_top_keys(s.thread_max, kRawSliceThreads / 32, n, s.bound, n);
  __syncthreads();
  const unsigned long long bound = s.bound[n - 1];  // 0 when fewer than n threads hold a key
#pragma unroll
  for (int k = 0; k < kRawKeysPerThread; ++k)
    if (key[k] != 0ull && key[k] >= bound) s.cand[atomicAdd(&s.count, 1)] = key[k];
  __syncthreads();
  const int m = s.count;
  for (int i = threadIdx.x; i < m; i += blockDim.x) {
    const unsigned long long c = s.cand[i];
    int rank = 0;
    for (int j = 0; j < m && rank < n; ++j) rank += s.cand[j] > c ? 1 : 0;
    if (rank < n) out[rank] = c;
  }
  for (int i = m + static_cast<int>(threadIdx.x); i < n; i += blockDim.x) out[i] = 0ull;
}

template <bool kTopKeys>
__global__ void __launch_bounds__(kRawSliceThreads)
    raw_slice_stats_kernel(const float* __restrict__ raw, SampleParams p, RawSlice* __restrict__ slices,
                           unsigned long long* __restrict__ top_keys) {
  const int64_t b = blockIdx.y, V = p.vocab;
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * kRawSlice;
  const int count = static_cast<int>(lo + kRawSlice < V ? kRawSlice : V - lo);
  float x[kRawKeysPerThread];
  float mx;
  uint32_t inf, finite;
  load_raw_slice<kRawSliceThreads>(raw + b * V + lo, count, p.softcap, x, inf, finite, mx);
  mx = block_reduce(mx, Max(), -INFINITY);
  // both counts in one reduction: each at most kRawSlice
  const uint32_t counts = block_reduce((inf << 16) | finite, Sum(), 0u);
  inf = counts >> 16;
  finite = counts & 0xffffu;
  double z = 0.0;
  if (inf == 0 && mx != -INFINITY) {
#pragma unroll
    for (int k = 0; k < kRawKeysPerThread; ++k)
      if (x[k] > -INFINITY) z += static_cast<double>(expf(x[k] - mx));
  }
  z = block_reduce(z, Sum(), 0.0);
  const int64_t at_slice = b * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0) slices[at_slice] = RawSlice{mx, inf, finite, z};
  if constexpr (kTopKeys) {
    __shared__ TopKeysShared s;
    unsigned long long key[kRawKeysPerThread];
#pragma unroll
    for (int k = 0; k < kRawKeysPerThread; ++k) {
      const int at = static_cast<int>(threadIdx.x) + k * kRawSliceThreads;
      key[k] = x[k] > -INFINITY ? order_key(x[k], static_cast<uint32_t>(lo + at)) : 0ull;  // (NaN: none)
    }
    block_top_keys(key, p.top_logprobs, top_keys + at_slice * p.top_logprobs, s);
  }
}

// The row's top tokens from the row itself (topLogprobs above kSliceTopMax): the copy turned in
// place into the distribution's values, bucketed by distance to the max mx, the cut bucket ranked.
template <class LogProb>
__device__ void raw_top_from_row(const SampleParams& p, float* row, int64_t b, float mx, long long inf,
                                 LogProb logprob) {
  __shared__ uint32_t s_hist[kRawBuckets];
  __shared__ int s_cut;
  const int64_t V = p.vocab;
  const int n = p.top_logprobs;
  for (int i = threadIdx.x; i < kRawBuckets; i += blockDim.x) s_hist[i] = 0u;
  __syncthreads();  // (also: the drawn tokens' values are read before the row is rewritten)
  // +Inf mode: every +Inf value in bucket 0; else bucket (mx - x) * kRawBuckets / kRawSpan
  auto bucket = [=](float x) -> int {
    if (inf > 0) return x == INFINITY ? 0 : -1;
    const float d = (mx - x) * (kRawBuckets / kRawSpan);
    return x > -INFINITY && d < static_cast<float>(kRawBuckets) ? static_cast<int>(d) : -1;
  };
  long long valid = 0;
  scan_row(row, 0, V, [&](int64_t v, float raw_v) {
    if (v >= V) return;
    const float x = softcap_logit(raw_v, p.softcap);
    const bool kept = inf > 0 ? x == INFINITY : x > -INFINITY;
    row[v] = kept ? x : NAN;
    valid += kept ? 1 : 0;
    const int k = bucket(x);
    if (k >= 0) atomicAdd(&s_hist[k], 1u);
  });
  valid = block_reduce(valid, Sum(), 0ll);  // (its barriers order the rewrite and the histogram)
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    p.top_tokens[b * n + i] = -1;
    p.top_token_logprobs[b * n + i] = -INFINITY;
  }
  const int take = static_cast<int>(valid < n ? valid : n);
  if (take == 0) return;
  // the first bucket at which the count from the top reaches `take` (thread 0: a short scan)
  if (threadIdx.x == 0) {
    uint32_t above = 0;
    int cut = -1;
    for (int k = 0; k < kRawBuckets && cut < 0; ++k) {
      above += s_hist[k];
      if (above >= static_cast<uint32_t>(take)) cut = above <= kMaxTopLogprobs ? k : -2;
    }
    s_cut = cut;
  }
  __syncthreads();
  const Elems e{row, nullptr, V};
  if (s_cut < 0) {  // block-uniform: too few values near the max, or too many in the cut bucket
    const uint64_t threshold = radix_select_count(e, static_cast<uint32_t>(take));
    write_top_keys(p, e, b, [](float, uint64_t) { return true; }, take, threshold, logprob);
    return;
  }
  // the values of the buckets up to the cut one, ranked
  const int cut = s_cut;
  write_top_keys(p, e, b, [=](float x, uint64_t) { const int k = bucket(x); return k >= 0 && k <= cut; }, take, 0ull,
                 logprob);
}

// kSliceKeys: top_keys [B, R, n] holds each slice's n largest keys (n <= kSliceTopMax, R n <=
// kRawSlice), launched with kRawSliceThreads; otherwise the top tokens come from the row itself.
template <bool kSliceKeys>
__global__ void __launch_bounds__(kSliceKeys ? kRawSliceThreads : kRawThreads)
    raw_logprobs_kernel(float* raw, const RawSlice* slices, const unsigned long long* top_keys, SampleParams p) {
  __shared__ float s_mx;
  __shared__ long long s_inf, s_finite;
  __shared__ double s_z;
  detail::griddep_wait();  // launched programmatically after raw_slice_stats_kernel
  const int64_t b = blockIdx.x, V = p.vocab;
  const int S = p.num_samples;
  const int R = static_cast<int>(raw_slices(V));
  float* const row = raw + b * V;
  if (threadIdx.x < 32) {  // warp 0: the row's slices, in a fixed order (lane r, r + 32, ...; one tree)
    const RawSlice* const mine = slices + b * R;
    float m = -INFINITY;
    long long n_inf = 0, n_finite = 0;
    for (int r = static_cast<int>(threadIdx.x); r < R; r += 32) {
      m = fmaxf(m, mine[r].max);
      n_inf += mine[r].inf;
      n_finite += mine[r].finite;
    }
    double z = 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      n_inf += __shfl_xor_sync(0xffffffffu, n_inf, o);
      n_finite += __shfl_xor_sync(0xffffffffu, n_finite, o);
    }
    if (n_inf == 0 && m != -INFINITY)
      for (int r = static_cast<int>(threadIdx.x); r < R; r += 32)
        if (mine[r].max > -INFINITY) z += mine[r].z * exp(static_cast<double>(mine[r].max) - static_cast<double>(m));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
    if (threadIdx.x == 0) {
      s_mx = m;
      s_inf = n_inf;
      s_finite = n_finite;
      s_z = z;
    }
  }
  __syncthreads();
  const float mx = s_mx;
  const long long inf = s_inf;
  const double lse = static_cast<double>(mx) + log(s_z);
  auto logprob = [=](float x) -> float {
    if (inf > 0) return x == INFINITY ? static_cast<float>(-log(static_cast<double>(inf))) : -INFINITY;
    return x > -INFINITY ? static_cast<float>(static_cast<double>(x) - lse) : -INFINITY;
  };
  if (p.logprobs)
    for (int j = threadIdx.x; j < S; j += blockDim.x) {
      const int32_t t = p.tokens[b * S + j];
      if (t >= 0) p.logprobs[b * S + j] = logprob(softcap_logit(row[t], p.softcap));
    }
  const int n = p.top_logprobs;
  if (n <= 0) return;
  if constexpr (kSliceKeys) {  // the row's n largest of its slices' keys
    __shared__ TopKeysShared s;
    __shared__ unsigned long long s_top[kSliceTopMax];
    const long long valid = inf > 0 ? inf : s_finite;  // +Inf keys are the largest: the first `inf`
    const int take = static_cast<int>(valid < n ? valid : n);
    unsigned long long key[kRawKeysPerThread];
#pragma unroll
    for (int k = 0; k < kRawKeysPerThread; ++k) {
      const int at = static_cast<int>(threadIdx.x) + k * kRawSliceThreads;
      key[k] = at < R * n ? top_keys[b * R * n + at] : 0ull;
    }
    block_top_keys(key, n, s_top, s);
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      p.top_tokens[b * n + i] = i < take ? static_cast<int32_t>(key_index(s_top[i])) : -1;
      p.top_token_logprobs[b * n + i] = i < take ? logprob(key_value(s_top[i])) : -INFINITY;
    }
  } else {
    raw_top_from_row(p, row, b, mx, inf, logprob);
  }
}

cudaError_t launch_raw_logprobs(const SampleParams& p, float* raw, Scratch& scratch, cudaStream_t stream) {
  const RawLayout l = raw_layout(p);
  uint8_t* ws = nullptr;
  cudaError_t err = scratch.take(l.bytes, &ws);
  if (err != cudaSuccess) return err;
  RawSlice* const slices = reinterpret_cast<RawSlice*>(ws + l.stats);
  unsigned long long* const keys = raw_top_from_slices(p) ? reinterpret_cast<unsigned long long*>(ws + l.keys) : nullptr;
  const dim3 grid(static_cast<unsigned>(raw_slices(p.vocab)), static_cast<unsigned>(p.batch));
  if (keys != nullptr) raw_slice_stats_kernel<true><<<grid, kRawSliceThreads, 0, stream>>>(raw, p, slices, keys);
  else raw_slice_stats_kernel<false><<<grid, kRawSliceThreads, 0, stream>>>(raw, p, slices, nullptr);
  err = cudaGetLastError();
  // a row's block merges its slices, reads its drawn tokens' values and ranks its top tokens
  const bool programmatic = detail::programmatic_launch_supported();
  const dim3 rows(static_cast<unsigned>(p.batch));
  if (err == cudaSuccess && keys != nullptr)
    err = detail::launch_kernel(raw_logprobs_kernel<true>, rows, dim3(kRawSliceThreads), 0, stream, programmatic, raw,
                                static_cast<const RawSlice*>(slices), static_cast<const unsigned long long*>(keys), p);
  else if (err == cudaSuccess)  // without top tokens a row only merges its slices and reads its drawn tokens
    err = detail::launch_kernel(raw_logprobs_kernel<false>, rows, dim3(p.top_logprobs > 0 ? kRawThreads : 32), 0, stream,
                                programmatic, raw, static_cast<const RawSlice*>(slices),
                                static_cast<const unsigned long long*>(nullptr), p);
  const cudaError_t freed = scratch.give_back(ws);
  return err != cudaSuccess ? err : freed;
}

// logprobsMode 'raw' on the one-pass path (raw_tiles_path): the epilogue writes each (row, tile)'s
// raw statistics (detail::RawTileStats). One block a row merges them in tile order (each sum
// rescaled in float64 to the row's max: the same bits whatever B), and recomputes each drawn token's
// raw logit as a float64 dot product over the block, rounded to fp32 before the bias as the GEMM's
// value is (the two differ by the GEMM's fp32 accumulation only). topLogprobs n come from the rows
// the epilogue stored, read only in the n tiles that can hold them (raw_top_from_tiles).
constexpr int kRawTileThreads = kRawSliceThreads;
bool raw_tiles_path(const SampleParams& p) {
  return reports_raw_logprobs(p) &&
         (p.top_logprobs == 0 || (p.top_logprobs <= kSliceTopMax && (p.vocab + 127) / 128 <= kRawSlice));
}

// The row's raw +Inf and finite counts and log-sum-exp, from its tile statistics.
struct RawRow {
  long long inf, finite;
  double lse;
};
__device__ RawRow raw_row_from_tiles(const detail::RawTileStats* row, int64_t num_vtiles) {
  const RowSummary sum = block_summary(row, num_vtiles, 1.0);
  return RawRow{sum.posinf, sum.valid - sum.posinf, static_cast<double>(sum.m) + log(sum.z)};
}

// A raw softcapped value's log-probability in its row (SEMANTICS §4).
__device__ float raw_logprob(const RawRow& r, float x) {
  if (r.inf > 0) return x == INFINITY ? static_cast<float>(-log(static_cast<double>(r.inf))) : -INFINITY;
  return x > -INFINITY && x < INFINITY ? static_cast<float>(fmin(static_cast<double>(x) - r.lse, 0.0)) : -INFINITY;
}

template <typename T>
__device__ double raw_dot(const SampleParams& p, int64_t b, int64_t t) {
  const T* const h = static_cast<const T*>(p.hidden) + b * p.dim;
  const T* const w = static_cast<const T*>(p.weight) + t * p.dim;
  double acc = 0.0;
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const bool vec = p.dim % kVec == 0 && ((reinterpret_cast<uintptr_t>(h) | reinterpret_cast<uintptr_t>(w)) & 15u) == 0;
  if (vec) {  // block-uniform: 16-byte loads
    for (int64_t d = static_cast<int64_t>(threadIdx.x) * kVec; d < p.dim; d += static_cast<int64_t>(blockDim.x) * kVec) {
      const uint4 hv = *reinterpret_cast<const uint4*>(h + d);
      const uint4 wv = *reinterpret_cast<const uint4*>(w + d);
      const T* const hs = reinterpret_cast<const T*>(&hv);
      const T* const ws = reinterpret_cast<const T*>(&wv);
#pragma unroll
      for (int k = 0; k < kVec; ++k)
        acc = fma(static_cast<double>(detail::to_float(hs[k])), static_cast<double>(detail::to_float(ws[k])), acc);
    }
  } else {
    for (int64_t d = threadIdx.x; d < p.dim; d += blockDim.x)
      acc = fma(static_cast<double>(detail::to_float(h[d])), static_cast<double>(detail::to_float(w[d])), acc);
  }
  return block_reduce(acc, Sum(), 0.0);
}

// The raw topLogprobs n (<= kSliceTopMax, ceil(V / 128) <= kRawSlice tiles) of row b from the
// stored raw rows. The n tiles of largest max (ties: lower tile first) hold the row's n largest
// values: the n-th largest tile max bounds the row's n-th largest value from below, so a value at or
// above that lies in a tile whose max is too, and ties at it take the lower tiles as the values'
// ties take the lower indices. With +Inf values, the first n tiles that hold any hold the first n
// of them.
__device__ void raw_top_from_tiles(const float* rows, const detail::RawTileStats* row_tiles, int64_t num_vtiles,
                                   const RawRow& r, const SampleParams& p, int64_t b) {
  __shared__ TopKeysShared s;
  __shared__ unsigned long long s_tiles[kSliceTopMax], s_top[kSliceTopMax];
  const int64_t V = p.vocab;
  const int n = p.top_logprobs;
  unsigned long long key[kRawKeysPerThread];
#pragma unroll
  for (int k = 0; k < kRawKeysPerThread; ++k) {
    const int64_t i = static_cast<int64_t>(threadIdx.x) + k * kRawTileThreads;
    key[k] = 0ull;
    if (i < num_vtiles) {
      const detail::RawTileStats t = row_tiles[i];
      if (r.inf > 0) key[k] = t.posinf > 0 ? order_key(1.0f, static_cast<uint32_t>(i)) : 0ull;
      else key[k] = t.max_logit > -INFINITY ? order_key(t.max_logit, static_cast<uint32_t>(i)) : 0ull;
    }
  }
  block_top_keys(key, n, s_tiles, s);
  __syncthreads();
  // the chosen tiles' values, 128 a tile: slot `at` is value at % 128 of chosen tile at / 128
  const float* const row = rows + b * V;
#pragma unroll
  for (int k = 0; k < kRawKeysPerThread; ++k) {
    const int at = static_cast<int>(threadIdx.x) + k * kRawTileThreads;
    const int c = at / 128;
    key[k] = 0ull;
    if (c < n && s_tiles[c] != 0ull) {
      const int64_t v = static_cast<int64_t>(key_index(s_tiles[c])) * 128 + at % 128;
      if (v < V) {
        const float x = softcap_logit(row[v], p.softcap);
        const bool kept = r.inf > 0 ? x == INFINITY : x > -INFINITY && x < INFINITY;  // (NaN: neither)
        key[k] = kept ? order_key(x, static_cast<uint32_t>(v)) : 0ull;
      }
    }
  }
  __syncthreads();  // (s is reused)
  block_top_keys(key, n, s_top, s);
  __syncthreads();
  const long long valid = r.inf > 0 ? r.inf : r.finite;
  const int take = static_cast<int>(valid < n ? valid : n);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    p.top_tokens[b * n + i] = i < take ? static_cast<int32_t>(key_index(s_top[i])) : -1;
    p.top_token_logprobs[b * n + i] = i < take ? raw_logprob(r, key_value(s_top[i])) : -INFINITY;
  }
}

// One block a row: its raw statistics, then with kTop its topLogprobs from `rows`
// (raw_top_from_tiles: its 36 KB of shared memory only there), with `drawn` its drawn tokens'
// logprobs (after the draw and the extra pass).
template <typename T, bool kTop>
__global__ void __launch_bounds__(kRawTileThreads)
    raw_from_tiles_kernel(const float* __restrict__ rows, const detail::RawTileStats* __restrict__ tiles,
                          int64_t num_vtiles, SampleParams p, bool drawn) {
  const int64_t b = blockIdx.x;
  const detail::RawTileStats* const row_tiles = tiles + b * num_vtiles;
  const RawRow r = raw_row_from_tiles(row_tiles, num_vtiles);
  if constexpr (kTop) raw_top_from_tiles(rows, row_tiles, num_vtiles, r, p, b);
  if (!drawn) return;
  const int S = p.num_samples;
  for (int j = 0; j < S; ++j) {
    const int32_t t = p.tokens[b * S + j];
    if (t < 0) {  // block-uniform: no token
      if (threadIdx.x == 0) p.logprobs[b * S + j] = -INFINITY;
      continue;
    }
    float x = static_cast<float>(raw_dot<T>(p, b, t));
    if (p.bias != nullptr) x += detail::to_float(static_cast<const T*>(p.bias)[t]);
    // (a recomputed max may sit a rounding above the row's: the logprob is clamped at 0)
    if (threadIdx.x == 0) p.logprobs[b * S + j] = raw_logprob(r, softcap_logit(x, p.softcap));
  }
}

// What the one-pass path's processed machinery runs in raw_tiles_path: no logprobs and no top
// tokens (the raw kernels write those), so rows without a filter need no summaries or candidates.
SampleParams without_processed_logprobs(const SampleParams& p) {
  SampleParams q = p;
  if (!raw_tiles_path(p)) return q;
  q.logprobs = nullptr;
  q.top_logprobs = 0;
  q.top_tokens = nullptr;
  q.top_token_logprobs = nullptr;
  q.raw_logprobs = 0;
  return q;
}

// raw_from_tiles_kernel over the batch: top tokens from `rows` (nullptr: none), drawn tokens'
// logprobs where `drawn`.
cudaError_t launch_raw_from_tiles(const SampleParams& p, const float* rows, const detail::RawTileStats* tiles,
                                  bool drawn, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.batch));
  const int64_t num_vtiles = (p.vocab + 127) / 128;
  const bool top = rows != nullptr;
  if (p.dtype == DType::kF32) return cudaErrorInvalidValue;  // (the one-pass GEMM takes f16 and bf16 only)
  auto kernel = p.dtype == DType::kF16 ? (top ? raw_from_tiles_kernel<__half, true> : raw_from_tiles_kernel<__half, false>)
                                       : (top ? raw_from_tiles_kernel<__nv_bfloat16, true>
                                              : raw_from_tiles_kernel<__nv_bfloat16, false>);
  kernel<<<grid, kRawTileThreads, 0, stream>>>(rows, tiles, num_vtiles, p, drawn);
  return cudaGetLastError();
}

// A [B, V] fp32 logits region of the workspace: the extra pass's rows, or raw mode's copy.
size_t row_logits_bytes(const SampleParams& p) {
  RegionLayout layout;
  layout.take(static_cast<size_t>(p.batch) * static_cast<size_t>(p.vocab) * sizeof(float));
  return layout.bytes;
}

size_t raw_logits_bytes(const SampleParams& p) { return reports_raw_logprobs(p) ? row_logits_bytes(p) : 0; }

// ---- materialized rows (reference, fallback) ---------------------------------------------------
// In place: raw logits (bias included) -> candidate values (softcap, mask, NaN for excluded).
__global__ void __launch_bounds__(kThreads)
    whole_rows_kernel(float* logits, SampleParams p, const int32_t* only_rows, const int32_t* any,
                      bool inverse_cdf) {
  // `any`, the extra pass's flagged count, is final before that pass's later grids start (the
  // logits kernel lets them start after its wait): no wait for a call with no flagged row.
  if (any != nullptr && __ldcg(any) == 0) return;
  detail::griddep_wait();  // launched programmatically by the extra pass: its writes are visible
  const int64_t b = blockIdx.x;
  if (only_rows != nullptr && only_rows[b] == 0) return;
  const int64_t V = p.vocab;
  float* row = logits + b * V;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) row[v] = candidate_value(p, b, v, row[v]);
  __syncthreads();
  const Elems e{row, nullptr, V};
  decide_row(p, e, load_control(p, b), nullptr, nullptr, inverse_cdf);
}

// The rows pass's decision, its first step: blocks (x, i) copy row value_rows[i] from the shards'
// segments (p.row_values) to its place in `rows` ([B, V], global order) and flag it 2 (stored
// wholly) for the extra pass, which decides it as it decides the unsharded call's flagged rows.
// Segments that are not one round's (row_values_segments_ok) leave the row unflagged, undecided.
// With `live`, only the first *live rows of value_rows are assembled.
__global__ void assemble_row_values_kernel(float* rows, SampleParams p, int32_t* flags, int32_t* flagged,
                                           const int32_t* live) {
  const int64_t i = blockIdx.y;
  if (live != nullptr && i >= *live) return;
  const int64_t b = p.value_rows[i], V = p.vocab;
  const bool raw = reports_raw_logprobs(p);  // (the segments' rows of raw logits follow their values)
  __shared__ bool s_ok;
  if (threadIdx.x == 0)
    s_ok = row_values_segments_ok(p.row_values, p.value_row_count, p.value_pitch, p.value_segments, V, raw);
  __syncthreads();
  const bool leader = blockIdx.x == 0 && threadIdx.x == 0;
  if (!s_ok) {
    if (leader && p.row_status != nullptr) p.row_status[b] = kRowUndecided;
    return;
  }
  if (leader) {
    flags[b] = 2;
    atomicAdd(flagged, 1);
  }
  float* row = rows + b * V;
  for (int32_t r = 0; r < p.value_segments; ++r) {
    const RowValuesHeader* h = row_values_segment(p.row_values, p.value_row_count, p.value_pitch, r, raw);
    const float* src = reinterpret_cast<const float*>(h + 1) + i * p.value_pitch;
    for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < h->vocab_size;
         v += static_cast<int64_t>(gridDim.x) * blockDim.x)
      row[h->vocab_offset + v] = src[v];
  }
}

// Logits of the rows flagged in `rows` only (the fallback of the fused pass): one warp per
// vocabulary entry, plain fp32 dot products. Slow by design and rare by construction.
template <typename T>
__global__ void flagged_rows_logits_kernel(SampleParams p, const int32_t* rows, const int32_t* any,
                                           float* logits) {
  if (*any == 0) return;
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  const T* W = static_cast<const T*>(p.weight);
  const T* H = static_cast<const T*>(p.hidden);
  const T* bias = static_cast<const T*>(p.bias);
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); v < p.vocab;
       v += warps) {
    for (int64_t b = 0; b < p.batch; ++b) {
      if (rows[b] == 0) continue;
      float acc = 0.0f;
      for (int64_t d = lane; d < p.dim; d += 32)
        acc = fmaf(detail::to_float(H[b * p.dim + d]), detail::to_float(W[v * p.dim + d]), acc);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (lane == 0) logits[b * p.vocab + v] = acc + (bias ? detail::to_float(bias[v]) : 0.0f);
    }
  }
}

// ---- the fused pass ------------------------------------------------------------------------------------
struct FusedState {
  RowStats* stats;        // [B]
  float* cand_val;        // [B, kCandidateCap]
  uint32_t* cand_idx;     // [B, kCandidateCap]
  float* win_score;       // [B, S]
  uint32_t* win_key;      // [B, S]
  float* win_logit;       // [B, S]
  int32_t* fallback;      // [B]
};

__global__ void init_state_kernel(FusedState st, int64_t B, int S) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < B) {
    RowStats s;
    s.max_logit = -INFINITY;
    s.overflow = 0;
    s.z = 0.0;
    s.valid = 0;
    s.posinf = 0;
    s.count = 0;
    s.pad = 0;
    s.floor_key = 0ull;
    st.stats[i] = s;
    st.fallback[i] = 0;
  }
  if (i < B * S) {
    st.win_score[i] = -INFINITY;
    st.win_key[i] = kNoToken;
    st.win_logit[i] = 0.0f;
  }
}

// One block per row: folds the chunk's logits [v0, v0 + count) into the row's state. Every value
// goes into the row's statistics and running winners; only values whose order key reaches the
// row's floor key enter the candidate buffer, and the buffer is cut back to the kCandidateCap
// largest (radix selection) only when it would overflow and at the end of the chunk. Exact: the
// kept set is the top kCandidateCap by order key of everything seen (a value below the floor has
// kCandidateCap candidates above it), whatever the order of the cuts.
__global__ void __launch_bounds__(kThreads)
    fold_chunk_kernel(const float* chunk_logits, int64_t v0, int64_t count, SampleParams p,
                      FusedState st) {
  constexpr int kBuffer = kCandidateCap + kSubChunk;
  __shared__ float s_val[kBuffer];
  __shared__ uint32_t s_idx[kBuffer];
  __shared__ int s_n, s_w;
  const int64_t b = blockIdx.x;
  const RowControl c = load_control(p, b);
  // The running winners serve every row that ends up keeping all its candidates: rows without
  // filters, but also rows whose filters turn out to be void (top-k >= the row's candidates, or
  // +Inf logits present), which only the whole-row statistics decide. So every row keeps them.
  const float T = c.temperature;
  const bool greedy = T == 0.0f;
  const float inv_t = greedy ? 0.0f : 1.0f / T;
  RowStats stats = st.stats[b];  // every thread reads; thread 0 writes back
  const float* row = chunk_logits + b * count;
  auto value_at = [&](int64_t i) {  // i: position in the chunk
    const int64_t v = v0 + i;
    return candidate_value(p, b, v, row[i]);
  };

  for (int i = threadIdx.x; i < stats.count; i += blockDim.x) {
    s_val[i] = st.cand_val[b * kCandidateCap + i];
    s_idx[i] = st.cand_idx[b * kCandidateCap + i];
  }
  if (threadIdx.x == 0) s_n = stats.count;
  __syncthreads();

  // Cuts the buffer back to its kCandidateCap largest keys and raises the floor (in place: each
  // thread first takes its survivors into registers, then they are written to the front).
  auto cut = [&]() {
    const int n = s_n;
    if (n <= kCandidateCap) return;
    const uint64_t threshold = radix_select_count(Elems{s_val, s_idx, n}, kCandidateCap);
    // Exactly kCandidateCap keys are >= threshold (keys are distinct); order in the buffer does
    // not matter.
    if (threadIdx.x == 0) s_w = 0;
    __syncthreads();
    float keep_v[kBuffer / kThreads];
    uint32_t keep_i[kBuffer / kThreads];
    int kept_here = 0;
#pragma unroll
    for (int r = 0; r < kBuffer / kThreads; ++r) {
      const int i = r * kThreads + threadIdx.x;
      if (i < n && order_key(s_val[i], s_idx[i]) >= threshold) {
        keep_v[kept_here] = s_val[i];
        keep_i[kept_here] = s_idx[i];
        ++kept_here;
      }
    }
    __syncthreads();
    const int at = atomicAdd(&s_w, kept_here);
    for (int r = 0; r < kept_here; ++r) {
      s_val[at + r] = keep_v[r];
      s_idx[at + r] = keep_i[r];
    }
    __syncthreads();
    if (threadIdx.x == 0) s_n = kCandidateCap;
    if (threshold > stats.floor_key) stats.floor_key = threshold;
    __syncthreads();
  };

  for (int64_t sub = 0; sub < count; sub += kSubChunk) {
    const int64_t n_sub = count - sub < kSubChunk ? count - sub : kSubChunk;
    // The buffer's fill, read here: the last writes to s_n (the previous pass 2's appends, or a
    // cut) are behind a barrier, and the next (this pass 2's appends) behind the block_reduce
    // barriers below. Read after those barriers instead, a warp that fell behind could see the
    // other warps' appends, take the cut alone and meet their barriers at other call sites (found
    // by compute-sanitizer racecheck, 2026-11-30: hazards in block_best and wrong draws).
    const int buffered = s_n;
    // Pass 1: statistics and how many values reach the floor.
    float local_max = -INFINITY;
    long long local_valid = 0, local_inf = 0;
    int local_up = 0;
    for (int64_t i = threadIdx.x; i < n_sub; i += blockDim.x) {
      const float l = value_at(sub + i);
      if (l != l) continue;
      ++local_valid;
      if (l == INFINITY) ++local_inf;
      else local_max = fmaxf(local_max, l);
      if (order_key(l, static_cast<uint32_t>(v0 + sub + i)) >= stats.floor_key) ++local_up;
    }
    const float sub_max = block_reduce(local_max, Max(), -INFINITY);
    const long long sub_valid = block_reduce(local_valid, Sum(), 0ll);
    const long long sub_inf = block_reduce(local_inf, Sum(), 0ll);
    const int sub_up = block_reduce(local_up, Sum(), 0);
    if (buffered + sub_up > kBuffer) cut();  // CTA-uniform; after it s_n = kCandidateCap

    // Pass 2: the log-sum-exp terms (float64), the buffer appends, then the Gumbel draws.
    const float new_max = fmaxf(stats.max_logit, sub_max);
    double local_z = 0.0;
    for (int64_t i = threadIdx.x; i < n_sub; i += blockDim.x) {
      const float l = value_at(sub + i);
      if (l != l) continue;
      const uint32_t v = static_cast<uint32_t>(v0 + sub + i);
      if (!greedy && l != INFINITY && new_max != -INFINITY)
        local_z += exp((static_cast<double>(l) - new_max) / static_cast<double>(T));
      if (order_key(l, v) >= stats.floor_key) {
        const int at = atomicAdd(&s_n, 1);
        s_val[at] = l;
        s_idx[at] = v;
      }
    }
    const double sub_z = block_reduce(local_z, Sum(), 0.0);
    if (!greedy && new_max != -INFINITY) {
      const double rescale = stats.max_logit == -INFINITY
                                 ? 0.0
                                 : exp((static_cast<double>(stats.max_logit) - new_max) / static_cast<double>(T));
      stats.z = stats.z * rescale + sub_z;
    }
    stats.max_logit = new_max;
    stats.valid += sub_valid;
    stats.posinf += sub_inf;

    for (int j = 0; j < p.num_samples; ++j) {
      Pick best{-INFINITY, kNoToken, 0.0f};
      for (int64_t i = threadIdx.x; i < n_sub; i += blockDim.x) {
        const float l = value_at(sub + i);
        if (l != l) continue;
        const uint32_t v = static_cast<uint32_t>(v0 + sub + i);
        const float g = greedy ? 0.0f : gumbel_noise(c.seed, c.offset, c.stream, static_cast<uint32_t>(j), v);
        const Candidate cand = make_candidate(l, inv_t, greedy, g, v);
        if (candidate_better(cand.score, cand.key, best.score, best.key)) best = {cand.score, cand.key, l};
      }
      best = block_best(best);
      if (threadIdx.x == 0) {
        const int64_t w = b * p.num_samples + j;
        if (candidate_better(best.score, best.key, st.win_score[w], st.win_key[w])) {
          st.win_score[w] = best.score;
          st.win_key[w] = best.key;
          st.win_logit[w] = best.logit;
        }
      }
    }
    __syncthreads();
  }
  cut();
  const int kept = s_n;
  for (int i = threadIdx.x; i < kept; i += blockDim.x) {
    st.cand_val[b * kCandidateCap + i] = s_val[i];
    st.cand_idx[b * kCandidateCap + i] = s_idx[i];
  }
  if (threadIdx.x == 0) {
    stats.count = kept;
    stats.overflow = stats.valid > kCandidateCap ? 1 : 0;
    st.stats[b] = stats;
  }
}

__global__ void __launch_bounds__(kThreads)
    decide_candidates_kernel(SampleParams p, FusedState st) {
  const int64_t b = blockIdx.x;
  const RowStats stats = st.stats[b];
  const Elems e{st.cand_val + b * kCandidateCap, st.cand_idx + b * kCandidateCap, stats.count};
  const RowWinners winners{st.win_score + b * p.num_samples, st.win_key + b * p.num_samples,
                           st.win_logit + b * p.num_samples};
  if (!decide_row(p, e, load_control(p, b), &stats, &winners, false)) {
    if (threadIdx.x == 0) {
      st.fallback[b] = 1;
      atomicAdd(p.fallback_rows, 1);
    }
  }
}

// ---- the one-pass path: decide each row from the filtered epilogue's summaries and candidates ----
constexpr int kOnePassCap = 32768;  // candidates per row: the first wave's appends (132 CTAs x k for
                                    // a top-k, up to half a tile for a flat top-p row) and the
                                    // streaming ones after the histogram bound takes over
// Three quarters of them are split into a slice per CTA that serves the row (184 on 132 SMs for
// B <= 128, 372 for two chunks: a top-k's first tile of 128 and what follows, a top-p row's ~70 a
// chunk); the rest, from kSpillAt, is the spill, for the CTAs whose slice overflows (a flat min-p
// row: 200-270 appends a CTA, ~27 K in all, CPU model of θ).
constexpr int kSpillAt = kOnePassCap / 4 * 3;

// Moves the candidates (in the slices' read order) at or above `level` and above `dropped`
// (ordered bits) to the front of the row's buffer, in chunks of one value per thread (every chunk
// read before any of it is overwritten); returns how many there are.
__device__ int64_t compact_prefix(float* val, uint32_t* idx, const CandidateSlices& cs, float level,
                                  uint32_t dropped) {
  const int64_t n = cs.n;
  __shared__ int s_warp[kThreads / 32];
  __shared__ int64_t s_base;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) s_base = 0;
  __syncthreads();
  for (int64_t start = 0; start < n; start += blockDim.x) {
    const int64_t i = start + threadIdx.x;
    float x = 0.0f;
    uint32_t v = 0;
    bool keep = false;
    if (i < n) {  // (read at or after where it is written: the front of the row's buffer)
      const int c = slice_of(cs, i, 0);
      const int64_t at = slice_at(cs, c) + (i - static_cast<int64_t>(cs.start[c] & 0xffffffffu));
      x = val[at];
      v = idx[at];
      keep = x >= level && detail::ordered_bits(x) > dropped;
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, keep);
    if (lane == 0) s_warp[warp] = __popc(ballot);
    __syncthreads();  // every read of this chunk is done; s_warp complete
    int before = 0;
    for (int w = 0; w < warp; ++w) before += s_warp[w];
    const int64_t at = s_base + before + __popc(ballot & ((1u << lane) - 1u));
    if (keep) {
      val[at] = x;
      idx[at] = v;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int total = 0;
      for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) total += s_warp[w];
      s_base += total;
    }
    __syncthreads();
  }
  return s_base;
}

// ---- the one-pass decision in shared memory ------------------------------------------------------
// The complete prefix goes into shared memory as order keys; a histogram of it over value buckets
// (counts and fixed-point masses, integer atomics: exact and independent of the schedule) finds the
// bucket where top-k, top-p or topLogprobs cut, and only that bucket's elements are ranked. A row
// whose prefix or cut bucket does not fit takes the generic path (compact_prefix + decide_row).
constexpr int kPrefixCap = 16384;  // prefix keys held (128 KB): a top-p row's θ stalls where tiles
                                   // stop appending > 16 values, ~3x rank 2048 on Gaussian rows
constexpr int kCutBuckets = 2048;  // value buckets spread over [prefix min, row max]
constexpr int kCutCap = 1024;      // elements of one cut bucket (or topLogprobs' head) ranked
constexpr double kMassScale = 0x1p42;  // fixed-point weight unit: weights <= 1 and fewer than 2^21
                                       // elements keep every sum below 2^63

static_assert(kThreads * 4 == kCutBuckets, "decide_prefix scans 4 buckets a thread");

struct PrefixShared {
  uint64_t key[kPrefixCap];
  uint32_t count[kCutBuckets];            // per bucket, then inclusive from the top bucket
  unsigned long long mass[kCutBuckets];   // the same for the fixed-point masses
  uint64_t cut_key[kCutCap];              // one bucket's keys, then sorted descending
  unsigned long long cut_mass[kCutCap];   // their masses in sorted order, then inclusive
  int n;
  int cut_n;
  int bucket;
  unsigned long long found;
  Pick drawn;     // warp 0's draw over a few kept keys, and their mass
  double drawn_z;
};


struct PrefixRow {
  int n;          // prefix keys in s.key
  float m;        // the row's max
  double z;       // the row's sum of exp((l - m) / T) (tile summaries)
  long long valid;
  bool incomplete;  // valid values below the prefix exist
  float lo;       // the prefix's smallest value
  float level;    // every valid value outside the prefix is <= level
  int32_t winner_token;
  float winner_logit;
};

enum PrefixDecision { kDecided = 0, kNeedsExtraPass = 1, kGenericPath = 2 };

// The value bucket of l: (m - l) scaled so that [lo, m] spans the buckets (monotone in l: equal
// values share a bucket and a larger value never lands in a later one).
struct CutBuckets {
  float m, scale;
  __device__ int of(float l) const {
    const float t = (m - l) * scale;
    return t < static_cast<float>(kCutBuckets - 1) ? static_cast<int>(t) : kCutBuckets - 1;
  }
};

// The bucket where the inclusive counts (or masses) first reach `target` (kCutBuckets: never).
template <typename T>
__device__ int first_bucket_reaching(const T* incl, double target, int last) {
  __shared__ int s_at;
  __syncthreads();  // every thread has read the previous call's s_at
  if (threadIdx.x == 0) s_at = kCutBuckets;
  __syncthreads();
  for (int i = threadIdx.x; i <= last; i += blockDim.x) {
    const bool here = static_cast<double>(incl[i]) >= target;
    const bool before = i > 0 && static_cast<double>(incl[i - 1]) >= target;
    if (here && !before) s_at = i;
  }
  __syncthreads();
  return s_at;
}

// A token's fixed-point mass, exp((l - m) / T) in units of 2^-42 (c2 = detail::exp2_scale(1 / T)).
__device__ __forceinline__ unsigned long long fixed_mass(float l, float m, float c2) {
  return detail::fixed_weight(l, m, c2, static_cast<float>(kMassScale));
}

// Gathers the keys of buckets [first, last] that are >= floor_key into s.cut_key, sorted descending
// (ranks by counting), with their fixed-point masses, inclusive, in s.cut_mass when `masses`.
// False when they do not fit.
__device__ bool gather_sorted(PrefixShared& s, const CutBuckets& cb, int first, int last, uint64_t floor_key,
                              bool masses, float c2) {
  __syncthreads();  // every thread is done with the previous gather
  if (threadIdx.x == 0) s.cut_n = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < s.n; i += blockDim.x) {
    const uint64_t key = s.key[i];
    const int bk = cb.of(key_value(key));
    if (bk >= first && bk <= last && key >= floor_key) {
      const int at = atomicAdd(&s.cut_n, 1);
      if (at < kCutCap) s.cut_mass[at] = key;  // staged here, ranked into cut_key below
    }
  }
  __syncthreads();
  const int c = s.cut_n;
  if (c > kCutCap) return false;
  for (int i = threadIdx.x; i < c; i += blockDim.x) {
    const uint64_t key = s.cut_mass[i];
    int rank = 0;
    for (int j = 0; j < c; ++j) rank += s.cut_mass[j] > key ? 1 : 0;
    s.cut_key[rank] = key;
  }
  __syncthreads();
  if (masses) {
    // inclusive scan of the sorted masses, kCutCap / kThreads per thread (a compile-time count keeps
    // mine[] in registers)
    constexpr int per = (kCutCap + kThreads - 1) / kThreads;
    unsigned long long mine[per];
    unsigned long long sum = 0;
#pragma unroll
    for (int o = 0; o < per; ++o) {
      const int i = threadIdx.x * per + o;
      mine[o] = i < c ? fixed_mass(key_value(s.cut_key[i]), cb.m, c2) : 0ull;
      sum += mine[o];
    }
    unsigned long long total;
    unsigned long long run = block_exclusive_scan(sum, total);
#pragma unroll
    for (int o = 0; o < per; ++o) {
      const int i = threadIdx.x * per + o;
      run += mine[o];
      if (i < c) s.cut_mass[i] = run;
    }
    __syncthreads();
  }
  return true;
}

// Offers a kept key to sample j's draw: its Gumbel candidate (noise stream j) raised into best.
__device__ __forceinline__ void offer_to_draw(const RowControl& c, uint64_t key, float inv_tf, uint32_t sample,
                                              Pick& best) {
  const float l = key_value(key);
  const uint32_t v = key_index(key);
  raise_pick(best, l, inv_tf, gumbel_noise(c.seed, c.offset, c.stream, sample, v), v);
}

// offer_to_draw for sample 0, its two logarithms only for a key whose bound from the Philox bits
// (detail::gumbel_upper) reaches best: a key below it scores strictly less, so cannot win or tie.
__device__ __forceinline__ void offer_to_draw_pruned(const RowControl& c, uint64_t key, float inv_tf, Pick& best) {
  const float l = key_value(key);
  const uint32_t v = key_index(key);
  const uint32_t x = noise_word(noise_block(c.seed, c.offset, c.stream, 0u, v >> 2), v & 3u);
  if (!(fmaf(l, inv_tf, detail::gumbel_upper(x)) >= best.score)) return;
  raise_pick(best, l, inv_tf, gumbel_from_bits(x), v);
}

// Adds a kept key of weight w (exp((l - m) / T)) to sample 0's draw: w to the kept mass zk, its
// candidate to best.
__device__ __forceinline__ void add_to_draw(const RowControl& c, uint64_t key, double w, float inv_tf, Pick& best,
                                            double& zk) {
  zk += w;
  offer_to_draw(c, key, inv_tf, 0u, best);
}

// Writes sample j of row c.b: its token, and its logprob against the kept set's log-mass log_z.
__device__ __forceinline__ void write_sample(const SampleParams& p, const RowControl& c, int j, const Pick& best,
                                             double md, double inv_t, double log_z) {
  const int64_t at = c.b * p.num_samples + j;
  p.tokens[at] = best.key == kNoToken ? -1 : static_cast<int32_t>(best.key & 0x7fffffffu);
  if (p.logprobs) p.logprobs[at] = static_cast<float>((static_cast<double>(best.logit) - md) * inv_t - log_z);
}

// Samples 1 .. S-1 of a row whose kept keys are key[0, n) in shared memory (sample 0 is drawn with
// the kept mass): each is the Gumbel argmax of the same keys under its own noise stream. Few keys:
// a warp a sample, its lanes striding the keys (a block's reductions would cost more than the
// keys' Philox); many: the block a sample.
constexpr int kWarpDrawKeys = 256;
__device__ void draw_more_samples(const SampleParams& p, const RowControl& c, const uint64_t* key, int n, double md,
                                  double inv_t, double log_z) {
  const int S = p.num_samples;
  const float inv_tf = 1.0f / c.temperature;
  if (n <= kWarpDrawKeys) {
    const int lane = threadIdx.x & 31, warps = static_cast<int>(blockDim.x >> 5);
    for (int j = 1 + static_cast<int>(threadIdx.x >> 5); j < S; j += warps) {  // warp-uniform
      Pick best{-INFINITY, kNoToken, 0.0f};
      for (int i = lane; i < n; i += 32) offer_to_draw(c, key[i], inv_tf, static_cast<uint32_t>(j), best);
      best = warp_best(best);
      if (lane == 0) write_sample(p, c, j, best, md, inv_t, log_z);
    }
    return;
  }
  for (int j = 1; j < S; ++j) {
    Pick best{-INFINITY, kNoToken, 0.0f};
    for (int i = threadIdx.x; i < n; i += blockDim.x) offer_to_draw(c, key[i], inv_tf, static_cast<uint32_t>(j), best);
    best = block_best(best);
    if (threadIdx.x == 0) write_sample(p, c, j, best, md, inv_t, log_z);
  }
}

// A complete prefix of at most this many keys (top-k, min-p and peaked rows) is decided by warp 0.
constexpr int kWarpPrefix = 64;

// decide_prefix's rules on warp 0 alone, for n <= kWarpPrefix keys: the keys sorted in registers
// (bitonic, two a lane), then the same order-key cut, fixed-point masses and draw, with warp scans
// in place of the block's histogram, cut buckets and reductions, whose barriers were most of such a
// row's decision. Never kGenericPath.
__device__ PrefixDecision decide_small_prefix(const SampleParams& p, const RowControl& c, const PrefixShared& s,
                                              const PrefixRow& r, int32_t top_k, bool k_on, bool p_on,
                                              bool minp_on, bool filtered) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  const int64_t b = c.b;
  const int n = r.n;
  const int n_top = p.top_logprobs;
  const double md = static_cast<double>(r.m);
  const double inv_t = 1.0 / static_cast<double>(c.temperature);
  auto weight = [=](float l) { return exp((static_cast<double>(l) - md) * inv_t); };
  const float c2 = detail::exp2_scale(inv_t);

  // key[j] ends at sorted position 2 lane + j, descending; 0 (below every order key) past n
  uint64_t key[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) key[j] = 2 * lane + j < n ? s.key[2 * lane + j] : 0ull;
#pragma unroll
  for (int size = 2; size <= kWarpPrefix; size <<= 1) {
#pragma unroll
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      if (stride == 1) {  // the pair is in this lane
        const bool desc = ((2 * lane) & size) == 0;
        const uint64_t hi = key[0] > key[1] ? key[0] : key[1], lo = key[0] > key[1] ? key[1] : key[0];
        key[0] = desc ? hi : lo;
        key[1] = desc ? lo : hi;
      } else {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const uint64_t other = __shfl_xor_sync(kAll, key[j], stride >> 1);
          const int e = 2 * lane + j;
          const bool keep_max = ((e & stride) == 0) == ((e & size) == 0);
          key[j] = keep_max ? (key[j] > other ? key[j] : other) : (key[j] < other ? key[j] : other);
        }
      }
    }
  }
  auto key_at = [&](int i) {  // sorted position i (warp-uniform)
    const uint64_t k0 = __shfl_sync(kAll, key[0], i >> 1), k1 = __shfl_sync(kAll, key[1], i >> 1);
    return (i & 1) ? k1 : k0;
  };

  uint64_t k_thr = 0ull;
  if (k_on) k_thr = key_at(top_k - 1);  // top_k <= n: decide_prefix sent a shorter prefix away

  uint64_t p_thr = 0ull;
  if (p_on) {
    unsigned long long mass[2], incl[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) mass[j] = 2 * lane + j < n ? fixed_mass(key_value(key[j]), r.m, c2) : 0ull;
    unsigned long long run = mass[0] + mass[1];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const unsigned long long y = __shfl_up_sync(kAll, run, o);
      if (lane >= o) run += y;
    }
    incl[0] = run - mass[1];
    incl[1] = run;
    auto incl_at = [&](int i) {
      const unsigned long long a0 = __shfl_sync(kAll, incl[0], i >> 1), a1 = __shfl_sync(kAll, incl[1], i >> 1);
      return (i & 1) ? a1 : a0;
    };
    const unsigned long long k_mass = k_on ? incl_at(top_k - 1) : 0ull;
    const double z_top_k = k_on ? static_cast<double>(k_mass) / kMassScale : r.z;
    const double target = static_cast<double>(c.top_p) * z_top_k * kMassScale;
    const unsigned long long avail = k_on ? k_mass : incl_at(n - 1);
    if (static_cast<double>(avail) >= target) {
      // the first position whose inclusive mass reaches the target
      const unsigned r0 = __ballot_sync(kAll, 2 * lane < n && static_cast<double>(incl[0]) >= target);
      const unsigned r1 = __ballot_sync(kAll, 2 * lane + 1 < n && static_cast<double>(incl[1]) >= target);
      int first = kWarpPrefix;
      if (r0 != 0u) first = 2 * (__ffs(r0) - 1);
      if (r1 != 0u && 2 * (__ffs(r1) - 1) + 1 < first) first = 2 * (__ffs(r1) - 1) + 1;
      const uint64_t kp = key_at(first);
      if (kp >= k_thr) p_thr = kp;
    } else if (r.incomplete && !k_on) {
      return kNeedsExtraPass;  // the nucleus reaches past the prefix
    }  // else: rounding with p ~ 1: keep all of top-k
  }
  const uint64_t thr = k_thr > p_thr ? k_thr : p_thr;
  const double min_w = minp_on ? static_cast<double>(c.min_p) : 0.0;

  // the kept set (a prefix of the order), its mass and the Gumbel draw among it
  Pick best{-INFINITY, kNoToken, 0.0f};
  double zk = 0.0;
  int kept = 0;
  uint32_t kept_mask = 0u;  // which of key[0], key[1] are kept
  const float inv_tf = 1.0f / c.temperature;
  if (filtered) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      if (2 * lane + j >= n || key[j] < thr) continue;
      const double w = weight(key_value(key[j]));
      if (min_w != 0.0 && w < min_w) continue;
      ++kept;
      kept_mask |= 1u << j;
      add_to_draw(c, key[j], w, inv_tf, best, zk);
    }
    best = warp_best(best);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) zk += __shfl_xor_sync(kAll, zk, o);
    kept = __reduce_add_sync(kAll, static_cast<unsigned>(kept));
  }
  const double log_z = log(filtered ? zk : r.z);
  const long long kept_count = filtered ? kept : r.valid;

  if (lane == 0) {
    const uint32_t tk = filtered ? best.key : (r.winner_token < 0 ? kNoToken : static_cast<uint32_t>(r.winner_token));
    const float logit = filtered ? best.logit : r.winner_logit;
    p.tokens[b * p.num_samples] = tk == kNoToken ? -1 : static_cast<int32_t>(tk & 0x7fffffffu);
    if (p.logprobs)
      p.logprobs[b * p.num_samples] = static_cast<float>((static_cast<double>(logit) - md) * inv_t - log_z);
    if (p.row_status) p.row_status[b] = kRowOk;
  }
  // samples 1 .. S-1, in turn (a row with several is filtered: decide_one_pass_kernel sends the
  // others to the extra pass)
  for (int j = 1; j < p.num_samples; ++j) {
    Pick more{-INFINITY, kNoToken, 0.0f};
#pragma unroll
    for (int o = 0; o < 2; ++o)
      if ((kept_mask >> o) & 1u) offer_to_draw(c, key[o], inv_tf, static_cast<uint32_t>(j), more);
    more = warp_best(more);
    if (lane == 0) write_sample(p, c, j, more, md, inv_t, log_z);
  }
  // topLogprobs: the head of the kept set is the head of the sorted prefix
  const int take = static_cast<int>(kept_count < n_top ? kept_count : n_top);
  for (int i0 = 0; i0 < n_top; i0 += 32) {  // warp-uniform
    const int i = i0 + lane;
    const int src = i < kWarpPrefix ? i : 0;
    const uint64_t k0 = __shfl_sync(kAll, key[0], src >> 1), k1 = __shfl_sync(kAll, key[1], src >> 1);
    const uint64_t kk = (src & 1) ? k1 : k0;
    if (i < n_top) {
      const bool in = i < take;
      p.top_tokens[b * n_top + i] = in ? static_cast<int32_t>(key_index(kk)) : -1;
      p.top_token_logprobs[b * n_top + i] =
          in ? static_cast<float>((static_cast<double>(key_value(kk)) - md) * inv_t - log_z) : -INFINITY;
    }
  }
  return kDecided;
}

// Decides a filtered row from its complete prefix in s.key (decide_row's rules: top-k by order key,
// then top-p by mass within top-k, then min-p; topLogprobs of the kept set). Writes nothing unless
// it returns kDecided.
__device__ PrefixDecision decide_prefix(const SampleParams& p, const RowControl& c, PrefixShared& s,
                                        const PrefixRow& r) {
  const int64_t b = c.b;
  const int n = r.n;
  const double md = static_cast<double>(r.m);
  const double inv_t = 1.0 / static_cast<double>(c.temperature);
  const bool p_on = c.top_p < 1.0f;
  const bool minp_on = c.min_p > 0.0f;
  const int n_top = p.top_logprobs;
  auto weight = [=](float l) { return exp((static_cast<double>(l) - md) * inv_t); };
  const float c2 = detail::exp2_scale(inv_t);
  int32_t top_k = c.top_k;
  if (p.filter_order == FilterOrder::kMinPFirst && minp_on && p_on) {
    // vLLM's order: Hugging Face's with top-k min(k, |S|), S the min-p survivors (min_p_first_top_k)
    long long local_s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
      if (weight(key_value(s.key[i])) >= static_cast<double>(c.min_p)) ++local_s;
    const long long survivors = block_reduce(local_s, Sum(), 0ll);
    // values outside the prefix lie at or below its level: they can pass min-p only if the level does
    top_k = min_p_first_top_k(top_k, survivors, r.incomplete && weight(r.level) >= static_cast<double>(c.min_p));
    if (top_k < 0) return kNeedsExtraPass;
  }
  const bool k_on = top_k > 0 && top_k < r.valid;
  // A row with top-k, top-p or min-p has no winner from the epilogue (FilterRow::drawn_by_decision):
  // when its top-k keeps every valid value, it is drawn here over the whole row, its prefix.
  const bool keeps_all = !(k_on || p_on || minp_on) && c.top_k > 0;
  const bool filtered = k_on || p_on || minp_on || keeps_all;

  if (keeps_all && r.incomplete) return kNeedsExtraPass;
  if (k_on && r.incomplete && top_k > n) return kNeedsExtraPass;
  if (!filtered && n_top > 0 && r.incomplete && n < n_top) return kNeedsExtraPass;
  if (r.incomplete && minp_on && !k_on && !p_on && weight(r.lo) >= static_cast<double>(c.min_p))
    return kNeedsExtraPass;
  if (n <= kWarpPrefix) {  // block-uniform; the other warps wait for warp 0's decision
    __shared__ int s_small;
    if (threadIdx.x < 32) {
      const PrefixDecision d = decide_small_prefix(p, c, s, r, top_k, k_on, p_on, minp_on, filtered);
      if (threadIdx.x == 0) s_small = d;
    }
    __syncthreads();
    return static_cast<PrefixDecision>(s_small);
  }

  // histogram of the prefix over its value range
  float scale = r.m > r.lo ? static_cast<float>(kCutBuckets - 1) / (r.m - r.lo) : 0.0f;
  if (!(scale < INFINITY)) scale = 0.0f;
  const CutBuckets cb{r.m, scale};
  for (int i = threadIdx.x; i < kCutBuckets; i += blockDim.x) {
    s.count[i] = 0u;
    if (p_on) s.mass[i] = 0ull;  // only top-p reads the masses
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float l = key_value(s.key[i]);
    const int bk = cb.of(l);
    atomicAdd(&s.count[bk], 1u);
    if (p_on) detail::shared_add_u64(&s.mass[bk], fixed_mass(l, r.m, c2));
  }
  __syncthreads();
  {  // inclusive prefixes from the top bucket: 4 consecutive buckets a thread (blockDim.x = 512)
    uint32_t cnt[4];
    unsigned long long ms[4];
    uint32_t cs = 0;
    unsigned long long mss = 0;
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      cnt[o] = s.count[4 * threadIdx.x + o];
      ms[o] = s.mass[4 * threadIdx.x + o];
      cs += cnt[o];
      mss += ms[o];
    }
    uint32_t ctot;
    unsigned long long mtot;
    uint32_t crun = block_exclusive_scan(cs, ctot);
    unsigned long long mrun = p_on ? block_exclusive_scan(mss, mtot) : 0ull;
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      crun += cnt[o];
      mrun += ms[o];
      s.count[4 * threadIdx.x + o] = crun;
      s.mass[4 * threadIdx.x + o] = mrun;
    }
    __syncthreads();
  }

  // top-k: the k-th largest key, from the bucket where the counts reach k
  uint64_t k_thr = 0;
  int k_bucket = kCutBuckets;
  unsigned long long k_mass = 0ull;  // the fixed-point mass of the top-k (p_on)
  if (k_on) {
    k_bucket = first_bucket_reaching(s.count, static_cast<double>(top_k), kCutBuckets - 1);
    const uint32_t before = k_bucket > 0 ? s.count[k_bucket - 1] : 0u;
    if (!gather_sorted(s, cb, k_bucket, k_bucket, 0ull, p_on, c2)) return kGenericPath;
    const int at = top_k - static_cast<int>(before) - 1;
    k_thr = s.cut_key[at];
    if (p_on) k_mass = (k_bucket > 0 ? s.mass[k_bucket - 1] : 0ull) + s.cut_mass[at];
  }

  // top-p: the largest key whose prefix (within top-k) reaches top_p of the top-k mass
  uint64_t p_thr = 0;
  if (p_on) {
    const double z_top_k = k_on ? static_cast<double>(k_mass) / kMassScale : r.z;
    const double target = static_cast<double>(c.top_p) * z_top_k * kMassScale;
    const unsigned long long avail = k_on ? k_mass : s.mass[kCutBuckets - 1];
    if (static_cast<double>(avail) >= target) {
      int bp;
      unsigned long long before;
      if (k_on && target > static_cast<double>(k_bucket > 0 ? s.mass[k_bucket - 1] : 0ull)) {
        bp = k_bucket;  // the cut lies in the top-k bucket: its sorted elements are gathered
        before = k_bucket > 0 ? s.mass[k_bucket - 1] : 0ull;
      } else {
        bp = first_bucket_reaching(s.mass, target, k_on ? k_bucket - 1 : kCutBuckets - 1);
        before = bp > 0 ? s.mass[bp - 1] : 0ull;
        if (!gather_sorted(s, cb, bp, bp, 0ull, true, c2)) return kGenericPath;
      }
      if (threadIdx.x == 0) s.found = 0ull;
      __syncthreads();
      const int cn = s.cut_n;
      for (int i = threadIdx.x; i < cn; i += blockDim.x) {
        const bool reaches = static_cast<double>(before + s.cut_mass[i]) >= target;
        const bool earlier = i > 0 && static_cast<double>(before + s.cut_mass[i - 1]) >= target;
        if (reaches && !earlier && s.cut_key[i] >= k_thr) s.found = s.cut_key[i];
      }
      __syncthreads();
      p_thr = s.found;
    } else if (r.incomplete && !k_on) {
      return kNeedsExtraPass;  // the nucleus reaches past the prefix
    }  // else: rounding with p ~ 1: keep all of top-k
  }
  const uint64_t thr = k_thr > p_thr ? k_thr : p_thr;
  const double min_w = minp_on ? static_cast<double>(c.min_p) : 0.0;

  // the kept set (a prefix of the order), its mass and the Gumbel draw among it
  Pick best{-INFINITY, kNoToken, 0.0f};
  double zk = 0.0;
  int kept_n = 0;
  const float inv_tf = 1.0f / c.temperature;
  if (filtered) {
    // The kept keys (a prefix of the order) move to the front of s.key, in prefix order, so that
    // the draw's Philox and logarithms run on full warps (scattered, they left most lanes idle).
    // Each round reads 4 keys a thread before its scan's barriers and writes at or below them.
    for (int base = 0; base < n; base += 4 * static_cast<int>(blockDim.x)) {
      uint64_t k4[4];
      uint32_t keep = 0u;
#pragma unroll
      for (int o = 0; o < 4; ++o) {
        const int i = base + 4 * static_cast<int>(threadIdx.x) + o;
        k4[o] = i < n ? s.key[i] : 0ull;
        if (i < n && k4[o] >= thr && (min_w == 0.0 || weight(key_value(k4[o])) >= min_w)) keep |= 1u << o;
      }
      uint32_t total;
      uint32_t at = static_cast<uint32_t>(kept_n) + block_exclusive_scan(static_cast<uint32_t>(__popc(keep)), total);
#pragma unroll
      for (int o = 0; o < 4; ++o)
        if ((keep >> o) & 1u) s.key[at++] = k4[o];
      kept_n += static_cast<int>(total);
    }
    __syncthreads();  // the compacted keys are written
    auto draw = [&](int from, int stride) {
      for (int i = from; i < kept_n; i += stride)
        add_to_draw(c, s.key[i], weight(key_value(s.key[i])), inv_tf, best, zk);
    };
    if (kept_n <= 64) {
      // a few kept keys (top-k, peaked rows): warp 0 draws them alone, its shuffles instead of two
      // block reductions' barriers
      if (threadIdx.x < 32) {
        draw(static_cast<int>(threadIdx.x), 32);
        best = warp_best(best);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) zk += __shfl_xor_sync(0xffffffffu, zk, o);
        if (threadIdx.x == 0) {
          s.drawn = best;
          s.drawn_z = zk;
          s.n = kept_n;  // topLogprobs' head below is gathered from the kept keys
        }
      }
      __syncthreads();
      best = s.drawn;
      zk = s.drawn_z;
    } else {
      draw(static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
      if (threadIdx.x == 0) s.n = kept_n;  // topLogprobs' head below is gathered from the kept keys
      best = block_best(best);
      zk = block_reduce(zk, Sum(), 0.0);
    }
  }
  const double z_kept = filtered ? zk : r.z;
  const long long kept_count = filtered ? kept_n : r.valid;
  const double log_z = log(z_kept);

  // topLogprobs: the head of the kept set is the head of the prefix
  const int take = static_cast<int>(kept_count < n_top ? kept_count : n_top);
  if (take > 0) {
    const int bt = first_bucket_reaching(s.count, static_cast<double>(take), kCutBuckets - 1);
    if (bt == kCutBuckets || !gather_sorted(s, cb, 0, bt, 0ull, false, c2)) return kGenericPath;
  }

  if (threadIdx.x == 0) {
    const uint32_t key = filtered ? best.key : (r.winner_token < 0 ? kNoToken : static_cast<uint32_t>(r.winner_token));
    const float logit = filtered ? best.logit : r.winner_logit;
    p.tokens[b * p.num_samples] = key == kNoToken ? -1 : static_cast<int32_t>(key & 0x7fffffffu);
    if (p.logprobs)
      p.logprobs[b * p.num_samples] = static_cast<float>((static_cast<double>(logit) - md) * inv_t - log_z);
    if (p.row_status) p.row_status[b] = kRowOk;
  }
  // samples 1 .. S-1 from the kept keys at the front of s.key (a row with several is filtered)
  if (p.num_samples > 1) draw_more_samples(p, c, s.key, kept_n, md, inv_t, log_z);
  for (int i = threadIdx.x; i < n_top; i += blockDim.x) {
    const bool in = i < take;
    const uint64_t key = in ? s.cut_key[i] : 0ull;
    p.top_tokens[b * n_top + i] = in ? static_cast<int32_t>(key_index(key)) : -1;
    p.top_token_logprobs[b * n_top + i] =
        in ? static_cast<float>((static_cast<double>(key_value(key)) - md) * inv_t - log_z) : -INFINITY;
  }
  return kDecided;
}

// Row b's listed tokens that the plain route's epilogue left out (deferred_listed_table), merged into
// the row's winner before its token is read: the steps of their table entries on their stored values, the
// mask, then the noise the epilogue would have drawn for them (sample 0), pruned against the winner
// so far as quads_update_pruned prunes (a Philox block only where the largest noise could reach it,
// the logarithms only where its bits can), so that the winner is the one the epilogue finds when it
// applies the entries itself. Block (x, b) takes kListedThreads marks words of row b, so that a row's
// tokens spread over the GPU (the decision's one block a row took 18 us at 4096 listed tokens: ncu,
// llama3-8b, B = 1); a warp deals its words' tokens out a lane each, so that their entries and
// values are loaded at once (ncu, 4096 a row at B = 64 / 128: 12.0 / 17.6 us; a thread taking its
// own words' tokens in turn, 12.8 / 21.1).
constexpr int kListedThreads = 256;

// The position of the n-th set bit of bits, from 0 (n < popc(bits)). CUDA's __fns(bits, 0, n + 1)
// is the same, emulated for any base and offset sign: 16 more instructions and a branch (sm_90a SASS).
__device__ __forceinline__ int nth_set_bit(uint32_t bits, int n) {
  int pos = 0;
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) {
    const int c = __popc(bits & ((1u << s) - 1u));
    if (n >= c) {
      n -= c;
      bits >>= s;
      pos += s;
    }
  }
  return pos;
}

// A running Gumbel winner of one row: the packed best, its score and the noise limit it sets.
struct RunningBest {
  unsigned long long best;
  float thr, intercept;
};

__device__ __forceinline__ RunningBest running_best(unsigned long long packed) {
  RunningBest pk;
  pk.best = packed;
  pk.thr = packed != 0ull ? detail::packed_score(packed) : -INFINITY;
  pk.intercept = detail::noise_bits_limit_intercept(pk.thr);
  return pk;
}

__device__ __forceinline__ void raise_best(RunningBest& pk, const Candidate& cand) {
  const unsigned long long packed = detail::pack_candidate(cand.score, cand.key);
  if (packed > pk.best) {
    pk.best = packed;
    pk.thr = cand.score;
    pk.intercept = detail::noise_bits_limit_intercept(pk.thr);
  }
}

// Offers sampled value x of token v, with its noise bits, to the running best.
__device__ __forceinline__ void offer_sampled(RunningBest& pk, const detail::RowParams& rp, float slope, float x,
                                              uint32_t noise, uint32_t v) {
  if (!detail::noise_bits_can_reach(noise, x, slope, pk.intercept)) return;
  raise_best(pk, make_candidate(x, rp.inv_temperature, false, gumbel_from_bits(noise), v));
}

// Offers value x of token v (NaN: none) to the running best.
__device__ __forceinline__ void offer_listed(RunningBest& pk, const detail::RowParams& rp, float slope, float x,
                                             uint32_t v) {
  if (x != x || x == -INFINITY) return;
  if (rp.greedy) {
    raise_best(pk, make_candidate(x, rp.inv_temperature, true, 0.0f, v));
    return;
  }
  if (fmaf(x, rp.inv_temperature, detail::kGumbelUpper) < pk.thr) return;
  const Philox4 r = noise_block(rp.seed, rp.offset, rp.stream, 0u, v >> 2);
  const uint32_t q = v & 3u;
  offer_sampled(pk, rp, slope, x, noise_word(r, q), v);
}

__global__ void __launch_bounds__(kListedThreads)
    listed_winners_kernel(SampleParams p, detail::FilterArgs f, const float* listed_values, unsigned long long* winners) {
  detail::griddep_wait();  // launched programmatically after the GEMM: its winners and stored values
  const int64_t b = blockIdx.y;
  const int64_t words = f.allowed_words;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kListedThreads + threadIdx.x;  // a lane's word
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const uint2 m = w < words ? f.listed[b * words + w] : make_uint2(0u, 0u);
  const uint32_t bits = m.x & (w < words && f.allowed != nullptr ? f.allowed[b * words + w] : ~0u);
  // the warp's allowed listed tokens in word order: lane j's are numbers [below, through) of them
  int through = __popc(bits);
#pragma unroll
  for (int s = 1; s < 32; s <<= 1) {
    const int t = __shfl_up_sync(~0u, through, s);
    if (lane >= s) through += t;
  }
  const int below = through - __popc(bits);
  const int total = __shfl_sync(~0u, through, 31);
  const detail::RowParams rp = detail::load_row_params(p.temperature, p.seed, p.offset, p.per_row_seed, b);
  const unsigned long long winner = __ldcg(winners + b);
  RunningBest pk = running_best(winner);
  const float slope = rp.inv_temperature * detail::kLog2e;
  for (int k0 = 0; k0 < total; k0 += 32) {
    const int k = k0 + lane;  // the token this lane takes: in the word of lane j, the first with through > k
    int j = 0;
#pragma unroll
    for (int s = 16; s > 0; s >>= 1)
      if (__shfl_sync(~0u, through, j + s - 1) <= k) j += s;
    const uint32_t bits_j = __shfl_sync(~0u, bits, j);
    const uint32_t marks_j = __shfl_sync(~0u, m.x, j);
    const uint32_t first_j = __shfl_sync(~0u, m.y, j);
    const int below_j = __shfl_sync(~0u, below, j);
    if (k < total) {
      const int o = nth_set_bit(bits_j, k - below_j);
      const uint32_t at = detail::listed_index(make_uint2(marks_j, first_j), o);
      offer_listed(pk, rp, slope, detail::apply_listed_entry(f.listed_table[at], listed_values[at]),
                   static_cast<uint32_t>((w - lane + j) * 32 + o));
    }
  }
  const unsigned long long best = block_reduce<unsigned long long>(pk.best, Max(), 0ull);
  if (threadIdx.x == 0 && best > winner) atomicMax(winners + b, best);
}

// A top-p row its candidates cannot decide that checks its winner (detail::row_checks_winner), with
// every tile stored, is checked by the decision grid's last kCheckBlocks blocks instead of going
// straight to the extra pass: they draw the row's kCheckDraws best Gumbel candidates over the stored
// values, in score order, and keep the first that the nucleus holds when every one before it lies
// past the cut: the argmax over the nucleus is the nucleus's first candidate in score order, and the
// candidates before it are the only values that score higher. A flat row's unfiltered winner lies in
// the nucleus with probability ~p (~0.9): with four candidates the row goes to the extra pass about
// once in 10^4 (or when a candidate lies within the margin of the cut).
// Calls above this batch leave every flagged row to the extra pass. Up to 256 rows: model-like B =
// 160 / 256 -7 / -3.5 points (H100, 2026-12-07); B = 256 with no flat row +3.5 (a third wave).
// Calls below the min batch run no check: its blocks wait on every row, ~2 µs at B = 1 (qwen3-0.6b,
// H100), more than the extra passes it spares there (~5 % of rows flat, ~20 µs a pass).
constexpr int64_t kCheckWinnersMinBatch = 4;
constexpr int64_t kCheckWinnersMaxBatch = 256;
constexpr int kCheckSlices = 16;  // a checked row's tasks in each of the two phases
constexpr int kCheckDraws = 4;    // the row's best candidates the check weighs, in score order
// The decision grid's blocks past its rows, that check (check_winners): 128 beat 64 by 0.7-12 and 64
// beat 32 by 1.5-12 points at model-like B = 64 and 128 (H100, 2026-12-06), Gaussian B 4-64 +-0.8.
constexpr int kCheckBlocks = 128;
// A check task's scan keeps this many of its thread's loads in flight: a task's time is its
// slice's scan, a chain of load latencies when each load waits for the last one's use.
constexpr int kCheckScanBatch = 8;
static_assert(kCheckSlices * kCheckDraws % 32 == 0 && kThreads / 32 * kCheckDraws % 32 == 0, "whole pools a lane");
struct WinnerCheck {
  double z;  // the row's mass (the tile summaries' sum, as the decision's)
  // per slice and candidate: the mass above the candidate's logit, and at it with the candidate
  // left out (ties, which the order breaks by index: the mass before the candidate lies between
  // the first and the sum)
  double above[kCheckSlices][kCheckDraws];
  double ties[kCheckSlices][kCheckDraws];
  unsigned long long draws[kCheckSlices][kCheckDraws];  // each slice's best packed candidates, descending
  float m;                  // the row's max
  uint32_t drawn, weighed;  // the row's slices drawn and weighed
};
struct CheckCounters {
  uint32_t decided;  // the decision's rows done (all B: no row is listed after)
  uint32_t checks;   // rows listed for the check
  uint32_t taken;    // the check's tasks taken by its blocks
  uint32_t listed[kCheckWinnersMaxBatch];  // the listed rows in listing order: b + 1 once published
};

// One decision block's row, listed for the check with its record (thread 0, block-uniform call).
__device__ __forceinline__ void list_for_check(const SampleParams& p, int64_t b, float m, double z, int32_t* fallback,
                                               WinnerCheck* check, CheckCounters* counts) {
  if (threadIdx.x != 0) return;
  WinnerCheck& r = check[b];
  r.z = z;
  r.m = m;
  r.drawn = 0u;
  r.weighed = 0u;
  fallback[b] = 2;  // stored: the extra pass reads its tiles back, if the check hands it on
  atomicAdd(p.fallback_rows, 1);
  const uint32_t at = atomicAdd(&counts->checks, 1u);
  // (release: the record above is visible to a check block that reads the entry)
  asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(counts->listed + at), "r"(static_cast<uint32_t>(b + 1))
               : "memory");
}

__device__ __forceinline__ uint32_t load_acquire(const uint32_t* x) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(x) : "memory");
  return v;
}

// The row listed i-th for the check once its entry is published, or -1 when every row is decided
// and fewer were listed (thread 0).
__device__ __forceinline__ int64_t listed_row(const CheckCounters* counts, uint32_t i, uint32_t batch) {
  if (i >= batch) return -1;
  while (true) {
    const uint32_t e = load_acquire(counts->listed + i);
    if (e != 0u) return static_cast<int64_t>(e) - 1;
    // a row's listing comes before its block counts itself decided
    if (load_acquire(&counts->decided) == batch && load_acquire(&counts->checks) <= i) return -1;
    __nanosleep(64);
  }
}

// Packed candidate c into a descending list of kCheckDraws (0: empty; packed values are distinct).
__device__ __forceinline__ void insert_draw(unsigned long long (&top)[kCheckDraws], unsigned long long c) {
#pragma unroll
  for (int i = 0; i < kCheckDraws; ++i) {
    const unsigned long long t = top[i];
    top[i] = c > t ? c : t;
    c = c > t ? t : c;
  }
}

// The check blocks: the listed rows' tasks, each block taking the next from one counter, a row's
// as soon as it is listed (its checks overlap the other rows' decisions): the row's kCheckSlices
// draws (a slice's kCheckDraws best candidates over its stored values, pruned as the epilogue
// prunes against the slice's kCheckDraws-th), then its weighs (the row's best kCheckDraws of the
// slices', and each one's mass above and at its logit over the slice: fp32 exp2 terms summed in
// float64, ~1e-6 relative like the tile summaries behind z). Nothing can hang however few blocks
// are resident (MPS, green contexts, kernels beside it): the rows' blocks come first in the grid
// and wait on nothing, a task waits only for its row's listing, and a weigh for its row's draws,
// earlier tasks that running blocks took and finish without waiting. The row's last weigh adds the
// slices in order (deterministic) and, candidate by candidate in score order, keeps the first whose
// mass before it is below p z, while each before it has at least p z before it, both with a margin
// of 1e-4 (a candidate near the cut sends the row to the extra pass).
__device__ void check_winners(const SampleParams& p, const detail::FilterArgs& f, int32_t* fallback,
                              WinnerCheck* check, CheckCounters* counts) {
  __shared__ uint32_t s_task;
  __shared__ int64_t s_row;
  __shared__ unsigned long long s_warp[kThreads / 32 * kCheckDraws];  // each warp's best, then their pool
  __shared__ unsigned long long s_draws[kCheckDraws];
  __shared__ float s_logit[kCheckDraws];
  __shared__ double s_sums[kThreads / 32][2 * kCheckDraws];
  // the threads' lists as warp_top_keys's pools: warp w's in keys [w 32 kCheckDraws, (w + 1) ...),
  // lane l's at l + 32 i (the decision's shared memory, which the check blocks do not use)
  extern __shared__ __align__(16) unsigned char dyn_smem[];
  unsigned long long* const pool = reinterpret_cast<unsigned long long*>(dyn_smem);
  static_assert(kThreads * kCheckDraws * sizeof(unsigned long long) <= sizeof(PrefixShared), "the pools fit");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t V = p.vocab, per = (V + 4 * kCheckSlices - 1) / (4 * kCheckSlices) * 4;  // multiples of 4
  while (true) {
    if (threadIdx.x == 0) {
      s_task = atomicAdd(&counts->taken, 1u);
      s_row = listed_row(counts, s_task / (2 * kCheckSlices), static_cast<uint32_t>(p.batch));
    }
    __syncthreads();
    const uint32_t task = s_task;
    const int64_t b = s_row;
    __syncthreads();  // s_task and s_row are rewritten by the next take
    if (b < 0) break;
    const bool weigh = task % (2 * kCheckSlices) >= kCheckSlices;
    const int slice = static_cast<int>(task % kCheckSlices);
    WinnerCheck* c = check + b;
    const float* row = f.row_logits + b * V;
    const int64_t v0 = slice * per, v1 = v0 + per < V ? v0 + per : V;
    if (!weigh) {
      unsigned long long top[kCheckDraws];
#pragma unroll
      for (int i = 0; i < kCheckDraws; ++i) top[i] = 0ull;
      const detail::RowParams rp = detail::load_row_params(p.temperature, p.seed, p.offset, p.per_row_seed, b);
      const float slope = rp.inv_temperature * detail::kLog2e;
      float thr = -INFINITY, intercept = detail::noise_bits_limit_intercept(thr);  // the list's last score
      // one quad a thread at a time: two in flight spill the four candidates' lists
      for (int64_t v = v0 + 4 * threadIdx.x; v < v1; v += 4 * blockDim.x) {
        float x[4];
#pragma unroll
        for (int o = 0; o < 4; ++o) x[o] = v + o < v1 ? __ldcs(row + v + o) : -INFINITY;
        const float hi = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
        if (fmaf(hi, rp.inv_temperature, detail::kGumbelUpper) < thr) continue;
        const Philox4 r = noise_block(rp.seed, rp.offset, rp.stream, 0u, static_cast<uint32_t>(v >> 2));
#pragma unroll
        for (int o = 0; o < 4; ++o) {
          if (x[o] == -INFINITY || !detail::noise_bits_can_reach(r.x[o], x[o], slope, intercept)) continue;
          const Candidate cand = make_candidate(x[o], rp.inv_temperature, false, gumbel_from_bits(r.x[o]),
                                                static_cast<uint32_t>(v + o));
          insert_draw(top, detail::pack_candidate(cand.score, cand.key));
          if (top[kCheckDraws - 1] != 0ull) {
            thr = detail::packed_score(top[kCheckDraws - 1]);
            intercept = detail::noise_bits_limit_intercept(thr);
          }
        }
      }
      unsigned long long* const mine = pool + warp * 32 * kCheckDraws;
#pragma unroll
      for (int i = 0; i < kCheckDraws; ++i) mine[lane + 32 * i] = top[i];
      __syncwarp();
      warp_top_keys(mine, kCheckDraws, kCheckDraws, s_warp + warp * kCheckDraws, kCheckDraws);
      __syncthreads();
      if (warp == 0) {
        warp_top_keys(s_warp, kThreads / 32 * kCheckDraws / 32, kCheckDraws, c->draws[slice], kCheckDraws);
        if (lane == 0) {
          __threadfence();
          atomicAdd(&c->drawn, 1u);
        }
      }
      __syncthreads();  // s_warp and the pools are rewritten by the next task
      continue;
    }
    // the row's best kCheckDraws over the slices' lists, once every slice is drawn
    if (warp == 0) {
      // (each lane's own acquire orders its loads of the lists after every slice's release)
      while (load_acquire(&c->drawn) < static_cast<uint32_t>(kCheckSlices)) __nanosleep(64);
      for (int i = lane; i < kCheckSlices * kCheckDraws; i += 32) pool[i] = __ldcg(&c->draws[0][0] + i);
      __syncwarp();
      warp_top_keys(pool, kCheckSlices * kCheckDraws / 32, kCheckDraws, s_draws, kCheckDraws);
      __syncwarp();
      if (lane < kCheckDraws) {
        const int32_t token = s_draws[lane] != 0ull ? detail::packed_token(s_draws[lane]) : -1;
        s_logit[lane] = token >= 0 && token < V ? __ldcg(row + token) : INFINITY;
      }
    }
    __syncthreads();
    float lw[kCheckDraws];
    int32_t tok[kCheckDraws];
    float lowest = INFINITY;
#pragma unroll
    for (int i = 0; i < kCheckDraws; ++i) {
      lw[i] = s_logit[i];
      tok[i] = s_draws[i] != 0ull ? detail::packed_token(s_draws[i]) : -1;
      lowest = fminf(lowest, lw[i]);
    }
    const float m = __ldcg(&c->m);
    const float c2 = detail::exp2_scale(1.0 / static_cast<double>(p.temperature[b]));
    double above[kCheckDraws], ties[kCheckDraws];
#pragma unroll
    for (int i = 0; i < kCheckDraws; ++i) above[i] = ties[i] = 0.0;
    for (int64_t v = v0 + threadIdx.x; v < v1; v += kCheckScanBatch * blockDim.x) {
      float xs[kCheckScanBatch];
#pragma unroll
      for (int u = 0; u < kCheckScanBatch; ++u) {
        const int64_t vu = v + u * blockDim.x;
        xs[u] = vu < v1 ? __ldcs(row + vu) : -INFINITY;  // (-Inf >= lowest never: drawn values' or +Inf)
      }
#pragma unroll
      for (int u = 0; u < kCheckScanBatch; ++u) {
        const float x = xs[u];
        if (!(x >= lowest)) continue;
        const int64_t vu = v + u * blockDim.x;
        const double e = static_cast<double>(detail::exp2_ftz((x - m) * c2));
#pragma unroll
        for (int i = 0; i < kCheckDraws; ++i) {
          if (x > lw[i]) above[i] += e;
          else if (x == lw[i] && vu != tok[i]) ties[i] += e;
        }
      }
    }
    // the block's sums in a fixed order: a xor tree per warp, then the warps in order
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int i = 0; i < kCheckDraws; ++i) {
        above[i] += __shfl_xor_sync(0xffffffffu, above[i], o);
        ties[i] += __shfl_xor_sync(0xffffffffu, ties[i], o);
      }
    if (lane == 0)
#pragma unroll
      for (int i = 0; i < kCheckDraws; ++i) {
        s_sums[warp][i] = above[i];
        s_sums[warp][kCheckDraws + i] = ties[i];
      }
    __syncthreads();
    if (threadIdx.x == 0) {
#pragma unroll
      for (int i = 0; i < kCheckDraws; ++i) {
        double a = 0.0, t = 0.0;
        for (int w = 0; w < kThreads / 32; ++w) {
          a += s_sums[w][i];
          t += s_sums[w][kCheckDraws + i];
        }
        c->above[slice][i] = a;
        c->ties[slice][i] = t;
      }
      __threadfence();
      if (atomicAdd(&c->weighed, 1u) == kCheckSlices - 1) {  // the row's last slice
        __threadfence();
        const double target = static_cast<double>(p.top_p[b]) * __ldcg(&c->z);
        for (int i = 0; i < kCheckDraws; ++i) {
          if (tok[i] < 0 || tok[i] >= V) break;
          double a = 0.0, t = 0.0;
          for (int k = 0; k < kCheckSlices; ++k) {
            a += __ldcg(&c->above[k][i]);
            t += __ldcg(&c->ties[k][i]);
          }
          if (a + t < target * (1.0 - 1e-4)) {  // in the nucleus: the row's token
            p.tokens[b] = tok[i];
            if (p.row_status) p.row_status[b] = kRowOk;
            fallback[b] = 0;
            atomicSub(p.fallback_rows, 1);
            break;
          }
          if (!(a >= target * (1.0 + 1e-4))) break;  // near the cut: the extra pass decides
        }
      }
    }
    __syncthreads();  // s_draws, s_logit and s_sums are rewritten by the next task
  }
}

// The first of `mine` consecutive slots of s.key for this thread: the warp's lanes in order, the
// warp's run reserved on the block's count n by its last lane (one shared atomic a warp).
__device__ __forceinline__ int reserve_keys(int& n, uint32_t mine, int lane) {
  uint32_t incl = mine;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  int at = 0;
  if (lane == 31 && incl > 0u) at = atomicAdd(&n, static_cast<int>(incl));
  return __shfl_sync(0xffffffffu, at, 31) + static_cast<int>(incl - mine);
}

// Appends this thread's kept values (bit o of keep[r]: x[r][o] of token xv[r][o]) to s.key as
// order keys, after the block's count s.n, the warp's lanes in order; slots from kPrefixCap on are
// counted in s.n, not written.
__device__ __forceinline__ void append_kept_keys(PrefixShared& s, const uint32_t (&keep)[kPrefixRounds],
                                                 const float (&x)[kPrefixRounds][4],
                                                 const uint32_t (&xv)[kPrefixRounds][4], int lane) {
  uint32_t mine = 0u;
#pragma unroll
  for (int r = 0; r < kPrefixRounds; ++r) mine += __popc(keep[r]);
  int at = reserve_keys(s.n, mine, lane);
#pragma unroll
  for (int r = 0; r < kPrefixRounds; ++r)
#pragma unroll
    for (int o = 0; o < 4; ++o)
      if ((keep[r] >> o) & 1u) {
        if (at < kPrefixCap) s.key[at] = order_key(x[r][o], xv[r][o]);
        ++at;
      }
}

// A streamed min-p row's batches dealt over more blocks of the decision (decide_min_p_streamed):
// its blocks b + j B, j < parts, take batch i when i mod parts = j, each draws its share, and the
// last to finish merges the shares in block order (the same mass and token whatever finishes last).
struct MinPShare {
  double z;                      // the share's kept mass
  unsigned long long in_prefix;  // its values of the prefix
  float lo;                      // its lowest value of the prefix
  Pick best;                     // its best kept key
};
struct MinPSplit {
  MinPShare* shares;  // [B, parts]
  uint32_t* done;     // [B], zeroed: the row's blocks that wrote their share, and kMinPSplitLeave
  int parts;          // 1: no split (min_p_split_parts)
};
constexpr int kMinPSplitParts = 4;
// Set by a row's first block once it knows the row does not stream (its candidates fit one batch):
// the row's other blocks, most of which start after it, leave on reading it.
constexpr uint32_t kMinPSplitLeave = 0x80000000u;

// A min-p row alone (no top-k below its valid count, no top-p or topLogprobs; one sample) keeps
// every value of weight exp((l - m) / T) >= minP: its kept set needs no order, so each batch of
// candidates is drawn as it is gathered, with no bound on the prefix. A flat row keeps 8-16 % of the
// vocabulary at T 1 and min-p 0.05 (model-like logits: 10-20 K keys); past kPrefixCap such a row
// would take the generic path (the decision 118 us against top-k 50's 24 at llama3-8b B = 128, ncu,
// H100). x / xv hold the first batch (loaded before the summaries merge). Decides as decide_prefix
// does (a prefix that holds every value min-p keeps) and returns true, or returns false (extra pass);
// with a split, a block that leaves the merge to another returns true.
__device__ bool decide_min_p_streamed(const SampleParams& p, const RowControl& c, PrefixShared& s, const float* val,
                                      const uint32_t* idx, const CandidateSlices& cs, float (&x)[kPrefixRounds][4],
                                      uint32_t (&xv)[kPrefixRounds][4], float level, uint32_t dropped, float m,
                                      long long valid, const MinPSplit& split, int part) {
  const int64_t b = c.b;
  const int lane = threadIdx.x & 31;
  const double md = static_cast<double>(m);
  const double inv_t = 1.0 / static_cast<double>(c.temperature);
  const double min_w = static_cast<double>(c.min_p);
  auto weight = [=](float l) { return exp((static_cast<double>(l) - md) * inv_t); };
  const float inv_tf = 1.0f / c.temperature;
  const int64_t batch = kPrefixRounds * static_cast<int64_t>(blockDim.x);  // quads: <= kPrefixCap values
  Pick best{-INFINITY, kNoToken, 0.0f};
  double zk = 0.0;
  float local_lo = INFINITY;
  unsigned long long prefix_values = 0ull;  // this thread's values of the prefix (>= level, above dropped)
  // weight(l) >= minP, decided on (l - m) / T against ln(minP) away from the boundary (margins far
  // above exp's and log's roundings), on weight itself within them
  const double ln_min_w = log(min_w);
  auto passes_min_p = [=](float l) {
    const double d = (static_cast<double>(l) - md) * inv_t;
    return d >= ln_min_w + 1e-9 || (d > ln_min_w - 1e-9 && exp(d) >= min_w);
  };
  const bool wants_mass = p.logprobs != nullptr;  // the kept mass is the sample's logprob's only use
  const int parts = split.parts;
  const int64_t stride = parts * batch;
  if (part > 0 && part * batch < cs.quads) load_prefix_batch(val, idx, cs, part * batch, x, xv);
  for (int64_t base = part * batch; base < cs.quads; base += stride) {
    __syncthreads();  // the previous batch's draw has read s.key and s.n
    if (threadIdx.x == 0) s.n = 0;
    __syncthreads();
    uint32_t keep[kPrefixRounds];
#pragma unroll
    for (int r = 0; r < kPrefixRounds; ++r) {
      keep[r] = 0u;
#pragma unroll
      for (int o = 0; o < 4; ++o)
        if (x[r][o] >= level && detail::ordered_bits(x[r][o]) > dropped) {
          ++prefix_values;
          local_lo = fminf(local_lo, x[r][o]);
          if (passes_min_p(x[r][o])) keep[r] |= 1u << o;
        }
    }
    // the kept keys of the batch to the front of s.key (a batch holds at most kPrefixCap values), so
    // that the draw's Philox runs on full warps
    append_kept_keys(s, keep, x, xv, lane);
    // the next batch's loads in flight during this batch's draw
    if (base + stride < cs.quads) load_prefix_batch(val, idx, cs, base + stride, x, xv);
    __syncthreads();
    const int n = s.n;
    if (wants_mass) {
      for (int i = threadIdx.x; i < n; i += blockDim.x)
        add_to_draw(c, s.key[i], weight(key_value(s.key[i])), inv_tf, best, zk);
    } else {
      for (int i = threadIdx.x; i < n; i += blockDim.x) offer_to_draw_pruned(c, s.key[i], inv_tf, best);
    }
  }
  long long prefix_n = block_reduce(static_cast<long long>(prefix_values), Sum(), 0ll);
  float lo = -block_reduce(-local_lo, Max(), -INFINITY);
  best = block_best(best);
  zk = block_reduce(zk, Sum(), 0.0);
  __shared__ int s_last, s_decided;  // this block merges the split's shares; the row is decided
  if (parts > 1) {
    if (threadIdx.x == 0) {
      split.shares[b * parts + part] = MinPShare{zk, static_cast<unsigned long long>(prefix_n), lo, best};
      __threadfence();
      s_last = (atomicAdd(split.done + b, 1u) & ~kMinPSplitLeave) == static_cast<uint32_t>(parts - 1) ? 1 : 0;
    }
    __syncthreads();
    if (s_last == 0) return true;  // another block merges the row
    if (threadIdx.x == 0) {
      __threadfence();
      zk = 0.0;
      prefix_n = 0;
      lo = INFINITY;
      best = Pick{-INFINITY, kNoToken, 0.0f};
      for (int j = 0; j < parts; ++j) {
        const MinPShare* sh = split.shares + b * parts + j;
        zk += __ldcg(&sh->z);
        prefix_n += static_cast<long long>(__ldcg(&sh->in_prefix));
        lo = fminf(lo, __ldcg(&sh->lo));
        const Pick q{__ldcg(&sh->best.score), __ldcg(&sh->best.key), __ldcg(&sh->best.logit)};
        if (candidate_better(q.score, q.key, best.score, best.key)) best = q;
      }
    }
  }
  // decide_one_pass_row's and decide_prefix's tests: values below the level are left out of the
  // prefix, and may pass min-p only when the level (and the prefix's lowest value) does
  if (threadIdx.x == 0) {
    const bool complete = prefix_n >= valid || weight(level) < min_w || (prefix_n > 0 && weight(lo) < min_w);
    s_decided = complete && best.key != kNoToken ? 1 : 0;
    if (s_decided) {
      p.tokens[b] = static_cast<int32_t>(best.key & 0x7fffffffu);
      if (p.logprobs) p.logprobs[b] = static_cast<float>((static_cast<double>(best.logit) - md) * inv_t - log(zk));
      if (p.row_status) p.row_status[b] = kRowOk;
    }
  }
  __syncthreads();
  return s_decided != 0;
}

// One block per row: the row's statistics from the tile summaries, its winner and the winner's
// logit, then the candidates cut to the prefix the epilogue provably gathered in full (values >=
// the largest threshold used and above the largest dropped value), decided in shared memory
// (decide_prefix) or, when that does not fit, by decide_row over the compacted candidates.
template <bool kChecks>
__device__ __forceinline__ void decide_one_pass_row(const SampleParams& p, const detail::FilterArgs& f,
                                                    const unsigned long long* winners, int32_t* fallback,
                                                    WinnerCheck* check, CheckCounters* counts,
                                                    const MinPSplit& split, int part) {
  extern __shared__ __align__(16) unsigned char dyn_smem[];
  PrefixShared& s = *reinterpret_cast<PrefixShared*>(dyn_smem);
  const int64_t b = static_cast<int64_t>(blockIdx.x) - part * p.batch;
  const RowControl c = load_control(p, b);
  // a split's other blocks (part > 0) work only on a row that may take the streamed min-p path,
  // and write nothing before it
  if (part > 0 && !(c.top_p >= 1.0f && c.min_p > 0.0f && c.temperature != 0.0f)) return;
  // nor on a row whose first block has found that it does not stream (MinPSplit::done's leave bit)
  if (part > 0 && __syncthreads_or(threadIdx.x == 0 && (__ldcg(split.done + b) & kMinPSplitLeave) != 0u)) return;
  const detail::TileSummary* ts = f.tiles + b * f.num_vtiles;
  const bool greedy = c.temperature == 0.0f;
  const double inv_t = greedy ? 0.0 : 1.0 / static_cast<double>(c.temperature);
  // 2: the epilogue stored the row's logits, or with stored_tiles the tiles marked there (the extra
  // pass reads those, not W)
  const int32_t flag_value =
      f.row_logits != nullptr && (f.store_all || detail::row_stores_logits(c.top_k, c.top_p, greedy)) ? 2 : 1;
  auto flag = [&]() {
    if (threadIdx.x == 0) {
      fallback[b] = flag_value;
      atomicAdd(p.fallback_rows, 1);
    }
  };
  // a top-p row its candidates cannot decide that checks its winner, every tile stored: listed for
  // the check blocks (check_winners), else flagged for the extra pass (block-uniform)
  const bool checks_winner = kChecks && detail::row_checks_winner(c.top_k, c.top_p, c.min_p, greedy);
  auto flag_or_check_winner = [&](float m, double z, long long valid) {
    if (!checks_winner || valid != p.vocab) {
      flag();
      return;
    }
    bool stored = true;
    for (int64_t t = threadIdx.x; t < f.num_vtiles; t += blockDim.x) stored &= f.stored_tiles[b * f.num_vtiles + t] != 0;
    if (__syncthreads_and(stored))
      list_for_check(p, b, m, z, fallback, check, counts);
    else
      flag();
  };
  const int S = p.num_samples;
  if (!detail::row_needs_stats(c.top_k, c.top_p, c.min_p, p.logprobs != nullptr, p.top_logprobs)) {
    // the epilogue wrote no summaries: the winner (its +Inf tier included) is the token. It draws
    // sample 0 only: a sampled row of several is drawn by the extra pass (a greedy row's are equal).
    if (S > 1 && !greedy) {
      flag();
      return;
    }
    if (threadIdx.x == 0) {
      fallback[b] = 0;
      const unsigned long long w = winners[b];
      for (int j = 0; j < S; ++j) p.tokens[b * S + j] = w == 0ull ? -1 : detail::packed_token(w);
      if (p.row_status) p.row_status[b] = w == 0ull ? kRowNoCandidate : kRowOk;
    }
    return;
  }

  // The candidates' first batch is loaded before the summaries merge, so that its latency hides
  // under that phase (a top-k row's appends fit one batch). A sampled row without a filter or
  // topLogprobs (logprobs alone) is decided from the summaries and the winner: no candidates.
  const bool filtered = c.top_k > 0 || c.top_p < 1.0f || c.min_p > 0.0f;
  const bool reads_candidates =  // block-uniform
      detail::row_gathers_candidates(c.top_k, c.top_p, c.min_p, p.top_logprobs, greedy);
  float* val = f.cand_val + b * static_cast<int64_t>(f.cap);
  uint32_t* idx = f.cand_idx + b * static_cast<int64_t>(f.cap);
  const uint32_t used = f.theta_used[b], dropped = f.max_dropped[b];
  __shared__ CandidateSlices cs;
  float x[kPrefixRounds][4];
  uint32_t xv[kPrefixRounds][4];
  if (reads_candidates) {
    load_candidate_slices(f, b, cs);
    // a split's other block leaves a row of one batch or less to its first (decide_prefix's path)
    if (cs.quads <= kPrefixRounds * static_cast<int64_t>(blockDim.x)) {
      if (part > 0) return;
      if (split.parts > 1 && threadIdx.x == 0) atomicOr(split.done + b, kMinPSplitLeave);
    }
    if (part == 0) load_prefix_batch(val, idx, cs, 0, x, xv);
  }
  // a top-p row's histogram of appended values (filter_row: top-p takes the rank bound without top-k)
  const bool topp_rank = c.top_k <= 0 && c.top_p < 1.0f && c.temperature != 0.0f;
  static_assert(detail::kHistBuckets == kThreads, "one histogram bucket a thread");
  const uint32_t hist_count =
      topp_rank ? __ldcg(f.hist + b * detail::kHistBuckets + (detail::kHistBuckets - 1 - threadIdx.x)) : 0u;

  const RowSummary sum = block_summary(ts, f.num_vtiles, inv_t);
  const float m = sum.m;
  const long long valid = sum.valid, posinf = sum.posinf;
  const double z = greedy ? 0.0 : sum.z;

  if (threadIdx.x == 0 && part == 0) fallback[b] = 0;
  if (valid == 0) {
    if (part == 0) write_no_candidate(p, b);
    return;
  }
  const int32_t token = detail::packed_token(winners[b]);
  if (posinf > 0) {
    // +Inf logits share the mass uniformly and no filter applies: the winner (drawn among them by
    // the noise alone) is the token. topLogprobs lists them: the materialized row does that.
    if (part > 0) return;
    if (p.top_logprobs > 0 || S > 1) {
      flag();
      return;
    }
    if (threadIdx.x == 0) {
      p.tokens[b] = token;
      if (p.logprobs) p.logprobs[b] = static_cast<float>(-log(static_cast<double>(posinf)));
      if (p.row_status) p.row_status[b] = kRowOk;
    }
    return;
  }
  float winner_logit = 0.0f;
  if (token >= 0) {
    const detail::TileSummary& t = ts[token / 128];
    if ((t.best_key & 0x7fffffffu) == static_cast<uint32_t>(token)) winner_logit = t.best_logit;
  }
  if (greedy) {  // the winner is the argmax (ties to the smaller index), every sample's; logprob 0
    for (int j = threadIdx.x; j < S; j += blockDim.x) {
      p.tokens[b * S + j] = token;
      if (p.logprobs) p.logprobs[b * S + j] = 0.0f;
    }
    if (threadIdx.x == 0 && p.row_status) p.row_status[b] = kRowOk;
    for (int i = threadIdx.x; i < p.top_logprobs; i += blockDim.x) {
      p.top_tokens[b * p.top_logprobs + i] = i == 0 ? token : -1;
      p.top_token_logprobs[b * p.top_logprobs + i] = i == 0 ? 0.0f : -INFINITY;
    }
    return;
  }
  if (!filtered && S > 1) {  // the whole row is kept: its samples need the row (the epilogue drew one)
    flag();
    return;
  }
  if (!filtered && p.top_logprobs == 0) {  // logprobs alone: the winner over the whole row
    if (threadIdx.x == 0) {
      p.tokens[b] = token;
      if (p.logprobs) p.logprobs[b] = static_cast<float>((static_cast<double>(winner_logit) - m) * inv_t - log(z));
      if (p.row_status) p.row_status[b] = kRowOk;
    }
    return;
  }

  // The complete prefix: every value >= level above `dropped` was appended and kept.
  float level = used == 0u ? -INFINITY : detail::from_ordered_bits(used);
  if (dropped != 0u) level = fmaxf(level, detail::from_ordered_bits(dropped));  // (ties: strictly above)

  // Top-p rows the candidates cannot decide, flagged before they are ranked (a flat row took two
  // rounds of decide_prefix first, and its block set the kernel's length). Only rows holding more
  // candidates than the rank they gather for, as such rows do: the test cost the others ~5 us at
  // B = 1 (Llama 3's default on gaussian logits, llama3-8b: +9-10 -> +12 %).
  // - Hugging Face's order: the appended values cannot hold p of the mass. The bound weighs each
  //   histogram bucket's count at the bucket's upper edge (fp32, with a margin of 1e-3 over its
  //   roundings and decide_prefix's ~1e-6), so no row decide_prefix would decide is flagged.
  // - vLLM's order with min-p and no top-k: fewer candidates than the row holds (the prefix is
  //   incomplete) and min-p reaches below its level: decide_prefix's open test (min_p_first_top_k)
  //   on the whole prefix, which sends such a row to the extra pass.
  if (topp_rank && cs.n > detail::kTopPRank) {  // block-uniform
    const bool min_p_first = p.filter_order == FilterOrder::kMinPFirst && c.min_p > 0.0f;
    bool undecidable;
    if (min_p_first) {
      undecidable = cs.n < valid && exp((static_cast<double>(level) - m) * inv_t) >= static_cast<double>(c.min_p);
    } else {
      const int bucket = detail::kHistBuckets - 1 - static_cast<int>(threadIdx.x);
      const float upper = bucket == detail::kHistBuckets - 1 ? m : fminf(detail::hist_lower_edge(bucket + 1), m);
      const float c2 = detail::exp2_scale(inv_t);
      const float w = hist_count == 0u ? 0.0f : static_cast<float>(hist_count) * detail::exp2_ftz((upper - m) * c2);
      undecidable = static_cast<double>(block_reduce(w, Sum(), 0.0f)) * 1.001 < static_cast<double>(c.top_p) * z;
    }
    if (undecidable) {
      flag_or_check_winner(m, z, valid);
      return;
    }
  }

  // A top-p row's θ lags the grid's appends, so its level keeps ~2.5x the kTopPRank values it
  // gathers for (5.4 K of 11.3 K appended at llama3-8b, B = 64). The final histogram's rank bound,
  // where it lies above the level, is a complete prefix too (every value above the level was
  // appended and counted): the row is decided from those keys first, and from the whole prefix
  // only when its nucleus reaches below them.
  float tight = level;
  if (topp_rank) {  // block-uniform
    uint32_t total;
    const uint32_t above = block_exclusive_scan(hist_count, total) + hist_count;  // from the top bucket down
    __shared__ int s_rank_bucket;
    if (threadIdx.x == 0) s_rank_bucket = -1;
    __syncthreads();
    const uint32_t rank = static_cast<uint32_t>(detail::kTopPRank);
    if (above >= rank && above - hist_count < rank)
      s_rank_bucket = detail::kHistBuckets - 1 - static_cast<int>(threadIdx.x);
    __syncthreads();
    if (s_rank_bucket > 0) tight = fmaxf(level, detail::hist_lower_edge(s_rank_bucket));
  }

  const int lane = threadIdx.x & 31;
  const int64_t batch = kPrefixRounds * static_cast<int64_t>(blockDim.x);  // quads
  const bool minp_alone = (c.top_k <= 0 || c.top_k >= valid) && c.top_p >= 1.0f && c.min_p > 0.0f;
  // (rows with one batch of candidates or less keep decide_prefix's path: its few-key draw on one warp)
  if (minp_alone && S == 1 && p.top_logprobs == 0 && cs.quads > batch) {  // block-uniform
    if (!decide_min_p_streamed(p, c, s, val, idx, cs, x, xv, level, dropped, m, valid, split, part))
      flag_or_check_winner(m, z, valid);
    return;
  }
  if (part > 0) return;
  float lvl = tight;
  bool incomplete = false;
  for (;;) {
    if (threadIdx.x == 0) s.n = 0;
    __syncthreads();
    float local_lo = INFINITY;
    for (int64_t base = 0; base < cs.quads; base += batch) {
      if (base > 0 || lvl != tight) load_prefix_batch(val, idx, cs, base, x, xv);  // (a retry reloads)
      uint32_t keep[kPrefixRounds];
#pragma unroll
      for (int r = 0; r < kPrefixRounds; ++r) {
        keep[r] = 0u;
#pragma unroll
        for (int o = 0; o < 4; ++o)
          if (x[r][o] >= lvl && detail::ordered_bits(x[r][o]) > dropped) {
            keep[r] |= 1u << o;
            local_lo = fminf(local_lo, x[r][o]);
          }
      }
      append_kept_keys(s, keep, x, xv, lane);
    }
    const float lo = -block_reduce(-local_lo, Max(), -INFINITY);  // (its barriers order s.n and s.key)
    const int kept = s.n;

    // Incomplete prefix: valid tokens below `lvl` exist. A min-p-only row is still decided when no
    // token below the level can pass min-p (its weight is below exp((level - m) / T) <= minP).
    incomplete = kept < valid;
    if (incomplete && minp_alone && exp((static_cast<double>(lvl) - m) * inv_t) < static_cast<double>(c.min_p))
      incomplete = false;
    if (kept > kPrefixCap) break;
    const PrefixRow r{kept, m, z, valid, incomplete, lo, lvl, token, winner_logit};
    const PrefixDecision d = decide_prefix(p, c, s, r);
    if (d == kNeedsExtraPass && lvl > level) {  // the nucleus reaches below the rank bound
      lvl = level;
      __syncthreads();
      continue;
    }
    if (d == kNeedsExtraPass) flag_or_check_winner(m, z, valid);
    if (d != kGenericPath) return;
    __syncthreads();
    break;
  }
  // generic path: the prefix compacted in global memory, decided by decide_row. A top-k that keeps
  // every valid value would take the epilogue's winner there, which a filtered row does not have.
  if (c.top_k >= valid && c.top_p >= 1.0f && c.min_p <= 0.0f) {
    flag();
    return;
  }
  const int64_t count = compact_prefix(val, idx, cs, level, dropped);
  RowStats stats;
  stats.max_logit = m;
  stats.overflow = (lvl != level ? count < valid : incomplete) ? 1 : 0;  // (the whole prefix here)
  stats.z = z;
  stats.valid = valid;
  stats.posinf = 0;
  stats.count = static_cast<int32_t>(count);
  stats.pad = 0;
  stats.floor_key = 0ull;
  const float score = detail::packed_score(winners[b]);
  const uint32_t key = token < 0 ? kNoToken : static_cast<uint32_t>(token);
  const RowWinners w{&score, &key, &winner_logit};
  const Elems e{val, idx, count};
  if (!decide_row(p, e, c, &stats, &w, false)) flag_or_check_winner(m, z, valid);
}

// One block per row (decide_one_pass_row), then with the winner check (kChecks) kCheckBlocks
// blocks more (check_winners): a row's block lists a row for the check with a release of its
// entry (list_for_check) and counts itself decided when done. Calls without the check run the
// instantiation that has none of its code (the row decision is latency-bound at small B).
template <bool kChecks>
__global__ void __launch_bounds__(kThreads)
    decide_one_pass_kernel(SampleParams p, detail::FilterArgs f, const unsigned long long* winners,
                           int32_t* fallback, WinnerCheck* check, CheckCounters* counts, MinPSplit split) {
  if constexpr (kChecks) {
    if (blockIdx.x >= p.batch) {
      check_winners(p, f, fallback, check, counts);
      return;
    }
  }
  const int part = kChecks ? 0 : static_cast<int>(blockIdx.x / static_cast<uint64_t>(p.batch));
  decide_one_pass_row<kChecks>(p, f, winners, fallback, check, counts, split, part);
  if constexpr (kChecks) {
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(&counts->decided, 1u);
    }
  }
}

// check_params plus what the filtered outputs need.
cudaError_t check(const SampleParams& p) {
  const cudaError_t err = detail::check_params(p);
  if (err != cudaSuccess) return err;
  if (p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs) return cudaErrorInvalidValue;
  if (p.top_logprobs > 0 && (!p.top_tokens || !p.top_token_logprobs)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

template <typename T>
cudaError_t launch_flagged_logits(const SampleParams& p, const int32_t* rows, const int32_t* any,
                                  float* logits, cudaStream_t stream) {
  const int sms = detail::multiprocessor_count();
  const int64_t blocks_needed = (p.vocab + 7) / 8;
  const int64_t grid = blocks_needed < sms * 8 ? blocks_needed : sms * 8;
  flagged_rows_logits_kernel<T><<<static_cast<unsigned>(grid), 256, 0, stream>>>(p, rows, any, logits);
  return cudaGetLastError();
}

cudaError_t launch_flagged_logits_any(const SampleParams& p, const int32_t* rows, const int32_t* any,
                                      float* logits, cudaStream_t stream) {
  switch (p.dtype) {
    case DType::kF32: return launch_flagged_logits<float>(p, rows, any, logits, stream);
    case DType::kF16: return launch_flagged_logits<__half>(p, rows, any, logits, stream);
    case DType::kBF16: return launch_flagged_logits<__nv_bfloat16>(p, rows, any, logits, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_reference_rows(const SampleParams& call, ReferenceMethod method,
                                  cudaStream_t stream) {
  cudaError_t err = check(call);
  if (err != cudaSuccess) return err;
  Scratch scratch(call, stream);
  SampleParams p;
  void* listed = nullptr;
  float* logits = nullptr;
  float* raw = nullptr;  // logprobsMode 'raw': the logits before whole_rows_kernel rewrites them
  const size_t bytes = static_cast<size_t>(call.batch) * static_cast<size_t>(call.vocab) * sizeof(float);
  err = build_listed_table(call, scratch, &p, &listed, stream);
  if (err == cudaSuccess) err = scratch.take(bytes, &logits);
  if (err == cudaSuccess && reports_raw_logprobs(p)) err = scratch.take(bytes, &raw);
  if (err == cudaSuccess) err = launch_logits_store(p, 0, p.vocab, logits, stream);
  if (err == cudaSuccess && raw != nullptr) err = cudaMemcpyAsync(raw, logits, bytes, cudaMemcpyDeviceToDevice, stream);
  if (err == cudaSuccess) {
    if (p.fallback_rows) cudaMemsetAsync(p.fallback_rows, 0, sizeof(int32_t), stream);
    whole_rows_kernel<<<static_cast<unsigned>(p.batch), kThreads, 0, stream>>>(
        logits, p, nullptr, nullptr, method == ReferenceMethod::kInverseCdf);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess && raw != nullptr) err = launch_raw_logprobs(p, raw, scratch, stream);
  const cudaError_t freed_raw = scratch.give_back(raw);
  if (err == cudaSuccess) err = freed_raw;
  const cudaError_t freed = scratch.give_back(logits);
  const cudaError_t freed_listed = scratch.give_back(listed);
  return err != cudaSuccess ? err : freed != cudaSuccess ? freed : freed_listed;
}

cudaError_t launch_whole_rows(const SampleParams& p, float* logits, const int32_t* only_rows,
                              const int32_t* any, cudaStream_t stream) {
  return detail::launch_kernel(whole_rows_kernel, dim3(static_cast<unsigned>(p.batch)), dim3(kThreads), 0, stream,
                               detail::programmatic_launch_supported(), logits, p, only_rows, any, false);
}

namespace {

bool row_values_call_ok(const SampleParams& p) {
  return p.row_values != nullptr && p.value_rows != nullptr && p.value_row_count >= 1 && p.value_row_count <= p.batch &&
         p.value_segments >= 1 && p.value_segments <= kMaxShards && p.value_pitch >= 1 && p.tokens != nullptr &&
         p.temperature != nullptr && p.seed != nullptr && p.offset != nullptr &&
         p.allowed == nullptr && p.softcap <= 0.0f && !has_penalties(p);  // (the segments' values are final)
}

// The segments' rows laid out in `rows` ([B, V]) and flagged (`flags`: [B] and the count, zeroed
// here), then decided by the extra pass; logprobsMode 'raw' then reports the raw distribution.
cudaError_t decide_assembled_rows(const SampleParams& p, const int32_t* live, float* rows, int32_t* flags,
                                  cudaStream_t stream) {
  const size_t B = static_cast<size_t>(p.batch);
  cudaError_t err = cudaMemsetAsync(flags, 0, (B + 1) * sizeof(int32_t), stream);
  if (err == cudaSuccess) {
    const int64_t blocks = (p.vocab + 255) / 256;
    const dim3 grid(static_cast<unsigned>(blocks < 32 ? blocks : 32), static_cast<unsigned>(p.value_row_count));
    assemble_row_values_kernel<<<grid, 256, 0, stream>>>(rows, p, flags, flags + B, live);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) err = launch_extra_pass(p, flags, flags + B, rows, nullptr, stream);
  if (err == cudaSuccess) err = launch_decide_raw_rows(p, live, stream);
  return err;
}

}  // namespace

cudaError_t launch_decide_row_values(const SampleParams& p, cudaStream_t stream) {
  if (!row_values_call_ok(p)) return cudaErrorInvalidValue;
  Scratch scratch(p, stream);
  float* rows = nullptr;
  int32_t* flags = nullptr;  // [B] and the flagged count after them
  const size_t B = static_cast<size_t>(p.batch);
  cudaError_t err = scratch.take(B * static_cast<size_t>(p.vocab) * sizeof(float), &rows);
  if (err == cudaSuccess) err = scratch.take((B + 1) * sizeof(int32_t), &flags);
  if (err == cudaSuccess) err = decide_assembled_rows(scratch.rest(p), nullptr, rows, flags, stream);
  const cudaError_t freed_flags = scratch.give_back(flags);
  const cudaError_t freed = scratch.give_back(rows);
  return err != cudaSuccess ? err : freed_flags != cudaSuccess ? freed_flags : freed;
}

cudaError_t launch_rows_pass_decide(const SampleParams& p, const int32_t* live, float* rows, int32_t* flags,
                                    cudaStream_t stream) {
  if (!row_values_call_ok(p) || live == nullptr || rows == nullptr || flags == nullptr) return cudaErrorInvalidValue;
  return decide_assembled_rows(p, live, rows, flags, stream);
}

// The one-pass path (filtered_gemm_supported): the split kernel's filtered epilogue, the per-row
// decision, then the extra pass for the rows it could not decide. cudaErrorNotSupported, with
// nothing enqueued, where the shape's tensor maps cannot be encoded.
namespace {

// The one-pass path's workspace regions (byte offsets), the first `zeroed` bytes zeroed per call.
struct OnePassLayout {
  size_t win, count, slice, top, theta, drop, hist, marks, check_counts, split_done, zeroed, tiles, raw, val, idx, fb,
      check, split_shares, bytes;
  bool checks_winners;  // runs_winner_check
  int split_parts;      // min_p_split_parts
};

// Raw mode with topLogprobs stores every row's raw logits, read back by raw_top_from_tiles
// (raw_tiles_path) or launch_raw_logprobs (raw_from_stored_rows: every statistic from the rows).
bool raw_rows_stored(const SampleParams& p) { return reports_raw_logprobs(p) && p.top_logprobs > 0; }
bool raw_from_stored_rows(const SampleParams& p) { return reports_raw_logprobs(p) && !raw_tiles_path(p); }

// Only filters (and, on the one-pass path, topLogprobs) can send a row to the materialized pass.
bool chunked_may_fall_back(const SampleParams& p) { return has_truncation(p); }
// Several samples of a row that keeps every token need the whole row (the epilogue draws one): in a
// call without filters every sampled row, so every row stores its logits for the extra pass.
bool every_row_to_extra_pass(const SampleParams& p) { return p.num_samples > 1 && !chunked_may_fall_back(p); }
bool one_pass_may_fall_back(const SampleParams& p) {
  return chunked_may_fall_back(p) || p.top_logprobs > 0 || p.num_samples > 1;
}
// The one-pass path's [B, V] logits region: for the extra pass of the processed machinery
// (without_processed_logprobs), and for every row's stored raw logits (raw_rows_stored).
bool one_pass_stores_rows(const SampleParams& p) {
  return one_pass_may_fall_back(without_processed_logprobs(p)) || raw_rows_stored(p);
}
// Whether the decision runs the winner check (check_winners): a top-p call of
// kCheckWinnersMinBatch to kCheckWinnersMaxBatch rows whose rows may fall back, where a flagged
// row's stored values are the drawn ones and its token is all it reports: one sample, no processed
// logprobs, no softcap, mask or listed tokens, rows that store the tiles they choose (not every
// tile for raw logprobs), no shard. Which rows of such a call check is detail::row_checks_winner.
bool runs_winner_check(const SampleParams& p) {
  const SampleParams q = without_processed_logprobs(p);
  return p.batch >= kCheckWinnersMinBatch && p.batch <= kCheckWinnersMaxBatch && p.top_p != nullptr &&
         p.partial == nullptr && p.num_samples == 1 && q.logprobs == nullptr && q.top_logprobs == 0 &&
         p.softcap <= 0.0f && p.allowed == nullptr && p.listed_marks == nullptr && !raw_rows_stored(p) &&
         !raw_tiles_path(p) && one_pass_may_fall_back(q);
}

// The decision's blocks a streamed min-p row's batches are dealt over (MinPSplit), in calls whose
// rows may stream (min-p, one sample, no topLogprobs, no winner check: its blocks follow the
// rows'; checks_winners is runs_winner_check(p)). Four at every B: past B = SMs / 4 the other blocks run as the rows' blocks finish, and
// still take a flat row's later batches (ncu, H100, model-like min-p, llama3-8b B = 128: the
// decision 54 us with up to 4 parts where B x parts fits the SMs, 49 with 2 at every B, 43 with 4).
int min_p_split_parts(const SampleParams& p, bool checks_winners) {
  const SampleParams q = without_processed_logprobs(p);
  if (p.min_p == nullptr || p.num_samples != 1 || q.top_logprobs != 0 || p.partial != nullptr || checks_winners)
    return 1;
  return kMinPSplitParts;
}

// Top-p rows store only the tiles they choose (row_looks_wide), except where every row stores every
// tile (raw_rows_stored).
bool rows_store_some_tiles(const SampleParams& p) { return p.top_p != nullptr && !raw_rows_stored(p); }

// The candidate slices a row: one per CTA of the split kernel, whose grid is at most a CTA per SM
// (its shared memory), and one per decision thread with the spill.
int candidate_slices() {
  const int sms = detail::multiprocessor_count();
  return sms < 1 ? 1 : sms > kThreads - 1 ? kThreads - 1 : sms;
}

// Calls whose rows need no statistics (no top-k, top-p, min-p or logprobs; one sample a row) with
// softcap, a mask or listed tokens take the plain sampling epilogue on the transformed logits
// (kSampleTransformed: launch_plain_transformed), not the filtered one and its decision.
bool takes_plain_epilogue(const SampleParams& p) {
  return p.partial == nullptr && p.row_values == nullptr && p.num_samples == 1 && !has_truncation(p) &&
         p.logprobs == nullptr && p.top_logprobs == 0 && filtered_gemm_possible(p);
}

// Whether the plain route's epilogue leaves the listed tokens to listed_winners_kernel
// (detail::deferred_listed_table): from kDeferListedBatch rows, or above it where the hidden size
// is at least kListedInEpilogueMinDim. Deferred from B = 1 (A/B, H200, 2026-12-05): 512 listed
// tokens a row cost llama3-8b +0.8 -> +1.7 % over plain at B = 1 and qwen3-0.6b +9.4 -> +13.9 %;
// at B = 16 mixed (qwen3-0.6b 4096 listed +40 -> +30 %, llama3-8b +4.4 -> +6.3 %): the extra
// kernel's start outweighs what it saves on a few rows. At B = 64 a long K loop hides the
// epilogue's dependent loads of the listed entries (llama3-8b, D 4096, H100: 512 listed +3.5 ->
// +2.3 %, 4096 listed +5.9 -> +5.2 %) and a short one does not (qwen3-0.6b, D 1024, H200: 512
// listed +29 -> +46 %). Above 64 rows (wider tiles) dense lists lose again (llama3-8b B = 100:
// 4096 listed +8.7 -> +10.6 %).
constexpr int64_t kDeferListedBatch = 64;
constexpr int64_t kListedInEpilogueMinDim = 4096;
bool plain_defers_listed(const SampleParams& p) {
  const bool long_k = p.dim >= kListedInEpilogueMinDim;
  return has_penalties(p) && (long_k ? p.batch > kDeferListedBatch : p.batch >= kDeferListedBatch);
}

// The plain route's workspace regions (byte offsets): the winners, then (deferred) the listed
// tokens' values.
struct PlainLayout {
  size_t win, listed_values, bytes;
};

PlainLayout plain_layout(const SampleParams& p) {
  RegionLayout layout;
  PlainLayout l;
  l.win = layout.take(static_cast<size_t>(p.batch) * sizeof(unsigned long long));
  l.listed_values =
      layout.take(plain_defers_listed(p) ? static_cast<size_t>(p.listed_entries) * sizeof(float) : 0);
  l.bytes = layout.bytes;
  return l;
}

OnePassLayout one_pass_layout(const SampleParams& p) {
  const size_t B = static_cast<size_t>(p.batch);
  const int64_t num_vtiles = (p.vocab + 127) / 128;
  const size_t cap = kOnePassCap;
  RegionLayout layout;
  OnePassLayout l;
  l.win = layout.take(B * sizeof(unsigned long long));
  l.count = layout.take(B * static_cast<size_t>(candidate_slices() + 1) * sizeof(uint32_t));
  l.slice = layout.take(sizeof(uint32_t));
  l.top = layout.take(B * sizeof(uint32_t));
  l.theta = layout.take(B * sizeof(uint32_t));
  l.drop = layout.take(B * sizeof(uint32_t));
  l.hist = layout.take(B * detail::kHistBuckets * sizeof(uint32_t));
  l.marks = layout.take(rows_store_some_tiles(p) ? B * static_cast<size_t>(num_vtiles) : 0);
  l.checks_winners = runs_winner_check(p);
  l.split_parts = min_p_split_parts(p, l.checks_winners);
  l.check_counts = layout.take(l.checks_winners ? sizeof(CheckCounters) : 0);
  l.split_done = layout.take(l.split_parts > 1 ? B * sizeof(uint32_t) : 0);
  l.zeroed = layout.bytes;
  l.tiles = layout.take(B * static_cast<size_t>(num_vtiles) * sizeof(detail::TileSummary));
  l.raw = layout.take(raw_tiles_path(p) && p.partial == nullptr ? B * static_cast<size_t>(num_vtiles) * sizeof(detail::RawTileStats)
                                                                 : 0);
  l.val = layout.take(B * cap * sizeof(float));
  l.idx = layout.take(B * cap * sizeof(uint32_t));
  l.fb = layout.take(B * sizeof(int32_t));
  l.check = layout.take(l.checks_winners ? B * sizeof(WinnerCheck) : 0);
  l.split_shares = layout.take(l.split_parts > 1 ? B * static_cast<size_t>(l.split_parts) * sizeof(MinPShare) : 0);
  l.bytes = layout.bytes;
  return l;
}

// The chunked path's workspace regions (byte offsets).
struct ChunkedLayout {
  int64_t chunk;
  size_t stats, val, idx, ws, wk, wl, fb, chunk_logits, bytes;
};

ChunkedLayout chunked_layout(const SampleParams& p) {
  const size_t B = static_cast<size_t>(p.batch), S = static_cast<size_t>(p.num_samples);
  RegionLayout layout;
  ChunkedLayout l;
  l.chunk = p.vocab < kChunkVocab ? p.vocab : kChunkVocab;
  l.stats = layout.take(B * sizeof(RowStats));
  l.val = layout.take(B * kCandidateCap * sizeof(float));
  l.idx = layout.take(B * kCandidateCap * sizeof(uint32_t));
  l.ws = layout.take(B * S * sizeof(float));
  l.wk = layout.take(B * S * sizeof(uint32_t));
  l.wl = layout.take(B * S * sizeof(float));
  l.fb = layout.take(B * sizeof(int32_t));
  l.chunk_logits = layout.take(B * static_cast<size_t>(l.chunk) * sizeof(float));
  l.bytes = layout.bytes;
  return l;
}

// Zeroes the one-pass workspace's counters (`words` 16-byte words) and the fallback-row count, and
// lets the GEMM launched after it start at once (it waits for this grid before its epilogue).
__global__ void clear_one_pass_kernel(uint4* __restrict__ zeroed, int64_t words, int32_t* __restrict__ fallback_rows) {
  detail::griddep_launch_dependents();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < words) zeroed[i] = make_uint4(0u, 0u, 0u, 0u);
  if (i == 0) *fallback_rows = 0;
}

// The opening of both one-pass launches: the zeroing kernel (`bytes` from `zeroed`, rounded up to
// 16-byte words, and *fallback_rows), then the listed tokens' table launched programmatically where
// that is supported (*programmatic says so), so that the GEMM after it can start at once too;
// *built says whether the table's kernel was launched.
cudaError_t zero_then_build_listed(const SampleParams& p, void* zeroed, size_t bytes, int32_t* fallback_rows,
                                   cudaStream_t stream, bool* programmatic, bool* built) {
  const int64_t words = static_cast<int64_t>((bytes + sizeof(uint4) - 1) / sizeof(uint4));
  clear_one_pass_kernel<<<static_cast<unsigned>((words + 255) / 256), 256, 0, stream>>>(
      static_cast<uint4*>(zeroed), words, fallback_rows);
  cudaError_t err = cudaGetLastError();
  *programmatic = detail::programmatic_launch_supported();
  if (err == cudaSuccess) {
    err = launch_build_listed(p, *programmatic, stream);
    *built = err == cudaSuccess;
  }
  return err;
}

}  // namespace

cudaError_t filtered_workspace_bytes(const SampleParams& p, size_t* bytes) {
  size_t chunked = chunked_layout(p).bytes + raw_logits_bytes(p) + raw_slices_bytes(p);
  if (chunked_may_fall_back(p)) chunked += row_logits_bytes(p);
  size_t one_pass = 0;
  if (filtered_gemm_possible(p)) {
    one_pass = one_pass_layout(p).bytes;
    // (an engine's sampler sizes it once for calls whose filters and logprobs come and go)
    const size_t plain = plain_layout(p).bytes;
    if (plain > one_pass) one_pass = plain;
    if (raw_from_stored_rows(p)) one_pass += (one_pass_may_fall_back(p) ? raw_logits_bytes(p) : 0) + raw_slices_bytes(p);
    if (one_pass_stores_rows(p)) {
      size_t extra = 0;
      const cudaError_t err = extra_pass_workspace_bytes(p, &extra);
      if (err != cudaSuccess) return err;
      one_pass += row_logits_bytes(p) + extra;
    }
  }
  *bytes = listed_table_bytes(p) + (chunked > one_pass ? chunked : one_pass);
  return cudaSuccess;
}

// The one-pass path (filtered_gemm_supported): the split kernel's filtered epilogue, the per-row
// decision, then the extra pass for the rows it could not decide. cudaErrorNotSupported, with
// nothing enqueued, where the shape's tensor maps cannot be encoded.
// The listed tokens' table (p.listed_*) is built here, between the zeroing kernel and the GEMM,
// where the GEMM's main loop hides it; *built says whether that kernel was launched.
// A vocabulary shard's call (p.partial set) takes the same GEMM, every row's summaries and winner
// (FilterArgs::shard), then launch_partial_from_candidates in place of the decision and extra pass;
// with logprobsMode 'raw' every row stores its raw logits, from which launch_partial_raw writes the
// state's raw section.
static cudaError_t launch_one_pass_filtered(const SampleParams& p, cudaStream_t stream, bool* built) {
  const size_t B = static_cast<size_t>(p.batch);
  const bool shard = p.partial != nullptr;
  const OnePassLayout l = one_pass_layout(p);
  Scratch scratch(p, stream);
  uint8_t* ws = nullptr;
  cudaError_t err = scratch.take(l.bytes, &ws);
  if (err != cudaSuccess) return err;
  detail::FilterArgs f;
  f.tiles = reinterpret_cast<detail::TileSummary*>(ws + l.tiles);
  f.num_vtiles = (p.vocab + 127) / 128;
  f.cand_val = reinterpret_cast<float*>(ws + l.val);
  f.cand_idx = reinterpret_cast<uint32_t*>(ws + l.idx);
  f.cand_count = reinterpret_cast<uint32_t*>(ws + l.count);
  f.hist = reinterpret_cast<uint32_t*>(ws + l.hist);
  f.top_bucket = reinterpret_cast<uint32_t*>(ws + l.top);
  f.theta_used = reinterpret_cast<uint32_t*>(ws + l.theta);
  f.max_dropped = reinterpret_cast<uint32_t*>(ws + l.drop);
  f.cap = static_cast<int32_t>(kOnePassCap);
  f.slices = candidate_slices();
  f.spill_at = kSpillAt;
  f.slice_cap = reinterpret_cast<uint32_t*>(ws + l.slice);
  f.top_k = p.top_k;
  f.top_p = p.top_p;
  f.min_p = p.min_p;
  f.allowed = p.allowed;
  f.allowed_words = (p.vocab + 31) / 32;
  f.listed = reinterpret_cast<const uint2*>(p.listed_marks);
  f.listed_table = reinterpret_cast<const detail::ListedEntry*>(p.listed_table);
  f.softcap = p.softcap;
  // the processed machinery (epilogue, decision, extra pass) reports no logprobs in raw_tiles_path
  const SampleParams q = without_processed_logprobs(p);
  f.top_logprobs = q.top_logprobs;
  f.logprobs = q.logprobs != nullptr;
  f.row_logits = nullptr;
  f.store_all = 0;
  f.min_p_first = p.filter_order == FilterOrder::kMinPFirst ? 1 : 0;
  f.shard = shard ? 1 : 0;
  f.raw_tiles = raw_tiles_path(p) && !shard ? reinterpret_cast<detail::RawTileStats*>(ws + l.raw) : nullptr;
  unsigned long long* winners = reinterpret_cast<unsigned long long*>(ws + l.win);
  // The extra pass's [B, V] fp32 logits: written by the epilogue for rows that store theirs (every
  // tile, or with stored_tiles the tiles it chose), by the extra pass for the rest of flagged rows.
  float* row_logits = nullptr;
  // raw_from_stored_rows: every row's stored logits, copied where the extra pass may rewrite them
  const bool raw_mode = raw_from_stored_rows(p);
  float* raw_copy = nullptr;
  const size_t row_bytes = static_cast<size_t>(B) * static_cast<size_t>(p.vocab) * sizeof(float);
  if (!shard && one_pass_stores_rows(p)) {
    err = scratch.take(row_bytes, &row_logits);
    if (err == cudaSuccess && raw_mode && one_pass_may_fall_back(p)) err = scratch.take(row_bytes, &raw_copy);
    if (err != cudaSuccess) {
      scratch.give_back(row_logits);
      scratch.give_back(ws);
      return err;
    }
    const bool store_all = raw_rows_stored(p) || every_row_to_extra_pass(q);
    if (p.top_p != nullptr || store_all) f.row_logits = row_logits;
    f.store_all = store_all ? 1 : 0;
  }
  f.stored_tiles = !shard && rows_store_some_tiles(p) ? ws + l.marks : nullptr;  // (the top-p rows' row_logits, not store_all)
  const bool shard_raw = shard && reports_raw_logprobs(p);
  if (shard_raw) {  // (an engine's rows pass then recomputes its rows: no tile is marked stored)
    err = scratch.take(row_bytes, &row_logits);
    if (err != cudaSuccess) {
      scratch.give_back(ws);
      return err;
    }
    f.row_logits = row_logits;
    f.store_all = 1;
  } else if (shard && p.shard_row_logits != nullptr && p.shard_stored_tiles != nullptr && rows_store_some_tiles(p)) {
    f.row_logits = p.shard_row_logits;  // (the engine's rows pass reads back what they stored)
    f.stored_tiles = p.shard_stored_tiles;
  }
  float* const raw = raw_copy != nullptr ? raw_copy : raw_mode ? row_logits : nullptr;
  int32_t* fallback = reinterpret_cast<int32_t*>(ws + l.fb);
  // the winner check's records, where its rows may be listed
  WinnerCheck* check = l.checks_winners ? reinterpret_cast<WinnerCheck*>(ws + l.check) : nullptr;

  // One zeroing kernel instead of two memsets, so that the GEMM can be launched programmatically.
  bool programmatic = false;
  err = zero_then_build_listed(p, ws, l.zeroed, p.fallback_rows != nullptr ? p.fallback_rows : fallback, stream,
                               &programmatic, built);
  if (err == cudaSuccess) {
    err = launch_filtered_gemm(p, winners, f, programmatic, stream);
    if (err == cudaErrorNotSupported) {  // nothing was launched
      scratch.give_back(raw_copy);
      scratch.give_back(row_logits);
      scratch.give_back(ws);
      return err;
    }
  }
  if (err == cudaSuccess && shard) {
    err = launch_partial_from_candidates(p, f, winners, stream);
    if (err == cudaSuccess && shard_raw) err = launch_partial_raw(p, row_logits, scratch, stream);
    const cudaError_t freed_rows = scratch.give_back(row_logits);
    const cudaError_t freed = scratch.give_back(ws);
    return err != cudaSuccess ? err : freed_rows != cudaSuccess ? freed_rows : freed;
  }
  if (err == cudaSuccess) {
    constexpr size_t kSmem = sizeof(PrefixShared);
    int per_sm = 0;
    if (check != nullptr) {
      err = detail::prepare_kernel(decide_one_pass_kernel<true>, kThreads, static_cast<int>(kSmem), &per_sm);
      if (err == cudaSuccess) {
        decide_one_pass_kernel<true><<<static_cast<unsigned>(B + kCheckBlocks), kThreads, kSmem, stream>>>(
            q, f, winners, fallback, check, reinterpret_cast<CheckCounters*>(ws + l.check_counts),
            MinPSplit{nullptr, nullptr, 1});
        err = cudaGetLastError();
      }
    } else {
      err = detail::prepare_kernel(decide_one_pass_kernel<false>, kThreads, static_cast<int>(kSmem), &per_sm);
      if (err == cudaSuccess) {
        const int parts = l.split_parts;
        const MinPSplit split{parts > 1 ? reinterpret_cast<MinPShare*>(ws + l.split_shares) : nullptr,
                              parts > 1 ? reinterpret_cast<uint32_t*>(ws + l.split_done) : nullptr, parts};
        decide_one_pass_kernel<false><<<static_cast<unsigned>(B * parts), kThreads, kSmem, stream>>>(
            q, f, winners, fallback, nullptr, nullptr, split);
        err = cudaGetLastError();
      }
    }
  }
  // The extra pass: only the rows the decision flagged (on the device: the kernels return at once
  // when none was), on a [B, V] fp32 reservation written for those rows only.
  // The raw rows are read before the extra pass rewrites its rows: copied, or their top tiles read
  // (in one kernel with the drawn tokens' logprobs where no extra pass runs).
  const bool extra_pass = one_pass_may_fall_back(q);
  const bool raw_top = f.raw_tiles != nullptr && p.top_logprobs > 0;
  if (err == cudaSuccess && raw_copy != nullptr)
    err = cudaMemcpyAsync(raw_copy, row_logits, row_bytes, cudaMemcpyDeviceToDevice, stream);
  if (err == cudaSuccess && raw_top && extra_pass) err = launch_raw_from_tiles(p, row_logits, f.raw_tiles, false, stream);
  if (err == cudaSuccess && extra_pass)
    err = launch_extra_pass(scratch.rest(q), fallback, q.fallback_rows, row_logits, f.stored_tiles, stream);
  if (err == cudaSuccess && raw != nullptr) err = launch_raw_logprobs(p, raw, scratch, stream);
  if (err == cudaSuccess && f.raw_tiles != nullptr && (p.logprobs != nullptr || (raw_top && !extra_pass)))
    err = launch_raw_from_tiles(p, raw_top && !extra_pass ? row_logits : nullptr, f.raw_tiles, p.logprobs != nullptr,
                                stream);
  for (void* region : {static_cast<void*>(raw_copy), static_cast<void*>(row_logits)}) {
    const cudaError_t freed = scratch.give_back(region);
    if (err == cudaSuccess) err = freed;
  }
  const cudaError_t freed = scratch.give_back(ws);
  return err != cudaSuccess ? err : freed;
}

namespace {

// The tokens and row statuses from the winners; launched programmatically.
__global__ void plain_tokens_kernel(const unsigned long long* __restrict__ winners, int64_t batch,
                                    int32_t* __restrict__ tokens, int32_t* __restrict__ row_status) {
  detail::griddep_wait();
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const unsigned long long w = winners[b];
  tokens[b] = detail::packed_token(w);
  if (row_status != nullptr) row_status[b] = w == 0ull ? kRowNoCandidate : kRowOk;
}

}  // namespace

// The zeroing kernel (the winners, the fallback count), the listed tokens' table, the GEMM, then
// (where plain_defers_listed) listed_winners_kernel for the listed tokens the epilogue left out, then
// the tokens: each launched programmatically after the one before it. cudaErrorNotSupported, with
// nothing enqueued, where the shape's tensor maps cannot be encoded.
static cudaError_t launch_plain_transformed(const SampleParams& p, cudaStream_t stream, bool* built) {
  const size_t B = static_cast<size_t>(p.batch);
  const PlainLayout l = plain_layout(p);
  const bool defer = plain_defers_listed(p) && p.listed_marks != nullptr;
  Scratch scratch(p, stream);
  uint8_t* ws = nullptr;
  cudaError_t err = scratch.take(l.bytes, &ws);
  if (err != cudaSuccess) return err;
  unsigned long long* winners = reinterpret_cast<unsigned long long*>(ws + l.win);
  float* const listed_values = defer ? reinterpret_cast<float*>(ws + l.listed_values) : nullptr;
  detail::FilterArgs f{};
  f.allowed = p.allowed;
  f.allowed_words = (p.vocab + 31) / 32;
  f.listed = reinterpret_cast<const uint2*>(p.listed_marks);
  f.listed_table = reinterpret_cast<const detail::ListedEntry*>(p.listed_table);
  f.softcap = p.softcap;
  detail::FilterArgs gemm_f = f;
  if (defer) gemm_f.listed_table = detail::deferred_listed_table(listed_values);
  bool programmatic = false;
  err = zero_then_build_listed(p, winners, B * sizeof(unsigned long long), p.fallback_rows, stream, &programmatic,
                               built);
  if (err == cudaSuccess) {
    err = launch_transformed_gemm(p, winners, gemm_f, programmatic, stream);
    if (err == cudaErrorNotSupported) {  // nothing was launched
      scratch.give_back(ws);
      return err;
    }
  }
  if (err == cudaSuccess && defer) {
    const dim3 grid(static_cast<unsigned>((f.allowed_words + kListedThreads - 1) / kListedThreads),
                    static_cast<unsigned>(B));
    err = detail::launch_kernel(listed_winners_kernel, grid, dim3(kListedThreads), 0, stream, programmatic, p, f,
                                static_cast<const float*>(listed_values), winners);
  }
  if (err == cudaSuccess)
    err = detail::launch_kernel(plain_tokens_kernel, dim3(static_cast<unsigned>((B + 255) / 256)), dim3(256), 0, stream,
                                programmatic, static_cast<const unsigned long long*>(winners), p.batch, p.tokens,
                                p.row_status);
  const cudaError_t freed = scratch.give_back(ws);
  return err != cudaSuccess ? err : freed;
}

// launch_fused_filtered once the listed tokens' table is built (p.listed_* set where p lists any).
static cudaError_t launch_filtered_passes(const SampleParams& p, cudaStream_t stream) {
  cudaError_t err = cudaSuccess;
  bool built = false;
  if (takes_plain_epilogue(p)) {
    err = launch_plain_transformed(p, stream, &built);
    if (err != cudaErrorNotSupported) return err;
  }
  if (!built && filtered_gemm_supported(p)) {
    err = launch_one_pass_filtered(p, stream, &built);
    if (err != cudaErrorNotSupported) return err;
  }
  if (!built && (err = launch_build_listed(p, false, stream)) != cudaSuccess) return err;
  const size_t B = static_cast<size_t>(p.batch), S = static_cast<size_t>(p.num_samples);
  const ChunkedLayout l = chunked_layout(p);
  const int64_t chunk = l.chunk;
  Scratch scratch(p, stream);
  uint8_t* ws = nullptr;
  if ((err = scratch.take(l.bytes, &ws)) != cudaSuccess) return err;
  FusedState st;
  st.stats = reinterpret_cast<RowStats*>(ws + l.stats);
  st.cand_val = reinterpret_cast<float*>(ws + l.val);
  st.cand_idx = reinterpret_cast<uint32_t*>(ws + l.idx);
  st.win_score = reinterpret_cast<float*>(ws + l.ws);
  st.win_key = reinterpret_cast<uint32_t*>(ws + l.wk);
  st.win_logit = reinterpret_cast<float*>(ws + l.wl);
  st.fallback = reinterpret_cast<int32_t*>(ws + l.fb);
  float* chunk_logits = reinterpret_cast<float*>(ws + l.chunk_logits);
  float* raw = nullptr;  // raw mode: every chunk's logits, gathered into [B, V]
  if (reports_raw_logprobs(p) && (err = scratch.take(raw_logits_bytes(p), &raw)) != cudaSuccess) {
    scratch.give_back(ws);
    return err;
  }

  err = cudaMemsetAsync(p.fallback_rows, 0, sizeof(int32_t), stream);
  const size_t init_items = B * S > B ? B * S : B;
  if (err == cudaSuccess) {
    init_state_kernel<<<static_cast<unsigned>((init_items + 255) / 256), 256, 0, stream>>>(
        st, p.batch, p.num_samples);
    err = cudaGetLastError();
  }
  for (int64_t v0 = 0; err == cudaSuccess && v0 < p.vocab; v0 += chunk) {
    const int64_t count = p.vocab - v0 < chunk ? p.vocab - v0 : chunk;
    err = launch_logits_store(p, v0, count, chunk_logits, stream);
    if (err == cudaSuccess && raw != nullptr)
      err = cudaMemcpy2DAsync(raw + v0, static_cast<size_t>(p.vocab) * sizeof(float), chunk_logits,
                              static_cast<size_t>(count) * sizeof(float), static_cast<size_t>(count) * sizeof(float),
                              B, cudaMemcpyDeviceToDevice, stream);
    if (err != cudaSuccess) break;
    fold_chunk_kernel<<<static_cast<unsigned>(p.batch), kThreads, 0, stream>>>(chunk_logits, v0, count,
                                                                               p, st);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) {
    decide_candidates_kernel<<<static_cast<unsigned>(p.batch), kThreads, 0, stream>>>(p, st);
    err = cudaGetLastError();
  }
  // Rows that fell back: a materialized row each (only top-p / min-p / large top-k can need it).
  // The per-row options live on the device, so whether a row falls back is known there only: the
  // fallback kernels always run when a filter could need them and return at once when no row was
  // flagged. Their [B, V] region is reserved in the workspace but only written for flagged rows.
  if (err == cudaSuccess && chunked_may_fall_back(p)) {
    float* row_logits = nullptr;
    err = scratch.take(B * static_cast<size_t>(p.vocab) * sizeof(float), &row_logits);
    if (err == cudaSuccess) {
      err = launch_flagged_logits_any(p, st.fallback, p.fallback_rows, row_logits, stream);
      if (err == cudaSuccess) {
        whole_rows_kernel<<<static_cast<unsigned>(p.batch), kThreads, 0, stream>>>(row_logits, p,
                                                                                  st.fallback, nullptr, false);
        err = cudaGetLastError();
      }
      const cudaError_t freed = scratch.give_back(row_logits);
      if (err == cudaSuccess) err = freed;
    }
  }
  if (err == cudaSuccess && raw != nullptr) err = launch_raw_logprobs(p, raw, scratch, stream);
  const cudaError_t freed_raw = scratch.give_back(raw);
  const cudaError_t freed = scratch.give_back(ws);
  return err != cudaSuccess ? err : freed_raw != cudaSuccess ? freed_raw : freed;
}

cudaError_t launch_shard_one_pass(const SampleParams& call, cudaStream_t stream) {
  cudaError_t err = check(call);
  if (err != cudaSuccess) return err;
  if (call.partial == nullptr || !filtered_gemm_supported(call)) return cudaErrorNotSupported;
  Scratch scratch(call, stream);
  SampleParams p;
  void* listed = nullptr;
  err = take_listed_table(call, scratch, &p, &listed);
  bool built = false;
  if (err == cudaSuccess) err = launch_one_pass_filtered(scratch.rest(p), stream, &built);
  const cudaError_t freed = scratch.give_back(listed);
  return err != cudaSuccess ? err : freed;
}

cudaError_t launch_fused_filtered(const SampleParams& call, cudaStream_t stream) {
  cudaError_t err = check(call);
  if (err != cudaSuccess) return err;
  if (!call.fallback_rows) return cudaErrorInvalidValue;
  Scratch scratch(call, stream);
  SampleParams p;
  void* listed = nullptr;
  err = take_listed_table(call, scratch, &p, &listed);
  if (err == cudaSuccess) err = launch_filtered_passes(scratch.rest(p), stream);
  const cudaError_t freed = scratch.give_back(listed);
  return err != cudaSuccess ? err : freed;
}

}  // namespace cuda
}  // namespace flashsample
