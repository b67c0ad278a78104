// Host-side dispatch of the GEMM kernels of tile_kernels.cuh: picks the tile configuration for the
// dtype, batch and alignment, sizes the persistent grid and launches. Shared by fused_sample.cu and
// reference.cu (the reference uses the same main loop with the store epilogue, so its logits are
// the fused path's logits bit for bit).
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include <atomic>
#include <map>
#include <mutex>
#include <utility>
#include <cstdlib>

#include "check_params.h"
#include "tile_kernels.cuh"
#include "wgmma_tile.cuh"
#include "wgmma_ws.cuh"

namespace flashsample {
namespace cuda {
namespace detail {

// The tensor-core path needs 16-byte rows: D a multiple of 8 and W, H 16-byte aligned. Other
// 16-bit inputs take the SIMT path (correct, slower).
constexpr int kMaxDevices = 64;

inline bool mma_path_ok(const SampleParams& p) {
  return p.dtype != DType::kF32 && p.dim % 8 == 0 &&
         (reinterpret_cast<uintptr_t>(p.weight) & 15) == 0 &&
         (reinterpret_cast<uintptr_t>(p.hidden) & 15) == 0;
}

// Launches a persistent tile kernel: one CTA per resident slot (SMs x CTAs per SM, computed once
// per device and kernel, when the dynamic shared-memory limit is raised), at most one per item.
// kBalanced (mma_tile_kernel only): one contiguous vocabulary range per CTA (tile_rows in
// tile_kernels.cuh) when every range holds at least one full tile; classic tiles otherwise.
template <class Cfg, bool kBalanced = false, class Kernel, class... Extra>
cudaError_t launch_persistent(Kernel kernel, GemmArgs a, cudaStream_t stream, const Extra&... extra) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  // Keyed by the kernel's host pointer, not by template instance: every translation unit that
  // launches a kernel may hold its own copy of it (whole-program device code), and each copy needs
  // its own shared-memory limit raised; a per-instance static would be shared by the linker across
  // those units and skip the second copy (harness run 6 hit exactly that).
  static std::mutex registry_mutex;
  static std::map<std::pair<const void*, int>, int> registry;  // (kernel, device) -> resident CTAs
  const auto key = std::make_pair(reinterpret_cast<const void*>(kernel), device);
  int resident = 0;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    const auto it = registry.find(key);
    if (it != registry.end()) resident = it->second;
  }
  if (resident == 0) {
    int sms = 0, per_sm = 0;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
    if (err != cudaSuccess) return err;
    if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
      return err;
    if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg::kThreads,
                                                             Cfg::kSmemBytes)) != cudaSuccess)
      return err;
    if (per_sm < 1) return cudaErrorInvalidConfiguration;
    resident = sms * per_sm;
    std::lock_guard<std::mutex> lock(registry_mutex);
    registry[key] = resident;
  }
  a.num_vtiles = (a.vocab + Cfg::kBV - 1) / Cfg::kBV;
  a.num_chunks = (a.batch + Cfg::kNB - 1) / Cfg::kNB;
  a.range_rows = a.num_ranges = 0;
  if constexpr (kBalanced) {
    const int64_t rows = ((a.vocab + resident - 1) / resident + 3) / 4 * 4;
    if (rows >= Cfg::kBV) {
      a.range_rows = rows;
      a.num_ranges = resident;
      a.num_vtiles = resident * ((rows + Cfg::kBV - 1) / Cfg::kBV);
    }
  }
  const int64_t items = a.num_vtiles * a.num_chunks;
  const int64_t grid = items < resident ? items : resident;
  kernel<<<static_cast<unsigned>(grid), Cfg::kThreads, Cfg::kSmemBytes, stream>>>(a, extra...);
  return cudaGetLastError();
}

template <class Cfg, bool kF16, Epi kEpi, bool kBalanced = false>
cudaError_t launch_mma(GemmArgs a, cudaStream_t stream) {
  return launch_persistent<Cfg, kBalanced>(mma_tile_kernel<Cfg, kF16, kEpi>, a, stream);
}

template <class Cfg, bool kF16, Epi kEpi>
cudaError_t launch_wgmma(GemmArgs a, cudaStream_t stream) {
  return launch_persistent<Cfg>(wgmma_tile_kernel<Cfg, kF16, kEpi>, a, stream);
}

// The warp-specialized ping-pong kernel (wgmma_ws.cuh): the persistent grid, 1 CTA per SM.
template <class Cfg, bool kF16, Epi kEpi>
cudaError_t launch_ws(GemmArgs a, cudaStream_t stream) {
  return launch_persistent<Cfg>(wgmma_ws_kernel<Cfg, kF16, kEpi>, a, stream);
}

// Whether the current device runs the sm_90a wgmma kernels: compute capability 9.0 (the build's
// 90a cubin), unless FLASHSAMPLE_NO_WGMMA is set (then every batch takes the mma.sync kernels,
// for comparisons and as an escape hatch). Cached per device.
inline bool wgmma_usable() {
  static std::atomic<int> cache[kMaxDevices];  // 0 unknown, 1 no, 2 yes
  static const bool disabled = [] {
    const char* e = std::getenv("FLASHSAMPLE_NO_WGMMA");
    return e != nullptr && e[0] != '\0' && e[0] != '0';
  }();
  if (disabled) return false;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  int v = device < kMaxDevices ? cache[device].load(std::memory_order_relaxed) : 0;
  if (v == 0) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    v = (major == 9 && minor == 0) ? 2 : 1;
    if (device < kMaxDevices) cache[device].store(v, std::memory_order_relaxed);
  }
  return v == 2;
}

