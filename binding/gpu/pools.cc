// The pools of pinned host blocks and of completion events (pools.h).
#include "pools.h"

namespace flashsample {
namespace binding {
namespace gpu_detail {

void* PinnedPool::acquire(size_t bytes, size_t* capacity) {
  size_t cap = 4096;
  while (cap < bytes) cap <<= 1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& list = free_[bucket(cap)];
    if (!list.empty()) {
      void* p = list.back();
      list.pop_back();
      cached_ -= cap;
      *capacity = cap;
      return p;
    }
  }
  void* p = nullptr;
  if (cudaHostAlloc(&p, cap, cudaHostAllocPortable) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  *capacity = cap;
  return p;
}

void PinnedPool::release(void* p, size_t capacity) {
  if (p == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cached_ + capacity <= kMaxCachedBytes) {
      free_[bucket(capacity)].push_back(p);
      cached_ += capacity;
      return;
    }
  }
  cudaFreeHost(p);
}

int PinnedPool::bucket(size_t cap) {
  int b = 0;
  while ((size_t(4096) << b) < cap) ++b;
  return b;
}

PinnedPool& pinned_pool() {
  static PinnedPool* pool = new PinnedPool();  // never destroyed: no CUDA calls at exit
  return *pool;
}

cudaError_t EventPool::acquire(int ordinal, cudaEvent_t* event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& list = free_[ordinal];
    if (!list.empty()) {
      *event = list.back();
      list.pop_back();
      return cudaSuccess;
    }
  }
  return cudaEventCreateWithFlags(event, cudaEventDisableTiming | cudaEventBlockingSync);
}

void EventPool::release(int ordinal, cudaEvent_t event) {
  if (event == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& list = free_[ordinal];
    if (list.size() < kMaxCached) {
      list.push_back(event);
      return;
    }
  }
  cudaEventDestroy(event);
}

EventPool& event_pool() {
  static EventPool* pool = new EventPool();  // never destroyed: no CUDA calls at exit
  return *pool;
}

}  // namespace gpu_detail
}  // namespace binding
}  // namespace flashsample
