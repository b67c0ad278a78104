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
#include "wgmma_split.cuh"
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

// The current device's compute capability as 10 major + minor (90 for sm_90), 0 when it cannot
// be read. Cached per device.
inline int compute_capability() {
  static std::atomic<int> cache[kMaxDevices];  // 0 unknown, else 1 + 10 major + minor
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  int v = device < kMaxDevices ? cache[device].load(std::memory_order_relaxed) : 0;
  if (v == 0) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    v = 1 + 10 * major + minor;
    if (device < kMaxDevices) cache[device].store(v, std::memory_order_relaxed);
  }
  return v - 1;
}

// Whether the current device takes programmatic dependent launches (compute capability >= 9.0).
inline bool programmatic_launch_supported() { return compute_capability() >= 90; }

// Launches `kernel`; with `programmatic`, with programmatic stream serialization: it may start
// before the previous kernel in the stream has finished (as soon as that one runs
// griddepcontrol.launch_dependents or exits) and must itself griddepcontrol.wait before it reads
// what that kernel writes. Without, an ordinary launch.
template <class... KernelArgs, class... Args>
cudaError_t launch_kernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          bool programmatic, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = programmatic ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// Launches a persistent tile kernel: one CTA per resident slot (SMs x CTAs per SM, computed once
// per device and kernel, when the dynamic shared-memory limit is raised), at most one per item.
// kBalanced (mma_tile_kernel only): one contiguous vocabulary range per CTA (tile_rows in
// tile_kernels.cuh) when every range holds at least one full tile; classic tiles otherwise.
// kWaitsForPreviousGrid: the kernel runs griddepcontrol.wait before it touches `winners` (the
// wgmma_ws kernels), so a.programmatic_launch may be honoured; every other kernel is launched in
// order whatever a.programmatic_launch says.
template <class Cfg, bool kBalanced = false, bool kWaitsForPreviousGrid = false, class Kernel, class... Extra>
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
  return launch_kernel(kernel, dim3(static_cast<unsigned>(grid)), dim3(Cfg::kThreads), Cfg::kSmemBytes, stream,
                       kWaitsForPreviousGrid && a.programmatic_launch, a, extra...);
}

template <class Cfg, bool kF16, Epi kEpi, bool kBalanced = false>
cudaError_t launch_mma(GemmArgs a, cudaStream_t stream) {
  return launch_persistent<Cfg, kBalanced>(mma_tile_kernel<Cfg, kF16, kEpi>, a, stream);
}

template <class Cfg, bool kF16, Epi kEpi>
cudaError_t launch_wgmma(GemmArgs a, cudaStream_t stream) {
  return launch_persistent<Cfg>(wgmma_tile_kernel<Cfg, kF16, kEpi>, a, stream);
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against libcuda);
// null when the driver does not have it.
using TensorMapEncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                          const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                          CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                          CUtensorMapFloatOOBfill);
inline TensorMapEncodeTiled tensor_map_encoder() {
  static const TensorMapEncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<TensorMapEncodeTiled>(f);
  }();
  return fn;
}

