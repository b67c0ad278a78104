// The CUDA runtime as the binding finds it: the device query (gpu_info), error messages, and the
// library's streams and tensor pool per device.
#include "runtime.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "../cuda_api.h"

namespace flashsample {
namespace binding {
namespace gpu_detail {

namespace {

// How much freed tensor memory the tensor pool keeps for reuse instead of returning it to the
// driver at the next synchronization: FLASHSAMPLE_TENSOR_POOL_KEEP_MB, default 256 MiB. With 0
// every tensor allocation after a free mapped fresh memory (see bench/TUNING.md, "Stress").
uint64_t tensor_pool_keep_bytes() {
  static const uint64_t keep = [] {
    const char* e = std::getenv("FLASHSAMPLE_TENSOR_POOL_KEEP_MB");
    if (e == nullptr || e[0] == '\0') return uint64_t(256) << 20;
    char* end = nullptr;
    const unsigned long long mb = std::strtoull(e, &end, 10);
    return (end != nullptr && *end == '\0' && mb < (1ull << 40)) ? uint64_t(mb) << 20 : uint64_t(256) << 20;
  }();
  return keep;
}

std::mutex g_streams_mutex;
DeviceStreams g_streams[64];

}  // namespace

std::string cuda_message(const char* what, cudaError_t status) {
  return std::string(what) + " failed: " + cudaGetErrorName(status) + " (" +
         cudaGetErrorString(status) + ")";
}

std::string device_streams(int ordinal, DeviceStreams** out) {
  if (ordinal < 0 || ordinal >= 64) return "device ordinal out of range";
  std::lock_guard<std::mutex> lock(g_streams_mutex);
  DeviceStreams& s = g_streams[ordinal];
  if (!s.ready) {
    FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
    FS_CUDA_TRY("cudaStreamCreate", cudaStreamCreateWithFlags(&s.compute, cudaStreamNonBlocking));
    FS_CUDA_TRY("cudaStreamCreate", cudaStreamCreateWithFlags(&s.copy, cudaStreamNonBlocking));
    FS_CUDA_TRY("cudaStreamCreate", cudaStreamCreateWithFlags(&s.transfer, cudaStreamNonBlocking));
    FS_CUDA_TRY("cudaStreamCreate", cudaStreamCreateWithFlags(&s.graph, cudaStreamNonBlocking));
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = ordinal;
    FS_CUDA_TRY("cudaMemPoolCreate (tensors)", cudaMemPoolCreate(&s.tensor_pool, &props));
    uint64_t keep = tensor_pool_keep_bytes();
    FS_CUDA_TRY("cudaMemPoolSetAttribute (tensors)",
                cudaMemPoolSetAttribute(s.tensor_pool, cudaMemPoolAttrReleaseThreshold, &keep));
    // Keep freed stream-ordered allocations in the pool instead of returning them to the driver
    // at every synchronization: per-call workspaces are small and frequent.
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, ordinal) == cudaSuccess) {
      uint64_t threshold = UINT64_MAX;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
    }
    s.ready = true;
  }
  *out = &s;
  return "";
}

}  // namespace gpu_detail

const GpuInfo& gpu_info() {
  static GpuInfo info = [] {
    GpuInfo i;
    i.compiled_with_cuda = true;
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      i.reason = std::string("no usable GPU: ") + cudaGetErrorString(status);
      return i;
    }
    if (count == 0) {
      i.reason = "no usable GPU: the driver reports no CUDA device";
      return i;
    }
    i.device_count = count;
    for (int d = 0; d < count; ++d) {
      cudaDeviceProp prop;
      if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
        (void)cudaGetLastError();
        prop = cudaDeviceProp();
        std::strcpy(prop.name, "unknown CUDA device");
      }
      i.names.push_back(prop.name);
      i.sm_versions.push_back(prop.major * 10 + prop.minor);
      i.sm_counts.push_back(prop.multiProcessorCount);
      i.memory_bytes.push_back(prop.totalGlobalMem);
    }
    return i;
  }();
  return info;
}

}  // namespace binding
}  // namespace flashsample
