// The binding's use of the CUDA runtime: device queries, memory, launching a sampling call on a
// stream and waiting for it on a worker thread, and the benchmark's timing loops. Without CUDA
// (FLASHSAMPLE_WITH_CUDA undefined) every entry point reports that the addon was built without it.
#include "cuda_api.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#if FLASHSAMPLE_WITH_CUDA
#include <cuda_runtime.h>

#include "../cuda/include/launchers.h"
#endif

namespace flashsample {
namespace binding {

namespace {

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
  kCount
};
constexpr const char* kHostStepNames[] = {
    "tensor alloc", "tensor upload", "tensor free", "call pinned block",
    "call scratch alloc", "call inputs copy", "call kernels", "call event"};
static_assert(sizeof(kHostStepNames) / sizeof(kHostStepNames[0]) ==
              static_cast<size_t>(HostStep::kCount));

struct HostStepCounter {
  std::atomic<uint64_t> calls{0}, total_ns{0}, max_ns{0}, slow{0};
};
HostStepCounter g_host_steps[static_cast<int>(HostStep::kCount)];

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
      HostStepCounter& c = g_host_steps[static_cast<int>(step)];
      c.calls.fetch_add(1, std::memory_order_relaxed);
      c.total_ns.fetch_add(ns, std::memory_order_relaxed);
      if (ns > 10000000) c.slow.fetch_add(1, std::memory_order_relaxed);
      uint64_t prev = c.max_ns.load(std::memory_order_relaxed);
      while (ns > prev && !c.max_ns.compare_exchange_weak(prev, ns, std::memory_order_relaxed)) {
      }
    }
  } record{step, t0};
  return fn();
}

}  // namespace

