// What the per-row decisions share (filters.cu's decide kernels and extra_pass.cu's): the 64-bit
// order keys of a row's values, the operators of their block reductions and the block scan.
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

// Exclusive prefix of x over the block's threads (thread order), and the total; fixed order, so
// float64 sums do not depend on timing.
template <typename T>
__device__ T block_exclusive_scan(T x, T& total) {
  __shared__ T warp_sums[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  T inc = x;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += y;
  }
  T excl = __shfl_up_sync(0xffffffffu, inc, 1);
  if (lane == 0) excl = T(0);
  __syncthreads();
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    T s = lane < warps ? warp_sums[lane] : T(0);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const T y = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += y;
    }
    __syncwarp();
    if (lane < warps) warp_sums[lane] = s;
  }
  __syncthreads();
  total = warp_sums[warps - 1];
  return (warp > 0 ? warp_sums[warp - 1] : T(0)) + excl;
}

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
