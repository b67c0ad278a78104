// How the GEMM kernels are launched: the device's compute capability, programmatic dependent
// launch, the persistent grid (one CTA per resident slot) and the tensor maps of the TMA tiles.
// Which kernel runs is dispatch.cuh's business.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <atomic>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "escape_hatches.h"
#include "kernels/wgmma_common.cuh"

namespace flashsample {
namespace cuda {
namespace detail {

constexpr int kMaxDevices = 64;

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

// The current device's multiprocessor count, 0 when it cannot be read. Cached per device.
inline int multiprocessor_count() {
  static std::atomic<int> cache[kMaxDevices];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  int v = device < kMaxDevices ? cache[device].load(std::memory_order_relaxed) : 0;
  if (v == 0) {
    cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device);
    if (device < kMaxDevices) cache[device].store(v, std::memory_order_relaxed);
  }
  return v;
}

// Once per (kernel, device, threads, smem): raises the kernel's dynamic shared-memory limit to
// `smem` (when nonzero) and counts its resident blocks per multiprocessor, so that later launches
// pay neither call again (together they cost microseconds of every enqueue's host time).
template <class Kernel>
cudaError_t prepare_kernel(Kernel kernel, int threads, int smem, int* per_sm) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  // Keyed by the kernel's host pointer (see launch_persistent).
  static std::mutex mutex;
  static std::map<std::pair<std::pair<const void*, int>, std::pair<int, int>>, int> prepared;
  const auto key = std::make_pair(std::make_pair(reinterpret_cast<const void*>(kernel), device), std::make_pair(threads, smem));
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = prepared.find(key);
    if (it != prepared.end()) {
      *per_sm = it->second;
      return cudaSuccess;
    }
  }
  if (smem > 0 && (err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) != cudaSuccess)
    return err;
  int blocks = 0;
  if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem)) != cudaSuccess) return err;
  std::lock_guard<std::mutex> lock(mutex);
  prepared[key] = blocks;
  *per_sm = blocks;
  return cudaSuccess;
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

// Whether a tile spreads the batch evenly over its chunks (Cfg::kEvenChunks; GemmArgs::chunk_cols).
template <class Cfg, class = void>
struct EvenChunks : std::false_type {};
template <class Cfg>
struct EvenChunks<Cfg, std::void_t<decltype(Cfg::kEvenChunks)>> : std::bool_constant<Cfg::kEvenChunks> {};

// A chunk's batch columns (GemmArgs::chunk_cols): kNB, or the batch spread evenly over the chunks.
template <class Cfg>
int64_t chunk_cols_of(int64_t batch) {
  const int64_t chunks = (batch + Cfg::kNB - 1) / Cfg::kNB;
  return EvenChunks<Cfg>::value && chunks > 0 ? (batch + chunks - 1) / chunks : Cfg::kNB;
}

// Launches a persistent tile kernel: one CTA per resident slot (SMs x CTAs per SM, computed once
// per device and kernel, when the dynamic shared-memory limit is raised), at most one per item.
// kBalanced (mma_tile_kernel only): one contiguous vocabulary range per CTA (tile_rows in
// common.cuh) when every range holds at least one full tile; classic tiles otherwise.
// kWaitsForPreviousGrid: the kernel runs griddepcontrol.wait before it touches `winners` (the
// warp-specialized kernels), so a.programmatic_launch may be honoured; every other kernel is launched in
// order whatever a.programmatic_launch says.
template <class Cfg, bool kBalanced = false, bool kWaitsForPreviousGrid = false, class Kernel, class... Extra>
cudaError_t launch_persistent(Kernel kernel, GemmArgs a, cudaStream_t stream, const Extra&... extra) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  // Keyed by the kernel's host pointer, not by template instance: every translation unit that
  // launches a kernel may hold its own copy of it (whole-program device code), and each copy needs
  // its own shared-memory limit raised; a per-instance static would be shared by the linker across
  // those units and skip the second copy.
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
  a.chunk_cols = chunk_cols_of<Cfg>(a.batch);
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
// refuses, and always under FLASHSAMPLE_NO_TENSOR_MAPS (the tests' way into that row of the
// dispatch table, and an escape hatch like FLASHSAMPLE_NO_WGMMA); the caller then runs the mma.sync
// tiles.
template <class Cfg>
bool encode_ws_maps(const GemmArgs& a, bool f16, CUtensorMapL2promotion w_promotion, WsTensorMaps* maps) {
  const TensorMapEncodeTiled encode = tensor_map_encoder();
  if (no_tensor_maps_hatch() || encode == nullptr || a.vocab <= 0 || a.batch <= 0 || a.dim <= 0 ||
      a.vocab >= (int64_t(1) << 31) || a.batch >= (int64_t(1) << 31) || a.dim % 8 != 0)
    return false;
  const CUtensorMapDataType type = f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const cuuint64_t row_bytes = static_cast<cuuint64_t>(a.dim) * 2;
  const cuuint32_t unit[2] = {1, 1};
  const cuuint64_t wdim[2] = {static_cast<cuuint64_t>(a.dim), static_cast<cuuint64_t>(a.vocab)};
  const cuuint64_t hdim[2] = {static_cast<cuuint64_t>(a.dim), static_cast<cuuint64_t>(a.batch)};
  const cuuint32_t wbox[2] = {static_cast<cuuint32_t>(Cfg::kBK), static_cast<cuuint32_t>(Cfg::kBV)};
  const cuuint32_t hbox[2] = {static_cast<cuuint32_t>(Cfg::kBK),
                              static_cast<cuuint32_t>(h_box_rows(chunk_cols_of<Cfg>(a.batch), Cfg::kNB))};
  return encode(&maps->w, type, 2, const_cast<void*>(a.weight), wdim, &row_bytes, wbox, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, w_promotion,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS &&
         encode(&maps->h, type, 2, const_cast<void*>(a.hidden), hdim, &row_bytes, hbox, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