std::vector<HostStepStats> host_step_stats() {
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

#if !FLASHSAMPLE_WITH_CUDA

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

#else  // FLASHSAMPLE_WITH_CUDA

namespace {

std::string cuda_message(const char* what, cudaError_t status) {
  return std::string(what) + " failed: " + cudaGetErrorName(status) + " (" +
         cudaGetErrorString(status) + ")";
}

#define FS_CUDA_TRY(what, expr)                          \
  do {                                                   \
    const cudaError_t fs_status_ = (expr);               \
    if (fs_status_ != cudaSuccess) {                     \
      (void)cudaGetLastError();                          \
      return cuda_message(what, fs_status_);             \
    }                                                    \
  } while (0)

// One compute stream and one copy stream per device, created on first use and kept for the life of
// the process (the driver reclaims them at exit). Non-blocking: no implicit ordering with the
// legacy default stream that other libraries may use.
// Per device: `compute` runs the library's sampling work (unless a call brings its own stream),
// `copy` brings results back, `transfer` allocates, fills and frees tensors. Tensor allocation,
// upload and free never wait for `compute`: with hundreds of calls queued there, a device-wide
// cudaFree or a synchronize of `compute` on the JS thread stalled the event loop for seconds
// (H200 stress run, 2026-11-30: p99 lag 1787 ms with 256 calls in flight).
struct DeviceStreams {
  cudaStream_t compute = nullptr;
  cudaStream_t copy = nullptr;
  cudaStream_t transfer = nullptr;
  // Tensors come from their own stream-ordered pool, which keeps at most
  // tensor_pool_keep_bytes() of freed memory for reuse: beyond that, memory a disposed tensor held
  // goes back to the driver at the next synchronization, so an engine sharing the GPU gets it
  // back (the default pool, tuned to keep per-call workspaces, keeps all).
  cudaMemPool_t tensor_pool = nullptr;
  bool ready = false;
};

// How much freed tensor memory the tensor pool keeps for reuse instead of returning it to the
// driver at the next synchronization: FLASHSAMPLE_TENSOR_POOL_KEEP_MB, default 256 MiB. With 0
// every tensor allocation after a free mapped fresh memory (see bench/NOTES.md, "Stress").
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

std::string device_streams(int ordinal, DeviceStreams** out) {
  if (ordinal < 0 || ordinal >= 64) return "device ordinal out of range";
  std::lock_guard<std::mutex> lock(g_streams_mutex);
  DeviceStreams& s = g_streams[ordinal];
  if (!s.ready) {
    FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
    FS_CUDA_TRY("cudaStreamCreate", cudaStreamCreateWithFlags(&s.compute, cudaStreamNonBlocking));
    FS_CUDA_TRY("cudaStreamCreate", cudaStreamCreateWithFlags(&s.copy, cudaStreamNonBlocking));
    FS_CUDA_TRY("cudaStreamCreate", cudaStreamCreateWithFlags(&s.transfer, cudaStreamNonBlocking));
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

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Carves one stream-ordered allocation into the per-call arrays.
struct ScratchLayout {
  size_t temperature = 0, seed = 0, offset = 0, top_k = 0, top_p = 0, min_p = 0, allowed = 0;
  size_t tokens = 0, row_status = 0, logprobs = 0, top_tokens = 0, top_logprobs = 0, fallback = 0;
  size_t input_bytes = 0, total = 0;
};

ScratchLayout plan_scratch(const SampleParams& p, const HostRowInputs& rows) {
  ScratchLayout l;
  const size_t B = static_cast<size_t>(p.batch), S = static_cast<size_t>(p.num_samples);
  const size_t n = static_cast<size_t>(std::max(p.top_logprobs, 0));
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t start = at;
    at = align_up(at + bytes, 256);
    return start;
  };
  l.temperature = take(B * 4);
  l.seed = take(B * 8);
  l.offset = take(B * 8);
  l.top_k = take(rows.top_k.size() * 4);
  l.top_p = take(rows.top_p.size() * 4);
  l.min_p = take(rows.min_p.size() * 4);
  l.allowed = take(rows.allowed.size() * 4);
  l.input_bytes = at;
  l.tokens = take(B * S * 4);
  l.row_status = take(B * 4);
  l.logprobs = take(p.logprobs ? B * S * 4 : 0);
  l.top_tokens = take(B * n * 4);
  l.top_logprobs = take(B * n * 4);
  l.fallback = take(4);
  l.total = at;
  return l;
}

std::vector<uint8_t> pack_inputs(const ScratchLayout& l, const SampleParams& p,
                                 const HostRowInputs& rows) {
  std::vector<uint8_t> staging(l.input_bytes, 0);
  auto put = [&](size_t at, const void* src, size_t bytes) {
    if (bytes) std::memcpy(staging.data() + at, src, bytes);
  };
  const size_t B = static_cast<size_t>(p.batch);
  put(l.temperature, rows.temperature.data(), B * 4);
  if (!rows.device_seed) put(l.seed, rows.seed.data(), B * 8);
  if (!rows.device_offset) put(l.offset, rows.offset.data(), B * 8);
  put(l.top_k, rows.top_k.data(), rows.top_k.size() * 4);
  put(l.top_p, rows.top_p.data(), rows.top_p.size() * 4);
  put(l.min_p, rows.min_p.data(), rows.min_p.size() * 4);
  put(l.allowed, rows.allowed.data(), rows.allowed.size() * 4);
  return staging;
}

// Points the per-row and output fields of `p` into the scratch block at `base`.
void bind_scratch(SampleParams* p, const ScratchLayout& l, uint8_t* base, const HostRowInputs& rows,
                  bool want_logprobs) {
  p->temperature = reinterpret_cast<const float*>(base + l.temperature);
  p->seed = rows.device_seed ? rows.device_seed : reinterpret_cast<const uint64_t*>(base + l.seed);
  p->offset =
      rows.device_offset ? rows.device_offset : reinterpret_cast<const uint64_t*>(base + l.offset);
  p->top_k = rows.top_k.empty() ? nullptr : reinterpret_cast<const int32_t*>(base + l.top_k);
  p->top_p = rows.top_p.empty() ? nullptr : reinterpret_cast<const float*>(base + l.top_p);
  p->min_p = rows.min_p.empty() ? nullptr : reinterpret_cast<const float*>(base + l.min_p);
  p->allowed = rows.device_allowed ? rows.device_allowed
               : rows.allowed.empty() ? nullptr
                                      : reinterpret_cast<const uint32_t*>(base + l.allowed);
  p->tokens = reinterpret_cast<int32_t*>(base + l.tokens);
  p->row_status = reinterpret_cast<int32_t*>(base + l.row_status);
  p->logprobs = want_logprobs ? reinterpret_cast<float*>(base + l.logprobs) : nullptr;
  p->top_tokens = p->top_logprobs > 0 ? reinterpret_cast<int32_t*>(base + l.top_tokens) : nullptr;
  p->top_token_logprobs =
      p->top_logprobs > 0 ? reinterpret_cast<float*>(base + l.top_logprobs) : nullptr;
  p->fallback_rows = reinterpret_cast<int32_t*>(base + l.fallback);
}

cudaError_t launch(SamplerKind kind, const SampleParams& p, cudaStream_t stream) {
  switch (kind) {
    case SamplerKind::kFused:
      return cuda::launch_fused_sample(p, stream);
    case SamplerKind::kReferenceGumbel:
      return cuda::launch_reference_sample(p, ReferenceMethod::kGumbel, stream);
    case SamplerKind::kReferenceInverseCdf:
      return cuda::launch_reference_sample(p, ReferenceMethod::kInverseCdf, stream);
  }
  return cudaErrorInvalidValue;
}

std::string launch_message(SamplerKind kind, cudaError_t status) {
  if (status == cudaErrorNotSupported) {
    return "this combination of options is not supported by the CUDA " +
           std::string(kind == SamplerKind::kFused ? "fused sampler" : "reference sampler") +
           " yet (" + cudaGetErrorString(status) + ")";
  }
  return cuda_message("sampling kernel launch", status);
}

}  // namespace

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

std::string gpu_malloc(int ordinal, size_t bytes, void** pointer) {
  DeviceStreams* s;
  std::string error = device_streams(ordinal, &s);
  if (!error.empty()) return error;
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  // Waits for `transfer` only (the allocation itself): afterwards any stream may use the memory.
  *pointer = nullptr;
  const cudaError_t status = timed(HostStep::kTensorAlloc, [&] {
    const cudaError_t e = cudaMallocFromPoolAsync(pointer, bytes, s->tensor_pool, s->transfer);
    return e != cudaSuccess ? e : cudaStreamSynchronize(s->transfer);
  });
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: the next call must not see this error
    if (*pointer != nullptr) cudaFreeAsync(*pointer, s->transfer);
    *pointer = nullptr;
    return cuda_message("cudaMallocFromPoolAsync", status);
  }
  return "";
}

// Called when the last reference to a tensor goes: no call of the library still uses it (calls
// hold references until their work has completed), so a stream-ordered free on `transfer` is safe
// and does not wait.
std::string gpu_free(int ordinal, void* pointer) {
  DeviceStreams* s;
  std::string error = device_streams(ordinal, &s);
  if (!error.empty()) return error;
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  FS_CUDA_TRY("cudaFreeAsync",
              timed(HostStep::kTensorFree, [&] { return cudaFreeAsync(pointer, s->transfer); }));
  return "";
}

std::string gpu_upload(int ordinal, void* device_dst, const void* host_src, size_t bytes) {
  DeviceStreams* s;
  std::string error = device_streams(ordinal, &s);
  if (!error.empty()) return error;
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  // Only fresh tensors are filled (Device.tensor): nothing queued elsewhere reads them yet, so the
  // copy goes on `transfer` and waits for itself only; the calls that read the tensor are enqueued
  // after this returns.
  FS_CUDA_TRY("cudaMemcpyAsync (host to device)", timed(HostStep::kTensorUpload, [&] {
                const cudaError_t e = cudaMemcpyAsync(device_dst, host_src, bytes,
                                                      cudaMemcpyHostToDevice, s->transfer);
                return e != cudaSuccess ? e : cudaStreamSynchronize(s->transfer);
              }));
  return "";
}

std::string gpu_download(int ordinal, void* host_dst, const void* device_src, size_t bytes) {
  DeviceStreams* s;
  std::string error = device_streams(ordinal, &s);
  if (!error.empty()) return error;
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  // Ordered after the library's own work on that tensor (this runs on a worker thread).
  FS_CUDA_TRY("cudaMemcpyAsync (device to host)",
              cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, s->compute));
  FS_CUDA_TRY("cudaStreamSynchronize", cudaStreamSynchronize(s->compute));
  return "";
}

