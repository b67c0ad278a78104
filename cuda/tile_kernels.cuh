// Device side of the CUDA backend: the tiled LM-head product logitsᵀ = W · Hᵀ with three epilogues
// (Gumbel-max sample with a running winner in registers, the same with the winner merged per tile
// for several samples, and a plain fp32 store for the materializing reference), plus the SIMT
// path for f32 operands (and for 16-bit operands whose rows are not 16-byte aligned).
//
// Included by fused_sample.cu and reference.cu only. Kernels know nothing of Node.
//
// Structure of the tensor-core kernel (mma_tile_kernel):
//   * roles swapped for decode: the vocabulary is the MMA's M dimension (16 rows), the batch its N
//     dimension (8 columns), so B = 1 wastes MMA lanes, never bandwidth;
//   * a persistent grid walks work items (batch chunk, vocabulary tile) with stride gridDim.x;
//     each item is a [kBV x kNB] tile of logits computed over D in k-slices of 64;
//   * W and H k-slices stream through a kStages-deep cp.async ring (16-byte loads, zero-filled
//     past V, B and D); every byte of W is read once per batch chunk (once for B <= 128);
//   * shared memory rows are XOR-swizzled in 16-byte chunks so ldmatrix is conflict-free, and the
//     W rows are permuted on the way in so that each thread's accumulators hold 4 consecutive
//     vocabulary indices of a batch column: one Philox call (noise_block) serves those 4;
//   * the winner of each (row, sample) is merged across warps and CTAs with an order-preserving
//     64-bit atomicMax (pack_candidate), so the result does not depend on timing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "convert.cuh"
#include "noise.h"
#include "params.h"

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

// best_of_quad with exact pruning, merged straight into the running best (bs, bk). `thr` is the
// score of a candidate that exists elsewhere (or -Inf). Exact because fmaf is monotone in its
// addend: a value whose fmaf(l, 1/T, bound) < max(thr, bs) scores strictly less than an existing
// candidate, so it can neither win nor tie; NaN logits and NaN scores make no candidate anyway.
//   * quad: if no value can reach the threshold even with the largest g, no Philox call;
//   * value: bound from the Philox bits (gumbel_upper), the two logs only when it fails. The
//     values left are evaluated in a warp-uniform loop (one per lane per trip), so a warp pays
//     for the most values any one lane needs, not for every value some lane needs.
// Every lane of the warp must call this (it uses __any_sync).
__device__ __forceinline__ void quad_update_pruned(const float (&l)[4], const RowParams& rp,
                                                   uint32_t sample, int64_t vq, int64_t vend,
                                                   float thr, float& bs, uint32_t& bk) {
  uint32_t m = 0;
  Philox4 r;
  r.x[0] = r.x[1] = r.x[2] = r.x[3] = 0u;
  if (vq < vend) {
    if (rp.greedy) {
#pragma unroll
      for (int o = 0; o < 4; ++o)
        if (vq + o < vend) {
          const Candidate c = make_candidate(l[o], 0.0f, true, 0.0f, static_cast<uint32_t>(vq + o));
          if (candidate_better(c.score, c.key, bs, bk)) {
            bs = c.score;
            bk = c.key;
          }
        }
    } else {
      const float t = fmaxf(thr, bs);
      bool any = false;
#pragma unroll
      for (int o = 0; o < 4; ++o)
        any |= (vq + o < vend) && fmaf(l[o], rp.inv_temperature, kGumbelUpper) >= t;
      if (any) {
        r = noise_block(rp.seed, rp.offset, rp.stream, sample, static_cast<uint32_t>(vq >> 2));
#pragma unroll
        for (int o = 0; o < 4; ++o)
          if ((vq + o < vend) && fmaf(l[o], rp.inv_temperature, gumbel_upper(r.x[o])) >= t)
            m |= 1u << o;
      }
    }
  }
  while (__any_sync(0xffffffffu, m != 0u)) {
    if (m != 0u) {
      const int o = __ffs(m) - 1;
      m &= m - 1u;
      const uint32_t x = o == 0 ? r.x[0] : o == 1 ? r.x[1] : o == 2 ? r.x[2] : r.x[3];
      const float lo = o == 0 ? l[0] : o == 1 ? l[1] : o == 2 ? l[2] : l[3];
      // re-test: the running best may have risen since the mask was built
      if (fmaf(lo, rp.inv_temperature, gumbel_upper(x)) >= fmaxf(thr, bs)) {
        const Candidate c = make_candidate(lo, rp.inv_temperature, false, gumbel_from_bits(x),
                                           static_cast<uint32_t>(vq + o));
        if (candidate_better(c.score, c.key, bs, bk)) {
          bs = c.score;
          bk = c.key;
        }
      }
    }
  }
}

