// What the per-row decisions share (filters.cu's decide kernels and extra_pass.cu's): the 64-bit
// order keys of a row's values and the operators of their block reductions.
#pragma once

#include <stdint.h>

namespace flashsample {
namespace cuda {
namespace detail {

// 64-bit key whose unsigned order is (value descending, index ascending): larger key = earlier.
__device__ __forceinline__ unsigned long long order_key(float l, uint32_t v) {
  if (l == 0.0f) l = 0.0f;  // one encoding for -0 and +0
  uint32_t b = __float_as_uint(l);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<unsigned long long>(b) << 32) | static_cast<unsigned long long>(0xffffffffu - v);
}
__device__ __forceinline__ float key_value(unsigned long long key) {
  const uint32_t b = static_cast<uint32_t>(key >> 32);
  return __uint_as_float((b & 0x80000000u) ? (b & 0x7fffffffu) : ~b);
}
__device__ __forceinline__ uint32_t key_index(unsigned long long key) {
  return 0xffffffffu - static_cast<uint32_t>(key);
}

struct Sum {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};
struct Min {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a < b ? a : b; }
};

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
