// The pieces every GEMM kernel of the CUDA backend shares: the packed candidate (one 64-bit word
// whose unsigned order is candidate_better's, merged across warps and CTAs with atomicMax, so the
// result does not depend on timing), the per-row sampling parameters, the exact pruning of the
// Gumbel epilogue, the kernels' argument struct and the sm_80 PTX wrappers.
// Kernels know nothing of Node.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "convert.cuh"
#include "../include/noise.h"
#include "../include/params.h"

namespace flashsample {
namespace cuda {
namespace detail {

// ---- candidate packing: one 64-bit word whose unsigned order is candidate_better's order ---------
// bit 63: +Inf tier; bits 62..31: the score, sign-flipped to sort as unsigned; bits 30..0:
// 0x7fffffff - index (ties go to the smaller index). 0 is "no candidate": no real candidate packs
// to 0 (that would need the score bits 0xffffffff, a NaN, and scores are never NaN).
__device__ __forceinline__ unsigned long long pack_candidate(float score, uint32_t key) {
  if (key == kNoToken) return 0ull;
  if (score == 0.0f) score = 0.0f;  // -0 and +0 compare equal in candidate_better: one encoding
  uint32_t bits = __float_as_uint(score);
  bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  const unsigned long long tier = (key >> 31) & 1u;
  const unsigned long long index = key & 0x7fffffffu;
  return (tier << 63) | (static_cast<unsigned long long>(bits) << 31) | (0x7fffffffull - index);
}

// The score of a packed candidate (pack_candidate's inverse for the score; -Inf for the empty 0).
__device__ __forceinline__ float packed_score(unsigned long long packed) {
  if (packed == 0ull) return -INFINITY;
  const uint32_t bits = static_cast<uint32_t>(packed >> 31);
  return __uint_as_float((bits & 0x80000000u) ? (bits & 0x7fffffffu) : ~bits);
}

__device__ __forceinline__ int32_t packed_token(unsigned long long packed) {
  if (packed == 0ull) return -1;
  return static_cast<int32_t>(0x7fffffffull - (packed & 0x7fffffffull));
}

// Warp-level argmax of a candidate over the lanes that differ in the bits of `mask_bits` (xor
// shuffles); every lane must take part.
template <int kFirstXor, int kLastXor>
__device__ __forceinline__ void warp_best(float& score, uint32_t& key) {
#pragma unroll
  for (int x = kFirstXor; x <= kLastXor; x <<= 1) {
    const float s = __shfl_xor_sync(0xffffffffu, score, x);
    const uint32_t k = __shfl_xor_sync(0xffffffffu, key, x);
    if (candidate_better(s, k, score, key)) {
      score = s;
      key = k;
    }
  }
}

// Per-row sampling parameters of batch row b (read through the read-only cache).
struct RowParams {
  float inv_temperature;
  bool greedy;
  uint64_t seed, offset;
  uint32_t stream;
};

__device__ __forceinline__ RowParams load_row_params(const float* temperature, const uint64_t* seed,
                                                     const uint64_t* offset, bool per_row_seed,
                                                     int64_t b) {
  RowParams r;
  const float t = __ldg(temperature + b);
  r.greedy = (t == 0.0f);
  r.inv_temperature = r.greedy ? 0.0f : 1.0f / t;  // IEEE division (no fast-math)
  r.seed = __ldg(reinterpret_cast<const unsigned long long*>(seed) + b);
  r.offset = __ldg(reinterpret_cast<const unsigned long long*>(offset) + b);
  r.stream = per_row_seed ? 0u : static_cast<uint32_t>(b);
  return r;
}

// The best candidate among the 4 vocabulary entries vq .. vq+3 (vq a multiple of 4) of one batch
// row and one sample: one Philox call for the 4 noises.
__device__ __forceinline__ void best_of_quad(const float (&logit)[4], const RowParams& rp,
                                             uint32_t sample, int64_t vq, int64_t vocab,
                                             float& best_score, uint32_t& best_key) {
  best_score = -INFINITY;
  best_key = kNoToken;
  if (vq >= vocab) return;
  float g[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (!rp.greedy) {
    const Philox4 r =
        noise_block(rp.seed, rp.offset, rp.stream, sample, static_cast<uint32_t>(vq >> 2));
#pragma unroll
    for (int o = 0; o < 4; ++o) g[o] = gumbel_from_bits(r.x[o]);
  }
#pragma unroll
  for (int o = 0; o < 4; ++o) {
    if (vq + o < vocab) {
      const Candidate c =
          make_candidate(logit[o], rp.inv_temperature, rp.greedy, g[o], static_cast<uint32_t>(vq + o));
      if (candidate_better(c.score, c.key, best_score, best_key)) {
        best_score = c.score;
        best_key = c.key;
      }
    }
  }
}

// noise_block for K rows at vocabulary quad `quad` when the K rows share one seed, with one key
// schedule for the K blocks: the same bits as K noise_block calls.
template <int K>
__device__ __forceinline__ void noise_blocks_one_key(const RowParams (&rp)[K], uint32_t sample, uint32_t quad,
                                                     Philox4 (&r)[K]) {
  uint32_t c[K][4];
#pragma unroll
  for (int k = 0; k < K; ++k) noise_counter(rp[k].offset, rp[k].stream, sample, quad, c[k]);
  philox4x32_10_one_key<K>(c, static_cast<uint32_t>(rp[0].seed), static_cast<uint32_t>(rp[0].seed >> 32));
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int o = 0; o < 4; ++o) r[k].x[o] = c[k][o];
}

// ---- exact pruning of the Gumbel epilogue ----------------------------------------------------
// An upper bound of gumbel_from_bits(x) from the bits alone. u >= 2^-(clz(x)+1) exactly (u is
// (x + 0.5) 2^-32 rounded, or the clamp 1 - 2^-24 >= 1/2), and E = -log1p(-u) >= u, so
// g = -log(E) <= -log(u) <= (clz(x) + 1) ln 2. The float ln 2 constant is rounded up and the
// 1e-3 margin covers the few-ulp errors of log1pf / logf (ulp(23) = 2e-6), so the computed g never
// exceeds the bound. gumbel_upper(0) = 22.8746 >= gumbel_from_bits(0) = 22.8736: the largest g.
__device__ __forceinline__ float gumbel_upper(uint32_t x) {
  return fmaf(static_cast<float>(__clz(x) + 1), 0.69314718f, 1e-3f);
}
constexpr float kGumbelUpper = 33.0f * 0.69314718f + 2e-3f;  // >= gumbel_upper(x) for every x

// The per-value test of the mask, cheaper than gumbel_upper (one exp2 against a count-leading-zeros
// chain) and tighter. For x >= 1, u >= x 2^-32 (1 - 2^-23) (x and the fmaf are rounded to 24 bits;
// the clamp 1 - 2^-24 costs -ln 6e-8), and E >= u, so g <= -ln u <= 32 ln 2 - ln x + 2e-7: a value
// with l/T + g >= t needs x <= exp(l/T - t + 32 ln 2). The 1e-3 margin covers that, the few-ulp
// errors of log1pf and logf, ex2.approx's 2^-22 and x's float rounding; the (|t| + 32) 2^-20 one
// covers the roundings that grow with the scores (the scores' fmaf, 1/T times log2 e, and the
// exponent's fmaf: a few 2^-24 of |t| + 23, the largest |l/T| of a value that can reach t; at
// T = 0.001 and logits near 30 they pass 1e-3). x = 0 always passes (0 <= exp2 of anything); NaN
// values never do, t = -Inf lets every finite value through. A superset of the values that can
// reach t: the loop below re-tests each exactly.
constexpr float kLog2e = 1.44269504f;
// 2^x by one MUFU.EX2 (relative error 2^-22), results below 2^-126 flushed to 0; exp2f adds a
// range test and two predicated multiplies a value to keep those denormals.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// log2(e) / T, rounded once from float64: the scale of the prescaled differences whose fp32 exp2
// gives the fixed-point weights below (the one-pass decision's and the extra pass's alike).
__device__ __forceinline__ float exp2_scale(double inv_t) { return static_cast<float>(inv_t * 1.4426950408889634); }
// A value's fixed-point weight round(exp((l - m) / T) · unit), c2 = exp2_scale(1 / T), from one
// fp32 exp2: within a relative 4e-6 at the smallest weights that count and ~3e-7 near the max
// (docs/SEMANTICS.md §5), a tenth of a double exp's instructions. Weights below 2^-126 flush to 0,
// which every unit here (at most 2^63 / V) rounds them to anyway.
__device__ __forceinline__ unsigned long long fixed_weight(float l, float m, float c2, float unit) {
  return __float2ull_rn(exp2_ftz((l - m) * c2) * unit);
}
// *at += x for a shared 64-bit word as two native 32-bit atomics (a 64-bit ATOMS is a CAS loop that
// hot buckets serialize): exact and order-free, each wrap of the low word carries once.
__device__ __forceinline__ void shared_add_u64(unsigned long long* at, unsigned long long x) {
  uint32_t* const w = reinterpret_cast<uint32_t*>(at);
  const uint32_t lo = static_cast<uint32_t>(x);
  const uint32_t old = atomicAdd(w, lo);
  const uint32_t hi = static_cast<uint32_t>(x >> 32) + (old + lo < old ? 1u : 0u);
  if (hi != 0u) atomicAdd(w + 1, hi);
}
__device__ __forceinline__ float noise_bits_limit_intercept(float t) {
  const float margin = fmaf(fabsf(t) + 32.0f, 0x1p-20f, 1e-3f);
  return (32.0f * 0.69314718f + margin - t) * kLog2e;
}
__device__ __forceinline__ bool noise_bits_can_reach(uint32_t x, float l, float slope, float intercept) {
  return static_cast<float>(x) <= exp2_ftz(fmaf(l, slope, intercept));
}

// best_of_quad with exact pruning for K rows at once, merged straight into each row's running best
// (bs, bk): quad k is row k's (its own params, bound, running best), all at the same vocabulary
// quad vq. `thr[k]` is the score of a candidate that exists elsewhere (or -Inf). Exact because fmaf
// is monotone in its addend: a value whose fmaf(l, 1/T, bound) < max(thr, bs) scores strictly less
// than an existing candidate, so it can neither win nor tie; NaN logits and NaN scores make no
// candidate anyway.
//   * quad: if no value can reach the threshold even with the largest g, no Philox call (one branch
//     for the K Philox calls: a Philox whose quad needs none is discarded);
//   * value: bound from the Philox bits (noise_bits_can_reach), the two logs only when it fails. The
//     values left are evaluated in a warp-uniform loop (one per lane per trip), so a warp pays
//     for the most values any one lane needs, not for every value some lane needs.
// Rows never interact: the same candidates and comparisons as K single-row calls in turn. The
// ping-pong epilogue calls it for the two columns of an n8 group, the split epilogue for a trip's
// columns.
// Every lane of the warp must call this (it uses __any_sync).
// kPastEndIsNan: the caller has made every value at or past vend[k] NaN already (the filtered
// epilogue), so l is used as it is. quads_whole (warp-uniform): every column's vend[k] is at or
// before vq or at or past vq + 4 (a tile inside the vocabulary), so no quad is cut. kColumnLaneStride: lanes l and l ^ d hold the same K columns
// for every power of two d >= it (1: the whole warp, the split layout; 4: lanes of one lane % 4,
// the ping-pong layout, whose other lanes hold other columns).
template <int K, bool kPastEndIsNan = false, int kColumnLaneStride = 1>
__device__ __forceinline__ void quads_update_pruned(const float (&l)[K][4], const RowParams (&rp)[K],
                                                    uint32_t sample, int64_t vq,
                                                    const int64_t (&vend)[K], bool quads_whole,
                                                    const float (&thr)[K], float (&bs)[K], uint32_t (&bk)[K]) {
  // Values at or past vend[k] become NaN once (a NaN passes no bound and makes no candidate), so the
  // tests below need no 64-bit bound per value. Only a quad that vend[k] cuts needs it.
  float lv[K][4];
  bool live[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    live[k] = vend[k] > vq;
#pragma unroll
    for (int o = 0; o < 4; ++o) lv[k][o] = l[k][o];
  }
  if (!kPastEndIsNan && !quads_whole) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t left = vend[k] - vq;
      const int nv = left <= 0 ? 0 : left >= 4 ? 4 : static_cast<int>(left);
#pragma unroll
      for (int o = 0; o < 4; ++o)
        if (o >= nv) lv[k][o] = NAN;
    }
  }
  uint32_t m[K];
  bool need[K];
  float t[K];
  bool any_need = false;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    m[k] = 0u;
    need[k] = false;
    t[k] = -INFINITY;
    if (live[k]) {
      if (rp[k].greedy) {
#pragma unroll
        for (int o = 0; o < 4; ++o) {
          const Candidate c = make_candidate(lv[k][o], 0.0f, true, 0.0f, static_cast<uint32_t>(vq + o));
          if (candidate_better(c.score, c.key, bs[k], bk[k])) {
            bs[k] = c.score;
            bk[k] = c.key;
          }
        }
      } else {
        t[k] = fmaxf(thr[k], bs[k]);
        // the quad's largest value (fmaxf skips NaN; a quad of NaN stays NaN and needs nothing)
        const float lmax = fmaxf(fmaxf(lv[k][0], lv[k][1]), fmaxf(lv[k][2], lv[k][3]));
        need[k] = fmaf(lmax, rp[k].inv_temperature, kGumbelUpper) >= t[k];
      }
    }
    any_need |= need[k];
  }
  Philox4 r[K];
#pragma unroll
  for (int k = 0; k < K; ++k) r[k].x[0] = r[k].x[1] = r[k].x[2] = r[k].x[3] = 0u;
  if (any_need) {
    bool one_key = true;
#pragma unroll
    for (int k = 1; k < K; ++k) one_key &= rp[k].seed == rp[0].seed;
    if (one_key) {
      noise_blocks_one_key<K>(rp, sample, static_cast<uint32_t>(vq >> 2), r);
    } else {
#pragma unroll
      for (int k = 0; k < K; ++k)
        r[k] = noise_block(rp[k].seed, rp[k].offset, rp[k].stream, sample, static_cast<uint32_t>(vq >> 2));
    }
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (need[k]) {
        const float slope = rp[k].inv_temperature * kLog2e;
        const float intercept = noise_bits_limit_intercept(t[k]);
#pragma unroll
        for (int o = 0; o < 4; ++o)
          if (noise_bits_can_reach(r[k].x[o], lv[k][o], slope, intercept)) m[k] |= 1u << o;
      }
  }
  uint32_t any_m = 0u;
  float tw[K];  // the threshold of column k: thr[k], raised to the warp's best candidate each round
#pragma unroll
  for (int k = 0; k < K; ++k) {
    any_m |= m[k];
    tw[k] = thr[k];
  }
  while (__any_sync(0xffffffffu, any_m != 0u)) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (m[k] != 0u) {
        const int o = __ffs(m[k]) - 1;
        m[k] &= m[k] - 1u;
        const uint32_t x = o == 0 ? r[k].x[0] : o == 1 ? r[k].x[1] : o == 2 ? r[k].x[2] : r[k].x[3];
        const float lo = o == 0 ? lv[k][0] : o == 1 ? lv[k][1] : o == 2 ? lv[k][2] : lv[k][3];
        // re-test: the running best may have risen since the mask was built
        if (fmaf(lo, rp[k].inv_temperature, gumbel_upper(x)) >= fmaxf(tw[k], bs[k])) {
          const Candidate c = make_candidate(lo, rp[k].inv_temperature, false, gumbel_from_bits(x),
                                             static_cast<uint32_t>(vq + o));
          if (candidate_better(c.score, c.key, bs[k], bk[k])) {
            bs[k] = c.score;
            bk[k] = c.key;
          }
        }
      }
    }
    any_m = 0u;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      any_m |= m[k];
      // Every lane's running best is a real candidate of its column's row, so the largest over the
      // lanes of that column is a valid threshold for the values still masked: a CTA's first tile,
      // with no threshold from earlier tiles, then evaluates about one value a lane instead of four.
      float w = bs[k];
