// The host-step statistics: per HostStep (host_steps.h), how often it ran and how long it took,
// since the process started. Built with and without CUDA (without, every count stays 0).
#include "host_steps.h"

#include <atomic>
#include <cstddef>

#include "../cuda_api.h"

namespace flashsample {
namespace binding {

namespace gpu_detail {
namespace {

constexpr const char* kHostStepNames[] = {
    "tensor alloc", "tensor upload", "tensor free", "call pinned block",
    "call scratch alloc", "call inputs copy", "call kernels", "call event",
    "enqueue prologue", "enqueue kernels", "enqueue bookkeeping", "graph launch"};
static_assert(sizeof(kHostStepNames) / sizeof(kHostStepNames[0]) ==
              static_cast<size_t>(HostStep::kCount));

struct HostStepCounter {
  std::atomic<uint64_t> calls{0}, total_ns{0}, max_ns{0}, slow{0};
};
HostStepCounter g_host_steps[static_cast<int>(HostStep::kCount)];

}  // namespace

void record_host_step(HostStep step, uint64_t ns) {
  HostStepCounter& c = g_host_steps[static_cast<int>(step)];
  c.calls.fetch_add(1, std::memory_order_relaxed);
  c.total_ns.fetch_add(ns, std::memory_order_relaxed);
  if (ns > 10000000) c.slow.fetch_add(1, std::memory_order_relaxed);
  uint64_t prev = c.max_ns.load(std::memory_order_relaxed);
  while (ns > prev && !c.max_ns.compare_exchange_weak(prev, ns, std::memory_order_relaxed)) {
  }
}

}  // namespace gpu_detail

std::vector<HostStepStats> host_step_stats() {
  using gpu_detail::g_host_steps;
  using gpu_detail::HostStep;
  using gpu_detail::kHostStepNames;
  std::vector<HostStepStats> out;
  for (int i = 0; i < static_cast<int>(HostStep::kCount); ++i) {
    HostStepStats s;
    s.name = kHostStepNames[i];
    s.calls = g_host_steps[i].calls.load(std::memory_order_relaxed);
    s.total_ms = g_host_steps[i].total_ns.load(std::memory_order_relaxed) / 1e6;
    s.max_ms = g_host_steps[i].max_ns.load(std::memory_order_relaxed) / 1e6;
    s.over_10ms = g_host_steps[i].slow.load(std::memory_order_relaxed);
    out.push_back(s);
  }
  return out;
}

}  // namespace binding
}  // namespace flashsample