// K independent quad_update_pruned calls at once: quad k is row k's (its own params, bound, running
// best), all at the same vocabulary quad vq. The same candidates and comparisons as K calls in
// turn (rows never interact), with one branch for the K Philox calls (a Philox whose quad needs
// none is discarded). The ping-pong epilogue calls it for the two columns of an n8 group. (Written
// to interleave the Philox chains; harness run 10 measured K = 2 / 4 no faster than K = 1: the
// epilogue was bound by its code size, not by dependent chains.)
// Every lane of the warp must call this (it uses __any_sync).
template <int K>
__device__ __forceinline__ void quads_update_pruned(const float (&l)[K][4], const RowParams (&rp)[K],
                                                    uint32_t sample, int64_t vq,
                                                    const int64_t (&vend)[K], const float (&thr)[K],
                                                    float (&bs)[K], uint32_t (&bk)[K]) {
  uint32_t m[K];
  bool need[K];
  float t[K];
  bool any_need = false;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    m[k] = 0u;
    need[k] = false;
    t[k] = -INFINITY;
    if (vq < vend[k]) {
      if (rp[k].greedy) {
#pragma unroll
        for (int o = 0; o < 4; ++o)
          if (vq + o < vend[k]) {
            const Candidate c = make_candidate(l[k][o], 0.0f, true, 0.0f, static_cast<uint32_t>(vq + o));
            if (candidate_better(c.score, c.key, bs[k], bk[k])) {
              bs[k] = c.score;
              bk[k] = c.key;
            }
          }
      } else {
        t[k] = fmaxf(thr[k], bs[k]);
#pragma unroll
        for (int o = 0; o < 4; ++o)
          need[k] |= (vq + o < vend[k]) && fmaf(l[k][o], rp[k].inv_temperature, kGumbelUpper) >= t[k];
      }
    }
    any_need |= need[k];
  }
  Philox4 r[K];
#pragma unroll
  for (int k = 0; k < K; ++k) r[k].x[0] = r[k].x[1] = r[k].x[2] = r[k].x[3] = 0u;
  if (any_need) {
#pragma unroll
    for (int k = 0; k < K; ++k)
      r[k] = noise_block(rp[k].seed, rp[k].offset, rp[k].stream, sample, static_cast<uint32_t>(vq >> 2));
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (need[k]) {
#pragma unroll
        for (int o = 0; o < 4; ++o)
          if ((vq + o < vend[k]) && fmaf(l[k][o], rp[k].inv_temperature, gumbel_upper(r[k].x[o])) >= t[k])
            m[k] |= 1u << o;
      }
  }
  uint32_t any_m = 0u;
#pragma unroll
  for (int k = 0; k < K; ++k) any_m |= m[k];
  while (__any_sync(0xffffffffu, any_m != 0u)) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (m[k] != 0u) {
        const int o = __ffs(m[k]) - 1;
        m[k] &= m[k] - 1u;
        const uint32_t x = o == 0 ? r[k].x[0] : o == 1 ? r[k].x[1] : o == 2 ? r[k].x[2] : r[k].x[3];
        const float lo = o == 0 ? l[k][0] : o == 1 ? l[k][1] : o == 2 ? l[k][2] : l[k][3];
        // re-test: the running best may have risen since the mask was built
        if (fmaf(lo, rp[k].inv_temperature, gumbel_upper(x)) >= fmaxf(thr[k], bs[k])) {
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
    for (int k = 0; k < K; ++k) any_m |= m[k];
  }
}