std::string gpu_check_pointer(int ordinal, const void* pointer) {
  cudaPointerAttributes attributes;
  const cudaError_t status = cudaPointerGetAttributes(&attributes, pointer);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return cuda_message("cudaPointerGetAttributes", status);
  }
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
    return "the pointer is not device memory (cudaPointerGetAttributes says host or unregistered)";
  }
  if (attributes.type == cudaMemoryTypeDevice && attributes.device != ordinal) {
    return "the pointer belongs to cuda:" + std::to_string(attributes.device) + ", not cuda:" +
           std::to_string(ordinal);
  }
  return "";
}

// Pinned host blocks for the per-call inputs. A cudaMemcpyAsync from pageable memory does not
// return until the stream reaches it, so with hundreds of calls queued each launch blocked the JS
// thread behind the others' kernels (H200 stress run 2026-11-30: p99 event-loop lag 1754 ms with
// tensors already on their own stream). From pinned memory the copy is truly asynchronous. Blocks
// (powers of two from 4 KB) are kept for reuse; a call returns its block once its work completed.
class PinnedPool {
 public:
  // Returns a block of at least `bytes` (its capacity in *capacity), or nullptr.
  void* acquire(size_t bytes, size_t* capacity) {
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
  // Called off the JS thread (the call's worker) or after a synchronize: cudaFreeHost may wait.
  void release(void* p, size_t capacity) {
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

 private:
  static constexpr size_t kMaxCachedBytes = size_t(256) << 20;
  static int bucket(size_t cap) {
    int b = 0;
    while ((size_t(4096) << b) < cap) ++b;
    return b;
  }
  std::mutex mutex_;
  std::vector<void*> free_[48];
  size_t cached_ = 0;
};

PinnedPool& pinned_pool() {
  static PinnedPool* pool = new PinnedPool();  // never destroyed: no CUDA calls at exit
  return *pool;
}

// Completion events of the calls, kept for reuse per device: creating one per call took 0.26 ms mean
// on the JS thread while uploads ran on worker threads (H200 stress run, 2026-11-30: the driver
// serializes object creation), against 0.01 ms for a record.
class EventPool {
 public:
  cudaError_t acquire(int ordinal, cudaEvent_t* event) {
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
  // The event's last record has completed (or failed): it may be recorded again.
  void release(int ordinal, cudaEvent_t event) {
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

 private:
  static constexpr size_t kMaxCached = 1024;
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_[64];
};

EventPool& event_pool() {
  static EventPool* pool = new EventPool();  // never destroyed: no CUDA calls at exit
  return *pool;
}

struct GpuCall {
  int ordinal = 0;
  void* pinned = nullptr;  // the inputs' pinned block, returned to the pool in gpu_wait
  size_t pinned_capacity = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  uint8_t* scratch = nullptr;
  ScratchLayout layout;
  size_t batch = 0, samples = 0, top_n = 0;
  bool tokens_on_device = false;
  bool want_logprobs = false;
};

std::string gpu_launch_sample(int ordinal, SamplerKind kind, const SampleParams& params,
                              const HostRowInputs& rows, int32_t* device_tokens,
                              uint64_t stream_handle, GpuCall** out_call) {
  DeviceStreams* s;
  std::string error = device_streams(ordinal, &s);
  if (!error.empty()) return error;
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  cudaStream_t stream =
      stream_handle ? reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(stream_handle))
                    : s->compute;

  SampleParams p = params;
  const ScratchLayout layout = plan_scratch(p, rows);
  const std::vector<uint8_t> staging = pack_inputs(layout, p, rows);
  size_t pinned_capacity = 0;
  void* pinned = timed(HostStep::kCallPinnedBlock,
                       [&] { return pinned_pool().acquire(staging.size(), &pinned_capacity); });
  if (pinned == nullptr) return "cudaHostAlloc failed: no pinned host memory for the call's inputs";
  std::memcpy(pinned, staging.data(), staging.size());
  void* scratch = nullptr;
  cudaError_t status = timed(HostStep::kCallScratchAlloc,
                             [&] { return cudaMallocAsync(&scratch, layout.total, stream); });
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    pinned_pool().release(pinned, pinned_capacity);
    return cuda_message("cudaMallocAsync (per-call arrays)", status);
  }
  // Error paths: wait for what was enqueued before the pinned block can be reused.
  auto release = [&] {
    cudaFreeAsync(scratch, stream);
    cudaStreamSynchronize(stream);
    pinned_pool().release(pinned, pinned_capacity);
  };
  status = timed(HostStep::kCallInputsCopy, [&] {
    return cudaMemcpyAsync(scratch, pinned, staging.size(), cudaMemcpyHostToDevice, stream);
  });
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    release();
    return cuda_message("cudaMemcpyAsync (per-row parameters)", status);
  }
  bind_scratch(&p, layout, static_cast<uint8_t*>(scratch), rows, params.logprobs != nullptr);
  if (device_tokens) p.tokens = device_tokens;
  status = timed(HostStep::kCallKernels, [&] {
    const cudaError_t e = cudaMemsetAsync(p.fallback_rows, 0, 4, stream);
    return e != cudaSuccess ? e : launch(kind, p, stream);
  });
  if (status == cudaSuccess) status = cudaGetLastError();
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    release();
    return launch_message(kind, status);
  }
  auto* call = new GpuCall();
  call->ordinal = ordinal;
  call->pinned = pinned;
  call->pinned_capacity = pinned_capacity;
  call->stream = stream;
  call->scratch = static_cast<uint8_t*>(scratch);
  call->layout = layout;
  call->batch = static_cast<size_t>(p.batch);
  call->samples = static_cast<size_t>(p.num_samples);
  call->top_n = static_cast<size_t>(std::max(p.top_logprobs, 0));
  call->tokens_on_device = device_tokens != nullptr;
  call->want_logprobs = params.logprobs != nullptr;
  status = timed(HostStep::kCallEvent, [&] {
    const cudaError_t e = event_pool().acquire(ordinal, &call->done);
    return e != cudaSuccess ? e : cudaEventRecord(call->done, stream);
  });
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    if (call->done) cudaEventDestroy(call->done);  // its state is unknown: not reused
    delete call;
    release();
    return cuda_message("cudaEventRecord", status);
  }
  *out_call = call;
  return "";
}

