// The scratch layout of a sampling call and the dispatch to the CUDA launchers (launch.h).
#include "launch.h"

#include <algorithm>
#include <cstring>

#include "../../cuda/include/launchers.h"
#include "runtime.h"

namespace flashsample {
namespace binding {
namespace gpu_detail {

namespace {

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

}  // namespace

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

}  // namespace gpu_detail
}  // namespace binding
}  // namespace flashsample
