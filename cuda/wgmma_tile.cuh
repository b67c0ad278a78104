// The sm_90a (Hopper) tensor-core path of the LM-head product logitsᵀ = W · Hᵀ: warpgroup MMA
// (wgmma.mma_async) with both operands read from shared memory by descriptor, fed by the same
// cp.async ring as mma_tile_kernel. Same three epilogues, same winner words, same noise.
//
// Why: mma.sync tops out far below the H200's matrix rate (v1-v3 measured ~125-200 TFLOP/s at
// B >= 128 against ~790 for wgmma), and its per-warp ldmatrix traffic re-reads the H slice from
// shared memory once per 16 vocabulary rows. wgmma reads each shared-memory tile once per
// warpgroup and runs asynchronously, so the next stage's loads and barrier overlap the MMAs.
//
// Layout:
//   * tile = 128 vocabulary rows (two m64 blocks, both computed by every warpgroup) x kNB batch
//     columns; warpgroup wg owns columns [wg·kNW, (wg+1)·kNW), so W is read from shared memory
//     by every warpgroup but from global memory once;
//   * k-slices of 64 (128-byte rows), stored in the 128-byte-swizzle pattern that wgmma's SW128
//     descriptors expect (16-byte chunk c of row r at r·128 + ((c ^ (r & 7)) · 16), 1024-byte
//     aligned 8-row atoms) — the same XOR swizzle mma_tile_kernel uses;
//   * W rows permuted on the way in (permuted_row_wg) so each thread's accumulators hold 4
//     consecutive vocabulary rows of a column: one Philox call per 4 logits, as in v2.
//   * ring discipline: stage `it` is consumed by wgmmas that stay in flight until iteration
//     it + 1 waits for them (wgmma.wait_group 1), so the slot refilled at iteration it is the one
//     of it - 2: kStages - 2 stages are prefetched.
#pragma once

#include "tile_kernels.cuh"
#include "wgmma_ops.cuh"

