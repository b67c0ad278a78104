// simt_tile_kernel: the LM-head product on CUDA cores, for f32 operands and for 16-bit operands
// whose rows are not 16-byte aligned (correct, slower than the tensor-core kernels). Same
// epilogues and winner words as the tensor-core kernels.
#pragma once

#include "common.cuh"

namespace flashsample {
namespace cuda {
namespace detail {

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
        best_of_quad(l, rp[j], static_cast<uint32_t>(s), vq + a.vocab_base, b < B ? V + a.vocab_base : 0, cs, ck);
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
