// float32 -> f16 / bf16 conversion for Device.tensor(Float32Array, shape, 'f16' | 'bf16'), bit for
// bit the rules of lib/dtype.ts's encodeF16 / encodeBF16 (round to nearest, ties to even; NaN stays
// a quiet NaN; overflow goes to infinity; f16 subnormals rounded). Done here rather than in JS: the
// JS loops took ~15 ms per fresh 2-3 MB tensor on the JS thread (H200 stress run, 2026-11-30,
// --cpu-prof: encodeF16 43 % of the process's time) and stalled the event loop for 350-580 ms.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace flashsample {
namespace binding {

inline uint16_t f32_to_bf16_bits(uint32_t x) {
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((x >> 16) | 0x0040u);  // NaN stays a (quiet) NaN
  }
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);  // wraps like JS's >>>
}

inline uint16_t f32_to_f16_bits(uint32_t x) {
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int exponent = static_cast<int>((x >> 23) & 0xffu);
  uint32_t mantissa = x & 0x7fffffu;
  if (exponent == 0xff) {
    return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u | (mantissa >> 13) : 0u));
  }
  int e = exponent - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to infinity
  if (e <= 0) {
    // subnormal half (or zero): shift the implicit-one mantissa, round to nearest even
    if (e < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    const int shift = 14 - e;
    const uint32_t half = 1u << (shift - 1);
    const uint32_t rest = mantissa & ((1u << shift) - 1u);
    uint32_t m = mantissa >> shift;
    if (rest > half || (rest == half && (m & 1u))) m++;
    return static_cast<uint16_t>(sign | m);
  }
  const uint32_t rest = mantissa & 0x1fffu;
  uint32_t m = mantissa >> 13;
  if (rest > 0x1000u || (rest == 0x1000u && (m & 1u))) {
    m++;
    if (m == 0x400u) {
      m = 0;
      e++;
      if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);
    }
  }
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(e) << 10) | m);
}

enum class HalfEncoding : int { kNone = 0, kF16 = 1, kBF16 = 2 };

// Converts n float32 values (any alignment) to 16-bit bits in `out`; large inputs are split over a
// few threads (each value independent, so the result does not depend on the split).
inline void encode_half(const void* src, uint16_t* out, size_t n, HalfEncoding enc) {
  const auto* in = static_cast<const uint8_t*>(src);
  auto run = [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      uint32_t x;
      std::memcpy(&x, in + 4 * i, 4);
      out[i] = enc == HalfEncoding::kBF16 ? f32_to_bf16_bits(x) : f32_to_f16_bits(x);
    }
  };
  const size_t kPerThread = size_t(1) << 20;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::min<size_t>({hw, 8, (n + kPerThread - 1) / kPerThread});
  if (threads <= 1) {
    run(0, n);
    return;
  }
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(run, n * t / threads, n * (t + 1) / threads);
  run(0, n / threads);
  for (auto& th : pool) th.join();
}

}  // namespace binding
}  // namespace flashsample
