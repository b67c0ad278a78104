// The pieces the extra-pass launch probes share (tail-launch-probe.cu, coop-extra-pass-probe.cu):
// the PDL controls and the two no-op kernels shaped as extra_pass.cu's (the first waits, then
// releases; the others release, read the flagged count F, and return when it is 0). Not shipped.
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