#pragma unroll
      for (int d = 16; d >= kColumnLaneStride; d >>= 1) w = fmaxf(w, __shfl_xor_sync(0xffffffffu, w, d));
      tw[k] = fmaxf(tw[k], w);
    }
  }
}

// ---- arguments shared by every GEMM kernel -------------------------------------------------------
// kSampleFiltered: kSampleOne plus the filtered path's summaries and candidates (ws_split.cuh).
// kSampleFew: 2 .. kPrunedSamples samples a row, each draw pruned as kSampleOne's (ws_pingpong.cuh).
// kSampleTransformed: kSampleOne on the transformed logits (softcap, mask, listed tokens: SEMANTICS
// §2, steps 1-2d), for calls whose rows need no statistics (ws_split.cuh).
enum class Epi : int {
  kSampleOne = 0,
  kSampleMany = 1,
  kStore = 2,
  kSampleFiltered = 3,
  kSampleFew = 4,
  kSampleTransformed = 5,
  kSampleFilteredWords = 6,  // kSampleFiltered for calls with listed tokens or a mask: their words loaded ahead
  kSampleFilteredSummaries = 7,  // kSampleFiltered for calls whose rows gather no candidates: summaries only
  kSampleFilteredNoTopP = 8  // kSampleFiltered for calls without top-p rows or stored logits
};