std::string gpu_wait(GpuCall* call, GpuOutputs* out) {
  std::unique_ptr<GpuCall> owned(call);
  std::string error;
  auto fail = [&](const char* what, cudaError_t status) {
    if (error.empty()) error = cuda_message(what, status);
    (void)cudaGetLastError();
  };
  cudaError_t status = cudaSetDevice(call->ordinal);
  if (status != cudaSuccess) fail("cudaSetDevice", status);
  status = cudaEventSynchronize(call->done);
  if (status != cudaSuccess) {
    fail("the sampling kernels", status);
    cudaEventDestroy(call->done);
  } else {
    event_pool().release(call->ordinal, call->done);
  }
  // The inputs' copy completed before the event (or the context is lost): the block is free.
  pinned_pool().release(call->pinned, call->pinned_capacity);
  call->pinned = nullptr;
  DeviceStreams* s = nullptr;
  if (error.empty()) error = device_streams(call->ordinal, &s);
  const ScratchLayout& l = call->layout;
  auto fetch = [&](void* dst, size_t at, size_t bytes) {
    if (!error.empty() || bytes == 0) return;
    status = cudaMemcpyAsync(dst, call->scratch + at, bytes, cudaMemcpyDeviceToHost, s->copy);
    if (status != cudaSuccess) fail("cudaMemcpyAsync (results)", status);
  };
  const size_t B = call->batch, S = call->samples, n = call->top_n;
  if (!call->tokens_on_device) {
    out->tokens.resize(B * S);
    fetch(out->tokens.data(), l.tokens, B * S * 4);
  }
  out->row_status.resize(B);
  fetch(out->row_status.data(), l.row_status, B * 4);
  if (call->want_logprobs) {
    out->logprobs.resize(B * S);
    fetch(out->logprobs.data(), l.logprobs, B * S * 4);
  }
  if (n) {
    out->top_tokens.resize(B * n);
    out->top_logprobs.resize(B * n);
    fetch(out->top_tokens.data(), l.top_tokens, B * n * 4);
    fetch(out->top_logprobs.data(), l.top_logprobs, B * n * 4);
  }
  fetch(&out->fallback_rows, l.fallback, 4);
  if (s) {
    status = cudaStreamSynchronize(s->copy);
    if (status != cudaSuccess) fail("cudaStreamSynchronize (results)", status);
    cudaFreeAsync(call->scratch, s->copy);
  } else {
    cudaFree(call->scratch);
  }
  return error;
}