// The two tensor maps of a kTma ws tile (WsTensorMaps): natural row order, SW128, zeros outside.
// False when the shape cannot be described (int32 coordinates, 16-byte row pitch) or the driver
// refuses; the caller then runs the cp.async twin of the tile.
template <class Cfg>
bool encode_ws_maps(const GemmArgs& a, bool f16, CUtensorMapL2promotion w_promotion, WsTensorMaps* maps) {
  const TensorMapEncodeTiled encode = tensor_map_encoder();
  if (encode == nullptr || a.vocab <= 0 || a.batch <= 0 || a.dim <= 0 || a.vocab >= (int64_t(1) << 31) ||
      a.batch >= (int64_t(1) << 31) || a.dim % 8 != 0)
    return false;
  const CUtensorMapDataType type = f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const cuuint64_t row_bytes = static_cast<cuuint64_t>(a.dim) * 2;
  const cuuint32_t unit[2] = {1, 1};
  const cuuint64_t wdim[2] = {static_cast<cuuint64_t>(a.dim), static_cast<cuuint64_t>(a.vocab)};
  const cuuint64_t hdim[2] = {static_cast<cuuint64_t>(a.dim), static_cast<cuuint64_t>(a.batch)};
  const cuuint32_t wbox[2] = {static_cast<cuuint32_t>(Cfg::kBK), static_cast<cuuint32_t>(Cfg::kBV)};
  const cuuint32_t hbox[2] = {static_cast<cuuint32_t>(Cfg::kBK), static_cast<cuuint32_t>(Cfg::kNB)};
  return encode(&maps->w, type, 2, const_cast<void*>(a.weight), wdim, &row_bytes, wbox, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, w_promotion,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS &&
         encode(&maps->h, type, 2, const_cast<void*>(a.hidden), hdim, &row_bytes, hbox, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The warp-specialized ping-pong kernel (wgmma_ws.cuh): the persistent grid, 1 CTA per SM. A kTma
// tile whose maps cannot be encoded runs as its cp.async twin (same tile, same results).
// w_promotion: the L2 fill size of the W copies (kTma only).
// A split-epilogue tile (wgmma_split.cuh) runs wgmma_split_kernel for kSampleOne and its ping-pong
// tile for the other epilogues or when its maps cannot be encoded.
template <class Cfg, bool kF16, Epi kEpi>
cudaError_t launch_ws(GemmArgs a, cudaStream_t stream,
                      CUtensorMapL2promotion w_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B) {
  if constexpr (Cfg::kSplitEpilogue) {
    if constexpr (kEpi == Epi::kSampleOne) {
      WsTensorMaps maps{};
      if (encode_ws_maps<Cfg>(a, kF16, w_promotion, &maps))
        return launch_persistent<Cfg, false, true>(wgmma_split_kernel<Cfg, kF16>, a, stream, maps);
    }
    return launch_ws<typename Cfg::PingPong, kF16, kEpi>(a, stream, w_promotion);
  } else if constexpr (Cfg::kTma) {
    WsTensorMaps maps{};
    if (encode_ws_maps<Cfg>(a, kF16, w_promotion, &maps))
      return launch_persistent<Cfg, false, true>(wgmma_ws_tma_kernel<Cfg, kF16, kEpi>, a, stream, maps);
    using Twin = WsTile<Cfg::kNB, Cfg::kStages, Cfg::kVtileMajor, Cfg::kRolled, Cfg::kCoop, false>;
    return launch_persistent<Twin, false, true>(wgmma_ws_kernel<Twin, kF16, kEpi>, a, stream);
  } else {
    return launch_persistent<Cfg, false, true>(wgmma_ws_kernel<Cfg, kF16, kEpi>, a, stream);
  }
}

// Whether the current device runs the sm_90a wgmma kernels: compute capability 9.0 (the build's
// 90a cubin), unless FLASHSAMPLE_NO_WGMMA is set (then every batch takes the mma.sync kernels,
// for comparisons and as an escape hatch). Cached per device.
inline bool wgmma_usable() {
  static const bool disabled = [] {
    const char* e = std::getenv("FLASHSAMPLE_NO_WGMMA");
    return e != nullptr && e[0] != '\0' && e[0] != '0';
  }();
  return !disabled && compute_capability() == 90;
}

// B > 64 on compute capability 9.0: 96-column chunks when they pad fewer columns than 128-column
// ones (64 < B <= 96, 128 < B <= 192, 256 < B <= 288, ...; a tie goes to 128): the padding columns
// of a partial chunk cost more than their share (measurements at WsSplitTile96).
inline bool prefer_96_column_chunks(int64_t batch) {
  const int64_t padded96 = (batch + 95) / 96 * 96, padded128 = (batch + 127) / 128 * 128;
  return padded96 < padded128;
}

template <bool kF16, Epi kEpi>
cudaError_t launch_mma_for_batch(const GemmArgs& a, cudaStream_t stream) {
  // Batch tiling on compute capability 9.0, measured with harness runs 9-15 (H200, llama3-8b, GEMM +
  // sampling epilogue, winner words identical to mma.sync's and wgmma_tile's on the bench inputs,
  // stored logits bitwise equal to wgmma_tile's on odd shapes; cuda/harness/NOTES.md): the
  // warp-specialized ping-pong kernel (wgmma_ws.cuh) at every batch size, its sampling epilogue
  // rolled (kRolled), its producer one thread issuing TMA copies of W in natural row order (kTma),
  // one chunk of the smallest N >= B up to 64, N = 128 chunks above. Run 14, TMA against the
  // cp.async producer of the same tile in the same run:
  //   B <= 16: WsTile16T 249.4 us at B = 1, 251.0 at B = 16 (cp.async 259.8 / 262.1; DRAM 88.8 %
  //            against 84.4 % under ncu)
  //   B <= 32: WsTile32T 255.2 (261.4)
  //   B <= 64: WsTile64T 284.1 (292.4; WsTile128T in one half-empty chunk 399.6)
  //   B > 64:  WsTile128T: B = 128 442.7 (468.4), B = 256 739.8 (867.8); the cooperative tile with
  //            TMA 506.6 / 825.2, two column groups per epilogue trip 429.0 / 742.4 against
  //            421.1 / 697.9 in run 15. Since runs 19-21 (shared running winners, each tile starting
  //            from the grid's winners): B = 128 349-351, B = 256 617-633.
  // v28 (harness run 30, library A/B in device call 42): kSampleOne runs the split-epilogue kernel
  // (wgmma_split.cuh: one MMA warpgroup, the sampling on 8 warps of their own) with the same chunks;
  // llama3-8b B = 96 / 128 / 256 332 / 339 / 538 -> 309 / 304 / 491 us, llama3-70b B = 128 / 256
  // 585 / 953 -> 567 / 895-917 (B = 96 580 -> 595); B <= 64 (harness -0.5 ... -3 %, library A/B in
  // device call 43): llama3-8b B = 1 / 16 / 32 / 64 249.6 / 250.2 / 251.5 / 264.0 -> 247.4 / 248.4 /
  // 249.6 / 256.3, qwen3-8b B = 64 303 -> 295, llama3-70b B = 64 513 -> 509.
  // v36 (harness run 40, library A/B in device call 57): 96-column chunks where they pad less
  // (prefer_96_column_chunks).
  // The other epilogues (kStore for the reference sampler, kSampleMany) keep the ping-pong tiles
  // (128 columns above B = 64, whatever the split tile's chunk).
  // A kTma tile whose tensor maps cannot be encoded runs its cp.async twin (launch_ws).
  // Without wgmma (compute capability 8.x, or FLASHSAMPLE_NO_WGMMA): mma.sync, B <= 64 in one chunk
  // of the smallest tile >= B (W read once), larger B in chunks of 128 columns; B <= 16 with
  // balanced vocabulary ranges (tile_rows), one per CTA.
  if (wgmma_usable()) {
    if (a.batch <= 16) return launch_ws<WsSplitTile16, kF16, kEpi>(a, stream);
    if (a.batch <= 32) return launch_ws<WsSplitTile32, kF16, kEpi>(a, stream);
    if (a.batch <= 64) return launch_ws<WsSplitTile64, kF16, kEpi>(a, stream);
    if (prefer_96_column_chunks(a.batch)) return launch_ws<WsSplitTile96, kF16, kEpi>(a, stream);
    return launch_ws<WsSplitTile128, kF16, kEpi>(a, stream);
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
