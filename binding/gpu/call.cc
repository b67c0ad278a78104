// A sampling call: gpu_launch_sample enqueues it on the JS thread (inputs through a pinned block,
// kernels, a completion event); gpu_wait waits for it on a worker thread and copies its outputs
// back.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../cuda_api.h"
#include "../../cuda/include/launchers.h"
#include "host_steps.h"
#include "launch.h"
#include "pools.h"
#include "runtime.h"

namespace flashsample {
namespace binding {

using gpu_detail::bind_scratch;
using gpu_detail::cuda_message;
using gpu_detail::device_streams;
using gpu_detail::DeviceStreams;
using gpu_detail::event_pool;
using gpu_detail::HostStep;
using gpu_detail::launch;
using gpu_detail::launch_message;
using gpu_detail::pack_inputs;
using gpu_detail::pinned_pool;
using gpu_detail::plan_scratch;
using gpu_detail::ScratchLayout;
using gpu_detail::timed;

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
  bool merge = false;
};

namespace {

// One call: a sampler `kind`, or (merge != nullptr) merge_partials over the blocks of `merge`.
std::string launch_call(int ordinal, SamplerKind kind, const PartialSet* merge, const SampleParams& params,
                        const HostRowInputs& rows, int32_t* device_tokens, uint64_t stream_handle,
                        GpuCall** out_call) {
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
    cudaError_t e = cudaMemsetAsync(p.fallback_rows, 0, 4, stream);
    if (e == cudaSuccess && p.listed_invalid != nullptr) {  // rows no table kernel reads stay valid
      e = cudaMemsetAsync(p.listed_invalid, 0, static_cast<size_t>(p.batch) * 4, stream);
    }
    if (e != cudaSuccess) return e;
    if (merge == nullptr) {
      const cudaError_t launched = launch(kind, p, stream);
      if (launched != cudaSuccess || p.listed_invalid == nullptr) return launched;
      // lists given as tensors: the rows whose lists the table kernel found invalid get status 4
      RecordTargets report;
      report.list_invalid = p.listed_invalid;
      return cuda::launch_record_tokens(report, nullptr, p.batch, p.row_status, stream);
    }
    if (p.row_values != nullptr) return cuda::launch_decide_row_values(p, stream);
    return cuda::launch_merge_partials(p, *merge, reinterpret_cast<int32_t*>(static_cast<uint8_t*>(scratch) + layout.merge_status),
                                       stream);
  });
  if (status == cudaSuccess) status = cudaGetLastError();
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    release();
    return merge ? cuda_message("merge_partials launch", status) : launch_message(kind, status);
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
  call->merge = merge != nullptr;
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

}  // namespace

std::string gpu_launch_sample(int ordinal, SamplerKind kind, const SampleParams& params,
                              const HostRowInputs& rows, int32_t* device_tokens,
                              uint64_t stream_handle, GpuCall** out_call) {
  return launch_call(ordinal, kind, nullptr, params, rows, device_tokens, stream_handle, out_call);
}

std::string gpu_launch_merge(int ordinal, const SampleParams& params, const HostRowInputs& rows,
                             const PartialSet& set, uint64_t stream_handle, GpuCall** out_call) {
  return launch_call(ordinal, SamplerKind::kFused, &set, params, rows, nullptr, stream_handle, out_call);
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
  int32_t merge_status[3] = {0, 0, 0};
  if (call->merge) fetch(merge_status, l.merge_status, 12);
  if (s) {
    status = cudaStreamSynchronize(s->copy);
    if (status != cudaSuccess) fail("cudaStreamSynchronize (results)", status);
    cudaFreeAsync(call->scratch, s->copy);
  } else {
    cudaFree(call->scratch);
  }
  out->merge_error = merge_status[0];
  out->merge_which = merge_status[1];
  out->merge_largest_shard = merge_status[2];
  return error;
}

}  // namespace binding
}  // namespace flashsample
