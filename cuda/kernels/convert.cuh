// Element conversions to fp32, shared by every kernel that reads operands element by element
// (the SIMT GEMM path, bias loads, the filtered path's fallback dot products).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace flashsample {
namespace cuda {
namespace detail {

template <typename T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T>
__device__ __forceinline__ float load_float(const void* base, int64_t i) {
  return to_float<T>(static_cast<const T*>(base)[i]);
}

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