// ---- arguments shared by every GEMM kernel -------------------------------------------------------
enum class Epi : int { kSampleOne = 0, kSampleMany = 1, kStore = 2 };

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
  unsigned long long* winners;  // [batch, num_samples] packed candidates (sample epilogues), zeroed
  float* logits;                // [batch, vocab] (store epilogue)
  int64_t num_vtiles, num_chunks;
  // Balanced ranges (range_rows > 0; mma_tile_kernel only): see tile_rows.
  int64_t range_rows = 0, num_ranges = 0;
  // Host side only: launch with programmatic stream serialization (launch_persistent). Only the
  // wgmma_ws kernels honour it (they wait for the previous grid before touching `winners`).
  bool programmatic_launch = false;
};

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

// ---- tensor-core tile configurations -------------------------------------------------------------
template <int BV, int NB, int WARPS_V, int WARPS_N, int STAGES, int BK = 64>
struct MmaTile {
  static constexpr int kBV = BV;            // vocabulary rows per tile (MMA M)
  static constexpr int kNB = NB;            // batch columns per chunk (MMA N)
  static constexpr int kBK = BK;            // k-slice: BK x 2 B per row = kChunks chunks of 16 B
  static constexpr int kChunks = BK / 8;
  static constexpr int kWarpsV = WARPS_V;
  static constexpr int kWarpsN = WARPS_N;
  static constexpr int kThreads = 32 * WARPS_V * WARPS_N;
  static constexpr int kWarpV = BV / WARPS_V;  // vocabulary rows per warp
  static constexpr int kWarpN = NB / WARPS_N;  // batch columns per warp
  static constexpr int kMT = kWarpV / 16;      // m16 tiles per warp
  static constexpr int kNT = kWarpN / 8;       // n8 tiles per warp
  static constexpr int kStages = STAGES;
  static constexpr int kWStageBytes = BV * kBK * 2;
  static constexpr int kHStageBytes = NB * kBK * 2;
  static constexpr int kSmemBytes = STAGES * (kWStageBytes + kHStageBytes);

  static_assert(BV % WARPS_V == 0 && NB % WARPS_N == 0, "warps must tile the block");
  static_assert(kMT % 2 == 0, "the 4-consecutive-vocab permutation pairs m16 tiles");
  static_assert(kNT == 1 || kNT % 2 == 0, "B fragments are loaded two n8 tiles at a time");
  static_assert(BK % 64 == 0, "the XOR swizzle works on groups of 8 chunks");
  static_assert((BV * kChunks) % kThreads == 0, "W chunks per stage spread evenly over the threads");
  static_assert(STAGES >= 2, "a ring needs two stages");
  static_assert(kSmemBytes <= 160 * 1024, "fits sm_80 (164 KB) and sm_90 (227 KB)");
};

// Decode configurations (B <= 64, memory-bound): 128 vocabulary rows per tile = 16 KB of W per
// k-slice; 4 stages = 64 KB of W in flight per CTA, and 2-3 CTAs fit per SM (the lead's estimate:
// ~34 KB in flight per SM covers the latency at 4.5 TB/s). Large batch: 128 x 128 tile, 8 warps
// of 64 x 32, one CTA per SM.
// Measured v1 (H200, B = 1, llama3-8b): 4 stages 286 us, 6 stages 268 us, 8 stages 379 us (one
// CTA of 4 warps per SM: too few warps), 256 x 8 with 8 warps 271 us.
// Run 4 (v3 code): k-slices of 128 (256 contiguous bytes per W row per stage), 3 stages, 2 CTAs
// per SM: B = 1 289 -> 258 us, B = 8 291 -> 262 us; the wider slice halves the DRAM page openings
// per byte and the per-stage barriers.
using Tile8 = MmaTile<128, 8, 4, 1, 3, 128>;
using Tile16 = MmaTile<128, 16, 4, 1, 3, 128>;
using Tile32 = MmaTile<128, 32, 4, 1, 4>;
using Tile64 = MmaTile<128, 64, 4, 2, 4>;
using Tile128 = MmaTile<128, 128, 2, 4, 4>;

