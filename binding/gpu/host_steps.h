// Private to binding/gpu/: timing of the host-side CUDA steps that run on the JS thread, read back
// by host_step_stats() (binding/cuda_api.h).
#pragma once

#include <chrono>
#include <cstdint>

namespace flashsample {
namespace binding {
namespace gpu_detail {

// Host-side steps timed for host_step_stats(): a step that waits for the device on the JS thread
// shows up as a large max or many calls over 10 ms.
enum class HostStep : int {
  kTensorAlloc,
  kTensorUpload,
  kTensorFree,
  kCallPinnedBlock,
  kCallScratchAlloc,
  kCallInputsCopy,
  kCallKernels,
  kCallEvent,
  kEnqueuePrologue,
  kEnqueueKernels,
  kEnqueueBookkeeping,
  kGraphLaunch,
  kCount
};

// Counts one call of `step` that took `ns` nanoseconds (thread-safe).
void record_host_step(HostStep step, uint64_t ns);

// Runs fn() and records its duration under `step`.
template <class Fn>
auto timed(HostStep step, Fn&& fn) -> decltype(fn()) {
  const auto t0 = std::chrono::steady_clock::now();
  struct Record {
    HostStep step;
    std::chrono::steady_clock::time_point t0;
    ~Record() {
      const uint64_t ns = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
              .count());
      record_host_step(step, ns);
    }
  } record{step, t0};
  return fn();
}

}  // namespace gpu_detail
}  // namespace binding
}  // namespace flashsample
