// Module entry: NativeBuffer, the samplers, device queries and the noise function (exported so the
// tests check the very code the kernels compile).
#include <napi.h>

#include <thread>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "../cpu/cpu_sampler.h"
#include "../cuda/escape_hatches.h"
#include "../cuda/include/noise.h"
#include "cuda_api.h"
#include "napi_util.h"
#include "native_buffer.h"
#include "storage.h"

namespace flashsample {
namespace binding {

void register_sample(Napi::Env env, Napi::Object exports);
void register_engine(Napi::Env env, Napi::Object exports);
void register_nccl(Napi::Env env, Napi::Object exports);

namespace {

// gpuStatus(): {compiledWithCuda, usable, reason, devices: [{name, sm, multiprocessors, memory}],
// escapeHatches: {noWgmma, noTensorMaps}} (the dispatch's own readers, cuda/escape_hatches.h)
Napi::Value GpuStatus(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const GpuInfo& gpu = gpu_info();
  Napi::Object status = Napi::Object::New(env);
  status.Set("compiledWithCuda", gpu.compiled_with_cuda);
  status.Set("usable", gpu.device_count > 0);
  status.Set("reason", gpu.reason);
  Napi::Array devices = Napi::Array::New(env, gpu.names.size());
  for (size_t i = 0; i < gpu.names.size(); ++i) {
    Napi::Object d = Napi::Object::New(env);
    d.Set("name", gpu.names[i]);
    d.Set("sm", gpu.sm_versions[i]);
    d.Set("multiprocessors", gpu.sm_counts[i]);
    d.Set("memory", static_cast<double>(gpu.memory_bytes[i]));
    devices.Set(static_cast<uint32_t>(i), d);
  }
  status.Set("devices", devices);
  Napi::Object hatches = Napi::Object::New(env);
  hatches.Set("noWgmma", cuda::no_wgmma_hatch());
  hatches.Set("noTensorMaps", cuda::no_tensor_maps_hatch());
  status.Set("escapeHatches", hatches);
  return status;
}

Napi::Value CpuThreads(const Napi::CallbackInfo& info) {
  const unsigned n = std::thread::hardware_concurrency();
  return Napi::Number::New(info.Env(), n == 0 ? 1 : n);
}

// cpuIsa(): the CPU backend's vector ISA, "avx512", "avx2" or "baseline" (cpu::kernel_isa()).
Napi::Value CpuIsa(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), cpu::kernel_isa());
}

// memoryStats(): the native buffers alive and the external memory reported to V8 (storage.h);
// diagnostics for the stress script, not part of the public API.
Napi::Value MemoryStats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const StorageStats s = storage_stats();
  Napi::Object out = Napi::Object::New(env);
  out.Set("hostBuffers", static_cast<double>(s.host_buffers));
  out.Set("hostBytes", static_cast<double>(s.host_bytes));
  out.Set("deviceBuffers", static_cast<double>(s.device_buffers));
  out.Set("deviceBytes", static_cast<double>(s.device_bytes));
  out.Set("externalBuffers", static_cast<double>(s.external_buffers));
  out.Set("reportedBytes", static_cast<double>(s.reported_bytes));
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  // The whole process's malloc (Node's, V8's and ours): bytes in use, and bytes free but still
  // held by the allocator (what RSS keeps after a burst of allocations is freed).
  const struct mallinfo2 m = mallinfo2();
  out.Set("mallocInUse", static_cast<double>(m.uordblks + m.hblkhd));
  out.Set("mallocFree", static_cast<double>(m.fordblks));
#endif
  return out;
}

// hostStepStats(): [{name, calls, totalMs, maxMs, over10ms}] per host-side CUDA step (cuda_api.h);
// diagnostics for the stress script, not part of the public API.
Napi::Value HostStepStatsJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::vector<HostStepStats> stats = host_step_stats();
  Napi::Array out = Napi::Array::New(env, stats.size());
  for (size_t i = 0; i < stats.size(); ++i) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", stats[i].name);
    o.Set("calls", static_cast<double>(stats[i].calls));
    o.Set("totalMs", stats[i].total_ms);
    o.Set("maxMs", stats[i].max_ms);
    o.Set("over10ms", static_cast<double>(stats[i].over_10ms));
    out.Set(static_cast<uint32_t>(i), o);
  }
  return out;
}

uint32_t u32_arg(const Napi::CallbackInfo& info, size_t i) {
  if (!info[i].IsNumber()) throw_error(info.Env(), "philox: expected 32-bit unsigned numbers");
  return info[i].As<Napi::Number>().Uint32Value();
}

// philox(c0, c1, c2, c3, k0, k1): [x0, x1, x2, x3]
Napi::Value Philox(const Napi::CallbackInfo& info) {
  if (info.Length() != 6) throw_error(info.Env(), "philox: expected 6 arguments");
  const Philox4 r = philox4x32_10(u32_arg(info, 0), u32_arg(info, 1), u32_arg(info, 2),
                                  u32_arg(info, 3), u32_arg(info, 4), u32_arg(info, 5));
  Napi::Array out = Napi::Array::New(info.Env(), 4);
  for (uint32_t i = 0; i < 4; ++i) out.Set(i, Napi::Number::New(info.Env(), r.x[i]));
  return out;
}

// gumbel(bits): the standard Gumbel value that the 32-bit draw `bits` maps to.
Napi::Value Gumbel(const Napi::CallbackInfo& info) {
  if (info.Length() != 1) throw_error(info.Env(), "gumbel: expected 1 argument");
  return Napi::Number::New(info.Env(), gumbel_from_bits(u32_arg(info, 0)));
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("NativeBuffer", NativeBuffer::Define(env));
  exports.Set("gpuStatus", Napi::Function::New<GpuStatus>(env, "gpuStatus"));
  exports.Set("memoryStats", Napi::Function::New<MemoryStats>(env, "memoryStats"));
  exports.Set("hostStepStats", Napi::Function::New<HostStepStatsJs>(env, "hostStepStats"));
  exports.Set("cpuThreads", Napi::Function::New<CpuThreads>(env, "cpuThreads"));
  exports.Set("cpuIsa", Napi::Function::New<CpuIsa>(env, "cpuIsa"));
  exports.Set("philox", Napi::Function::New<Philox>(env, "philox"));
  exports.Set("gumbel", Napi::Function::New<Gumbel>(env, "gumbel"));
  exports.Set("maxBatch", Napi::Number::New(env, static_cast<double>(kMaxBatch)));
  exports.Set("maxSamples", Napi::Number::New(env, static_cast<double>(kMaxSamples)));
  register_sample(env, exports);
  register_engine(env, exports);
  register_nccl(env, exports);
  return exports;
}

}  // namespace
}  // namespace binding
}  // namespace flashsample

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) {
  return flashsample::binding::Init(env, exports);
}

NODE_API_MODULE(flashsample, InitModule)