struct GemmArgs {
  const void* hidden;
  const void* weight;
  const void* bias;  // nullptr = none
  int64_t batch, vocab, dim;
  int32_t num_samples;
  const float* temperature;
  const uint64_t* seed;
  const uint64_t* offset;
  bool per_row_seed;
  // A vocabulary shard's first global token id (SEMANTICS §6): the sample epilogues offer local
  // entry v as token vocab_base + v, so its noise and the winners' ids are global. 0 unsharded.
  int64_t vocab_base = 0;
  unsigned long long* winners;  // [batch, num_samples] packed candidates (sample epilogues), zeroed
  float* logits;                // [batch, vocab] (store epilogue)
  int64_t num_vtiles, num_chunks;
  // Batch columns per chunk: chunk c holds rows [c·chunk_cols, min(batch, (c + 1)·chunk_cols)).
  // Cfg::kNB, or for tiles with kEvenChunks the batch spread evenly over the chunks (launch_persistent).
  int64_t chunk_cols = 0;
  // Balanced ranges (range_rows > 0; mma_tile_kernel only): see tile_rows.
  int64_t range_rows = 0, num_ranges = 0;
  // Host side only: launch with programmatic stream serialization (launch_persistent). Only the
  // wgmma_ws kernels honour it (they wait for the previous grid before touching `winners`).
  bool programmatic_launch = false;
};

