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
  l.bias_offsets = take(rows.bias_offsets.size() * 4);
  l.bias_tokens = take(rows.bias_tokens.size() * 4);
  l.bias_values = take(rows.bias_values.size() * 4);
  l.banned_offsets = take(rows.banned_offsets.size() * 4);
  l.banned_tokens = take(rows.banned_tokens.size() * 4);
  l.penalty_offsets = take(rows.penalty_offsets.size() * 4);
  l.penalty_tokens = take(rows.penalty_tokens.size() * 4);
  l.penalty_counts = take(rows.penalty_counts.size() * 4);
  l.penalty_in_prompt = take(rows.penalty_in_prompt.size());
  l.repetition = take(rows.repetition_penalty.size() * 4);
  l.frequency = take(rows.frequency_penalty.size() * 4);
  l.presence = take(rows.presence_penalty.size() * 4);
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
  put(l.bias_offsets, rows.bias_offsets.data(), rows.bias_offsets.size() * 4);
  put(l.bias_tokens, rows.bias_tokens.data(), rows.bias_tokens.size() * 4);
  put(l.bias_values, rows.bias_values.data(), rows.bias_values.size() * 4);
  put(l.banned_offsets, rows.banned_offsets.data(), rows.banned_offsets.size() * 4);
  put(l.banned_tokens, rows.banned_tokens.data(), rows.banned_tokens.size() * 4);
  put(l.penalty_offsets, rows.penalty_offsets.data(), rows.penalty_offsets.size() * 4);
  put(l.penalty_tokens, rows.penalty_tokens.data(), rows.penalty_tokens.size() * 4);
  put(l.penalty_counts, rows.penalty_counts.data(), rows.penalty_counts.size() * 4);
  put(l.penalty_in_prompt, rows.penalty_in_prompt.data(), rows.penalty_in_prompt.size());
  put(l.repetition, rows.repetition_penalty.data(), rows.repetition_penalty.size() * 4);
  put(l.frequency, rows.frequency_penalty.data(), rows.frequency_penalty.size() * 4);
  put(l.presence, rows.presence_penalty.data(), rows.presence_penalty.size() * 4);
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
  // The listed tokens' CSR lists (an empty list stays null; an empty tokenIds of a given list is
  // valid: its offsets are all 0, and the kernels never read past them).
  auto i32 = [&](size_t at) { return reinterpret_cast<const int32_t*>(base + at); };
  auto f32 = [&](size_t at) { return reinterpret_cast<const float*>(base + at); };
  if (!rows.bias_offsets.empty()) {
    p->bias_offsets = i32(l.bias_offsets);
    p->bias_tokens = i32(l.bias_tokens);
    p->bias_values = f32(l.bias_values);
  }
  if (!rows.banned_offsets.empty()) {
    p->banned_offsets = i32(l.banned_offsets);
    p->banned_tokens = i32(l.banned_tokens);
  }
  if (!rows.penalty_offsets.empty()) {
    p->penalty_offsets = i32(l.penalty_offsets);
    p->penalty_tokens = i32(l.penalty_tokens);
    p->penalty_counts = i32(l.penalty_counts);
    p->penalty_in_prompt = reinterpret_cast<const uint8_t*>(base + l.penalty_in_prompt);
    p->repetition_penalty = rows.repetition_penalty.empty() ? nullptr : f32(l.repetition);
    p->frequency_penalty = rows.frequency_penalty.empty() ? nullptr : f32(l.frequency);
    p->presence_penalty = rows.presence_penalty.empty() ? nullptr : f32(l.presence);
  }
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
