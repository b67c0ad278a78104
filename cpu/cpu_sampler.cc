// Entry-point plumbing of the CPU backend: parameter checks and the thread helpers. The samplers
// themselves are in cpu_fused.cc and cpu_reference.cc.
#include "cpu_sampler.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>

#include "cpu_internal.h"

namespace flashsample {
namespace cpu {
namespace detail {

std::string validate(const SampleParams& p) {
  if (p.hidden == nullptr) return "hidden is null";
  if (p.weight == nullptr) return "weight is null";
  if (p.tokens == nullptr) return "tokens is null";
  if (p.temperature == nullptr) return "temperature is null";
  if (p.seed == nullptr) return "seed is null";
  if (p.offset == nullptr) return "offset is null";
  if (p.dtype != DType::kF32 && p.dtype != DType::kF16 && p.dtype != DType::kBF16) {
    return "dtype must be f32, f16 or bf16";
  }
  if (p.batch <= 0 || p.batch > kMaxBatch) return "batch must be in 1 .. 65535";
  if (p.vocab <= 0 || p.vocab >= static_cast<int64_t>(kNoToken)) {
    return "vocab must be in 1 .. 2^31 - 2";
  }
  if (p.dim <= 0) return "dim must be positive";
  if (p.num_samples <= 0 || p.num_samples > kMaxSamples) return "num_samples must be in 1 .. 65536";
  if (p.top_logprobs < 0) return "top_logprobs must be >= 0";
  if (p.top_logprobs > 0 && (p.top_tokens == nullptr || p.top_token_logprobs == nullptr)) {
    return "top_logprobs > 0 needs top_tokens and top_token_logprobs";
  }
  return std::string();
}

int resolve_threads(int requested) {
  if (requested > 0) return requested;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void run_threads(int count, const std::function<void(int)>& body) {
  std::exception_ptr first_error;
  std::atomic<bool> failed{false};
  auto guarded = [&](int t) {
    try {
      body(t);
    } catch (...) {
      if (!failed.exchange(true)) first_error = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(std::max(0, count - 1)));
  for (int t = 1; t < count; ++t) workers.emplace_back(guarded, t);
  if (count > 0) guarded(0);
  for (std::thread& w : workers) w.join();
  if (first_error) std::rethrow_exception(first_error);
}

void parallel_for(int64_t items, int num_threads, const std::function<void(int64_t)>& body) {
  std::atomic<int64_t> next{0};
  const int threads = static_cast<int>(std::min<int64_t>(std::max(1, num_threads), items));
  run_threads(threads, [&](int) {
    for (int64_t i = next.fetch_add(1); i < items; i = next.fetch_add(1)) body(i);
  });
}

}  // namespace detail
}  // namespace cpu
}  // namespace flashsample
