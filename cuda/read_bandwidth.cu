// launch_read_stream: the read-bandwidth ceiling for the benchmark. 16-byte __ldg loads over the
// buffer, grid-stride, four independent loads in flight per thread per step, xor checksum folded
// into `sink` with one atomicXor per block (so the loads cannot be elided).
#include <cuda_runtime.h>
#include <stdint.h>

#include "include/launchers.h"

namespace flashsample {
namespace cuda {
namespace {

constexpr int kStreamThreads = 512;

__global__ void __launch_bounds__(kStreamThreads)
    read_stream_kernel(const uint4* __restrict__ data, size_t n16, const uint8_t* __restrict__ tail,
                       size_t tail_bytes, unsigned int* __restrict__ sink) {
  __shared__ unsigned int s_acc[kStreamThreads / 32];
  unsigned int acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 a = __ldg(data + i), b = __ldg(data + i + stride);
    const uint4 c = __ldg(data + i + 2 * stride), d = __ldg(data + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^
           d.w;
  }
  for (; i < n16; i += stride) {
    const uint4 a = __ldg(data + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (blockIdx.x == 0)
    for (size_t j = threadIdx.x; j < tail_bytes; j += blockDim.x) acc ^= tail[j];
#pragma unroll
  for (int x = 16; x > 0; x >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, x);
  if ((threadIdx.x & 31) == 0) s_acc[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned int total = 0;
    for (int w = 0; w < kStreamThreads / 32; ++w) total ^= s_acc[w];
    atomicXor(sink, total);
  }
}

}  // namespace

cudaError_t launch_read_stream(const void* buffer, size_t bytes, unsigned int* sink,
                               cudaStream_t stream) {
  if (buffer == nullptr || sink == nullptr) return cudaErrorInvalidValue;
  if ((reinterpret_cast<uintptr_t>(buffer) & 15) != 0) return cudaErrorInvalidValue;
  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  const size_t n16 = bytes / 16;
  const uint8_t* tail = static_cast<const uint8_t*>(buffer) + n16 * 16;
  // 4 blocks of 512 threads per SM x 4 loads of 16 B in flight per thread = 128 KB per SM.
  size_t blocks = static_cast<size_t>(sms) * 4;
  const size_t needed = (n16 + kStreamThreads - 1) / kStreamThreads;
  if (blocks > needed) blocks = needed > 0 ? needed : 1;
  read_stream_kernel<<<static_cast<unsigned>(blocks), kStreamThreads, 0, stream>>>(
      static_cast<const uint4*>(buffer), n16, tail, bytes - n16 * 16, sink);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace flashsample