// Smem row that holds vocabulary row `r` of the tile: within each warp's kWarpV rows, offset
// o = 32q + 4g + 2p + h goes to m16 tile (2q + p), half h, row g, so that the accumulators
// c[2q][h*2+j], c[2q+1][h*2+j] of the lane with group g hold vocabulary 32q + 4g + {0,1,2,3}.
template <class Cfg>
__device__ __forceinline__ int permuted_row(int r) {
  const int w = r / Cfg::kWarpV;
  const int o = r % Cfg::kWarpV;
  const int q = o >> 5, g = (o >> 2) & 7, p = (o >> 1) & 1, h = o & 1;
  return w * Cfg::kWarpV + (2 * q + p) * 16 + h * 8 + g;
}

template <class Cfg, bool kF16, Epi kEpi>
__global__ void __launch_bounds__(Cfg::kThreads) mma_tile_kernel(const GemmArgs a) {
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int kBV = Cfg::kBV, kNB = Cfg::kNB, kThreads = Cfg::kThreads;
  constexpr int kMT = Cfg::kMT, kNT = Cfg::kNT, kStages = Cfg::kStages, kCh = Cfg::kChunks;
  const uint32_t smem_w = smem_u32(smem);
  const uint32_t smem_h = smem_w + kStages * Cfg::kWStageBytes;

  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int wv = warp % Cfg::kWarpsV, wn = warp / Cfg::kWarpsV;
  const int g = lane >> 2, t4 = lane & 3;

  const int64_t V = a.vocab, D = a.dim, B = a.batch;
  const int KT = static_cast<int>((D + Cfg::kBK - 1) / Cfg::kBK);
  const int64_t total_items = a.num_vtiles * a.num_chunks;
  const int64_t my_items =
      blockIdx.x < total_items ? (total_items - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  const int64_t total_it = my_items * KT;
  const __nv_bfloat16* W = static_cast<const __nv_bfloat16*>(a.weight);  // 2-byte elements
  const __nv_bfloat16* H = static_cast<const __nv_bfloat16*>(a.hidden);

  // Load cursor: iteration ld_it is k-slice ld_kt of this CTA's work item ld_item.
  int64_t ld_it = 0, ld_item = blockIdx.x;
  int ld_kt = 0, ld_slot = 0;
  int64_t ld_v0, ld_vend, ld_b0 = (ld_item / a.num_vtiles) * kNB;
  tile_rows(a, ld_item % a.num_vtiles, kBV, ld_v0, ld_vend);
  auto load_stage = [&]() {
    if (ld_it < total_it) {
      const int64_t k0 = static_cast<int64_t>(ld_kt) * Cfg::kBK;
      const uint32_t sw = smem_w + ld_slot * Cfg::kWStageBytes;
      const uint32_t sh = smem_h + ld_slot * Cfg::kHStageBytes;
#pragma unroll
      for (int i = tid; i < kBV * kCh; i += kThreads) {
        const int r = i / kCh, c = i % kCh;
        const int64_t v = ld_v0 + r, k = k0 + c * 8;
        const bool ok = v < ld_vend && k < D;
        const void* src = ok ? static_cast<const void*>(W + v * D + k) : a.weight;
        const int pr = permuted_row<Cfg>(r);
        cp_async16(sw + (pr * kCh + (c ^ (pr & 7))) * 16, src, ok ? 16 : 0);
      }
#pragma unroll
      for (int i = tid; i < kNB * kCh; i += kThreads) {
        const int r = i / kCh, c = i % kCh;
        const int64_t b = ld_b0 + r, k = k0 + c * 8;
        const bool ok = b < B && k < D;
        const void* src = ok ? static_cast<const void*>(H + b * D + k) : a.hidden;
        cp_async16(sh + (r * kCh + (c ^ (r & 7))) * 16, src, ok ? 16 : 0);
      }
      ++ld_it;
      ld_slot = ld_slot + 1 == kStages ? 0 : ld_slot + 1;
      if (++ld_kt == KT) {
        ld_kt = 0;
        ld_item += gridDim.x;
        tile_rows(a, ld_item % a.num_vtiles, kBV, ld_v0, ld_vend);
        ld_b0 = (ld_item / a.num_vtiles) * kNB;
      }
    }
    cp_async_commit();
  };

  // Running winners (single-sample epilogue): one per (n8 tile, column of the pair).
  float win_score[kNT][2];
  uint32_t win_key[kNT][2];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      win_score[nt][j] = -INFINITY;
      win_key[nt][j] = kNoToken;
    }

  float acc[kMT][kNT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) load_stage();

  int slot = 0, kt = 0;
  int64_t item = blockIdx.x;
  for (int64_t it = 0; it < total_it; ++it) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    load_stage();
    const uint32_t sw = smem_w + slot * Cfg::kWStageBytes;
    const uint32_t sh = smem_h + slot * Cfg::kHStageBytes;
    // Fragments double-buffered across the 16-wide k steps: the ldmatrix of step ks+1 is issued
    // before the MMAs of step ks.
    uint32_t af[2][kMT][4];
    uint32_t bf[2][kNT][2];
    auto load_frags = [&](int ks, int buf) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        const int row = wv * Cfg::kWarpV + mt * 16 + (lane & 15);
        const int ch = ks * 2 + (lane >> 4);
        ldmatrix_x4(af[buf][mt], sw + (row * kCh + (ch ^ (row & 7))) * 16);
      }
      if constexpr (kNT == 1) {
        const int row = wn * Cfg::kWarpN + (lane & 7);
        const int ch = ks * 2 + ((lane >> 3) & 1);
        ldmatrix_x2(bf[buf][0][0], bf[buf][0][1], sh + (row * kCh + (ch ^ (row & 7))) * 16);
      } else {
#pragma unroll
        for (int np = 0; np < kNT / 2; ++np) {
          const int row = wn * Cfg::kWarpN + np * 16 + (lane & 7) + ((lane >> 4) << 3);
          const int ch = ks * 2 + ((lane >> 3) & 1);
          uint32_t r[4];
          ldmatrix_x4(r, sh + (row * kCh + (ch ^ (row & 7))) * 16);
          bf[buf][2 * np][0] = r[0];
          bf[buf][2 * np][1] = r[1];
          bf[buf][2 * np + 1][0] = r[2];
          bf[buf][2 * np + 1][1] = r[3];
        }
      }
    };
    load_frags(0, 0);
