// A probe, not shipped: would one cooperative kernel (launched programmatically) make the extra
// pass's no-op cheaper than its five programmatic kernels, and what does a grid barrier cost in it?
// Each step is timed as the bench times a call (events around it, host enqueueing ahead):
//   a long "split" kernel (spins 200 us on every SM), a decision-like kernel (64 blocks) that
//   writes the flagged count F, then
//   none:  nothing;
//   pdl5:  five kernels launched programmatically, as extra_pass.cu does (the first waits, then
//          releases; the others release, read F, and return when it is 0);
//   coop:  one cooperative kernel, launched programmatically (2 blocks of 512 an SM, 64 KB of
//          dynamic shared memory): waits, reads F, returns when it is 0, else crosses `kBarriers`
//          grid barriers (a counter and a generation word);
//   pdl1:  one programmatic kernel of the same grid that only waits and returns.
// Then the coop step captured in a graph (does capture accept a cooperative programmatic launch?).
// Build and run (GPU machine): nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a
//   cuda/harness/coop-extra-pass-probe.cu -o /tmp/coop && /tmp/coop
#include <cuda_runtime.h>

#include "probe_kernels.cuh"

#include <algorithm>
#include <cstdio>
#include <vector>

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

constexpr int kBarriers = 4;

__global__ void split_like(unsigned long long ns) {
  const unsigned long long t0 = now_ns();
  while (now_ns() - t0 < ns) {
  }
}
__global__ void decision_like(int* F, int flag) {
  gd_wait();
  __shared__ int work[512];
  work[threadIdx.x] = threadIdx.x * flag;
  __syncthreads();
  if (threadIdx.x == 0 && blockIdx.x == 0) *F = flag + (work[5] & 0);
}
__global__ void k_last(const int* F, int* sink) {
  if (__ldcg(F) == 0) return;
  gd_wait();
  if (threadIdx.x == 0) atomicAdd(sink, 1);
}

// bar[0]: arrivals, bar[1]: generation
__device__ void grid_barrier(unsigned* bar) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned* gen = bar + 1;
    const unsigned g = *gen;
    __threadfence();
    if (atomicAdd(bar, 1u) == gridDim.x - 1) {
      bar[0] = 0;
      __threadfence();
      atomicAdd(bar + 1, 1u);
    } else {
      while (*gen == g) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}
__global__ void k_coop(const int* F, int* sink, unsigned* bar) {
  extern __shared__ int smem[];
  gd_wait();
  const int f = *(volatile const int*)F;
  if (f == 0) return;
  smem[threadIdx.x] = threadIdx.x;
  for (int i = 0; i < kBarriers; ++i) grid_barrier(bar);
  if (threadIdx.x == 0) atomicAdd(sink, smem[0] + 1);
}
__global__ void k_one(const int* F, int* sink) {
  gd_wait();
  if (*(volatile const int*)F == 0) return;
  if (threadIdx.x == 0) atomicAdd(sink, 1);
}

static int g_coop_grid = 0;
static cudaError_t launch_coop(cudaStream_t s, const int* F, int* sink, unsigned* bar) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(g_coop_grid);
  cfg.blockDim = dim3(512);
  cfg.dynamicSmemBytes = 64 * 1024;
  cfg.stream = s;
  cudaLaunchAttribute at[2];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  at[1].id = cudaLaunchAttributeCooperative;
  at[1].val.cooperative = 1;
  cfg.attrs = at;
  cfg.numAttrs = 2;
  return cudaLaunchKernelEx(&cfg, k_coop, F, sink, bar);
}

