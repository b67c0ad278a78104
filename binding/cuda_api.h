// The slice of the CUDA runtime the binding uses, available whether or not the addon was built
// with CUDA. Without CUDA every call reports "built without CUDA", so the rest of the binding
// needs no #ifdefs. Implemented in binding/gpu/, one file per concern (no_cuda.cc without CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../cuda/include/params.h"

namespace flashsample {
namespace binding {

struct GpuInfo {
  bool compiled_with_cuda = false;
  int device_count = 0;
  std::string reason;                 // why no GPU is usable; empty when one is
  std::vector<std::string> names;     // one per device
  std::vector<int> sm_versions;       // major * 10 + minor
  std::vector<int> sm_counts;
  std::vector<size_t> memory_bytes;
};

// Queries the driver once (cached): never throws, never exits.
const GpuInfo& gpu_info();

// Every function returns an empty string on success, else a message that includes the CUDA error.
std::string gpu_malloc(int ordinal, size_t bytes, void** pointer);
std::string gpu_free(int ordinal, void* pointer);
std::string gpu_upload(int ordinal, void* device_dst, const void* host_src, size_t bytes);
std::string gpu_download(int ordinal, void* host_dst, const void* device_src, size_t bytes);
// Checks that `pointer` is device (or managed) memory usable from device `ordinal`.
std::string gpu_check_pointer(int ordinal, const void* pointer);

// An in-flight GPU call: its launch happened on the JS thread (so stream order follows call
// order); `wait` blocks a worker thread until the stream reached the call's end, then copies the
// small outputs back and releases the call's temporaries.
struct GpuCall;

struct GpuOutputs {
  std::vector<int32_t> tokens;   // empty when the tokens went to a device tensor
  std::vector<int32_t> row_status;
  std::vector<float> logprobs;
  std::vector<int32_t> top_tokens;
  std::vector<float> top_logprobs;
  int32_t fallback_rows = 0;
};

// Per-row inputs as the JS layer expanded them (host vectors), or device pointers for seeds and
// offsets that already live on the GPU (graph capture).
struct HostRowInputs {
  std::vector<float> temperature;
  std::vector<uint64_t> seed, offset;
  const uint64_t* device_seed = nullptr;
  const uint64_t* device_offset = nullptr;
  std::vector<int32_t> top_k;
  std::vector<float> top_p, min_p;
  std::vector<uint32_t> allowed;
  const uint32_t* device_allowed = nullptr;
};

enum class SamplerKind : int32_t { kFused = 0, kReferenceGumbel = 1, kReferenceInverseCdf = 2 };

// Launches one sampling call on `stream` (0: the library's stream for the device). `p` carries
// device operand pointers and sizes; the per-row arrays are uploaded from `rows`. When
// `device_tokens` is non-null the tokens are written there and not copied back.
std::string gpu_launch_sample(int ordinal, SamplerKind kind, const SampleParams& p,
                              const HostRowInputs& rows, int32_t* device_tokens,
                              uint64_t stream_handle, GpuCall** call);
std::string gpu_wait(GpuCall* call, GpuOutputs* outputs);  // also frees `call`

// Benchmark support, run on a worker thread: times `iters` launches (after `warmup`) rotating over
// `params`, each with CUDA events; microseconds per launch.
std::string gpu_time_sampler(int ordinal, SamplerKind kind, const std::vector<SampleParams>& params,
                             const HostRowInputs& rows, int warmup, int iters,
                             std::vector<double>* microseconds);
std::string gpu_read_bandwidth(int ordinal, size_t bytes, int iters, double* bytes_per_second);

// Diagnostics for the stress script's event-loop check: the time spent in each host-side CUDA step
// of tensor management and call launch (all of which run on the JS thread), since the process
// started. Not part of the public API.
struct HostStepStats {
  const char* name;
  uint64_t calls = 0;
  double total_ms = 0, max_ms = 0;
  uint64_t over_10ms = 0;  // calls of the step that took longer than 10 ms
};
std::vector<HostStepStats> host_step_stats();

}  // namespace binding
}  // namespace flashsample
