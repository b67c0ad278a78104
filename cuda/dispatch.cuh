// Which kernel and tile run an LM-head GEMM, by architecture, operands, batch and epilogue. The
// epilogue is the caller's: kSampleOne (one Gumbel-max sample per row, launch_fused_sample),
// kSampleFew / kSampleMany (2 .. 4 / more samples per row), kStore (fp32 logits, the reference and
// the filtered path).
//
// | arch              | operands                 | B            | epilogue     | kernel (file)                         | tile           |
// |-------------------|--------------------------|--------------|--------------|---------------------------------------|----------------|
// | 9.0               | bf16 / f16, 16-B rows    | <= 16        | kSampleOne   | wgmma_split_kernel (ws_split.cuh)     | WsSplitTile16  |
// | 9.0               |                          | <= 32        | kSampleOne   | wgmma_split_kernel                    | WsSplitTile32  |
// | 9.0               |                          | <= 64        | kSampleOne   | wgmma_split_kernel                    | WsSplitTile64  |
// | 9.0               |                          | > 64         | kSampleOne   | wgmma_split_kernel, 96- or 128-column chunks, whichever pads fewer; 64-column ones for small D (small_dim_chunks) | WsSplitTile96 / 128 / 64 |
// | 9.0               |                          | <= 16/32/64  | other        | wgmma_ws_tma_kernel (ws_pingpong.cuh) | WsTileT<16/32/64> |
// | 9.0               |                          | > 64         | other        | wgmma_ws_tma_kernel                   | WsTileT<128>   |
// | 9.0               |                          | as above     | kSampleTransformed | wgmma_split_transformed_kernel (ws_split.cuh) | WsSplitTile16 ... 128 |
// | 9.0               |                          | as above     | kSampleFiltered, kSampleFilteredWords (calls with lists or a mask), kSampleFilteredSummaries (no top-k, top-p, min-p or topLogprobs), kSampleFilteredNoTopP (no top-p, no stored logits) | wgmma_split_filtered_kernel (ws_split.cuh) | WsSplitTile16 ... 128 |
// | 8.x, or mma.sync* | bf16 / f16, 16-B rows    | <= 8 / 16    | any          | mma_tile_kernel (mma_sync.cuh), balanced ranges | Tile8 / Tile16 |
// | 8.x, or mma.sync* |                          | <= 32/64/more| any          | mma_tile_kernel                       | Tile32 / 64 / 128 |
// | any               | f32, or unaligned rows   | <= 8 / more  | kSampleMany, kStore | simt_tile_kernel (simt.cuh)    | SimtSmall / Large |
//
// * mma.sync on 9.0: under FLASHSAMPLE_NO_WGMMA, or where the tensor maps cannot be encoded (a
//   driver without the encoder, or FLASHSAMPLE_NO_TENSOR_MAPS). kSampleTransformed and
//   kSampleFiltered need wgmma and the tensor maps; without them filters.cu runs its chunked path.
// Each tile's evidence (the measurement that chose it) is the line beside its definition.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include "check_params.h"
#include "escape_hatches.h"
#include "kernels/mma_sync.cuh"
#include "kernels/simt.cuh"
#include "kernels/ws_pingpong.cuh"
#include "kernels/ws_split.cuh"
#include "launch.cuh"