// The H rows one TMA box loads for a chunk: its chunk_cols rounded up to a swizzle atom (8 rows),
// at most the tile's kNB; the stage's rows past the box keep stale values, which only dead columns
// read. kNB-row boxes cost even chunks 13-17 % (H100, llama3-8b B = 200 / 300: 541 / 752 -> 468 /
// 625 µs) for a reason not isolated (bench/TUNING.md, "What bounds each batch size today").
__host__ __device__ __forceinline__ int64_t h_box_rows(int64_t chunk_cols, int64_t nb) {
  const int64_t rows = (chunk_cols + 7) / 8 * 8;
  return rows > 0 && rows < nb ? rows : nb;
}

// The row parameters of batch columns b0 + n, n = first, first + step, ... < count, into a kernel's
// shared staging arrays (one chunk's columns); padding columns (b >= batch) are greedy, noise-free
// and never written.
__device__ __forceinline__ void stage_row_params(const GemmArgs& a, int64_t b0, int first, int step, int count,
                                                 float* inv_t, uint8_t* greedy, unsigned long long* seed,
                                                 unsigned long long* offset) {
  for (int n = first; n < count; n += step) {
    const int64_t b = b0 + n;
    RowParams r;
    if (b < a.batch) {
      r = load_row_params(a.temperature, a.seed, a.offset, a.per_row_seed, b);
    } else {
      r.greedy = true;  // padding column: no noise, never written
      r.inv_temperature = 0.0f;
      r.seed = r.offset = 0;
    }
    inv_t[n] = r.inv_temperature;
    greedy[n] = r.greedy ? 1 : 0;
    seed[n] = r.seed;
    offset[n] = r.offset;
  }
}