std::string gpu_time_sampler(int ordinal, SamplerKind kind, const std::vector<SampleParams>& params,
                             const HostRowInputs& rows, int warmup, int iters,
                             std::vector<double>* microseconds) {
  DeviceStreams* s;
  std::string error = device_streams(ordinal, &s);
  if (!error.empty()) return error;
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  if (params.empty()) return "no inputs to time";
  cudaStream_t stream = s->compute;
  const ScratchLayout layout = plan_scratch(params[0], rows);
  const std::vector<uint8_t> staging = pack_inputs(layout, params[0], rows);
  void* scratch = nullptr;
  FS_CUDA_TRY("cudaMalloc (timing scratch)", cudaMalloc(&scratch, layout.total));
  std::vector<cudaEvent_t> events(2 * static_cast<size_t>(iters), nullptr);
  auto cleanup = [&] {
    for (cudaEvent_t e : events)
      if (e) cudaEventDestroy(e);
    cudaFree(scratch);
  };
  cudaError_t status =
      cudaMemcpy(scratch, staging.data(), staging.size(), cudaMemcpyHostToDevice);
  std::vector<SampleParams> bound = params;
  for (SampleParams& p : bound)
    bind_scratch(&p, layout, static_cast<uint8_t*>(scratch), rows, p.logprobs != nullptr);
  for (size_t i = 0; status == cudaSuccess && i < events.size(); ++i)
    status = cudaEventCreate(&events[i]);
  for (int i = 0; status == cudaSuccess && i < warmup; ++i)
    status = launch(kind, bound[static_cast<size_t>(i) % bound.size()], stream);
  for (int i = 0; status == cudaSuccess && i < iters; ++i) {
    const SampleParams& p = bound[static_cast<size_t>(i + warmup) % bound.size()];
    status = cudaEventRecord(events[2 * i], stream);
    if (status == cudaSuccess) status = launch(kind, p, stream);
    if (status == cudaSuccess) status = cudaEventRecord(events[2 * i + 1], stream);
  }
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  microseconds->assign(static_cast<size_t>(iters), 0.0);
  for (int i = 0; status == cudaSuccess && i < iters; ++i) {
    float ms = 0;
    status = cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]);
    (*microseconds)[i] = ms * 1000.0;
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    cudaStreamSynchronize(stream);
    cleanup();
    return launch_message(kind, status);
  }
  cleanup();
  return "";
}