#pragma unroll
    for (int ks = 0; ks < Cfg::kBK / 16; ++ks) {
      if (ks + 1 < Cfg::kBK / 16) load_frags(ks + 1, (ks + 1) & 1);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
          mma_16816<kF16>(acc[mt][nt], af[ks & 1][mt], bf[ks & 1][nt][0], bf[ks & 1][nt][1]);
    }
    slot = slot + 1 == kStages ? 0 : slot + 1;
    if (++kt != KT) continue;
    kt = 0;

    // ---------------- epilogue of one work item ----------------
    const int64_t chunk = item / a.num_vtiles, vtile = item % a.num_vtiles;
    const int64_t b0 = chunk * kNB;
    int64_t v0, v_end;
    tile_rows(a, vtile, kBV, v0, v_end);

    // Bias of this lane's vocabulary quads.
    float bias[kMT / 2][4];
#pragma unroll
    for (int q = 0; q < kMT / 2; ++q) {
      const int64_t vq = v0 + wv * Cfg::kWarpV + q * 32 + 4 * g;
#pragma unroll
      for (int o = 0; o < 4; ++o) {
        bias[q][o] = 0.0f;
        if (a.bias != nullptr && vq + o < v_end)
          bias[q][o] = kF16 ? load_float<__half>(a.bias, vq + o)
                            : load_float<__nv_bfloat16>(a.bias, vq + o);
      }
    }

