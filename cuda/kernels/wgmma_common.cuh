// The sm_90a (Hopper) building blocks of the warp-specialized kernels (ws_pingpong.cuh,
// ws_split.cuh): wgmma descriptors and fences, mbarriers, bulk tensor copies (TMA), named
// barriers, setmaxnreg and programmatic dependent launch. Each wrapper compiles to nothing (or is
// never reached) outside the architectures that have its instruction.
#pragma once

#include <cuda.h>  // CUtensorMap (the type only: maps are encoded through the runtime's driver entry point)

#include "common.cuh"
#include "wgmma_ops.cuh"

namespace flashsample {
namespace cuda {
namespace detail {

// The static shared memory a kernel with an `extern __shared__ __align__(1024)` array really takes:
// ptxas pads the static part to a multiple of 1 KB so that the dynamic array starts aligned
// (ptxas -v reports the padded size).
constexpr int static_smem_padded(int bytes) { return (bytes + 1023) / 1024 * 1024; }

// The kTma tiles' tensor maps: W as [V, D] with a box of kBV rows x 64, H as [B, D] with a box of
// N rows x 64, both SW128-swizzled (the layout the wgmma descriptors read). A __grid_constant__
// parameter of the TMA kernels (launch.cuh encodes them).
struct WsTensorMaps {
  CUtensorMap w;
  CUtensorMap h;
};

// Shared-memory matrix descriptor: K-major operand, 128-byte swizzle, 8-row groups 1024 bytes
// apart (SBO); LBO is unused for swizzled K-major layouts (encoded 1, as CUTLASS does). The low
// word is the start address >> 4 and LBO; the high word (SBO 64 · 16 bytes, 128-byte swizzle) is
// the same for every address, so a descriptor is also its low word plus that constant.
__host__ __device__ constexpr uint64_t sw128_desc_from_lo(uint32_t lo) {
  return (((64ull) | (1ull << 30)) << 32) | lo;
}
__host__ __device__ constexpr uint64_t sw128_desc(uint32_t smem_addr) {
  return sw128_desc_from_lo(((smem_addr & 0x3FFFF) >> 4) | (1u << 16));
}

__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// cp.async writes through the generic proxy; wgmma reads through the async proxy.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// Keeps the compiler from moving accumulator reads or writes across the wgmma issue/wait points.
template <int N>
__device__ __forceinline__ void pin_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The next stage of a ring of `Stages` mbarrier-guarded slots: the slot index wraps to 0 and the
// parity of the phase to wait for flips (a producer also notes that it has wrapped: from then on
// it waits for each slot's release).
template <int Stages>
__device__ __forceinline__ void ring_advance(int& slot, uint32_t& phase) {
  if (++slot == Stages) {
    slot = 0;
    phase ^= 1u;
  }
}
template <int Stages>
__device__ __forceinline__ void ring_advance(int& slot, uint32_t& phase, bool& wrapped) {
  if (++slot == Stages) {
    slot = 0;
    phase ^= 1u;
    wrapped = true;
  }
}

// ---- PTX wrappers: mbarrier, cp.async arrive, named barriers, setmaxnreg (sm_90) -------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// Spins until the phase of parity `parity` of the mbarrier has completed (acquire, CTA scope).
// The label lives in its own { } scope, so every inlined copy has its own.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "WS_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@!P1 bra WS_WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Arrive-on `bar` once every cp.async this thread issued so far has completed; .noinc: this
// arrival is one of the barrier's expected arrivals (the count is the number of producer threads).
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// One arrival on `bar` that also raises the phase's expected transaction bytes by `bytes`.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Bulk tensor copy of one box at (c0 = k column, c1 = row) into shared memory at `dst`; its bytes
// complete_tx on `bar`. Rows and k columns outside the tensor arrive as zeros (and still count).
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int32_t c0, int32_t c1,
                                            uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
#endif
}
// The same load with an L2 eviction policy (createpolicy): W is read once per call, so its lines
// go first when L2 needs room, and the call's other lines (H, the filtered path's summaries and
// candidates, the code of the kernels after the GEMM) are not pushed out by the stream of W.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
#endif
  return policy;
}
__device__ __forceinline__ void tma_load_2d_hinted(uint32_t dst, const CUtensorMap* map, int32_t c0, int32_t c1,
                                                   uint32_t bar, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "l"(policy)
      : "memory");
#endif
}
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#endif
}
// Programmatic dependent launch (sm_90). griddep_wait: block until the grids this one depends on
// have completed and their memory is visible (returns at once when it was launched normally).
// griddep_launch_dependents: the grid launched after this one with programmatic serialization may
// start (it still waits for this grid's completion before reading what this grid writes).
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// A 64-bit load that other SMs' atomics may be changing: relaxed at GPU scope (single-copy atomic,
// not served from a stale L1 line).
__device__ __forceinline__ unsigned long long ld_relaxed_u64(const unsigned long long* p) {
  unsigned long long v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
#else
  v = *p;
#endif
  return v;
}
// The same for a shared-memory word that other warps of the CTA raise with atomics (a plain load
// racing with them would be a data race in the PTX memory model).
__device__ __forceinline__ unsigned long long ld_relaxed_shared_u64(const unsigned long long* p) {
  unsigned long long v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("ld.relaxed.cta.shared.b64 %0, [%1];\n" : "=l"(v) : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(p))) : "memory");
#else
  v = *p;
#endif
  return v;
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
