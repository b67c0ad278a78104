// mma_tile_kernel: the sm_80 tensor-core (mma.sync) LM-head product logitsᵀ = W · Hᵀ with three
// epilogues (Gumbel-max sample with a running winner in registers, the same with the winner merged
// per tile for several samples, and a plain fp32 store for the materializing reference). Runs on
// compute capability 8.x and wherever the sm_90a kernels are not used (dispatch.cuh).
//
// Structure:
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

#include "common.cuh"

namespace flashsample {
namespace cuda {
namespace detail {

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

// 128 vocabulary rows per tile. B <= 16: k-slices of 128 (256 contiguous bytes per W row per stage),
// 3 stages, 2 CTAs per SM (llama3-8b on the H200, B = 1 / 8: 289 / 291 -> 258 / 262 us against
// 64-wide slices); B = 32 / 64: 4 stages of 64-wide slices (4 stages 286 us, 6 268, 8 379 at B = 1
// with one CTA per SM); B > 64: a 128 x 128 tile, 8 warps of 64 x 32, one CTA per SM.
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
              best_of_quad(l, rp, static_cast<uint32_t>(s), vq + a.vocab_base, col_ok ? v_end + a.vocab_base : 0, cs, ck);
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

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