#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int n = wn * Cfg::kWarpN + nt * 8 + t4 * 2 + j;
        const int64_t b = b0 + n;
        const bool col_ok = b < B;
        if constexpr (kEpi == Epi::kStore) {
          if (col_ok) {
#pragma unroll
            for (int q = 0; q < kMT / 2; ++q) {
              const int64_t vq = v0 + wv * Cfg::kWarpV + q * 32 + 4 * g;
#pragma unroll
              for (int o = 0; o < 4; ++o)
                if (vq + o < v_end)
                  a.logits[b * V + vq + o] = acc[2 * q + (o >> 1)][nt][(o & 1) * 2 + j] + bias[q][o];
            }
          }
        } else {
          RowParams rp;
          if (col_ok) {
            rp = load_row_params(a.temperature, a.seed, a.offset, a.per_row_seed, b);
          } else {
            rp.greedy = true;  // padding column: no noise, never written
            rp.inv_temperature = 0.0f;
            rp.seed = rp.offset = 0;
            rp.stream = 0;
          }
          const int num_s = kEpi == Epi::kSampleOne ? 1 : a.num_samples;
          for (int s = 0; s < num_s; ++s) {
            float best_s = -INFINITY;
            uint32_t best_k = kNoToken;
#pragma unroll
            for (int q = 0; q < kMT / 2; ++q) {
              const int64_t vq = v0 + wv * Cfg::kWarpV + q * 32 + 4 * g;
              float l[4];
#pragma unroll
              for (int o = 0; o < 4; ++o) l[o] = acc[2 * q + (o >> 1)][nt][(o & 1) * 2 + j] + bias[q][o];
              float cs;
              uint32_t ck;
              best_of_quad(l, rp, static_cast<uint32_t>(s), vq, col_ok ? v_end : 0, cs, ck);
              if (candidate_better(cs, ck, best_s, best_k)) {
                best_s = cs;
                best_k = ck;
              }
            }
            if constexpr (kEpi == Epi::kSampleOne) {
              if (candidate_better(best_s, best_k, win_score[nt][j], win_key[nt][j])) {
                win_score[nt][j] = best_s;
                win_key[nt][j] = best_k;
              }
            } else {
              warp_best<4, 16>(best_s, best_k);  // lanes with the same t4 share the column
              if (g == 0 && col_ok && best_k != kNoToken)
                atomicMax(a.winners + b * a.num_samples + s, pack_candidate(best_s, best_k));
            }
          }
        }
      }
    }

#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;

    if constexpr (kEpi == Epi::kSampleOne) {
      // Flush the running winners when the next item is another batch chunk (or there is none).
      const int64_t next = item + gridDim.x;
      if (next >= total_items || next / a.num_vtiles != chunk) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            float s = win_score[nt][j];
            uint32_t k = win_key[nt][j];
            warp_best<4, 16>(s, k);
            const int64_t b = b0 + wn * Cfg::kWarpN + nt * 8 + t4 * 2 + j;
            if (g == 0 && b < B && k != kNoToken) atomicMax(a.winners + b, pack_candidate(s, k));
            win_score[nt][j] = -INFINITY;
            win_key[nt][j] = kNoToken;
          }
      }
    }
    item += gridDim.x;
  }
  cp_async_wait<0>();
}

// ---- SIMT path: f32 operands, or 16-bit operands that are not 16-byte aligned --------------------
// One CTA per work item (batch chunk, vocabulary tile); each thread owns 4 consecutive vocabulary
// rows x 2 batch columns. Many CTAs per SM keep the loads in flight (no explicit pipeline).
template <int TVT, int TBT>
struct SimtTile {
  static constexpr int kTV = TVT, kTB = TBT;
  static constexpr int kThreads = TVT * TBT;
  static constexpr int kBV = 4 * TVT;
  static constexpr int kNB = 2 * TBT;
  static constexpr int kBK = 32;
  static_assert(TVT % 32 == 0, "a warp covers 32 consecutive vocabulary quads of one column pair");
  static_assert(kThreads <= 1024, "one block");
};
using SimtSmall = SimtTile<64, 4>;   // 256 x 8, B <= 8
using SimtLarge = SimtTile<32, 16>;  // 128 x 32