static cudaError_t step(int v, int flag, cudaStream_t s, int* F, int* sink, unsigned* bar) {
  split_like<<<132, 384, 0, s>>>(200000ull);
  cudaError_t err = launch_programmatic(decision_like, 64, 512, s, F, flag);
  if (err != cudaSuccess) return err;
  if (v == 1) {
    launch_programmatic(k_first, 264, 256, s, (const int*)F, sink);
    launch_programmatic(k_next, 512, 512, s, (const int*)F, sink);
    launch_programmatic(k_next, 512, 512, s, (const int*)F, sink);
    launch_programmatic(k_next, 1024, 256, s, (const int*)F, sink);
    err = launch_programmatic(k_last, 64, 512, s, (const int*)F, sink);
  } else if (v == 2) {
    err = launch_coop(s, F, sink, bar);
  } else if (v == 3) {
    err = launch_programmatic(k_one, g_coop_grid, 512, s, (const int*)F, sink);
  }
  return err;
}

int main() {
  int *F, *sink;
  unsigned* bar;
  cudaMalloc(&F, 4);
  cudaMalloc(&sink, 4);
  cudaMalloc(&bar, 8);
  cudaMemset(sink, 0, 4);
  cudaMemset(bar, 0, 8);
  cudaFuncSetAttribute(k_coop, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
  int per_sm = 0, sms = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_coop, 512, 64 * 1024);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  g_coop_grid = per_sm * sms;
  printf("coop grid %d (%d an SM)\n", g_coop_grid, per_sm);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const int iters = 300;
  std::vector<cudaEvent_t> ev(2 * iters);
  for (auto& e : ev) cudaEventCreate(&e);
  const char* names[] = {"none", "pdl5", "coop", "pdl1"};
  for (int flag : {0, 1})
    for (int rep = 0; rep < 2; ++rep)
      for (int v = 0; v < 4; ++v) {
        cudaError_t err = cudaSuccess;
        for (int i = 0; i < 20 && err == cudaSuccess; ++i) err = step(v, flag, s, F, sink, bar);
        for (int i = 0; i < iters && err == cudaSuccess; ++i) {
          cudaEventRecord(ev[2 * i], s);
          err = step(v, flag, s, F, sink, bar);
          cudaEventRecord(ev[2 * i + 1], s);
        }
        cudaError_t es = cudaStreamSynchronize(s);
        if (err != cudaSuccess || es != cudaSuccess) {
          printf("flag %d %-4s failed: %s / %s\n", flag, names[v], cudaGetErrorString(err), cudaGetErrorString(es));
          cudaGetLastError();
          continue;
        }
        std::vector<float> t(iters);
        for (int i = 0; i < iters; ++i) {
          cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]);
          t[i] *= 1000.0f;
        }
        std::sort(t.begin(), t.end());
        printf("flag %d %-4s median %7.2f us  p10 %7.2f  p90 %7.2f\n", flag, names[v], t[iters / 2], t[iters / 10],
               t[iters * 9 / 10]);
      }
  // capture of the cooperative programmatic step
  for (int flag : {0, 1}) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaError_t err = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    for (int i = 0; i < 10 && err == cudaSuccess; ++i) err = step(2, flag, s, F, sink, bar);
    cudaError_t ec = cudaStreamEndCapture(s, &g);
    if (err != cudaSuccess || ec != cudaSuccess) {
      printf("graph flag %d capture failed: %s / %s\n", flag, cudaGetErrorString(err), cudaGetErrorString(ec));
      cudaGetLastError();
      continue;
    }
    ec = cudaGraphInstantiate(&ge, g, 0);
    if (ec != cudaSuccess) {
      printf("graph flag %d instantiate failed: %s\n", flag, cudaGetErrorString(ec));
      cudaGetLastError();
      continue;
    }
    cudaEvent_t a = ev[0], b = ev[1];
    cudaGraphLaunch(ge, s);
    cudaEventRecord(a, s);
    for (int i = 0; i < 10; ++i) cudaGraphLaunch(ge, s);
    cudaEventRecord(b, s);
    err = cudaStreamSynchronize(s);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    printf("graph flag %d coop %7.2f us/step %s\n", flag, 1000.0f * ms / 100, cudaGetErrorString(err));
  }
  int h = 0;
  cudaMemcpy(&h, sink, 4, cudaMemcpyDeviceToHost);
  printf("sink %d (%s)\n", h, cudaGetErrorString(cudaGetLastError()));
  return 0;
}
