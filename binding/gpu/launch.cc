// The scratch layout of a sampling call and the dispatch to the CUDA launchers (launch.h).
#include "launch.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "../../cuda/include/launchers.h"
#include "../../cuda/include/regions.h"
#include "runtime.h"

namespace flashsample {
namespace binding {
namespace gpu_detail {

namespace {

template <class T>
size_t bytes_of(const std::vector<T>& v) {
  return v.size() * sizeof(T);
}

// The per-row inputs of a call, in scratch order, once for plan_scratch and pack_inputs:
// f(layout slot, host data or nullptr when the array already lives on the device, bytes).
template <class Layout, class F>
void each_input(Layout& l, const SampleParams& p, const HostRowInputs& rows, F&& f) {
  const size_t B = static_cast<size_t>(p.batch);
  f(l.temperature, rows.temperature.data(), B * 4);
  f(l.seed, rows.device_seed ? nullptr : rows.seed.data(), B * 8);
  f(l.offset, rows.device_offset ? nullptr : rows.offset.data(), B * 8);
  f(l.top_k, rows.top_k.data(), bytes_of(rows.top_k));
  f(l.top_p, rows.top_p.data(), bytes_of(rows.top_p));
  f(l.min_p, rows.min_p.data(), bytes_of(rows.min_p));
  f(l.allowed, rows.allowed.data(), bytes_of(rows.allowed));
  f(l.bias_offsets, rows.bias_offsets.data(), bytes_of(rows.bias_offsets));
  f(l.bias_tokens, rows.bias_tokens.data(), bytes_of(rows.bias_tokens));
  f(l.bias_values, rows.bias_values.data(), bytes_of(rows.bias_values));
  f(l.banned_offsets, rows.banned_offsets.data(), bytes_of(rows.banned_offsets));
  f(l.banned_tokens, rows.banned_tokens.data(), bytes_of(rows.banned_tokens));
  f(l.penalty_offsets, rows.penalty_offsets.data(), bytes_of(rows.penalty_offsets));
  f(l.penalty_tokens, rows.penalty_tokens.data(), bytes_of(rows.penalty_tokens));
  f(l.penalty_counts, rows.penalty_counts.data(), bytes_of(rows.penalty_counts));
  f(l.penalty_in_prompt, rows.penalty_in_prompt.data(), bytes_of(rows.penalty_in_prompt));
  f(l.repetition, rows.repetition_penalty.data(), bytes_of(rows.repetition_penalty));
  f(l.frequency, rows.frequency_penalty.data(), bytes_of(rows.frequency_penalty));
  f(l.presence, rows.presence_penalty.data(), bytes_of(rows.presence_penalty));
}

}  // namespace

ScratchLayout plan_scratch(const SampleParams& p, const HostRowInputs& rows) {
  ScratchLayout l;
  const size_t B = static_cast<size_t>(p.batch), S = static_cast<size_t>(p.num_samples);
  const size_t n = static_cast<size_t>(std::max(p.top_logprobs, 0));
  RegionLayout regions;
  auto take = [&](size_t bytes) { return regions.take(bytes); };
  each_input(l, p, rows, [&](size_t& slot, const void*, size_t bytes) { slot = take(bytes); });
  l.input_bytes = regions.bytes;
  l.tokens = take(B * S * 4);
  l.row_status = take(B * 4);
  l.logprobs = take(p.logprobs ? B * S * 4 : 0);
  l.top_tokens = take(B * n * 4);
  l.top_logprobs = take(B * n * 4);
  l.fallback = take(4);
  l.merge_status = take(12);
  l.list_invalid = take(rows.lists_unchecked ? B * 4 : 0);
  l.total = regions.bytes;
  return l;
}

std::vector<uint8_t> pack_inputs(const ScratchLayout& l, const SampleParams& p,
                                 const HostRowInputs& rows) {
  std::vector<uint8_t> staging(l.input_bytes, 0);
  each_input(l, p, rows, [&](size_t slot, const void* src, size_t bytes) {
    if (src != nullptr && bytes) std::memcpy(staging.data() + slot, src, bytes);
  });
  return staging;
}

void bind_scratch(SampleParams* p, const ScratchLayout& l, uint8_t* base, const HostRowInputs& rows,
                  bool want_logprobs) {
  bind_row_inputs(p, rows, l, [base](const auto& v, size_t slot) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    return reinterpret_cast<const T*>(base + slot);
  });
  p->tokens = reinterpret_cast<int32_t*>(base + l.tokens);
  p->row_status = reinterpret_cast<int32_t*>(base + l.row_status);
  p->logprobs = want_logprobs ? reinterpret_cast<float*>(base + l.logprobs) : nullptr;
  p->top_tokens = p->top_logprobs > 0 ? reinterpret_cast<int32_t*>(base + l.top_tokens) : nullptr;
  p->top_token_logprobs =
      p->top_logprobs > 0 ? reinterpret_cast<float*>(base + l.top_logprobs) : nullptr;
  p->fallback_rows = reinterpret_cast<int32_t*>(base + l.fallback);
  p->listed_invalid = rows.lists_unchecked ? reinterpret_cast<int32_t*>(base + l.list_invalid) : nullptr;
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
