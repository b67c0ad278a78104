// A probe, not shipped: would a device-side tail launch make the extra pass's no-op cheaper than its
// five programmatic kernels (bench/TUNING.md, "Next steps" of the filtered path)?
//   parent: a decision-like kernel (1 or 64 blocks of 512) that writes the flagged count F;
//   pdl:  then five kernels launched programmatically, as extra_pass.cu launches them (the first
//         waits, then releases; the others release, read F, and return when it is 0);
//   cdp:  the parent's last block tail-launches five kernels only when F > 0;
//   none: the parent alone.
// 2000 steps a variant in one stream, then 20-step graphs of the same (capture works for all three).
// Build and run (GPU machine): nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -rdc=true
//   cuda/harness/tail-launch-probe.cu -lcudadevrt -o /tmp/probe && /tmp/probe
#include <cstdio>
#include <cuda_runtime.h>

#include "probe_kernels.cuh"


__device__ unsigned done_count;

// tail-launched kernels: plain (the tail stream is sequential)
__global__ void t_kernel(const int* F, int* sink) {
  if (threadIdx.x == 0) atomicAdd(sink, 1);
}

__global__ void parent(int* F, int flag, int* sink, int cdp) {
  __shared__ int work[512];  // (as measured; nvcc warns that it is never read)
  work[threadIdx.x] = threadIdx.x * flag;
  __syncthreads();
  if (threadIdx.x == 0 && blockIdx.x == 0) *F = flag;
  if (!cdp) return;
  __threadfence();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(&done_count, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last || threadIdx.x != 0) return;
  done_count = 0;
  if (*(volatile int*)F > 0) {
    t_kernel<<<132, 256, 0, cudaStreamTailLaunch>>>(F, sink);
    t_kernel<<<32, 512, 0, cudaStreamTailLaunch>>>(F, sink);
    t_kernel<<<32, 512, 0, cudaStreamTailLaunch>>>(F, sink);
    t_kernel<<<32, 256, 0, cudaStreamTailLaunch>>>(F, sink);
    t_kernel<<<1, 512, 0, cudaStreamTailLaunch>>>(F, sink);
  }
}

static void step(int variant, int blocks, int flag, cudaStream_t s, int* F, int* sink) {
  parent<<<blocks, 512, 0, s>>>(F, flag, sink, variant == 1);
  if (variant == 0) {
    launch_programmatic(k_first, 132, 256, s, static_cast<const int*>(F), sink);
    launch_programmatic(k_next, 32, 512, s, static_cast<const int*>(F), sink);
    launch_programmatic(k_next, 32, 512, s, static_cast<const int*>(F), sink);
    launch_programmatic(k_next, 32, 256, s, static_cast<const int*>(F), sink);
    launch_programmatic(k_next, 1, 512, s, static_cast<const int*>(F), sink);
  }
}

int main() {
  int *F, *sink;
  cudaMalloc(&F, 4);
  cudaMalloc(&sink, 4);
  cudaMemset(sink, 0, 4);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const char* names[] = {"pdl", "cdp", "none"};
  const int iters = 2000;
  for (int blocks : {1, 64})
    for (int flag : {0, 1})
      for (int v = 0; v < 3; ++v) {
        for (int i = 0; i < 50; ++i) step(v, blocks, flag, s, F, sink);
        cudaEventRecord(e0, s);
        for (int i = 0; i < iters; ++i) step(v, blocks, flag, s, F, sink);
        cudaEventRecord(e1, s);
        cudaError_t err = cudaStreamSynchronize(s);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        printf("stream blocks %2d flag %d %-4s %7.2f us/iter %s\n", blocks, flag, names[v], 1000.0f * ms / iters,
               cudaGetErrorString(err));
        // the same step captured in a graph of 20 steps
        cudaGraph_t g;
        cudaGraphExec_t ge;
        err = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        for (int i = 0; i < 20; ++i) step(v, blocks, flag, s, F, sink);
        cudaError_t ec = cudaStreamEndCapture(s, &g);
        if (err != cudaSuccess || ec != cudaSuccess) {
          printf("graph   blocks %2d flag %d %-4s capture failed: %s / %s\n", blocks, flag, names[v],
                 cudaGetErrorString(err), cudaGetErrorString(ec));
          cudaGetLastError();
          continue;
        }
        ec = cudaGraphInstantiate(&ge, g, 0);
        if (ec != cudaSuccess) {
          printf("graph   blocks %2d flag %d %-4s instantiate failed: %s\n", blocks, flag, names[v], cudaGetErrorString(ec));
          cudaGetLastError();
          continue;
        }
        for (int i = 0; i < 5; ++i) cudaGraphLaunch(ge, s);
        cudaEventRecord(e0, s);
        for (int i = 0; i < iters / 20; ++i) cudaGraphLaunch(ge, s);
        cudaEventRecord(e1, s);
        err = cudaStreamSynchronize(s);
        cudaEventElapsedTime(&ms, e0, e1);
        printf("graph   blocks %2d flag %d %-4s %7.2f us/iter %s\n", blocks, flag, names[v], 1000.0f * ms / iters,
               cudaGetErrorString(err));
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
      }
  int h = 0;
  cudaMemcpy(&h, sink, 4, cudaMemcpyDeviceToHost);
  printf("sink %d (%s)\n", h, cudaGetErrorString(cudaGetLastError()));
  return 0;
}