std::string gpu_read_bandwidth(int ordinal, size_t bytes, int iters, double* bytes_per_second) {
  DeviceStreams* s;
  std::string error = device_streams(ordinal, &s);
  if (!error.empty()) return error;
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  bytes = bytes / 16 * 16;
  void* buffer = nullptr;
  unsigned int* sink = nullptr;
  FS_CUDA_TRY("cudaMalloc (bandwidth buffer)", cudaMalloc(&buffer, bytes));
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaError_t status = cudaMalloc(&sink, sizeof(unsigned int));
  // Non-zero data: zeros have been seen to run faster than real data on this hardware.
  if (status == cudaSuccess) status = cudaMemsetAsync(buffer, 0x5a, bytes, s->compute);
  if (status == cudaSuccess) status = cudaEventCreate(&start);
  if (status == cudaSuccess) status = cudaEventCreate(&stop);
  std::vector<double> seconds;
  for (int i = 0; status == cudaSuccess && i < iters + 2; ++i) {
    status = cudaEventRecord(start, s->compute);
    if (status == cudaSuccess) status = cuda::launch_read_stream(buffer, bytes, sink, s->compute);
    if (status == cudaSuccess) status = cudaEventRecord(stop, s->compute);
    if (status == cudaSuccess) status = cudaEventSynchronize(stop);
    float ms = 0;
    if (status == cudaSuccess) status = cudaEventElapsedTime(&ms, start, stop);
    if (i >= 2) seconds.push_back(ms * 1e-3);  // the first two are warm-up
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  cudaFree(sink);
  cudaFree(buffer);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return cuda_message("read-bandwidth kernel", status);
  }
  std::sort(seconds.begin(), seconds.end());
  *bytes_per_second = static_cast<double>(bytes) / seconds[seconds.size() / 2];
  return "";
}

#endif  // FLASHSAMPLE_WITH_CUDA

}  // namespace binding
}  // namespace flashsample
