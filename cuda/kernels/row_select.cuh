// What the per-row decisions share (filters.cu's decide kernels, extra_pass.cu's and partial.cu's):
// the 64-bit order keys of a row's values, block reductions (with their operators), the block scan,
// the descending sort of order keys, the block-wide Gumbel-max pick, the block's pass over a row
// and a row with nothing to draw.
#pragma once

#include <math.h>
#include <stdint.h>

#include "../include/noise.h"
#include "../include/params.h"

namespace flashsample {
namespace cuda {
namespace detail {

// 64-bit key whose unsigned order is (value descending, index ascending): larger key = earlier.
__device__ __forceinline__ unsigned long long order_key(float l, uint32_t v) {
  if (l == 0.0f) l = 0.0f;  // one encoding for -0 and +0
  uint32_t b = __float_as_uint(l);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<unsigned long long>(b) << 32) | static_cast<unsigned long long>(0xffffffffu - v);
}
__device__ __forceinline__ float key_value(unsigned long long key) {
  const uint32_t b = static_cast<uint32_t>(key >> 32);
  return __uint_as_float((b & 0x80000000u) ? (b & 0x7fffffffu) : ~b);
}
__device__ __forceinline__ uint32_t key_index(unsigned long long key) {
  return 0xffffffffu - static_cast<uint32_t>(key);
}

struct Sum {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};
struct Min {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a < b ? a : b; }
};

// Exclusive prefix of x over the block's threads (thread order), and the total; fixed order, so
// float64 sums do not depend on timing.
template <typename T>
__device__ T block_exclusive_scan(T x, T& total) {
  __shared__ T warp_sums[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  T inc = x;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += y;
  }
  T excl = __shfl_up_sync(0xffffffffu, inc, 1);
  if (lane == 0) excl = T(0);
  __syncthreads();
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    T s = lane < warps ? warp_sums[lane] : T(0);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const T y = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += y;
    }
    __syncwarp();
    if (lane < warps) warp_sums[lane] = s;
  }
  __syncthreads();
  total = warp_sums[warps - 1];
  return (warp > 0 ? warp_sums[warp - 1] : T(0)) + excl;
}

// Descending bitonic sort of keys[0, n) by the block, in shared or global memory: pads the slots up
// to the next power of two with 0 (below every order key; they must exist). The compare-and-swap
// steps of stride >= 64 go through memory, a pair a thread and a barrier a step; a warp takes the
// steps of stride <= 32 of 64 consecutive keys in registers (two a lane, lane l holding l and
// l + 32; shuffles, no barrier): 1024 keys took 55 barriers a step each, now 15 (blockDim a multiple
// of 32). Below 64 keys every step goes through memory.
__device__ __forceinline__ unsigned long long bitonic_keep(unsigned long long mine, unsigned long long other,
                                                           bool keep_larger) {
  return keep_larger ? (mine > other ? mine : other) : (mine < other ? mine : other);
}
__device__ inline void block_sort_desc(unsigned long long* keys, int n) {
  int np = 1;
  while (np < n) np <<= 1;
  for (int i = n + threadIdx.x; i < np; i += blockDim.x) keys[i] = 0ull;
  __syncthreads();
  auto memory_step = [&](int size, int stride) {
    for (int i = threadIdx.x; i < np / 2; i += blockDim.x) {
      const int lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
      const bool desc = (lo & size) == 0;
      const unsigned long long x = keys[lo], y = keys[hi];
      if ((x < y) == desc) {
        keys[lo] = y;
        keys[hi] = x;
      }
    }
    __syncthreads();
  };
  if (np < 64) {
    for (int size = 2; size <= np; size <<= 1)
      for (int stride = size >> 1; stride > 0; stride >>= 1) memory_step(size, stride);
    return;
  }
  const int lane = threadIdx.x & 31, warps = static_cast<int>(blockDim.x >> 5);
  // the steps of stride min(size / 2, 32) .. 1 of every size in [size_lo, size_hi], in registers
  auto register_steps = [&](int size_lo, int size_hi) {
    for (int seg = static_cast<int>(threadIdx.x >> 5); seg < np / 64; seg += warps) {
      const int pa = seg * 64 + lane, pb = pa + 32;
      unsigned long long a = keys[pa], b = keys[pb];
      for (int size = size_lo; size <= size_hi; size <<= 1) {
        for (int stride = (size >> 1) < 32 ? (size >> 1) : 32; stride > 0; stride >>= 1) {
          if (stride == 32) {  // a and b are partners: the lower position keeps by its direction
            const bool desc = (pa & size) == 0;
            const unsigned long long hi = a > b ? a : b, lo = a > b ? b : a;
            a = desc ? hi : lo;
            b = desc ? lo : hi;
          } else {
            const unsigned long long oa = __shfl_xor_sync(0xffffffffu, a, stride);
            const unsigned long long ob = __shfl_xor_sync(0xffffffffu, b, stride);
            const bool lower = (lane & stride) == 0;  // this lane holds the pair's lower position
            a = bitonic_keep(a, oa, lower == ((pa & size) == 0));
            b = bitonic_keep(b, ob, lower == ((pb & size) == 0));
          }
        }
      }
      keys[pa] = a;
      keys[pb] = b;
    }
    __syncthreads();
  };
  register_steps(2, 64);
  for (int size = 128; size <= np; size <<= 1) {
    for (int stride = size >> 1; stride >= 64; stride >>= 1) memory_step(size, stride);
    register_steps(size, size);
  }
}