namespace flashsample {
namespace cuda {
namespace detail {

// The tensor-core kernels need 16-byte rows: D a multiple of 8 and W, H 16-byte aligned. Other
// 16-bit inputs take the SIMT kernel (correct, slower).
inline bool tensor_core_path_ok(const SampleParams& p) {
  return p.dtype != DType::kF32 && p.dim % 8 == 0 &&
         (reinterpret_cast<uintptr_t>(p.weight) & 15) == 0 &&
         (reinterpret_cast<uintptr_t>(p.hidden) & 15) == 0;
}

// Whether the current device runs the sm_90a wgmma kernels: compute capability 9.0 (the build's
// 90a cubin), unless FLASHSAMPLE_NO_WGMMA is set (then every batch takes the mma.sync kernels,
// for comparisons and as an escape hatch). Cached per device.
inline bool wgmma_usable() {
  return !no_wgmma_hatch() && compute_capability() == 90;
}

// B > 64: 96-column chunks when they pad fewer columns than 128-column ones (64 < B <= 96,
// 128 < B <= 192, 256 < B <= 288, ...; a tie goes to 128): a partial chunk's padding columns cost
// more than their share.
inline bool prefer_96_column_chunks(int64_t batch) {
  const int64_t padded96 = (batch + 95) / 96 * 96, padded128 = (batch + 127) / 128 * 128;
  return padded96 < padded128;
}

// One sample a row on heads of small D: 64-column chunks, whose 7 ring stages keep a short K loop
// fed where one 128-column chunk's 4 leave the MMA warpgroup waiting for data. B 97-128 at
// D <= 2048 (H100, 2026-12-07, plain B = 128: qwen3-0.6b -5.8 %, gemma3-1b -4.9, llama3.2-1b -2.1,
// gpt2 -14.1) and every B <= 256 at D <= 768 (gpt2 -1.6 to -5.0 % at 96-256); more than two such
// chunks cost qwen3-0.6b +4-6 % and gemma3-1b +9-14 % at B = 160-256.
inline bool small_dim_chunks(int64_t dim, int64_t batch) {
  return batch <= 256 && (dim <= 768 || (dim <= 2048 && batch > 96 && batch <= 128));
}

template <class Cfg, bool kF16, Epi kEpi, bool kBalanced = false>
cudaError_t launch_mma_sync(GemmArgs a, cudaStream_t stream) {
  return launch_persistent<Cfg, kBalanced>(mma_tile_kernel<Cfg, kF16, kEpi>, a, stream);
}

// The table's mma.sync rows. mma.sync draws several samples unpruned.
template <bool kF16, Epi kEpi>
cudaError_t launch_mma_sync_for_batch(const GemmArgs& a, cudaStream_t stream) {
  constexpr Epi kMmaEpi = kEpi == Epi::kSampleFew ? Epi::kSampleMany : kEpi;
  if (a.batch <= 8) return launch_mma_sync<Tile8, kF16, kMmaEpi, true>(a, stream);
  if (a.batch <= 16) return launch_mma_sync<Tile16, kF16, kMmaEpi, true>(a, stream);
  if (a.batch <= 32) return launch_mma_sync<Tile32, kF16, kMmaEpi>(a, stream);
  if (a.batch <= 64) return launch_mma_sync<Tile64, kF16, kMmaEpi>(a, stream);
  return launch_mma_sync<Tile128, kF16, kMmaEpi>(a, stream);
}

// kSampleOne runs the split tile, the other epilogues its ping-pong tile (WsSplitTile::PingPong);
// where their tensor maps cannot be encoded, the mma.sync tiles.
template <class SplitCfg, bool kF16, Epi kEpi>
cudaError_t launch_ws(GemmArgs a, cudaStream_t stream) {
  WsTensorMaps maps{};
  if constexpr (kEpi == Epi::kSampleOne) {
    if (encode_ws_maps<SplitCfg>(a, kF16, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, &maps))
      return launch_persistent<SplitCfg, false, true>(wgmma_split_kernel<SplitCfg, kF16>, a, stream, maps);
  } else {
    using Cfg = typename SplitCfg::PingPong;
    if (encode_ws_maps<Cfg>(a, kF16, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, &maps))
      return launch_persistent<Cfg, false, true>(wgmma_ws_tma_kernel<Cfg, kF16, kEpi>, a, stream, maps);
  }
  return launch_mma_sync_for_batch<kF16, kEpi>(a, stream);
}

// The table's tensor-core rows: wgmma on compute capability 9.0, mma.sync elsewhere.
template <bool kF16, Epi kEpi>
cudaError_t launch_tensor_core_gemm(const GemmArgs& a, cudaStream_t stream) {
  if (wgmma_usable()) {
    if (a.batch <= 16) return launch_ws<WsSplitTile16, kF16, kEpi>(a, stream);
    if (a.batch <= 32) return launch_ws<WsSplitTile32, kF16, kEpi>(a, stream);
    if (a.batch <= 64 || (kEpi == Epi::kSampleOne && small_dim_chunks(a.dim, a.batch)))
      return launch_ws<WsSplitTile64, kF16, kEpi>(a, stream);
    if (prefer_96_column_chunks(a.batch)) return launch_ws<WsSplitTile96, kF16, kEpi>(a, stream);
    return launch_ws<WsSplitTile128, kF16, kEpi>(a, stream);
  }
  return launch_mma_sync_for_batch<kF16, kEpi>(a, stream);
}

// The table's filtered row (filters.cu runs its chunked path where this is not usable).
inline bool filtered_gemm_usable(const SampleParams& p) { return tensor_core_path_ok(p) && wgmma_usable(); }

// The split kernel with an epilogue that reads FilterArgs: kSampleFilteredWords for calls with
// lists or a mask (their words loaded one item ahead), kSampleFilteredSummaries for calls no row of
// which can gather candidates (logprobs alone: two columns a trip), kSampleFilteredNoTopP for calls
// without top-p rows or stored logits (top-k, min-p, topLogprobs: no mass bound or row store compiled
// in), kSampleFiltered for the others (no word tested in their trips), or kSampleTransformed.
template <class SplitCfg, bool kF16, Epi kEpi>
cudaError_t launch_split_with_filter_args(const GemmArgs& a, const FilterArgs& f, cudaStream_t stream) {
  WsTensorMaps maps{};
  if (!encode_ws_maps<SplitCfg>(a, kF16, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, &maps)) return cudaErrorNotSupported;
  if constexpr (kEpi == Epi::kSampleTransformed) {
    return launch_persistent<SplitCfg, false, true>(wgmma_split_transformed_kernel<SplitCfg, kF16>, a, stream, maps, f);
  } else {
    if (f.listed != nullptr || f.allowed != nullptr)
      return launch_persistent<SplitCfg, false, true>(
          wgmma_split_filtered_kernel<SplitCfg, kF16, Epi::kSampleFilteredWords>, a, stream, maps, f);
    if (f.top_k == nullptr && f.top_p == nullptr && f.min_p == nullptr && f.top_logprobs <= 0)
      return launch_persistent<SplitCfg, false, true>(
          wgmma_split_filtered_kernel<SplitCfg, kF16, Epi::kSampleFilteredSummaries>, a, stream, maps, f);
    if (f.top_p == nullptr && f.row_logits == nullptr)
      return launch_persistent<SplitCfg, false, true>(
          wgmma_split_filtered_kernel<SplitCfg, kF16, Epi::kSampleFilteredNoTopP>, a, stream, maps, f);
    return launch_persistent<SplitCfg, false, true>(wgmma_split_filtered_kernel<SplitCfg, kF16, Epi::kSampleFiltered>,
                                                    a, stream, maps, f);
  }
}

template <bool kF16, Epi kEpi>
cudaError_t launch_filter_args_for_batch(const GemmArgs& a, const FilterArgs& f, cudaStream_t stream) {
  if (a.batch <= 16) return launch_split_with_filter_args<WsSplitTile16, kF16, kEpi>(a, f, stream);
  if (a.batch <= 32) return launch_split_with_filter_args<WsSplitTile32, kF16, kEpi>(a, f, stream);
  if (a.batch <= 64) return launch_split_with_filter_args<WsSplitTile64, kF16, kEpi>(a, f, stream);
  if (prefer_96_column_chunks(a.batch)) return launch_split_with_filter_args<WsSplitTile96, kF16, kEpi>(a, f, stream);
  return launch_split_with_filter_args<WsSplitTile128, kF16, kEpi>(a, f, stream);
}

// One sample per row with the filtered epilogue (kEpi kSampleFiltered; a.winners and f's counters
// zeroed by the caller) or on the transformed logits (kSampleTransformed: f's softcap, allowed,
// listed and listed_table, its other fields unused; a.winners zeroed by the caller), with
// a.programmatic_launch only when the caller's last kernel releases its dependents (the epilogue's
// griddepcontrol.wait comes before its first access to them).
template <Epi kEpi>
cudaError_t launch_filter_args_gemm(const SampleParams& p, const GemmArgs& a, const FilterArgs& f, cudaStream_t stream) {
  static_assert(kEpi == Epi::kSampleFiltered || kEpi == Epi::kSampleTransformed, "an epilogue that reads FilterArgs");
  if (!filtered_gemm_usable(p) || a.num_samples != 1) return cudaErrorNotSupported;
  return p.dtype == DType::kF16 ? launch_filter_args_for_batch<true, kEpi>(a, f, stream)
                                : launch_filter_args_for_batch<false, kEpi>(a, f, stream);
}

template <class Cfg, typename T, Epi kEpi>
cudaError_t launch_simt(GemmArgs a, cudaStream_t stream) {
  a.num_vtiles = (a.vocab + Cfg::kBV - 1) / Cfg::kBV;
  a.num_chunks = (a.batch + Cfg::kNB - 1) / Cfg::kNB;
  a.chunk_cols = Cfg::kNB;
  if (a.num_vtiles > 0x7fffffff || a.num_chunks > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(a.num_vtiles), static_cast<unsigned>(a.num_chunks));
  simt_tile_kernel<Cfg, T, kEpi><<<grid, Cfg::kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

// The table's SIMT rows.
template <typename T, Epi kEpi>
cudaError_t launch_simt_gemm(const GemmArgs& a, cudaStream_t stream) {
  if (a.batch <= 8) return launch_simt<SimtSmall, T, kEpi>(a, stream);
  return launch_simt<SimtLarge, T, kEpi>(a, stream);
}

// The GEMM with epilogue kEpi (kSampleOne is promoted to kSampleFew for 2 .. kPrunedSamples samples
// a row, to kSampleMany for more).
template <Epi kEpi>
cudaError_t launch_gemm(const SampleParams& p, GemmArgs a, cudaStream_t stream) {
  if (tensor_core_path_ok(p)) {
    const bool f16 = p.dtype == DType::kF16;
    if constexpr (kEpi == Epi::kStore) {
      return f16 ? launch_tensor_core_gemm<true, Epi::kStore>(a, stream)
                 : launch_tensor_core_gemm<false, Epi::kStore>(a, stream);
    } else if (a.num_samples == 1) {
      return f16 ? launch_tensor_core_gemm<true, Epi::kSampleOne>(a, stream)
                 : launch_tensor_core_gemm<false, Epi::kSampleOne>(a, stream);
    } else if (a.num_samples <= kPrunedSamples) {
      return f16 ? launch_tensor_core_gemm<true, Epi::kSampleFew>(a, stream)
                 : launch_tensor_core_gemm<false, Epi::kSampleFew>(a, stream);
    } else {
      return f16 ? launch_tensor_core_gemm<true, Epi::kSampleMany>(a, stream)
                 : launch_tensor_core_gemm<false, Epi::kSampleMany>(a, stream);
    }
  }
  constexpr Epi kSimtEpi = kEpi == Epi::kStore ? Epi::kStore : Epi::kSampleMany;
  switch (p.dtype) {
    case DType::kF32: return launch_simt_gemm<float, kSimtEpi>(a, stream);
    case DType::kF16: return launch_simt_gemm<__half, kSimtEpi>(a, stream);
    case DType::kBF16: return launch_simt_gemm<__nv_bfloat16, kSimtEpi>(a, stream);
  }
  return cudaErrorInvalidValue;
}

inline GemmArgs gemm_args(const SampleParams& p) {
  GemmArgs a;
  a.hidden = p.hidden;
  a.weight = p.weight;
  a.bias = p.bias;
  a.batch = p.batch;
  a.vocab = p.vocab;
  a.dim = p.dim;
  a.num_samples = p.num_samples;
  a.temperature = p.temperature;
  a.seed = p.seed;
  a.offset = p.offset;
  a.per_row_seed = p.per_row_seed;
  a.vocab_base = p.vocab_offset;
  a.winners = nullptr;
  a.logits = nullptr;
  a.num_vtiles = a.num_chunks = a.chunk_cols = 0;
  return a;
}

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