// Column n's row parameters from a kernel's staging arrays (stage_row_params), for batch row b.
__device__ __forceinline__ RowParams staged_row_params(const GemmArgs& a, const float* inv_t, const uint8_t* greedy,
                                                       const unsigned long long* seed,
                                                       const unsigned long long* offset, int n, int64_t b) {
  RowParams r;
  r.inv_temperature = inv_t[n];
  r.greedy = greedy[n] != 0;
  r.seed = seed[n];
  r.offset = offset[n];
  r.stream = a.per_row_seed ? 0u : static_cast<uint32_t>(b);
  return r;
}

// The bias of vocabulary rows vq .. vq + 3 (0 past the vocabulary or without a bias), as floats.
template <bool kF16>
__device__ __forceinline__ void load_bias_quad(const void* bias_ptr, int64_t vq, int64_t vocab, float (&bias)[4]) {
#pragma unroll
  for (int o = 0; o < 4; ++o) {
    bias[o] = 0.0f;
    if (bias_ptr != nullptr && vq + o < vocab)
      bias[o] = kF16 ? load_float<__half>(bias_ptr, vq + o) : load_float<__nv_bfloat16>(bias_ptr, vq + o);
  }
}

// Vocabulary rows [v0, v_end) of tile `vtile` (0 <= vtile < num_vtiles).
// Classic tiling (range_rows == 0): tile t covers [t·BV, t·BV + BV) (clipped to the vocabulary).
// Balanced ranges: the vocabulary is cut into num_ranges contiguous ranges of range_rows rows (a
// multiple of 4, so vocabulary quads and their Philox counters stay whole), one per CTA of the
// persistent grid (grid = num_ranges, so tile `vtile` belongs to CTA vtile % num_ranges), each
// walked in tiles of BV whose last one is partial. Every CTA then streams the same W bytes: with
// classic tiles the last round of a memory-bound grid runs part-empty (llama3-8b at B = 1: 1002
// tiles on 264 CTA slots = 3.8 rounds; qwen3-8b: 1187 = 4.5 rounds).
__device__ __forceinline__ void tile_rows(const GemmArgs& a, int64_t vtile, int bv, int64_t& v0,
                                          int64_t& v_end) {
  if (a.range_rows == 0) {
    v0 = vtile * bv;
    v_end = a.vocab;
    return;
  }
  const int64_t r = vtile % a.num_ranges, t = vtile / a.num_ranges;
  v0 = r * a.range_rows + t * bv;
  v_end = min(a.vocab, (r + 1) * a.range_rows);
}

// ---- PTX wrappers (sm_80+) -----------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t& r0, uint32_t& r1, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(addr));
}
template <bool kF16>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  if constexpr (kF16) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}
}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
