// The pieces the extra-pass launch probes share (tail-launch-probe.cu, coop-extra-pass-probe.cu):
// the PDL controls, a programmatic launch as extra_pass.cu's launch_kernel makes it, and the two
// no-op kernels shaped as extra_pass.cu's (the first waits, then releases; the others release,
// read the flagged count F, and return when it is 0). Not shipped.
#pragma once
#include <cuda_runtime.h>

__device__ __forceinline__ void gd_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void gd_launch() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

__global__ void k_first(const int* F, int* sink) {
  gd_wait();
  gd_launch();
  if (*(volatile const int*)F == 0) return;
  if (threadIdx.x == 0) atomicAdd(sink, 1);
}
__global__ void k_next(const int* F, int* sink) {
  gd_launch();
  const int f = __ldcg(F);
  if (f == 0) return;
  gd_wait();
  if (threadIdx.x == 0) atomicAdd(sink, 1);
}

// Launches k with programmatic stream serialization (it may start before the previous grid ends).
template <typename... Args, typename... Vals>
static cudaError_t launch_programmatic(void (*k)(Args...), int grid, int threads, cudaStream_t s, Vals... vals) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, k, vals...);
}