// Block-wide reduction of v by op (every thread gets the result).
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T identity) {
  __shared__ T partial[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // `partial` may still be read by the previous call
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = identity;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) r = op(r, partial[w]);
  return r;
}

// A slice of `count` stored raw logits, thread t's values t + kThreads k (NaN past the slice; every
// load issued before any is used), softcapped into x, with the thread's +Inf count, finite count
// and largest finite value (-Inf where none): what the raw-logprobs slice kernels reduce.
template <int kThreads, int kLoads>
__device__ __forceinline__ void load_raw_slice(const float* __restrict__ slice, int64_t count, float softcap,
                                               float (&x)[kLoads], uint32_t& inf, uint32_t& finite, float& mx) {
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int64_t at = static_cast<int64_t>(threadIdx.x) + k * kThreads;
    x[k] = at < count ? slice[at] : NAN;
  }
  inf = 0u;
  finite = 0u;
  mx = -INFINITY;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    x[k] = softcap_logit(x[k], softcap);
    if (x[k] == INFINITY) ++inf;
    else if (x[k] > -INFINITY) {  // (NaN: neither)
      ++finite;
      mx = fmaxf(mx, x[k]);
    }
  }
}

// A Gumbel-max candidate carrying its logit (for logprobs).
struct Pick {
  float score;
  uint32_t key;
  float logit;
};

// The warp's best pick, on every lane.
__device__ __forceinline__ Pick warp_best(Pick p) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Pick q;
    q.score = __shfl_xor_sync(0xffffffffu, p.score, o);
    q.key = __shfl_xor_sync(0xffffffffu, p.key, o);
    q.logit = __shfl_xor_sync(0xffffffffu, p.logit, o);
    if (candidate_better(q.score, q.key, p.score, p.key)) p = q;
  }
  return p;
}

__device__ inline Pick block_best(Pick p) {
  __shared__ Pick partial[32];
  p = warp_best(p);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = p;
  __syncthreads();
  Pick r{-INFINITY, kNoToken, 0.0f};
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w)
    if (candidate_better(partial[w].score, partial[w].key, r.score, r.key)) r = partial[w];
  return r;
}

// Visits row[lo, hi) with the block: per step every thread issues its kScanUnroll loads before it
// uses any (a load and its use per trip leaves a scan bound by L2 latency: raw logprobs' passes so
// cost logprobsMode 'raw' +31 % over plain at B = 1 against +22 %, llama3-8b, 2026-12-02), then
// calls visit(v, raw) for each of them in index order (v >= hi: past the slice, raw 0; every thread
// makes the same number of calls, so a visit may use warp collectives).
constexpr int kScanUnroll = 8;
template <class Visit>
__device__ __forceinline__ void scan_row(const float* row, int64_t lo, int64_t hi, Visit&& visit) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * kScanUnroll;
  for (int64_t base = lo; base < hi; base += step) {
    float raw[kScanUnroll];
#pragma unroll
    for (int j = 0; j < kScanUnroll; ++j) {
      const int64_t v = base + j * blockDim.x + threadIdx.x;
      raw[j] = v < hi ? row[v] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kScanUnroll; ++j) visit(base + j * blockDim.x + threadIdx.x, raw[j]);
  }
}

// Row b has no token to draw (every value NaN, -Inf or masked): -1 and -Inf everywhere, status
// kRowNoCandidate. Called by the whole block.
__device__ __forceinline__ void write_no_candidate(const SampleParams& p, int64_t b) {
  const int S = p.num_samples;
  for (int j = threadIdx.x; j < S; j += blockDim.x) {
    p.tokens[b * S + j] = -1;
    if (p.logprobs) p.logprobs[b * S + j] = -INFINITY;
  }
  for (int i = threadIdx.x; i < p.top_logprobs; i += blockDim.x) {
    p.top_tokens[b * p.top_logprobs + i] = -1;
    p.top_token_logprobs[b * p.top_logprobs + i] = -INFINITY;
  }
  if (threadIdx.x == 0 && p.row_status) p.row_status[b] = kRowNoCandidate;
}

// vLLM's order (min-p first) as Hugging Face's: top-p's mass is that of the min-p survivors S, a
// prefix of the order, so it is Hugging Face's order with top-k min(k, |S|), whose min-p step then
// keeps every token. `open`: values below the ones at hand may survive min-p, so |S| is only a lower
// bound and the top-k must bound S itself. Returns the top-k to use, or -1 when the values at hand
// cannot decide the row.
__device__ __forceinline__ int32_t min_p_first_top_k(int32_t top_k, long long survivors, bool open) {
  if (open) return top_k > 0 && top_k <= survivors ? top_k : -1;
  return top_k > 0 && top_k < survivors ? top_k : static_cast<int32_t>(survivors);
}

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
