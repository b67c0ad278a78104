// The parameter checks every CUDA launcher repeats before touching memory (the binding validates
// user input first; these guard the launchers against a caller that bypassed it).
#pragma once

#include <cuda_runtime.h>

#include "include/noise.h"
#include "include/params.h"

namespace flashsample {
namespace cuda {
namespace detail {

// Checks every launcher repeats (the binding validates first; these would otherwise fault).
inline cudaError_t check_params(const SampleParams& p) {
  if (p.batch < 1 || p.batch > kMaxBatch || p.vocab < 1 || p.vocab > 0x7ffffffe || p.dim < 1 ||
      p.num_samples < 1 || p.num_samples > kMaxSamples)
    return cudaErrorInvalidValue;
  if (p.hidden == nullptr || p.weight == nullptr || p.temperature == nullptr ||
      p.seed == nullptr || p.offset == nullptr || p.tokens == nullptr)
    return cudaErrorInvalidValue;
  if (p.dtype != DType::kF32 && p.dtype != DType::kF16 && p.dtype != DType::kBF16)
    return cudaErrorInvalidValue;
  if (has_penalties(p) && p.listed_entries < 0) return cudaErrorInvalidValue;
  if (p.filter_order != FilterOrder::kHuggingFace && p.filter_order != FilterOrder::kMinPFirst)
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
