// The regions of one allocation laid out in order: a launcher's workspace, an engine sampler's
// parameter block, a call's scratch. Shared by the CUDA backend and the binding.
#pragma once

#include <stddef.h>

namespace flashsample {

// take(n) returns the next region's byte offset; every region starts 256-byte aligned (so that
// any element type and vector load fits); bytes is the size to allocate.
struct RegionLayout {
  size_t bytes = 0;
  size_t take(size_t n) {
    const size_t start = bytes;
    bytes = (bytes + n + 255) / 256 * 256;
    return start;
  }
};

}  // namespace flashsample
