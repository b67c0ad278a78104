// Private to binding/gpu/ (CUDA builds only): the host-side objects a call needs, kept for reuse
// so that creating them does not stall the JS thread.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <vector>

namespace flashsample {
namespace binding {
namespace gpu_detail {

// Pinned host blocks for the per-call inputs. A cudaMemcpyAsync from pageable memory does not
// return until the stream reaches it, so with hundreds of calls queued each launch blocked the JS
// thread behind the others' kernels (seconds of event-loop lag, with tensors already on their own
// stream). From pinned memory the copy is truly asynchronous. Blocks (powers of two from 4 KB) are
// kept for reuse; a call returns its block once its work completed.
class PinnedPool {
 public:
  // Returns a block of at least `bytes` (its capacity in *capacity), or nullptr.
  void* acquire(size_t bytes, size_t* capacity);
  // Called off the JS thread (the call's worker) or after a synchronize: cudaFreeHost may wait.
  void release(void* p, size_t capacity);

 private:
  static constexpr size_t kMaxCachedBytes = size_t(256) << 20;
  static int bucket(size_t cap);
  std::mutex mutex_;
  std::vector<void*> free_[48];
  size_t cached_ = 0;
};

// The process's pools, created on first use and never destroyed (no CUDA calls at exit).
PinnedPool& pinned_pool();

// Completion events of the calls, kept for reuse per device: creating one per call took 0.26 ms
// mean on the JS thread while uploads ran on worker threads (the driver serializes object
// creation), against 0.01 ms for a record.
class EventPool {
 public:
  cudaError_t acquire(int ordinal, cudaEvent_t* event);
  // The event's last record has completed (or failed): it may be recorded again.
  void release(int ordinal, cudaEvent_t event);

 private:
  static constexpr size_t kMaxCached = 1024;
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_[64];
};

EventPool& event_pool();

}  // namespace gpu_detail
}  // namespace binding
}  // namespace flashsample