namespace flashsample {
namespace cuda {
namespace detail {

template <int NW, int WG, int STAGES>
struct WgTile {
  static constexpr int kBV = 128;  // vocabulary rows per tile: two m64 blocks
  static constexpr int kNW = NW;   // batch columns per warpgroup (wgmma N)
  static constexpr int kWG = WG;   // consumer warpgroups (all of them also issue loads)
  static constexpr int kNB = NW * WG;
  static constexpr int kBK = 64;
  static constexpr int kThreads = 128 * WG;
  static constexpr int kNT = NW / 8;  // n8 column groups per warpgroup
  static constexpr int kAcc = NW / 2; // fp32 accumulators per thread per m64 block
  static constexpr int kStages = STAGES;
  static constexpr int kWStageBytes = kBV * 128;
  static constexpr int kHStageBytes = kNB * 128;
  // +1024: the dynamic shared-memory base is only 16-byte aligned; the ring starts at the next
  // 1024-byte boundary (SW128 atoms must be 1024-byte aligned for the descriptor's swizzle).
  static constexpr int kSmemBytes = STAGES * (kWStageBytes + kHStageBytes) + 1024;
  static_assert(NW % 8 == 0 && NW >= 8 && NW <= 128, "wgmma N");
  static_assert(STAGES >= 3, "two stages are held by in-flight wgmmas");
  static_assert(kSmemBytes <= 227 * 1024, "sm_90 shared memory");
};

// B <= 16, 32 and 64: one warpgroup (2 CTAs per SM at 32 and 64). B <= 128: two warpgroups of 64
// columns. B <= 256: two warpgroups of 128 columns (128 accumulators per thread). Timings:
// gemm_dispatch.cuh.
using WgTile16 = WgTile<16, 1, 6>;
using WgTile32 = WgTile<32, 1, 5>;
using WgTile64 = WgTile<64, 1, 4>;
using WgTile128 = WgTile<64, 2, 4>;
using WgTile256 = WgTile<128, 2, 4>;

// Smem row of vocabulary row o (0..127) of the tile. Thread (warp wi of the warpgroup, lane group
// g = lane/4) holds accumulator rows wi·16 + g and wi·16 + 8 + g of each m64 block p; mapping
// o = 32·wi + 4·g + 2·p + h to smem row 64·p + 16·wi + 8·h + g gives it vocabulary 32·wi + 4·g + 0..3.
__device__ __forceinline__ int permuted_row_wg(int o) {
  const int wi = o >> 5, g = (o >> 2) & 7, p = (o >> 1) & 1, h = o & 1;
  return p * 64 + wi * 16 + h * 8 + g;
}

// Shared-memory matrix descriptor: K-major operand, 128-byte swizzle, 8-row groups 1024 bytes
// apart (SBO); LBO is unused for swizzled K-major layouts (encoded 1, as CUTLASS does). The low
// word is the start address >> 4 and LBO; the high word (SBO 64 · 16 bytes, 128-byte swizzle) is
// the same for every address, so a descriptor is also its low word plus that constant.
__host__ __device__ constexpr uint64_t sw128_desc_from_lo(uint32_t lo) {
  return (((64ull) | (1ull << 30)) << 32) | lo;
}
__host__ __device__ constexpr uint64_t sw128_desc(uint32_t smem_addr) {
  return sw128_desc_from_lo(((smem_addr & 0x3FFFF) >> 4) | (1u << 16));
}

__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// cp.async writes through the generic proxy; wgmma reads through the async proxy.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// Keeps the compiler from moving accumulator reads or writes across the wgmma issue/wait points.
template <int N>
__device__ __forceinline__ void pin_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <class Cfg, bool kF16, Epi kEpi>
__global__ void __launch_bounds__(Cfg::kThreads, 1) wgmma_tile_kernel(const GemmArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  constexpr int kBV = Cfg::kBV, kNB = Cfg::kNB, kNW = Cfg::kNW, kThreads = Cfg::kThreads;
  constexpr int kNT = Cfg::kNT, kAcc = Cfg::kAcc, kStages = Cfg::kStages;
  const uint32_t smem_w = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t smem_h = smem_w + kStages * Cfg::kWStageBytes;

  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, wi = warp & 3;
  const int g = lane >> 2, t4 = lane & 3;

  const int64_t V = a.vocab, D = a.dim, B = a.batch;
  const int KT = static_cast<int>((D + Cfg::kBK - 1) / Cfg::kBK);
  const int64_t total_items = a.num_vtiles * a.num_chunks;
  const int64_t my_items =
      blockIdx.x < total_items ? (total_items - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  const int64_t total_it = my_items * KT;
  const __nv_bfloat16* W = static_cast<const __nv_bfloat16*>(a.weight);
  const __nv_bfloat16* H = static_cast<const __nv_bfloat16*>(a.hidden);

  int64_t ld_it = 0, ld_item = blockIdx.x;
  int ld_kt = 0, ld_slot = 0;
  int64_t ld_v0 = (ld_item % a.num_vtiles) * kBV, ld_b0 = (ld_item / a.num_vtiles) * kNB;
  auto load_stage = [&]() {
    if (ld_it < total_it) {
      const int64_t k0 = static_cast<int64_t>(ld_kt) * Cfg::kBK;
      const uint32_t sw = smem_w + ld_slot * Cfg::kWStageBytes;
      const uint32_t sh = smem_h + ld_slot * Cfg::kHStageBytes;
#pragma unroll
      for (int i = tid; i < kBV * 8; i += kThreads) {
        const int r = i >> 3, c = i & 7;
        const int64_t v = ld_v0 + r, k = k0 + c * 8;
        const bool ok = v < V && k < D;
        const void* src = ok ? static_cast<const void*>(W + v * D + k) : a.weight;
        const int pr = permuted_row_wg(r);
        cp_async16(sw + (pr * 8 + (c ^ (pr & 7))) * 16, src, ok ? 16 : 0);
      }
#pragma unroll
      for (int i = tid; i < kNB * 8; i += kThreads) {
        const int r = i >> 3, c = i & 7;
        const int64_t b = ld_b0 + r, k = k0 + c * 8;
        const bool ok = b < B && k < D;
        const void* src = ok ? static_cast<const void*>(H + b * D + k) : a.hidden;
        cp_async16(sh + (r * 8 + (c ^ (r & 7))) * 16, src, ok ? 16 : 0);
      }
      ++ld_it;
      ld_slot = ld_slot + 1 == kStages ? 0 : ld_slot + 1;
      if (++ld_kt == KT) {
        ld_kt = 0;
        ld_item += gridDim.x;
        ld_v0 = (ld_item % a.num_vtiles) * kBV;
        ld_b0 = (ld_item / a.num_vtiles) * kNB;
      }
    }
    cp_async_commit();
  };

  float win_score[kNT][2];
  uint32_t win_key[kNT][2];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      win_score[nt][j] = -INFINITY;
      win_key[nt][j] = kNoToken;
    }

  // Row parameters of the current batch chunk, loaded once per chunk into shared memory: read
  // per column and per item in the epilogue, global loads there stalled 8-warp CTAs.
  __shared__ float row_inv_t[kNB];
  __shared__ unsigned long long row_seed[kNB], row_offset[kNB];
  __shared__ uint8_t row_greedy[kNB];
  int64_t params_chunk = -1;

  float acc0[kAcc], acc1[kAcc];  // m64 blocks p = 0 and p = 1
#pragma unroll
  for (int e = 0; e < kAcc; ++e) acc0[e] = acc1[e] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) load_stage();

