// The CUDA dispatch's escape hatches (the table in cuda/dispatch.cuh), each read once per process:
// FLASHSAMPLE_NO_WGMMA sends compute capability 9.0's calls to the mma.sync kernels, and
// FLASHSAMPLE_NO_TENSOR_MAPS takes the row of a driver that cannot encode tensor maps. One reader
// serves the dispatch and gpuStatus(), so a test sees the hatch the kernels see.
#pragma once

#include <cstdlib>

namespace flashsample {
namespace cuda {

// Set: present, not empty and not starting with '0'.
inline bool env_flag_set(const char* name) {
  const char* e = std::getenv(name);
  return e != nullptr && e[0] != '\0' && e[0] != '0';
}

inline bool no_wgmma_hatch() {
  static const bool set = env_flag_set("FLASHSAMPLE_NO_WGMMA");
  return set;
}

inline bool no_tensor_maps_hatch() {
  static const bool set = env_flag_set("FLASHSAMPLE_NO_TENSOR_MAPS");
  return set;
}

}  // namespace cuda
}  // namespace flashsample
