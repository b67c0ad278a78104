// binding/cuda_api.h for an addon built without CUDA (CMakeLists.txt compiles this file instead of
// the rest of binding/gpu/, host_steps.cc aside): every entry point reports that the addon was
// built without it.
#include "../cuda_api.h"

namespace flashsample {
namespace binding {

static const char kNoCuda[] = "flashsample was built without CUDA (no nvcc at install time)";

const GpuInfo& gpu_info() {
  static GpuInfo info = [] {
    GpuInfo i;
    i.reason = kNoCuda;
    return i;
  }();
  return info;
}
std::string gpu_malloc(int, size_t, void**) { return kNoCuda; }
std::string gpu_free(int, void*) { return kNoCuda; }
std::string gpu_upload(int, void*, const void*, size_t) { return kNoCuda; }
std::string gpu_download(int, void*, const void*, size_t) { return kNoCuda; }
std::string gpu_check_pointer(int, const void*) { return kNoCuda; }
struct GpuCall {};
std::string gpu_launch_sample(int, SamplerKind, const SampleParams&, const HostRowInputs&,
                              int32_t*, uint64_t, GpuCall**) {
  return kNoCuda;
}
std::string gpu_wait(GpuCall*, GpuOutputs*) { return kNoCuda; }
std::string gpu_time_sampler(int, SamplerKind, const std::vector<SampleParams>&,
                             const HostRowInputs&, int, int, std::vector<double>*) {
  return kNoCuda;
}
std::string gpu_read_bandwidth(int, size_t, int, double*) { return kNoCuda; }

}  // namespace binding
}  // namespace flashsample