  int slot = 0, kt = 0;
  int64_t item = blockIdx.x;
  for (int64_t it = 0; it < total_it; ++it) {
    cp_async_wait<kStages - 3>();
    fence_proxy_async_smem();
    __syncthreads();
    load_stage();  // refills the slot of iteration it - 2, whose wgmmas every warpgroup has waited for
    const uint32_t sw = smem_w + slot * Cfg::kWStageBytes;
    const uint32_t sh = smem_h + slot * Cfg::kHStageBytes + wg * kNW * 128;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < Cfg::kBK / 16; ++ks) {
      const uint64_t db = sw128_desc(sh + ks * 32);
      Wgmma<kNW, kF16>::mma(acc0, sw128_desc(sw + ks * 32), db);
      Wgmma<kNW, kF16>::mma(acc1, sw128_desc(sw + 64 * 128 + ks * 32), db);
    }
    wgmma_commit();
    slot = slot + 1 == kStages ? 0 : slot + 1;
    if (++kt != KT) {
      wgmma_wait<1>();
      continue;
    }
    kt = 0;
    wgmma_wait<0>();
    pin_registers(acc0);
    pin_registers(acc1);

    // ---------------- epilogue of one work item ----------------
    const int64_t chunk = item / a.num_vtiles, vtile = item % a.num_vtiles;
    const int64_t v0 = vtile * kBV, b0 = chunk * kNB;
    const int64_t vq = v0 + wi * 32 + 4 * g;  // this thread's vocabulary quad

    if constexpr (kEpi != Epi::kStore) {
      if (chunk != params_chunk) {  // CTA-uniform
        __syncthreads();
        stage_row_params(a, b0, tid, kThreads, kNB, row_inv_t, row_greedy, row_seed, row_offset);
        __syncthreads();
        params_chunk = chunk;
      }
    }

    float bias[4];
    load_bias_quad<kF16>(a.bias, vq, V, bias);

#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int n = wg * kNW + nt * 8 + t4 * 2 + j;
        const int64_t b = b0 + n;
        const bool col_ok = b < B;
        // vocabulary vq + o with o = 2p + h: block p, accumulator row half h
        float l[4];
        l[0] = acc0[nt * 4 + j] + bias[0];
        l[1] = acc0[nt * 4 + 2 + j] + bias[1];
        l[2] = acc1[nt * 4 + j] + bias[2];
        l[3] = acc1[nt * 4 + 2 + j] + bias[3];
        if constexpr (kEpi == Epi::kStore) {
          if (col_ok) {
#pragma unroll
            for (int o = 0; o < 4; ++o)
              if (vq + o < V) a.logits[b * V + vq + o] = l[o];
          }
        } else {
          RowParams rp;
          rp.inv_temperature = row_inv_t[n];
          rp.greedy = row_greedy[n] != 0;
          rp.seed = row_seed[n];
          rp.offset = row_offset[n];
          rp.stream = a.per_row_seed ? 0u : static_cast<uint32_t>(b);
          if constexpr (kEpi == Epi::kSampleOne) {
            // Exact pruning (quad_update_pruned): the threshold is the best running winner of
            // the 8 lanes that hold this column (each a real candidate of the row), so a value
            // whose bound cannot reach it skips the two logs, and a quad none of whose values
            // can reach it even with the largest g skips its Philox call.
            float thr = win_score[nt][j];
            thr = fmaxf(thr, __shfl_xor_sync(0xffffffffu, thr, 4));
            thr = fmaxf(thr, __shfl_xor_sync(0xffffffffu, thr, 8));
            thr = fmaxf(thr, __shfl_xor_sync(0xffffffffu, thr, 16));
            quad_update_pruned(l, rp, 0u, vq, col_ok ? V : 0, thr, win_score[nt][j], win_key[nt][j]);
          } else {
            for (int s = 0; s < a.num_samples; ++s) {
              float best_s;
              uint32_t best_k;
              best_of_quad(l, rp, static_cast<uint32_t>(s), vq, col_ok ? V : 0, best_s, best_k);
              warp_best<4, 16>(best_s, best_k);  // lanes with the same t4 share the column
              if (g == 0 && col_ok && best_k != kNoToken)
                atomicMax(a.winners + b * a.num_samples + s, pack_candidate(best_s, best_k));
            }
          }
        }
      }
    }

#pragma unroll
    for (int e = 0; e < kAcc; ++e) acc0[e] = acc1[e] = 0.0f;

    if constexpr (kEpi == Epi::kSampleOne) {
      const int64_t next = item + gridDim.x;
      if (next >= total_items || next / a.num_vtiles != chunk) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            float s = win_score[nt][j];
            uint32_t k = win_key[nt][j];
            warp_best<4, 16>(s, k);
            const int64_t b = b0 + wg * kNW + nt * 8 + t4 * 2 + j;
            if (g == 0 && b < B && k != kNoToken) atomicMax(a.winners + b, pack_candidate(s, k));
            win_score[nt][j] = -INFINITY;
            win_key[nt][j] = kNoToken;
          }
      }
    }
    item += gridDim.x;
  }
  cp_async_wait<0>();
#else
  __trap();  // never launched: the host dispatches here only on compute capability 9.0
#endif
}

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