template <class Cfg, typename T, Epi kEpi>
__global__ void __launch_bounds__(Cfg::kThreads) simt_tile_kernel(const GemmArgs a) {
  constexpr int kBV = Cfg::kBV, kNB = Cfg::kNB, kBK = Cfg::kBK, kThreads = Cfg::kThreads;
  __shared__ __align__(16) float ws[kBK][kBV + 4];
  __shared__ __align__(16) float hs[kBK][kNB];
  __shared__ float red_s[kThreads / 32][2];
  __shared__ uint32_t red_k[kThreads / 32][2];

  const int tid = threadIdx.x;
  const int tv = tid % Cfg::kTV, tb = tid / Cfg::kTV;
  const int64_t V = a.vocab, D = a.dim, B = a.batch;
  const int64_t vtile = blockIdx.x, chunk = blockIdx.y;
  const int64_t v0 = vtile * kBV, b0 = chunk * kNB;

  float acc[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i][0] = acc[i][1] = 0.0f;

  for (int64_t k0 = 0; k0 < D; k0 += kBK) {
    __syncthreads();
    for (int i = tid; i < kBV * kBK; i += kThreads) {
      const int r = i / kBK, c = i % kBK;
      const int64_t v = v0 + r, k = k0 + c;
      ws[c][r] = (v < V && k < D) ? load_float<T>(a.weight, v * D + k) : 0.0f;
    }
    for (int i = tid; i < kNB * kBK; i += kThreads) {
      const int r = i / kBK, c = i % kBK;
      const int64_t b = b0 + r, k = k0 + c;
      hs[c][r] = (b < B && k < D) ? load_float<T>(a.hidden, b * D + k) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kBK; ++kk) {
      const float4 w4 = *reinterpret_cast<const float4*>(&ws[kk][4 * tv]);
      const float2 h2 = *reinterpret_cast<const float2*>(&hs[kk][2 * tb]);
      acc[0][0] = fmaf(w4.x, h2.x, acc[0][0]);
      acc[1][0] = fmaf(w4.y, h2.x, acc[1][0]);
      acc[2][0] = fmaf(w4.z, h2.x, acc[2][0]);
      acc[3][0] = fmaf(w4.w, h2.x, acc[3][0]);
      acc[0][1] = fmaf(w4.x, h2.y, acc[0][1]);
      acc[1][1] = fmaf(w4.y, h2.y, acc[1][1]);
      acc[2][1] = fmaf(w4.z, h2.y, acc[2][1]);
      acc[3][1] = fmaf(w4.w, h2.y, acc[3][1]);
    }
  }

  const int64_t vq = v0 + 4 * tv;
  float bias[4];
#pragma unroll
  for (int o = 0; o < 4; ++o)
    bias[o] = (a.bias != nullptr && vq + o < V) ? load_float<T>(a.bias, vq + o) : 0.0f;

  if constexpr (kEpi == Epi::kStore) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t b = b0 + 2 * tb + j;
      if (b < B)
#pragma unroll
        for (int o = 0; o < 4; ++o)
          if (vq + o < V) a.logits[b * V + vq + o] = acc[o][j] + bias[o];
    }
  } else {
    RowParams rp[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t b = b0 + 2 * tb + j;
      if (b < B) {
        rp[j] = load_row_params(a.temperature, a.seed, a.offset, a.per_row_seed, b);
      } else {
        rp[j].greedy = true;
        rp[j].inv_temperature = 0.0f;
        rp[j].seed = rp[j].offset = 0;
        rp[j].stream = 0;
      }
    }
    const int warp = tid >> 5, lane = tid & 31;
    for (int s = 0; s < a.num_samples; ++s) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int64_t b = b0 + 2 * tb + j;
        float l[4];
#pragma unroll
        for (int o = 0; o < 4; ++o) l[o] = acc[o][j] + bias[o];
        float cs;
        uint32_t ck;
        best_of_quad(l, rp[j], static_cast<uint32_t>(s), vq, b < B ? V : 0, cs, ck);
        warp_best<1, 16>(cs, ck);  // a warp is 32 quads of the same column pair
        if (lane == 0) {
          red_s[warp][j] = cs;
          red_k[warp][j] = ck;
        }
      }
      __syncthreads();
      if (tid < kNB) {
        const int tbb = tid >> 1, j = tid & 1;
        const int64_t b = b0 + tid;
        float bs = -INFINITY;
        uint32_t bk = kNoToken;
        for (int w = 0; w < Cfg::kTV / 32; ++w) {
          const int ww = tbb * (Cfg::kTV / 32) + w;
          if (candidate_better(red_s[ww][j], red_k[ww][j], bs, bk)) {
            bs = red_s[ww][j];
            bk = red_k[ww][j];
          }
        }
        if (b < B && bk != kNoToken) atomicMax(a.winners + b * a.num_samples + s, pack_candidate(bs, bk));
      }
      __syncthreads();
    }
  }
}

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
