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
std::string gpu_launch_merge(int, const SampleParams&, const HostRowInputs&, const PartialSet&, uint64_t,
                             GpuCall**) {
  return kNoCuda;
}
std::string gpu_time_sampler(int, SamplerKind, const std::vector<SampleParams>&,
                             const HostRowInputs&, int, int, std::vector<double>*) {
  return kNoCuda;
}
std::string gpu_read_bandwidth(int, size_t, int, double*) { return kNoCuda; }

EngineSampler::~EngineSampler() = default;
std::string gpu_workspace_bytes(int, const SampleParams&, size_t*) { return kNoCuda; }
std::string gpu_set_rows(EngineSampler*, int64_t, int64_t, uint32_t, const uint8_t*, size_t,
                         const uint32_t*, uint64_t) {
  return kNoCuda;
}
std::string gpu_enqueue(const std::shared_ptr<EngineSampler>&, const SampleParams&, bool, bool, uint64_t,
                        std::vector<StorageRef>) {
  return kNoCuda;
}
std::string gpu_set_list_rows(EngineSampler*, int, int64_t, int64_t, const uint8_t* const[kListMaxColumns], uint64_t) {
  return kNoCuda;
}
struct GpuRead {};
std::string gpu_read_block_start(const std::shared_ptr<EngineSampler>&, GpuRead**) { return kNoCuda; }
std::string gpu_read_block_wait(GpuRead*, std::vector<uint8_t>*) { return kNoCuda; }
std::string gpu_synchronize_start(int, uint64_t, GpuRead**) { return kNoCuda; }
bool gpu_capturing() { return false; }
std::string gpu_capture_begin(int, uint64_t) { return kNoCuda; }
struct GpuGraph {};
std::string gpu_capture_end(std::shared_ptr<GpuGraph>*) { return kNoCuda; }
void gpu_capture_abort() {}
std::string gpu_graph_launch(const std::shared_ptr<GpuGraph>&, uint64_t) { return kNoCuda; }
int gpu_graph_ordinal(const GpuGraph&) { return 0; }
std::string gpu_stream_create(int, uint64_t*) { return kNoCuda; }
std::string gpu_stream_destroy(int, uint64_t) { return kNoCuda; }

NcclStatus nccl_status() {
  NcclStatus s;
  s.error = "NCCL: this build of flashsample has no CUDA backend";
  return s;
}
std::string nccl_unique_id(std::vector<uint8_t>*) { return kNoCuda; }
struct NcclComm {};
struct NcclWait {};
NcclCommInfo nccl_comm_info(const NcclComm&) { return NcclCommInfo{0, 0, 0, true}; }
std::string nccl_init_rank(const uint8_t*, int, int, int, int, std::shared_ptr<NcclComm>*) { return kNoCuda; }
std::string nccl_init_all(const std::vector<int>&, std::vector<std::shared_ptr<NcclComm>>*) { return kNoCuda; }
std::string nccl_all_gather(const std::vector<std::shared_ptr<NcclComm>>&, const std::vector<const void*>&,
                            const std::vector<void*>&, size_t, uint64_t, NcclWait**) {
  return kNoCuda;
}
std::string nccl_wait(NcclWait*, int) { return kNoCuda; }
std::string nccl_all_gather_enqueue(NcclComm&, int, const void*, void*, size_t, uint64_t) { return kNoCuda; }
void nccl_abort(NcclComm&) {}
void nccl_destroy(NcclComm&) {}

}  // namespace binding
}  // namespace flashsample