template <bool kF16, Epi kEpi>
cudaError_t launch_mma_for_batch(const GemmArgs& a, cudaStream_t stream) {
  // Batch tiling on compute capability 9.0, measured with harness runs 9-12 (H200, llama3-8b, GEMM +
  // sampling epilogue, winner words identical to mma.sync's and wgmma_tile's on the bench inputs;
  // cuda/harness/NOTES.md): the warp-specialized ping-pong kernel (wgmma_ws.cuh) at every batch size,
  // its sampling epilogue rolled (kRolled: 44 KB of code instead of up to 316 KB), one chunk of the
  // smallest N >= B up to 64, N = 128 chunks above:
  //   B <= 16: WsTile16R 261.1 us at B = 1, 263.6 at B = 16 (run 12; mma.sync Tile8 259-263 at
  //            B <= 8 and wgmma_tile WgTile16 281.4 at B = 16 in runs 8-9)
  //   B <= 32: WsTile32R 263.2 (WgTile32 309.6)
  //   B <= 64: WsTile64R 292.8 (WgTile64 382.3; WsTile128R in one half-empty chunk 360.5)
  //   B > 64: WsTile128R: B = 128 447.2 (WsTile64 508.2, cooperative wsC<128,4,R> 462.9), B = 256
  //           784.8 (WsTile64 979.0, wsC<128,4,R> 795.5)
  // Without wgmma (compute capability 8.x, or FLASHSAMPLE_NO_WGMMA): mma.sync, B <= 64 in one chunk
  // of the smallest tile >= B (W read once), larger B in chunks of 128 columns; B <= 16 with
  // balanced vocabulary ranges (tile_rows), one per CTA.
  if (wgmma_usable()) {
    if (a.batch <= 16) return launch_ws<WsTile16R, kF16, kEpi>(a, stream);
    if (a.batch <= 32) return launch_ws<WsTile32R, kF16, kEpi>(a, stream);
    if (a.batch <= 64) return launch_ws<WsTile64R, kF16, kEpi>(a, stream);
    return launch_ws<WsTile128R, kF16, kEpi>(a, stream);
  }
  if (a.batch <= 8) return launch_mma<Tile8, kF16, kEpi, true>(a, stream);
  if (a.batch <= 16) return launch_mma<Tile16, kF16, kEpi, true>(a, stream);
  if (a.batch <= 32) return launch_mma<Tile32, kF16, kEpi>(a, stream);
  if (a.batch <= 64) return launch_mma<Tile64, kF16, kEpi>(a, stream);
  return launch_mma<Tile128, kF16, kEpi>(a, stream);
}

template <class Cfg, typename T, Epi kEpi>
cudaError_t launch_simt(GemmArgs a, cudaStream_t stream) {
  a.num_vtiles = (a.vocab + Cfg::kBV - 1) / Cfg::kBV;
  a.num_chunks = (a.batch + Cfg::kNB - 1) / Cfg::kNB;
  if (a.num_vtiles > 0x7fffffff || a.num_chunks > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(a.num_vtiles), static_cast<unsigned>(a.num_chunks));
  simt_tile_kernel<Cfg, T, kEpi><<<grid, Cfg::kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

template <typename T, Epi kEpi>
cudaError_t launch_simt_for_batch(const GemmArgs& a, cudaStream_t stream) {
  if (a.batch <= 8) return launch_simt<SimtSmall, T, kEpi>(a, stream);
  return launch_simt<SimtLarge, T, kEpi>(a, stream);
}

// The GEMM with epilogue kEpi (kSampleOne is promoted to kSampleMany when num_samples > 1).
template <Epi kEpi>
cudaError_t launch_gemm(const SampleParams& p, GemmArgs a, cudaStream_t stream) {
  if (mma_path_ok(p)) {
    const bool f16 = p.dtype == DType::kF16;
    if constexpr (kEpi == Epi::kStore) {
      return f16 ? launch_mma_for_batch<true, Epi::kStore>(a, stream)
                 : launch_mma_for_batch<false, Epi::kStore>(a, stream);
    } else if (a.num_samples == 1) {
      return f16 ? launch_mma_for_batch<true, Epi::kSampleOne>(a, stream)
                 : launch_mma_for_batch<false, Epi::kSampleOne>(a, stream);
    } else {
      return f16 ? launch_mma_for_batch<true, Epi::kSampleMany>(a, stream)
                 : launch_mma_for_batch<false, Epi::kSampleMany>(a, stream);
    }
  }
  constexpr Epi kSimtEpi = kEpi == Epi::kStore ? Epi::kStore : Epi::kSampleMany;
  switch (p.dtype) {
    case DType::kF32: return launch_simt_for_batch<float, kSimtEpi>(a, stream);
    case DType::kF16: return launch_simt_for_batch<__half, kSimtEpi>(a, stream);
    case DType::kBF16: return launch_simt_for_batch<__nv_bfloat16, kSimtEpi>(a, stream);
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
  a.winners = nullptr;
  a.logits = nullptr;
  a.num_vtiles = a.num_chunks = 0;
  return a;
}

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
