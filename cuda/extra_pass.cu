// The extra pass of the one-pass filtered path: the rows decide_one_pass_kernel could not decide
// from its candidates (flagged), decided exactly from their whole materialized row, with the
// decision whole_rows_kernel(logits, p, flags, false) makes (filters.cu: decide_row) and the same
// noise, but spread over many blocks per row.
//
//   1. flagged_logits_*: the flagged rows' logits only, kGroup rows per read of W (mma.sync for
//      16-byte aligned f16/bf16, SIMT otherwise; tiles the one-pass epilogue stored are read back),
//      raw (bias included) into the [B, V] reservation, plus per-block statistics of the rows.
//   2. histogram_kernel: per row, a histogram of counts and fixed-point masses over kBuckets
//      buckets of (max - l) / T. cut_kernel: every block of a row finds the buckets where top-k,
//      top-p and topLogprobs cut and gathers its slice's values in them; the row's last block
//      sorts them by order key and resolves each cut exactly: the row's plan (a key threshold plus
//      min-p), or its whole output (greedy, no candidate), or "too many values in a cut bucket"
//      (ties): those rows go to whole_rows_kernel.
//   3. sample_kernel: the Gumbel argmax of the kept set, its count and fixed-point mass, each warp's
//      over its run of the row added to the row's by integer atomics (the same whatever the split);
//      the row's last block writes token, logprob and topLogprobs.
// Fixed grids from B, V, D only; every kernel returns at once when no row is flagged (*count).
//
// Masses: the histogram holds round(w 2^shift) per value (w = exp((l - max) / T) from an fp32 exp2,
// as the one-pass decision's weights; shift = 63 - ceil(log2 V), so a row's sum fits 64 bits).
// Integer atomics are exact and order independent; the weights' relative ~1e-6 and the per-value
// rounding (<= 2^-(shift+1)) only move a top-p cut whose cumulative mass lies within a relative
// ~1e-6 of the target. The values in the cut's bucket are weighed in float64 (mass_cut).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "internal_launchers.h"
#include "kernels/common.cuh"
#include "kernels/listed.cuh"
#include "launch.cuh"
#include "kernels/row_select.cuh"

namespace flashsample {
namespace cuda {
namespace {

constexpr int kGroup = 8;             // flagged rows per read of W: the n of mma.m16n8k16
constexpr int kTileRows = 32;         // vocabulary rows per block task (two m16 tiles)
constexpr int kLogitWarps = 8;        // split D; one warp per row of the group in the epilogue
constexpr int kLogitThreads = kLogitWarps * 32;
// Histogram buckets per row: half of 8192's flush and cut search (ncu, 3 flagged rows: the
// histogram and cut kernels 17.1 / 18.6 us against 18.5 / 19.7 with 8192); a cut bucket still
// holds ~V / 1000.
constexpr int kBuckets = 4096;
constexpr int kBucketsPerThread = 8;
constexpr int kDecideThreads = kBuckets / kBucketsPerThread;  // 512
constexpr int kGatherCap = 8192;      // values of the cut buckets a row's resolution sorts (64 KB)
constexpr double kMaxSpan = 128.0;    // (max - l) / T beyond this shares the last bucket (w < 1e-55)
constexpr int kRowBlocks = 32;        // blocks per row of the histogram and the cuts
// Draw tasks (blocks of kDrawWarps warps, each on its own run of quads) per row at most: one quad
// a lane at V = 128256, so that a few rows with wide kept sets spread over the GPU (16 tasks a row
// cost the model-like Llama 3 default's 3 flat rows 7 points at B = 64).
constexpr int kMaxDrawTasks = 128;
constexpr int kDrawWarps = 8;
constexpr int kSampleThreads = kDrawWarps * 32;
// Quads a lane loads before using any, at 4 blocks an SM (64 registers): the draw is bound by its
// warps' latency, not by bytes (ncu, 256 flagged rows: 8 quads at 2 blocks an SM ran 173 us at 16 %
// of DRAM); 2 quads at 4 blocks beat 8 at 2 and 4 at 3 (all flagged, B = 256: +257 -> +236 %).
constexpr int kDrawQuadsInFlight = 2;
constexpr int kMaxTopLogprobs = 1024;
constexpr int kSamplesPerScan = 4;    // samples drawn per scan of a warp's run (a Philox each per quad)

static_assert(kBuckets == kDecideThreads * kBucketsPerThread, "one bucket range per thread");
static_assert((kGatherCap & (kGatherCap - 1)) == 0, "bitonic sort over a power of two");

enum PlanMode : int32_t { kPlanSample = 0, kPlanDone = 1, kPlanWholeRow = 2 };
enum TaskCounter : int { kHistogramTasks = 0, kCutTasks = 1, kDrawTasks = 2, kTaskCounters = 3 };

// Statistics of a row's candidate values over one logits block's vocabulary rows.
struct RowPart {
  float max_finite;            // -Inf when none
  float min_finite;            // +Inf when none
  uint32_t valid;              // finite or +Inf
  uint32_t posinf;
  unsigned long long best_key; // largest order key (the greedy token), 0 when none
};

// What the draw needs to know about a row: kept = order key >= threshold and, with min-p,
// exp((l - max) / T) >= min_w; in +Inf mode kept = +Inf.
struct RowPlan {
  unsigned long long threshold;
  double md, inv_t, min_w;
  int32_t mode;       // PlanMode
  int32_t inf_mode;
  int32_t top_avail;  // the row's largest keys held in top_keys (>= topLogprobs' take)
  int32_t pad;
};

struct Work {
  int32_t* list;                 // [B]: slot -> batch row, in batch order
  int32_t* whole_row;            // [B]: rows left to whole_rows_kernel (zeroed by the logits kernel)
  RowPart* parts;                // [B, logit_blocks]
  int32_t logit_blocks;
  RowPlan* plans;                // [B]
  uint32_t* hist_count;          // [B, kBuckets]
  unsigned long long* hist_mass; // [B, kBuckets]
  uint32_t* draw_done;           // [B]: blocks done with the row's draw
  unsigned long long* kept_mass; // [B]: the kept weights in fixed point (mass_shift), summed by atomics
  unsigned long long* kept_count;// [B]
  unsigned long long* best;      // [B, num_samples]: packed candidates, by atomicMax
  unsigned long long* top_keys;  // [B, max(topLogprobs, 1)]
  struct RowShape* shapes;       // [B]: the row's statistics, from the histogram's block 0
  unsigned long long* gathered;  // [B, kGatherCap]: order keys of the cut buckets' values
  uint32_t* gather_count;        // [B]
  uint32_t* cut_done;            // [B]: blocks done gathering
  uint32_t* next_task;           // [kTaskCounters]: the histogram's, the cuts' and the draw's next (row, slice) task
  const uint8_t* stored_tiles;   // [B, num_vtiles] or nullptr (launch_extra_pass)
  int64_t num_vtiles;
};

// ---- row values (as filters.cu's decide_row sees them) ------------------------------------------
using detail::block_exclusive_scan;
using detail::block_sort_desc;
using detail::key_index;
using detail::key_value;
using detail::kScanUnroll;
using detail::Max;
using detail::min_p_first_top_k;
using detail::order_key;
using detail::scan_row;
using detail::Sum;
using detail::write_no_candidate;

using detail::candidate_value;

// ---- block helpers ------------------------------------------------------------------------------
template <typename T, typename Op>
__device__ T block_all_reduce(T v, Op op) {
  __shared__ T partial[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = partial[0];
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) r = op(r, partial[w]);
  return r;
}


// Block-wide compaction in thread order, one round at a time: this thread's position among the
// flagged threads of the round, after `base` earlier ones (meaningful where f). Every thread calls
// it; the caller then writes its element and calls block_compact_advance.
__device__ __forceinline__ int block_compact_slot(bool f, int* warp_count, const int& base) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned ballot = __ballot_sync(0xffffffffu, f);
  if (lane == 0) warp_count[warp] = __popc(ballot);
  __syncthreads();
  int slot = base;
  for (int w = 0; w < warp; ++w) slot += warp_count[w];
  return slot + __popc(ballot & ((1u << lane) - 1u));
}
// Adds the round's flagged count to base (after every thread's write of the round).
__device__ __forceinline__ void block_compact_advance(const int* warp_count, int& base) {
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) base += warp_count[w];
  __syncthreads();
}

// The batch rows of slots [first, first + kGroup) into rows[] (-1 past the last flagged row), and
// whether the one-pass epilogue stored each one's logits (flag 2) into stored[].
// Slots number the flagged rows in batch order; with `list`, every slot's row goes there too.
__device__ void find_flagged(const int32_t* flags, int64_t B, int first, int* rows, int* stored, int32_t* list) {
  __shared__ int warp_count[32];
  __shared__ int base;
  if (threadIdx.x < kGroup) rows[threadIdx.x] = -1;
  if (threadIdx.x == 0) base = 0;
  __syncthreads();
  for (int64_t start = 0; start < B; start += blockDim.x) {
    const int64_t b = start + threadIdx.x;
    const bool f = b < B && flags[b] != 0;
    const int slot = block_compact_slot(f, warp_count, base);
    if (f) {
      if (slot >= first && slot < first + kGroup) rows[slot - first] = static_cast<int>(b);
      if (list != nullptr) list[slot] = static_cast<int32_t>(b);
    }
    block_compact_advance(warp_count, base);
    if (list == nullptr && base >= first + kGroup) break;  // block-uniform
  }
  __syncthreads();
  if (threadIdx.x < kGroup) stored[threadIdx.x] = rows[threadIdx.x] >= 0 && flags[rows[threadIdx.x]] == 2;
  __syncthreads();
}

// ---- 1. the flagged rows' logits ----------------------------------------------------------------
// Zeroes what the later kernels accumulate into, for the F flagged rows (before any of them runs).
__device__ void clear_row_state(const Work& w, int F, int64_t B, int S) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < B; i += stride) w.whole_row[i] = 0;
  if (first < kTaskCounters) w.next_task[first] = 0u;
  for (int64_t i = first; i < static_cast<int64_t>(F) * kBuckets; i += stride) {
    w.hist_count[i] = 0u;
    w.hist_mass[i] = 0ull;
  }
  for (int64_t i = first; i < F; i += stride) {
    w.draw_done[i] = 0u;
    w.gather_count[i] = 0u;
    w.cut_done[i] = 0u;
    w.kept_mass[i] = 0ull;
    w.kept_count[i] = 0ull;
  }
  for (int64_t i = first; i < static_cast<int64_t>(F) * S; i += stride) w.best[i] = 0ull;
}

// Whether the one-pass epilogue stored group row n's logits of vocabulary v's tile of 128: the row
// is flagged 2 (stored[n]), wholly stored or, with stored_tiles, stored on that tile.
__device__ __forceinline__ bool tile_stored(const Work& w, const int* rows, const int* stored, int n, int64_t v) {
  return stored[n] && (w.stored_tiles == nullptr || w.stored_tiles[rows[n] * w.num_vtiles + (v >> 7)] != 0);
}
// Tasks a block looks up at once: one thread per (task, group row).
constexpr int kTasksPerLookup = kLogitThreads / kGroup;
static_assert(kTasksPerLookup == 32, "a lookup's tasks fit one 32-bit mask");

// Bit i: the block's task first + i * gridDim.x has a group row the one-pass epilogue did not
// store on its tile (its logits need W). One parallel round of loads for 32 tasks; a lookup per
// task and row is a chain of dependent loads (ncu, B = 64, 3 flagged rows: 57 % of the kernel's
// samples, 15.8 us against 9.6).
__device__ uint32_t tasks_needing_w(const Work& w, const int* rows, const int* stored, int64_t first, int64_t tasks) {
  __shared__ uint32_t s_mask;
  const int n = threadIdx.x % kGroup, i = threadIdx.x / kGroup;
  if (threadIdx.x == 0) s_mask = 0u;
  __syncthreads();
  const int64_t task = first + static_cast<int64_t>(i) * gridDim.x;
  const bool needs = task < tasks && rows[n] >= 0 && !tile_stored(w, rows, stored, n, task * kTileRows);
  if (needs) atomicOr(&s_mask, 1u << i);
  __syncthreads();
  const uint32_t mask = s_mask;
  __syncthreads();
  return mask;
}

struct PartAcc {
  float mx = -INFINITY, mn = INFINITY;
  uint32_t valid = 0, posinf = 0;
  unsigned long long best = 0ull;
};

// Adds row b's raw logit of v to the row's statistics.
__device__ __forceinline__ void add_value(const SampleParams& p, int b, int64_t v, float raw, PartAcc& acc) {
  const float l = candidate_value(p, b, v, raw);
  if (l != l) return;
  ++acc.valid;
  if (l == INFINITY) ++acc.posinf;
  else {
    acc.mx = fmaxf(acc.mx, l);
    acc.mn = fminf(acc.mn, l);
  }
  const unsigned long long key = order_key(l, static_cast<uint32_t>(v));
  acc.best = key > acc.best ? key : acc.best;
}

// The statistics of the tasks in `stored_tasks` (bits as tasks_needing_w's), whose rows the
// one-pass epilogue all stored: read back kStoredBatch tasks at a time, their loads in flight
// together. Thread (warp n, lane r) takes row n of the group, vocabulary row r of each task.
constexpr int kStoredBatch = 8;
__device__ __forceinline__ void add_stored_tasks(const SampleParams& p, const int* rows, int64_t first,
                                                 uint32_t stored_tasks, const float* row_logits, PartAcc& acc) {
  const int n = threadIdx.x >> 5, r = threadIdx.x & 31;
  const int b = rows[n];
  if (b < 0) return;
  const float* const row = row_logits + static_cast<int64_t>(b) * p.vocab;
  for (int i0 = 0; i0 < kTasksPerLookup && (stored_tasks >> i0) != 0u; i0 += kStoredBatch) {
    float raw[kStoredBatch];
    int64_t v[kStoredBatch];
#pragma unroll
    for (int j = 0; j < kStoredBatch; ++j) {
      v[j] = (first + static_cast<int64_t>(i0 + j) * gridDim.x) * kTileRows + r;
      const bool in = ((stored_tasks >> (i0 + j)) & 1u) != 0u && v[j] < p.vocab;
      raw[j] = in ? row[v[j]] : NAN;
      if (!in) v[j] = -1;
    }
#pragma unroll
    for (int j = 0; j < kStoredBatch; ++j)
      if (v[j] >= 0) add_value(p, b, v[j], raw[j], acc);
  }
}

// The block's tasks (task blockIdx.x, then every gridDim.x-th): those whose group rows the one-pass
// epilogue all stored are read back (no read of W, no barrier); compute(v0) takes each other one
// and calls store_task (block-uniform).
template <class Compute>
__device__ __forceinline__ void for_each_task(const SampleParams& p, const Work& w, const int* rows, const int* stored,
                                              int64_t tasks, const float* row_logits, PartAcc& acc, Compute&& compute) {
  const int64_t lookup_step = static_cast<int64_t>(kTasksPerLookup) * gridDim.x;
  for (int64_t first = blockIdx.x; first < tasks; first += lookup_step) {
    const uint32_t needs_w = tasks_needing_w(w, rows, stored, first, tasks);
    const int64_t in_lookup = (tasks - first + gridDim.x - 1) / gridDim.x;
    const uint32_t all = in_lookup >= kTasksPerLookup ? ~0u : (1u << in_lookup) - 1u;
    add_stored_tasks(p, rows, first, all & ~needs_w, row_logits, acc);
    for (uint32_t left = needs_w; left != 0u; left &= left - 1u)
      compute((first + static_cast<int64_t>(__ffs(left) - 1) * gridDim.x) * kTileRows);
  }
}

// Sums of the task (s_sum[vrow][slot]) -> raw logits of the flagged rows, plus the statistics of
// their candidate values: thread (warp n, lane r) takes row n of the group, vocabulary row r. A
// row the one-pass epilogue stored on this tile (tile_stored) is read back instead.
__device__ __forceinline__ void store_task(const SampleParams& p, const Work& w, const float (*s_sum)[kGroup + 1],
                                           const int* rows, const int* stored, int64_t v0, float* row_logits,
                                           PartAcc& acc) {
  const int n = threadIdx.x >> 5, r = threadIdx.x & 31;
  const int b = rows[n];
  const int64_t v = v0 + r;
  if (b < 0 || v >= p.vocab) return;
  float* const at = row_logits + static_cast<int64_t>(b) * p.vocab + v;
  float raw;
  if (tile_stored(w, rows, stored, n, v0)) {
    raw = *at;
  } else {
    raw = s_sum[r][n];
    if (p.bias != nullptr) {
      switch (p.dtype) {
        case DType::kF32: raw += detail::load_float<float>(p.bias, v); break;
        case DType::kF16: raw += detail::load_float<__half>(p.bias, v); break;
        case DType::kBF16: raw += detail::load_float<__nv_bfloat16>(p.bias, v); break;
      }
    }
    *at = raw;
  }
  add_value(p, b, v, raw, acc);
}

__device__ __forceinline__ RowPart as_part(const PartAcc& a) {
  RowPart part;
  part.max_finite = a.mx;
  part.min_finite = a.mn;
  part.valid = a.valid;
  part.posinf = a.posinf;
  part.best_key = a.best;
  return part;
}
__device__ __forceinline__ void merge_part(PartAcc& a, const RowPart& q) {
  a.mx = fmaxf(a.mx, q.max_finite);
  a.mn = fminf(a.mn, q.min_finite);
  a.valid += q.valid;
  a.posinf += q.posinf;
  a.best = q.best_key > a.best ? q.best_key : a.best;
}
// Every lane gets the warp's merge (min / max / integer sums: exact in any order).
__device__ __forceinline__ PartAcc warp_merge(PartAcc a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a.mx = fmaxf(a.mx, __shfl_xor_sync(0xffffffffu, a.mx, o));
    a.mn = fminf(a.mn, __shfl_xor_sync(0xffffffffu, a.mn, o));
    a.valid += __shfl_xor_sync(0xffffffffu, a.valid, o);
    a.posinf += __shfl_xor_sync(0xffffffffu, a.posinf, o);
    const unsigned long long k = __shfl_xor_sync(0xffffffffu, a.best, o);
    a.best = k > a.best ? k : a.best;
  }
  return a;
}

__device__ __forceinline__ void write_part(const Work& w, int slot, PartAcc a) {
  a = warp_merge(a);
  if ((threadIdx.x & 31) == 0) w.parts[static_cast<int64_t>(slot) * w.logit_blocks + blockIdx.x] = as_part(a);
}

// 16 bytes of W, streamed past L1 (read once).
__device__ __forceinline__ uint4 load_stream16(const void* ptr) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(ptr));
  return r;
}

// f16/bf16, D % 8 == 0, 16-byte aligned H and W. A block task is 32 vocabulary rows (two m16
// tiles, A = W) times the group's 8 rows (n8, B = H) over all of D; warp w takes the 64-wide
// chunks w, w + 8, ... of D. Within a chunk, lane (g, t) loads 16 bytes of vocabulary rows g and
// g + 8 of each tile and of the group's row g at offsets 8t and 32 + 8t: the k order inside an mma
// is a permutation of D, the same for A and B, so the dot products are unchanged. The 8 warps'
// partial sums are added in warp order (deterministic).
template <bool kF16>
__global__ void __launch_bounds__(kLogitThreads)
    flagged_logits_mma_kernel(SampleParams p, const int32_t* flags, const int32_t* count, Work w,
                              float* row_logits) {
  // Launched programmatically after the decision. The kernels after this one read the flagged count
  // before they wait (a call with no flagged row must not pay four grid completions), so they may
  // be scheduled only once the count is final: after this wait.
  detail::griddep_wait();
  detail::griddep_launch_dependents();
  const int F = *count;
  if (F == 0) return;
  __shared__ float s_part[kLogitWarps][kTileRows][kGroup + 1];
  __shared__ float s_sum[kTileRows][kGroup + 1];
  __shared__ int s_rows[kGroup], s_stored[kGroup];
  clear_row_state(w, F, p.batch, p.num_samples);
  using T = typename std::conditional<kF16, __half, __nv_bfloat16>::type;
  const T* W = static_cast<const T*>(p.weight);
  const T* H = static_cast<const T*>(p.hidden);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t D = p.dim, V = p.vocab;
  const int64_t tasks = (V + kTileRows - 1) / kTileRows;
  const int64_t chunks = (D + 63) / 64;
  for (int first = 0; first < F; first += kGroup) {
    find_flagged(flags, p.batch, first, s_rows, s_stored, blockIdx.x == 0 && first == 0 ? w.list : nullptr);
    const int hrow = s_stored[g] && w.stored_tiles == nullptr ? -1 : s_rows[g];
    const T* h_row = hrow >= 0 ? H + static_cast<int64_t>(hrow) * D : nullptr;
    PartAcc acc;
    for_each_task(p, w, s_rows, s_stored, tasks, row_logits, acc, [&](int64_t v0) {
      const T* w_row[2][2];
#pragma unroll
      for (int tile = 0; tile < 2; ++tile)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int64_t v = v0 + tile * 16 + half * 8 + g;
          w_row[tile][half] = v < V ? W + v * D : nullptr;
        }
      float c[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll 2
      for (int64_t chunk = warp; chunk < chunks; chunk += kLogitWarps) {
        uint4 a[2][2][2], hb[2];  // [tile][half (row g / g + 8)][offset], [offset]
#pragma unroll
        for (int off = 0; off < 2; ++off) {
          const int64_t k = chunk * 64 + off * 32 + t * 8;
          const bool in = k < D;
#pragma unroll
          for (int tile = 0; tile < 2; ++tile)
#pragma unroll
            for (int half = 0; half < 2; ++half)
              a[tile][half][off] = in && w_row[tile][half] ? load_stream16(w_row[tile][half] + k)
                                                           : make_uint4(0u, 0u, 0u, 0u);
          hb[off] = in && h_row ? __ldg(reinterpret_cast<const uint4*>(h_row + k)) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int off = 0; off < 2; ++off)
#pragma unroll
          for (int tile = 0; tile < 2; ++tile) {
            const uint32_t a0[4] = {a[tile][0][off].x, a[tile][1][off].x, a[tile][0][off].y, a[tile][1][off].y};
            detail::mma_16816<kF16>(c[tile], a0, hb[off].x, hb[off].y);
            const uint32_t a1[4] = {a[tile][0][off].z, a[tile][1][off].z, a[tile][0][off].w, a[tile][1][off].w};
            detail::mma_16816<kF16>(c[tile], a1, hb[off].z, hb[off].w);
          }
      }
      // c[tile]: (vocabulary row tile*16 + g, group row 2t, 2t+1), (row + 8, same)
#pragma unroll
      for (int tile = 0; tile < 2; ++tile) {
        s_part[warp][tile * 16 + g][2 * t] = c[tile][0];
        s_part[warp][tile * 16 + g][2 * t + 1] = c[tile][1];
        s_part[warp][tile * 16 + g + 8][2 * t] = c[tile][2];
        s_part[warp][tile * 16 + g + 8][2 * t + 1] = c[tile][3];
      }
      __syncthreads();
      {
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < kLogitWarps; ++k) s += s_part[k][lane][warp];
        s_sum[lane][warp] = s;
      }
      __syncthreads();
      store_task(p, w, s_sum, s_rows, s_stored, v0, row_logits, acc);
    });
    if (first + warp < F) write_part(w, first + warp, acc);
    __syncthreads();  // s_rows is rewritten by the next group
  }
}

// Any dtype and alignment: warp w computes vocabulary rows 4w .. 4w + 3 of the task for the
// group's 8 rows, one element per lane at a time, then a butterfly per dot product.
template <typename T>
__global__ void __launch_bounds__(kLogitThreads)
    flagged_logits_simt_kernel(SampleParams p, const int32_t* flags, const int32_t* count, Work w,
                               float* row_logits) {
  // Launched programmatically after the decision. The kernels after this one read the flagged count
  // before they wait (a call with no flagged row must not pay four grid completions), so they may
  // be scheduled only once the count is final: after this wait.
  detail::griddep_wait();
  detail::griddep_launch_dependents();
  const int F = *count;
  if (F == 0) return;
  __shared__ float s_sum[kTileRows][kGroup + 1];
  __shared__ int s_rows[kGroup], s_stored[kGroup];
  clear_row_state(w, F, p.batch, p.num_samples);
  const T* W = static_cast<const T*>(p.weight);
  const T* H = static_cast<const T*>(p.hidden);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t D = p.dim, V = p.vocab;
  const int64_t tasks = (V + kTileRows - 1) / kTileRows;
  constexpr int kRowsPerWarp = kTileRows / kLogitWarps;
  for (int first = 0; first < F; first += kGroup) {
    find_flagged(flags, p.batch, first, s_rows, s_stored, blockIdx.x == 0 && first == 0 ? w.list : nullptr);
    PartAcc acc;
    for_each_task(p, w, s_rows, s_stored, tasks, row_logits, acc, [&](int64_t task_v0) {
      const int64_t v0 = task_v0 + warp * kRowsPerWarp;
      float sum[kRowsPerWarp][kGroup];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i)
#pragma unroll
        for (int n = 0; n < kGroup; ++n) sum[i][n] = 0.0f;
      for (int64_t d = lane; d < D; d += 32) {
        float wv[kRowsPerWarp];
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i)
          wv[i] = v0 + i < V ? detail::to_float(W[(v0 + i) * D + d]) : 0.0f;
#pragma unroll
        for (int n = 0; n < kGroup; ++n) {
          if (s_rows[n] < 0) continue;
          const float h = detail::to_float(H[static_cast<int64_t>(s_rows[n]) * D + d]);
#pragma unroll
          for (int i = 0; i < kRowsPerWarp; ++i) sum[i][n] = fmaf(h, wv[i], sum[i][n]);
        }
      }
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i)
#pragma unroll
        for (int n = 0; n < kGroup; ++n) {
          float s = sum[i][n];
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
          if (lane == 0) s_sum[warp * kRowsPerWarp + i][n] = s;
        }
      __syncthreads();
      store_task(p, w, s_sum, s_rows, s_stored, task_v0, row_logits, acc);
      __syncthreads();
    });
    if (first + warp < F) write_part(w, first + warp, acc);
    __syncthreads();
  }
}

// ---- 2. histograms and the resolution of the cuts -----------------------------------------------
struct RowControl {
  float temperature;
  int32_t top_k;
  float top_p, min_p;
};

__device__ RowControl load_control(const SampleParams& p, int64_t b) {
  RowControl c;
  c.temperature = p.temperature[b];
  c.top_k = p.top_k ? p.top_k[b] : 0;
  c.top_p = p.top_p ? p.top_p[b] : 1.0f;
  c.min_p = p.min_p ? p.min_p[b] : 0.0f;
  return c;
}

// The row's statistics and the bucket map, the same in every block (integer and min/max merges).
// Fixed-point masses round(w 2^shift) with w <= 1: a row's V of them sum within 64 bits.
__device__ __forceinline__ int mass_shift(int64_t V) {
  return 63 - (V > 1 ? 64 - __clzll(static_cast<unsigned long long>(V - 1)) : 0);
}

struct RowShape {
  float m;                      // largest finite candidate value
  long long valid, posinf;
  unsigned long long best_key;
  double md, inv_t;
  double span, scale;           // buckets cover (max - l) / T in [0, span): scale = kBuckets / span
  int shift;                    // fixed-point masses: round(w 2^shift)
};

__device__ RowShape row_shape(const Work& w, int slot, const RowControl& c, int64_t V) {
  PartAcc a;
  const RowPart* parts = w.parts + static_cast<int64_t>(slot) * w.logit_blocks;
  for (int i = threadIdx.x; i < w.logit_blocks; i += blockDim.x) merge_part(a, parts[i]);
  // the five statistics merged in one block merge (two barriers)
  __shared__ RowPart partial[32];
  a = warp_merge(a);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = as_part(a);
  __syncthreads();
  PartAcc r;
  for (int i = 0; i < static_cast<int>(blockDim.x >> 5); ++i) merge_part(r, partial[i]);
  RowShape s;
  s.m = r.mx;
  const float mn = r.mn;
  s.valid = r.valid;  // <= V < 2^31
  s.posinf = r.posinf;
  s.best_key = r.best;
  s.md = static_cast<double>(s.m);
  s.inv_t = c.temperature == 0.0f ? 0.0 : 1.0 / static_cast<double>(c.temperature);
  s.span = 0.0;
  if (s.m != -INFINITY) s.span = fmin((s.md - static_cast<double>(mn)) * s.inv_t, kMaxSpan);
  s.scale = s.span > 0.0 ? kBuckets / s.span : 0.0;
  s.shift = mass_shift(V);
  return s;
}

// The bucket of a finite value: monotone in l (larger values, lower buckets).
__device__ __forceinline__ int bucket_of(double d /* (l - max) / T <= 0 */, const RowShape& s) {
  const double x = -d;
  if (!(x < s.span)) return kBuckets - 1;
  const int k = static_cast<int>(x * s.scale);
  return k < kBuckets - 1 ? k : kBuckets - 1;
}

__device__ __forceinline__ double from_fixed(unsigned long long x, int shift) {
  return ldexp(static_cast<double>(x), -shift);
}

// The histogram search: the first bucket whose inclusive cumulative (counts, or masses against a
// float64 target) reaches `target`, over buckets < limit; kBuckets when none does. `before`: the
// cumulative up to that bucket, exclusive.
struct Found {
  int bucket;
  unsigned long long before;
};

template <bool kMass, typename X>
__device__ Found search_buckets(const X (&x)[kBucketsPerThread], unsigned long long excl,
                                int limit, unsigned long long count_target, double mass_target, int shift) {
  __shared__ int s_bucket;
  __shared__ unsigned long long s_before;
  if (threadIdx.x == 0) s_bucket = kBuckets;
  __syncthreads();
  unsigned long long cum = excl, at_found = 0ull;
  int found = kBuckets;
  const int b0 = threadIdx.x * kBucketsPerThread;
#pragma unroll
  for (int i = 0; i < kBucketsPerThread; ++i) {
    const unsigned long long next = cum + x[i];
    const bool reached = kMass ? from_fixed(next, shift) >= mass_target : next >= count_target;
    if (found == kBuckets && b0 + i < limit && reached) {
      found = b0 + i;
      at_found = cum;
    }
    cum = next;
  }
  if (found < kBuckets) atomicMin(&s_bucket, found);
  __syncthreads();
  Found f;
  f.bucket = s_bucket;
  if (found < kBuckets && found == f.bucket) s_before = at_found;
  __syncthreads();
  f.before = f.bucket < kBuckets ? s_before : 0ull;
  __syncthreads();
  return f;
}

// The cumulative of x over the buckets below `bucket`.
template <typename X>
__device__ unsigned long long prefix_at(const X (&x)[kBucketsPerThread], unsigned long long excl,
                                        int bucket) {
  __shared__ unsigned long long s_prefix;
  const int b0 = threadIdx.x * kBucketsPerThread;
  if (bucket >= b0 && bucket < b0 + kBucketsPerThread) {
    unsigned long long c = excl;
#pragma unroll
    for (int i = 0; i < kBucketsPerThread; ++i)
      if (b0 + i < bucket) c += x[i];
    s_prefix = c;
  }
  __syncthreads();
  const unsigned long long r = s_prefix;
  __syncthreads();
  return r;
}

// Appends to keys[] (count in *n) the row's candidate values whose bucket passes `take` (one block
// scans the whole row).
template <class Take>
__device__ void gather(const SampleParams& p, int64_t b, const float* row, const RowShape& s,
                       unsigned long long* keys, int* n, Take take) {
  const int lane = threadIdx.x & 31;
  scan_row(row, 0, p.vocab, [&](int64_t v, float raw) {
    bool sel = false;
    unsigned long long key = 0ull;
    if (v < p.vocab) {
      const float l = candidate_value(p, b, v, raw);
      if (l == l && l != INFINITY) {
        sel = take(bucket_of((static_cast<double>(l) - s.md) * s.inv_t, s));
        key = order_key(l, static_cast<uint32_t>(v));
      }
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, sel);
    if (ballot == 0u) return;
    int at = 0;
    if (lane == __ffs(ballot) - 1) at = atomicAdd(n, __popc(ballot));
    at = __shfl_sync(0xffffffffu, at, __ffs(ballot) - 1) + __popc(ballot & ((1u << lane) - 1u));
    if (sel && at < kGatherCap) keys[at] = key;
  });
  __syncthreads();
}

// The first `want` +Inf values in index order (the row's largest keys in +Inf mode).
__device__ int gather_first_inf(const SampleParams& p, int64_t b, const float* row, unsigned long long* keys,
                                int want) {
  __shared__ int warp_count[32];
  __shared__ int base;
  if (threadIdx.x == 0) base = 0;
  __syncthreads();
  const int64_t step = static_cast<int64_t>(blockDim.x) * kScanUnroll;
  for (int64_t start = 0; start < p.vocab; start += step) {
    float raw[kScanUnroll];
#pragma unroll
    for (int j = 0; j < kScanUnroll; ++j) {
      const int64_t v = start + j * blockDim.x + threadIdx.x;
      raw[j] = v < p.vocab ? row[v] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kScanUnroll; ++j) {
      const int64_t v = start + j * blockDim.x + threadIdx.x;
      const bool inf = v < p.vocab && candidate_value(p, b, v, raw[j]) == INFINITY;
      const int at = block_compact_slot(inf, warp_count, base);
      if (inf && at < want) keys[at] = order_key(INFINITY, static_cast<uint32_t>(v));
      block_compact_advance(warp_count, base);
    }
    if (base >= want) break;  // block-uniform
  }
  const int got = base < want ? base : want;
  __syncthreads();
  return got;
}

// How many of the sorted keys[0, n) lie in buckets < limit (they come first).
__device__ int count_below(const unsigned long long* keys, int n, const RowShape& s, int limit) {
  int c = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    c += bucket_of((static_cast<double>(key_value(keys[i])) - s.md) * s.inv_t, s) < limit;
  return block_all_reduce(c, Sum());
}

// The top-p cut inside the sorted keys[lo, hi): the first key at which `above` plus the float64
// weights from lo reach `target` (the last key when rounding leaves them short).
__device__ unsigned long long mass_cut(const unsigned long long* keys, int lo, int hi, double above,
                                       double target, const RowShape& s) {
  __shared__ int s_at;
  const int len = hi - lo;
  const int per = (len + blockDim.x - 1) / blockDim.x;
  const int a = lo + threadIdx.x * per, e = min(hi, a + per);
  double mine = 0.0;
  for (int i = a; i < e; ++i) mine += exp((static_cast<double>(key_value(keys[i])) - s.md) * s.inv_t);
  double total;
  double cum = above + block_exclusive_scan(mine, total);
  if (threadIdx.x == 0) s_at = hi - 1;
  __syncthreads();
  for (int i = a; i < e; ++i) {
    cum += exp((static_cast<double>(key_value(keys[i])) - s.md) * s.inv_t);
    if (cum >= target) {
      atomicMin(&s_at, i);
      break;
    }
  }
  __syncthreads();
  const unsigned long long k = keys[s_at];
  __syncthreads();
  return k;
}


// The histogram's cumulative counts and masses and the buckets where the cuts known before any
// value is read fall: topLogprobs' (every bucket up to the one holding the n-th largest value),
// top-k's, and top-p's when top-k is off. Every block of cut_kernel computes the same.
//
// vLLM's order (min-p and top-p) is Hugging Face's with top-k min(k, |S|), S the min-p survivors
// (min_p_first_top_k), a prefix of the buckets. Buckets more than one below the one of ln(min_p)
// survive whole, those more than one above it do not (a bucket's width is far above the weights'
// rounding). Where that leaves the top-k open, the blocks gather the three buckets around it (and
// the empty ones above them), where |S| and so top-k's cut end, and the buckets where top-p's cut
// can then fall: its target is top_p times the top-k mass, which lies between the masses of the
// buckets before those three and through them. The row's last block counts |S| exactly from them.
struct CutSearch {
  uint32_t cnt[kBucketsPerThread];
  unsigned long long mass[kBucketsPerThread];
  unsigned long long cnt_excl, mass_excl, total_mass;
  long long want_top;
  bool k_on, p_on;
  Found top, kcut, pcut;
  bool min_p_open;                    // vLLM's order with |S| to count
  int min_p_lo, min_p_hi;             // the buckets around ln(min_p)
  unsigned long long survivors_below; // values in the buckets before min_p_lo (all survive)
  int k_lo, p_lo, p_hi;               // bucket ranges gathered for the open cuts: top-k's [k_lo,
                                      // min_p_hi], top-p's [p_lo, p_hi] (empty: lo > hi)
  __device__ bool any() const {
    return top.bucket >= 0 || kcut.bucket >= 0 || (pcut.bucket >= 0 && pcut.bucket < kBuckets) || min_p_open;
  }
  __device__ void no_ranges() {
    min_p_open = false;
    min_p_lo = k_lo = p_lo = 1;
    min_p_hi = p_hi = 0;
    survivors_below = 0ull;
  }
  // No cut: a row that keeps every valid value (needs_cut false: no histogram was counted for it),
  // and the state of a row resolve_row decides without one (greedy, +Inf, nothing valid).
  __device__ void no_cut() {
    for (int i = 0; i < kBucketsPerThread; ++i) {
      cnt[i] = 0u;
      mass[i] = 0ull;
    }
    cnt_excl = mass_excl = total_mass = 0ull;
    want_top = 0;
    k_on = p_on = false;
    top = kcut = pcut = Found{-1, 0ull};
    no_ranges();
  }
  __device__ bool take(int k) const {
    return k <= top.bucket || k == kcut.bucket || k == pcut.bucket || (k >= k_lo && k <= min_p_hi) ||
           (k >= p_lo && k <= p_hi);
  }
  // (block-collective) The first bucket at which the counts from the top reach n.
  __device__ Found count_reaching(unsigned long long n) const {
    return search_buckets<false>(cnt, cnt_excl, kBuckets, n, 0.0, 0);
  }
  // (block-collective) The first bucket below `limit` at which the masses from the top reach `target`.
  __device__ Found mass_reaching(double target, int shift, int limit = kBuckets) const {
    return search_buckets<true>(mass, mass_excl, limit, 0ull, target, shift);
  }
  // (block-collective) Top-p's cut over the whole row (no top-k).
  __device__ Found whole_row_top_p(float top_p, int shift) const {
    return mass_reaching(static_cast<double>(top_p) * from_fixed(total_mass, shift), shift);
  }
};

// Buckets of top-p's possible cut gathered up front at most; a wider range leaves the cut's bucket
// to the row's last block (one scan of the row).
constexpr int kMaxPCutBuckets = 8;

// Whether a row's kept set or its topLogprobs need the histogram's cuts (top-k, top-p, topLogprobs);
// min-p alone is a weight test in the draw.
__device__ __forceinline__ bool needs_cut(const SampleParams& p, const RowControl& c) {
  return c.top_k > 0 || c.top_p < 1.0f || p.top_logprobs > 0;
}

__device__ void find_cuts(const SampleParams& p, const Work& w, int slot, const RowControl& c, const RowShape& s,
                          CutSearch& q) {
  q.k_on = c.top_k > 0 && c.top_k < s.valid;
  q.p_on = c.top_p < 1.0f;
  q.no_ranges();
  unsigned long long my_cnt = 0ull, my_mass = 0ull;
  // A thread's 16 buckets in 16-byte loads (64 and 128 contiguous bytes): element loads at those
  // strides asked L1 for 32 sectors each, and that queue bound the kernel (ncu: lg throttle 36 %).
  // Written by the histogram kernel, which this grid waited for.
  const int64_t h0 = static_cast<int64_t>(slot) * kBuckets + threadIdx.x * kBucketsPerThread;
  const uint4* const cnt4 = reinterpret_cast<const uint4*>(w.hist_count + h0);
  const ulonglong2* const mass2 = reinterpret_cast<const ulonglong2*>(w.hist_mass + h0);
#pragma unroll
  for (int i = 0; i < kBucketsPerThread / 4; ++i) {
    const uint4 c4 = cnt4[i];
    q.cnt[4 * i] = c4.x;
    q.cnt[4 * i + 1] = c4.y;
    q.cnt[4 * i + 2] = c4.z;
    q.cnt[4 * i + 3] = c4.w;
  }
#pragma unroll
  for (int i = 0; i < kBucketsPerThread / 2; ++i) {
    const ulonglong2 m2 = mass2[i];
    q.mass[2 * i] = m2.x;
    q.mass[2 * i + 1] = m2.y;
  }
#pragma unroll
  for (int i = 0; i < kBucketsPerThread; ++i) {
    my_cnt += q.cnt[i];
    my_mass += q.mass[i];
  }
  unsigned long long total_cnt;
  q.cnt_excl = block_exclusive_scan(my_cnt, total_cnt);
  q.mass_excl = block_exclusive_scan(my_mass, q.total_mass);
  q.want_top = p.top_logprobs < s.valid ? p.top_logprobs : s.valid;
  const Found none{-1, 0ull};
  q.top = q.want_top > 0 ? q.count_reaching(q.want_top) : none;
  q.kcut = q.k_on ? q.count_reaching(c.top_k) : none;
  q.pcut = none;
  if (p.filter_order == FilterOrder::kMinPFirst && c.min_p > 0.0f && q.p_on) {
    const int mb = bucket_of(log(static_cast<double>(c.min_p)), s);
    q.min_p_lo = mb > 0 ? mb - 1 : 0;
    q.min_p_hi = mb + 1;
    q.survivors_below = prefix_at(q.cnt, q.cnt_excl, q.min_p_lo);
    // |S| >= survivors_below: a top-k within them is min(k, |S|) already, Hugging Face's cuts below
    q.min_p_open = !(c.top_k > 0 && static_cast<unsigned long long>(c.top_k) <= q.survivors_below);
  }
  if (q.min_p_open) {
    q.k_on = false;
    q.kcut = none;
    // top-k min(k, |S|) >= survivors_below ends in the bucket of the survivors_below-th value
    // (empty buckets between it and min_p_lo) or in the three around ln(min_p)
    q.k_lo = q.survivors_below > 0 ? q.count_reaching(q.survivors_below).bucket : q.min_p_lo;
    const double tp = static_cast<double>(c.top_p);
    const double z_lo = from_fixed(prefix_at(q.mass, q.mass_excl, q.min_p_lo), s.shift);
    const double z_hi = from_fixed(q.min_p_hi + 1 < kBuckets ? prefix_at(q.mass, q.mass_excl, q.min_p_hi + 1)
                                                             : q.total_mass, s.shift);
    const int lo = q.mass_reaching(tp * z_lo, s.shift).bucket;
    const int hi = q.mass_reaching(tp * z_hi, s.shift).bucket;
    if (hi - lo < kMaxPCutBuckets) {
      q.p_lo = lo;
      q.p_hi = hi;
    }
  } else if (q.p_on && !q.k_on) {
    q.pcut = q.whole_row_top_p(c.top_p, s.shift);
  }
}

// Slice `slice` of `slices` of the row: the order keys of the values in the buckets q takes, appended
// to the row's gathered keys (positions past kGatherCap are counted, not written).
__device__ void gather_slice(const SampleParams& p, const Work& w, int slot, int slice, int slices, int64_t b,
                             const float* row, const RowShape& s, const CutSearch& q) {
  const int lane = threadIdx.x & 31;
  const int64_t V = p.vocab;
  const int64_t per = (V + slices - 1) / slices;
  const int64_t lo = slice * per, hi = lo + per < V ? lo + per : V;
  unsigned long long* out = w.gathered + static_cast<int64_t>(slot) * kGatherCap;
  scan_row(row, lo, hi, [&](int64_t v, float raw) {
    bool sel = false;
    unsigned long long key = 0ull;
    if (v < hi) {
      const float l = candidate_value(p, b, v, raw);
      if (l == l) {
        sel = q.take(bucket_of((static_cast<double>(l) - s.md) * s.inv_t, s));
        key = order_key(l, static_cast<uint32_t>(v));
      }
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, sel);
    if (ballot == 0u) return;
    uint32_t at = 0;
    if (lane == __ffs(ballot) - 1) at = atomicAdd(w.gather_count + slot, static_cast<uint32_t>(__popc(ballot)));
    at = __shfl_sync(0xffffffffu, at, __ffs(ballot) - 1) + __popc(ballot & ((1u << lane) - 1u));
    if (sel && at < kGatherCap) out[at] = key;
  });
}

// One row's decision up to the draw (the row's last cut_kernel block): see the file comment.
__device__ void resolve_row(const SampleParams& p, const Work& w, int slot, int64_t b, const float* row,
                            const RowControl& c, const RowShape& s, const CutSearch& q, unsigned long long* keys) {
  __shared__ int s_n;
  RowPlan plan;
  plan.threshold = 0ull;
  plan.md = s.md;
  plan.inv_t = s.inv_t;
  plan.min_w = 0.0;
  plan.mode = kPlanSample;
  plan.inf_mode = 0;
  plan.top_avail = 0;
  plan.pad = 0;
  const int n_top = p.top_logprobs;
  unsigned long long* top_keys = w.top_keys + static_cast<int64_t>(slot) * (n_top > 0 ? n_top : 1);
  auto finish = [&](const RowPlan& pl) {
    if (threadIdx.x == 0) {
      w.plans[slot] = pl;
      if (pl.mode == kPlanWholeRow) w.whole_row[b] = 1;
    }
  };

  if (s.valid == 0) {
    write_no_candidate(p, b);
    plan.mode = kPlanDone;
    finish(plan);
    return;
  }
  if (threadIdx.x == 0 && p.row_status) p.row_status[b] = kRowOk;
  if (c.temperature == 0.0f) {  // greedy: the largest key, every sample's, logprob 0
    const int32_t token = key_index(s.best_key);
    for (int j = threadIdx.x; j < p.num_samples; j += blockDim.x) {
      p.tokens[b * p.num_samples + j] = token;
      if (p.logprobs) p.logprobs[b * p.num_samples + j] = 0.0f;
    }
    for (int i = threadIdx.x; i < n_top; i += blockDim.x) {
      p.top_tokens[b * n_top + i] = i == 0 ? token : -1;
      p.top_token_logprobs[b * n_top + i] = i == 0 ? 0.0f : -INFINITY;
    }
    plan.mode = kPlanDone;
    finish(plan);
    return;
  }
  if (s.posinf > 0) {  // +Inf mode: the +Inf values share the mass, no filter applies
    plan.inf_mode = 1;
    if (n_top > 0) {
      const int want = static_cast<int>(s.posinf < n_top ? s.posinf : n_top);
      plan.top_avail = gather_first_inf(p, b, row, keys, want);
      for (int i = threadIdx.x; i < plan.top_avail; i += blockDim.x) top_keys[i] = keys[i];
    }
    finish(plan);
    return;
  }

  bool k_on = q.k_on;
  const bool p_on = q.p_on;
  int32_t top_k = c.top_k;
  plan.min_w = c.min_p > 0.0f ? static_cast<double>(c.min_p) : 0.0;
  Found kcut = q.kcut, pcut = q.pcut;
  double z_top_k = from_fixed(q.total_mass, s.shift);
  const long long want_top = q.want_top;
  const unsigned long long(&mass)[kBucketsPerThread] = q.mass;
  const unsigned long long mass_excl = q.mass_excl;
  int n = static_cast<int>(min(__ldcg(w.gather_count + slot), static_cast<uint32_t>(kGatherCap + 1)));
  const unsigned long long* gathered = w.gathered + static_cast<int64_t>(slot) * kGatherCap;
  if (n <= kGatherCap)
    for (int i = threadIdx.x; i < n; i += blockDim.x) keys[i] = __ldcg(gathered + i);
  if (q.min_p_open && n <= kGatherCap) {
    // vLLM's order (CutSearch): |S| counted exactly in the buckets around ln(min_p), then the cuts
    // of Hugging Face's order with top-k min(k, |S|), in buckets the blocks gathered
    long long mine = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const double d = (static_cast<double>(key_value(keys[i])) - s.md) * s.inv_t;
      const int k = bucket_of(d, s);
      mine += k >= q.min_p_lo && k <= q.min_p_hi && exp(d) >= plan.min_w ? 1 : 0;
    }
    const long long survivors = static_cast<long long>(q.survivors_below) + block_all_reduce(mine, Sum());
    top_k = min_p_first_top_k(c.top_k, survivors, false);
    k_on = top_k > 0 && top_k < s.valid;
    kcut = k_on ? q.count_reaching(static_cast<unsigned long long>(top_k)) : Found{-1, 0ull};
    pcut = !k_on ? q.whole_row_top_p(c.top_p, s.shift) : Found{-1, 0ull};
  }
  if (n > kGatherCap) {
    plan.mode = kPlanWholeRow;
    finish(plan);
    return;
  }
  if (threadIdx.x == 0) s_n = n;
  __syncthreads();
  block_sort_desc(keys, n);

  // top-k: the (k - before)-th key of its cut bucket; the top-k mass, exact in float64 inside it
  unsigned long long k_threshold = 0ull;
  int k_end = 0;
  if (k_on) {
    const int lo = count_below(keys, n, s, kcut.bucket);
    k_end = lo + static_cast<int>(static_cast<unsigned long long>(top_k) - kcut.before);
    k_threshold = keys[k_end - 1];
    double mine = 0.0;
    for (int i = lo + threadIdx.x; i < k_end; i += blockDim.x)
      mine += exp((static_cast<double>(key_value(keys[i])) - s.md) * s.inv_t);
    double inside;
    block_exclusive_scan(mine, inside);
    z_top_k = from_fixed(prefix_at(mass, mass_excl, kcut.bucket), s.shift) + inside;
  }
  // top-p: the smallest prefix of the top-k set whose mass reaches top_p times the top-k mass
  unsigned long long p_threshold = 0ull;
  if (p_on) {
    const double target = static_cast<double>(c.top_p) * z_top_k;
    if (k_on) {
      pcut = q.mass_reaching(target, s.shift, kcut.bucket);
      if (pcut.bucket == kBuckets) pcut = Found{kcut.bucket, prefix_at(mass, mass_excl, kcut.bucket)};
    }
    if (pcut.bucket < kBuckets && !q.take(pcut.bucket)) {  // (block-uniform) a bucket no block gathered
      const int cut = pcut.bucket;
      gather(p, b, row, s, keys, &s_n, [cut](int k) { return k == cut; });
      n = s_n;
      if (n > kGatherCap) {
        plan.mode = kPlanWholeRow;
        finish(plan);
        return;
      }
      block_sort_desc(keys, n);
    }
    if (pcut.bucket < kBuckets) {  // else rounding with top_p ~ 1: the whole top-k set
      const int lo = count_below(keys, n, s, pcut.bucket);
      const int hi = k_on && pcut.bucket == kcut.bucket ? k_end : count_below(keys, n, s, pcut.bucket + 1);
      p_threshold = mass_cut(keys, lo, hi, from_fixed(pcut.before, s.shift), target, s);
    }
  }
  plan.threshold = k_threshold > p_threshold ? k_threshold : p_threshold;
  if (want_top > 0) {
    plan.top_avail = static_cast<int32_t>(want_top);
    for (int i = threadIdx.x; i < want_top; i += blockDim.x) top_keys[i] = keys[i];
  }
  finish(plan);
}

// The prologue of the extra pass's kernels after its logits kernel, which are launched
// programmatically: lets the next kernel be scheduled now (it waits for this one), then reads the
// flagged count, final before this grid starts (the logits kernel releases its dependents only
// after its own wait), and waits for the previous grid only when some row is flagged.
__device__ __forceinline__ int flagged_count_then_wait(const int32_t* count) {
  detail::griddep_launch_dependents();
  const int F = __ldcg(count);
  if (F != 0) detail::griddep_wait();
  return F;
}

// Tasks are (row slot, slice) pairs in slot order. Block i takes task i first, then the next one
// of `counter` as it comes free (every thread gets it), so that a block that resolves a row (the
// row's last task) delays no fixed share of the later rows; when the grid holds every task, no
// block asks. The grids are one resident wave (launch_extra_pass): a call with no flagged row then
// starts no block beyond it.
__device__ __forceinline__ int next_task(uint32_t* counter, int tasks) {
  if (tasks <= static_cast<int>(gridDim.x)) return tasks;
  __shared__ int s_task;
  __syncthreads();  // every thread has read the previous task
  if (threadIdx.x == 0) s_task = static_cast<int>(gridDim.x + atomicAdd(counter, 1u));
  __syncthreads();
  return s_task;
}

// This block's tasks of F rows × `slices`, as (slot, x): `for (const Task t : BlockTasks(F, n, counter))`.
struct Task {
  int slot, x;
};
struct BlockTasks {
  struct Cursor {
    int task, tasks, slices;
    uint32_t* counter;
    __device__ Task operator*() const { return Task{task / slices, task % slices}; }
    __device__ Cursor& operator++() {
      task = next_task(counter, tasks);
      return *this;
    }
    __device__ bool operator!=(const Cursor&) const { return task < tasks; }
  };
  int tasks, slices;
  uint32_t* counter;
  __device__ BlockTasks(int F, int n, uint32_t* c) : tasks(F * n), slices(n), counter(c) {}
  __device__ Cursor begin() const { return Cursor{static_cast<int>(blockIdx.x), tasks, slices, counter}; }
  __device__ Cursor end() const { return Cursor{tasks, tasks, slices, counter}; }
};

// Slices a row of the histogram and the cuts: kRowBlocks for a few flagged rows (each row's latency
// spread over many blocks), fewer when the F rows' tasks would outnumber the grid (one resident
// wave): each block then takes one task, and fewer slices flush fewer partial histograms (64 rows
// of 32 slices: 8 M global atomics, ncu 90 us for the histogram and 150 for the cuts at B = 64).
// Integer counts and sorted keys: the result does not depend on the slices.
__device__ __forceinline__ int row_slices(int F) {
  const int fit = static_cast<int>(gridDim.x) / F;
  return fit < 1 ? 1 : fit < kRowBlocks ? fit : kRowBlocks;
}

// Tasks (slot, x), x < row_slices(F): task x of a row takes the x-th slice of its vocabulary. Each block
// counts its slice in shared memory, then adds its non-empty buckets to the row's: two global
// atomics per value were the kernel's bound (their issue queue: ncu long_sb 50 % behind REDs).
constexpr size_t kHistogramSmem = kBuckets * (sizeof(unsigned long long) + sizeof(uint32_t));
__global__ void __launch_bounds__(kDecideThreads)
    histogram_kernel(SampleParams p, const int32_t* count, const float* row_logits, Work w) {
  const int F = flagged_count_then_wait(count);
  if (F == 0) return;
  extern __shared__ unsigned long long s_mass[];  // kBuckets masses, then kBuckets counts
  uint32_t* const s_count = reinterpret_cast<uint32_t*>(s_mass + kBuckets);
  const int64_t V = p.vocab;
  const int slices = row_slices(F);
  for (const Task t : BlockTasks(F, slices, w.next_task + kHistogramTasks)) {
    const int slot = t.slot, x = t.x;
    const int64_t b = w.list[slot];
    const RowControl c = load_control(p, b);
    if (!needs_cut(p, c) && x != 0) continue;  // (block-uniform) no histogram: task 0 writes the shape
    const RowShape s = row_shape(w, slot, c, V);
    if (x == 0 && threadIdx.x == 0) w.shapes[slot] = s;
    const float* row = row_logits + b * V;
    if (s.valid > 0 && c.temperature != 0.0f && s.posinf == 0 && needs_cut(p, c)) {
      uint32_t* hc = w.hist_count + static_cast<int64_t>(slot) * kBuckets;
      unsigned long long* hm = w.hist_mass + static_cast<int64_t>(slot) * kBuckets;
      const int64_t per = (V + slices - 1) / slices;
      const int64_t lo = x * per, hi = lo + per < V ? lo + per : V;
      for (int i = threadIdx.x; i < kBuckets; i += blockDim.x) {
        s_mass[i] = 0ull;
        s_count[i] = 0u;
      }
      __syncthreads();
      // the one-pass decision's weights (detail::fixed_weight), in this row's 2^-shift units
      const float c2 = detail::exp2_scale(s.inv_t);
      const float unit = ldexpf(1.0f, s.shift);
      scan_row(row, lo, hi, [&](int64_t v, float raw) {
        if (v >= hi) return;
        const float l = candidate_value(p, b, v, raw);
        if (l != l) return;
        const double d = (static_cast<double>(l) - s.md) * s.inv_t;
        const int k = bucket_of(d, s);
        const unsigned long long wf = detail::fixed_weight(l, s.m, c2, unit);
        atomicAdd(s_count + k, 1u);
        if (wf != 0ull) detail::shared_add_u64(s_mass + k, wf);
      });
      __syncthreads();
      for (int i = threadIdx.x; i < kBuckets; i += blockDim.x) {  // integer sums: any order is exact
        const uint32_t n = s_count[i];
        if (n == 0u) continue;
        atomicAdd(hc + i, n);
        const unsigned long long m = s_mass[i];
        if (m != 0ull) atomicAdd(hm + i, m);
      }
    }
    __syncthreads();
  }
}

// Tasks (slot, x) as the histogram's: every task finds the row's cut buckets from the histogram and
// gathers its slice's values in them; the row's last one sorts them and resolves the row.
__global__ void __launch_bounds__(kDecideThreads)
    cut_kernel(SampleParams p, const int32_t* count, const float* row_logits, Work w) {
  const int F = flagged_count_then_wait(count);
  if (F == 0) return;
  extern __shared__ unsigned long long s_keys[];
  __shared__ bool s_last;
  const int slices = row_slices(F);
  for (const Task t : BlockTasks(F, slices, w.next_task + kCutTasks)) {
    const int slot = t.slot, x = t.x;
    const int64_t b = w.list[slot];
    const RowControl c = load_control(p, b);
    const RowShape s = w.shapes[slot];
    const float* row = row_logits + b * p.vocab;
    CutSearch q;
    q.no_cut();
    if (s.valid > 0 && c.temperature != 0.0f && s.posinf == 0 && needs_cut(p, c)) {  // block-uniform
      find_cuts(p, w, slot, c, s, q);
      if (q.any()) gather_slice(p, w, slot, x, slices, b, row, s, q);
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(w.cut_done + slot, 1u) == static_cast<uint32_t>(slices - 1);
    __syncthreads();
    if (s_last) {
      __threadfence();
      resolve_row(p, w, slot, b, row, c, s, q, s_keys);
    }
    __syncthreads();
  }
}

// ---- 3. the draw ----------------------------------------------------------------------------------
// Tasks (slot, x), x < draw_tasks_per_row(F): each warp of a task draws over its run of the row's
// vocabulary quads (one Philox per quad with a kept value) and adds its kept count, its kept mass in
// fixed point and its best candidate of each sample to the row's by atomics: integer sums and
// maxima, so the result does not depend on the split, which follows F. The row's last block writes
// token, logprob and topLogprobs. A scan draws kSamplesPerScan samples, each with its own noise
// stream; more samples scan the run again (from L1/L2).
__device__ __forceinline__ int draw_tasks_per_row(int F) {
  const int fit = static_cast<int>(gridDim.x) / F;
  return fit < 1 ? 1 : fit < kMaxDrawTasks ? fit : kMaxDrawTasks;
}

__global__ void __launch_bounds__(kSampleThreads, 4)
    sample_kernel(SampleParams p, const int32_t* count, const float* row_logits, Work w) {
  const int F = flagged_count_then_wait(count);
  if (F == 0) return;
  __shared__ bool s_last;
  const int64_t V = p.vocab;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tasks_per_row = draw_tasks_per_row(F);
  const double unit = ldexp(1.0, mass_shift(V));
  for (const Task t : BlockTasks(F, tasks_per_row, w.next_task + kDrawTasks)) {
    const int slot = t.slot;
    const RowPlan plan = w.plans[slot];
    if (plan.mode != kPlanSample) continue;  // block-uniform
    const int64_t b = w.list[slot];
    const float T = p.temperature[b];
    const float inv_tf = 1.0f / T;
    const uint64_t seed = p.seed[b], offset = p.offset[b];
    const uint32_t stream = p.per_row_seed ? 0u : static_cast<uint32_t>(b);
    const float* row = row_logits + b * V;
    const int64_t quads = (V + 3) / 4;
    const int64_t runs = static_cast<int64_t>(tasks_per_row) * kDrawWarps;
    const int64_t per = (quads + runs - 1) / runs;
    const int S = p.num_samples;
    const int64_t q_lo = (static_cast<int64_t>(t.x) * kDrawWarps + warp) * per;
    const int64_t q_hi = q_lo + per < quads ? q_lo + per : quads;
    for (int j0 = 0; j0 < S; j0 += kSamplesPerScan) {  // warp-uniform
      unsigned long long z = 0ull, kept = 0ull, best[kSamplesPerScan];
#pragma unroll
      for (int jj = 0; jj < kSamplesPerScan; ++jj) best[jj] = 0ull;
      for (int64_t q0 = q_lo; q0 < q_hi; q0 += 32 * kDrawQuadsInFlight) {
        // every load of the round before any use: one memory latency a round, not one a quad
        float l[kDrawQuadsInFlight][4];
#pragma unroll
        for (int r = 0; r < kDrawQuadsInFlight; ++r) {
          const int64_t q = q0 + 32 * r + lane;
#pragma unroll
          for (int o = 0; o < 4; ++o) {
            const int64_t v = 4 * q + o;
            l[r][o] = q < q_hi && v < V ? row[v] : NAN;
          }
        }
        // the keys at or above the plan's threshold (cheap, every value); the weights, min-p and
        // noise only for the few quads that hold one
        uint32_t passes = 0u;  // bit 4r + o
#pragma unroll
        for (int r = 0; r < kDrawQuadsInFlight; ++r) {
          const int64_t q = q0 + 32 * r + lane;
          if (q < q_hi) detail::candidate_quad(p, b, 4 * q, l[r]);
#pragma unroll
          for (int o = 0; o < 4; ++o) {
            const float x = l[r][o];
            const bool pass = x == x && (plan.inf_mode ? x == INFINITY
                                                       : order_key(x, static_cast<uint32_t>(4 * q + o)) >= plan.threshold);
            passes |= pass ? 1u << (4 * r + o) : 0u;
          }
        }
#pragma unroll 1
        for (uint32_t left = passes; left != 0u;) {
          const int r = (__ffs(left) - 1) >> 2;
          const uint32_t quad_bits = (left >> (4 * r)) & 0xfu;
          left &= ~(0xfu << (4 * r));
          float lq[4];
#pragma unroll
          for (int o = 0; o < 4; ++o) {
            lq[o] = l[0][o];
#pragma unroll
            for (int rr = 1; rr < kDrawQuadsInFlight; ++rr) lq[o] = r == rr ? l[rr][o] : lq[o];
          }
          const int64_t q = q0 + 32 * r + lane;
          bool keep[4];
          bool any = false;
#pragma unroll
          for (int o = 0; o < 4; ++o) {
            keep[o] = false;
            if (((quad_bits >> o) & 1u) == 0u) continue;
            const double x = plan.inf_mode ? 1.0 : exp((static_cast<double>(lq[o]) - plan.md) * plan.inv_t);
            keep[o] = plan.inf_mode || plan.min_w == 0.0 || x >= plan.min_w;
            if (keep[o]) {
              z += __double2ull_rn(x * unit);
              ++kept;
              any = true;
            }
          }
          if (!any) continue;
#pragma unroll
          for (int jj = 0; jj < kSamplesPerScan; ++jj) {
            if (j0 + jj >= S) break;
            const Philox4 rn =
                noise_block(seed, offset, stream, static_cast<uint32_t>(j0 + jj), static_cast<uint32_t>(q));
#pragma unroll
            for (int o = 0; o < 4; ++o) {
              if (!keep[o]) continue;
              const Candidate cand =
                  make_candidate(lq[o], inv_tf, false, gumbel_from_bits(rn.x[o]), static_cast<uint32_t>(4 * q + o));
              const unsigned long long packed = detail::pack_candidate(cand.score, cand.key);
              best[jj] = packed > best[jj] ? packed : best[jj];
            }
          }
        }
      }
      if (j0 == 0) {  // the kept mass and count: the first scan's
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
          z += __shfl_xor_sync(0xffffffffu, z, o);
          kept += __shfl_xor_sync(0xffffffffu, kept, o);
        }
        if (lane == 0 && kept != 0ull) {
          atomicAdd(w.kept_mass + slot, z);
          atomicAdd(w.kept_count + slot, kept);
        }
      }
#pragma unroll
      for (int jj = 0; jj < kSamplesPerScan; ++jj) {
        if (j0 + jj >= S) break;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
          const unsigned long long bo = __shfl_xor_sync(0xffffffffu, best[jj], o);
          best[jj] = bo > best[jj] ? bo : best[jj];
        }
        if (lane == 0 && best[jj] != 0ull) atomicMax(w.best + static_cast<int64_t>(slot) * S + j0 + jj, best[jj]);
      }
    }
    __syncthreads();  // every warp's atomics issued
    if (threadIdx.x == 0) {
      __threadfence();
      s_last = atomicAdd(w.draw_done + slot, 1u) == static_cast<uint32_t>(tasks_per_row - 1);
    }
    __syncthreads();
    if (!s_last) continue;
    __threadfence();
    __shared__ double s_log_z;
    __shared__ unsigned long long s_kept;
    if (threadIdx.x == 0) {
      const unsigned long long kr = __ldcg(w.kept_count + slot);
      const double log_z = log(static_cast<double>(__ldcg(w.kept_mass + slot)) / unit);
      for (int j = 0; j < S; ++j) {
        const int32_t token = detail::packed_token(__ldcg(w.best + static_cast<int64_t>(slot) * S + j));
        p.tokens[b * S + j] = token;
        if (p.logprobs) {
          float lp = -INFINITY;
          if (token >= 0) {
            const float l = candidate_value(p, b, token, row[token]);
            lp = static_cast<float>(plan.inf_mode ? -log_z : (static_cast<double>(l) - plan.md) * plan.inv_t - log_z);
          }
          p.logprobs[b * S + j] = lp;
        }
      }
      s_log_z = log_z;
      s_kept = kr;
    }
    __syncthreads();
    const int n_top = p.top_logprobs;
    const unsigned long long* top_keys = w.top_keys + static_cast<int64_t>(slot) * (n_top > 0 ? n_top : 1);
    const long long take = min(static_cast<long long>(plan.top_avail), static_cast<long long>(s_kept));
    for (int i = threadIdx.x; i < n_top; i += blockDim.x) {
      int32_t token = -1;
      float lp = -INFINITY;
      if (i < take) {
        const unsigned long long key = top_keys[i];
        token = key_index(key);
        lp = static_cast<float>(plan.inf_mode ? -s_log_z
                                              : (static_cast<double>(key_value(key)) - plan.md) * plan.inv_t - s_log_z);
      }
      p.top_tokens[b * n_top + i] = token;
      p.top_token_logprobs[b * n_top + i] = lp;
    }
    __syncthreads();
  }
}

}  // namespace

namespace {

using LogitsKernel = void (*)(SampleParams, const int32_t*, const int32_t*, Work, float*);

// The logits kernel for `p`'s operands: tensor cores where the dtype and alignment allow.
LogitsKernel logits_kernel_for(const SampleParams& p, bool tensor_cores) {
  return tensor_cores ? (p.dtype == DType::kF16 ? flagged_logits_mma_kernel<true> : flagged_logits_mma_kernel<false>)
         : p.dtype == DType::kF32 ? flagged_logits_simt_kernel<float>
         : p.dtype == DType::kF16 ? flagged_logits_simt_kernel<__half>
                                  : flagged_logits_simt_kernel<__nv_bfloat16>;
}

// The logits kernel's grid: one resident wave (a second, partial wave would leave SMs idle at the
// end).
cudaError_t logit_blocks_for(const SampleParams& p, LogitsKernel kernel, int* blocks) {
  int per_sm = 0;
  const cudaError_t err = detail::prepare_kernel(kernel, kLogitThreads, 0, &per_sm);
  if (err != cudaSuccess) return err;
  const int sms = detail::multiprocessor_count();
  const int64_t tasks = (p.vocab + kTileRows - 1) / kTileRows;
  const int64_t resident = static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1);
  *blocks = static_cast<int>(tasks < resident ? tasks : resident);
  return cudaSuccess;
}

// The workspace regions (byte offsets) for `logit_blocks` logits blocks.
struct ExtraPassLayout {
  // each region's offset, named as Work's pointer into it
  size_t list, whole_row, parts, plans, hist_count, hist_mass, shapes, gathered, gather_count, cut_done, draw_done,
      kept_mass, kept_count, best, top_keys, next_task, bytes;
};

ExtraPassLayout extra_pass_layout(const SampleParams& p, int logit_blocks) {
  const size_t B = static_cast<size_t>(p.batch);
  const size_t n_top = p.top_logprobs > 0 ? static_cast<size_t>(p.top_logprobs) : 1;
  RegionLayout layout;
  ExtraPassLayout l;
  l.list = layout.take(B * sizeof(int32_t));
  l.whole_row = layout.take(B * sizeof(int32_t));
  l.parts = layout.take(B * logit_blocks * sizeof(RowPart));
  l.plans = layout.take(B * sizeof(RowPlan));
  l.hist_count = layout.take(B * kBuckets * sizeof(uint32_t));
  l.hist_mass = layout.take(B * kBuckets * sizeof(unsigned long long));
  l.shapes = layout.take(B * sizeof(RowShape));
  l.gathered = layout.take(B * kGatherCap * sizeof(unsigned long long));
  l.gather_count = layout.take(B * sizeof(uint32_t));
  l.cut_done = layout.take(B * sizeof(uint32_t));
  l.draw_done = layout.take(B * sizeof(uint32_t));
  l.kept_mass = layout.take(B * sizeof(unsigned long long));
  l.kept_count = layout.take(B * sizeof(unsigned long long));
  l.best = layout.take(B * static_cast<size_t>(p.num_samples) * sizeof(unsigned long long));
  l.top_keys = layout.take(B * n_top * sizeof(unsigned long long));
  l.next_task = layout.take(kTaskCounters * sizeof(uint32_t));
  l.bytes = layout.bytes;
  return l;
}

// The extra pass's regions in the block at `ws` (laid out by extra_pass_layout).
Work work_in(uint8_t* ws, const ExtraPassLayout& l, int logit_blocks, const uint8_t* stored_tiles, const SampleParams& p) {
  Work w;
  w.list = reinterpret_cast<int32_t*>(ws + l.list);
  w.whole_row = reinterpret_cast<int32_t*>(ws + l.whole_row);
  w.parts = reinterpret_cast<RowPart*>(ws + l.parts);
  w.logit_blocks = logit_blocks;
  w.plans = reinterpret_cast<RowPlan*>(ws + l.plans);
  w.hist_count = reinterpret_cast<uint32_t*>(ws + l.hist_count);
  w.hist_mass = reinterpret_cast<unsigned long long*>(ws + l.hist_mass);
  w.shapes = reinterpret_cast<RowShape*>(ws + l.shapes);
  w.gathered = reinterpret_cast<unsigned long long*>(ws + l.gathered);
  w.gather_count = reinterpret_cast<uint32_t*>(ws + l.gather_count);
  w.cut_done = reinterpret_cast<uint32_t*>(ws + l.cut_done);
  w.draw_done = reinterpret_cast<uint32_t*>(ws + l.draw_done);
  w.kept_mass = reinterpret_cast<unsigned long long*>(ws + l.kept_mass);
  w.kept_count = reinterpret_cast<unsigned long long*>(ws + l.kept_count);
  w.best = reinterpret_cast<unsigned long long*>(ws + l.best);
  w.top_keys = reinterpret_cast<unsigned long long*>(ws + l.top_keys);
  w.next_task = reinterpret_cast<uint32_t*>(ws + l.next_task);
  w.stored_tiles = stored_tiles;
  w.num_vtiles = (p.vocab + 127) / 128;
  return w;
}

bool use_tensor_cores(const SampleParams& p) {
  return p.dtype != DType::kF32 && p.dim % 8 == 0 && reinterpret_cast<uintptr_t>(p.hidden) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.weight) % 16 == 0;
}

// The logits kernel for `p` (its operands' alignment decides), its grid, and the extra pass's
// regions carved from a Scratch (ws, to give back) as w.
struct TakenWork {
  LogitsKernel logits_kernel;
  uint8_t* ws = nullptr;
  Work w;  // (w.logit_blocks: the logits kernel's grid)
};
cudaError_t take_work(const SampleParams& p, Scratch& scratch, const uint8_t* stored_tiles, TakenWork* t) {
  t->logits_kernel = logits_kernel_for(p, use_tensor_cores(p));
  int logit_blocks = 0;
  cudaError_t err = logit_blocks_for(p, t->logits_kernel, &logit_blocks);
  if (err != cudaSuccess) return err;
  const ExtraPassLayout l = extra_pass_layout(p, logit_blocks);
  if ((err = scratch.take(l.bytes, &t->ws)) != cudaSuccess) return err;
  t->w = work_in(t->ws, l, logit_blocks, stored_tiles, p);
  return cudaSuccess;
}

}  // namespace

// Either logits kernel may run for a later call (the operands' alignment decides): the larger grid.
cudaError_t extra_pass_workspace_bytes(const SampleParams& p, size_t* bytes) {
  int blocks = 0, simt_blocks = 0;
  cudaError_t err = logit_blocks_for(p, logits_kernel_for(p, false), &simt_blocks);
  if (err == cudaSuccess && p.dtype != DType::kF32) err = logit_blocks_for(p, logits_kernel_for(p, true), &blocks);
  if (err != cudaSuccess) return err;
  *bytes = extra_pass_layout(p, blocks > simt_blocks ? blocks : simt_blocks).bytes;
  return cudaSuccess;
}

cudaError_t launch_extra_pass(const SampleParams& p, const int32_t* flags, const int32_t* flagged_count,
                              float* row_logits, const uint8_t* stored_tiles, cudaStream_t stream) {
  if (flags == nullptr || flagged_count == nullptr || row_logits == nullptr || p.num_samples < 1 ||
      p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs)
    return cudaErrorInvalidValue;
  const size_t B = static_cast<size_t>(p.batch);
  Scratch scratch(p, stream);
  TakenWork t;
  cudaError_t err = take_work(p, scratch, stored_tiles, &t);
  if (err != cudaSuccess) return err;
  const Work& w = t.w;

  // Five kernels that return at once when no row was flagged (the common case): each is launched
  // programmatically, and the four after the logits kernel read the final flagged count before
  // they wait, so a no-op pass costs one grid completion and four grid starts (as plain launches
  // plus a memset: 14-18 us a call, H200; waiting in each kernel: ~4 us more at B = 1).
  const bool programmatic = detail::programmatic_launch_supported();
  const size_t gather_bytes = kGatherCap * sizeof(unsigned long long);
  int cut_per_sm = 0, histogram_per_sm = 0, sample_per_sm = 0;
  err = detail::prepare_kernel(cut_kernel, kDecideThreads, static_cast<int>(gather_bytes), &cut_per_sm);
  if (err == cudaSuccess)
    err = detail::prepare_kernel(histogram_kernel, kDecideThreads, static_cast<int>(kHistogramSmem), &histogram_per_sm);
  if (err == cudaSuccess) err = detail::prepare_kernel(sample_kernel, kSampleThreads, 0, &sample_per_sm);
  // The later kernels' grids: one resident wave at most (their blocks take tasks as they come
  // free), since a no-op pass pays for every wave of blocks that only return (llama3-8b top-k 50
  // at B = 16, grids of a block per task: the later four kernels' 2048 blocks cost ~3 points).
  const int64_t sms = detail::multiprocessor_count();
  auto wave = [&](int per_sm, int tasks_per_row) {
    const int64_t resident = sms * (per_sm > 0 ? per_sm : 1);
    const int64_t tasks = static_cast<int64_t>(B) * tasks_per_row;
    return dim3(static_cast<unsigned>(tasks < resident ? tasks : resident));
  };
  if (err == cudaSuccess) {
    err = detail::launch_kernel(t.logits_kernel, dim3(static_cast<unsigned>(w.logit_blocks)), dim3(kLogitThreads), 0,
                                stream, programmatic, p, flags, flagged_count, w, row_logits);
  }
  if (err == cudaSuccess) {
    err = detail::launch_kernel(histogram_kernel, wave(histogram_per_sm, kRowBlocks), dim3(kDecideThreads),
                                kHistogramSmem, stream, programmatic, p, flagged_count,
                                static_cast<const float*>(row_logits), w);
  }
  if (err == cudaSuccess) {
    err = detail::launch_kernel(cut_kernel, wave(cut_per_sm, kRowBlocks), dim3(kDecideThreads), gather_bytes, stream,
                                programmatic, p, flagged_count, static_cast<const float*>(row_logits), w);
  }
  if (err == cudaSuccess) {
    err = detail::launch_kernel(sample_kernel, wave(sample_per_sm, kMaxDrawTasks), dim3(kSampleThreads), 0, stream,
                                programmatic, p, flagged_count, static_cast<const float*>(row_logits), w);
  }
  if (err == cudaSuccess) err = launch_whole_rows(p, row_logits, w.whole_row, flagged_count, stream);
  const cudaError_t freed = scratch.give_back(t.ws);
  return err != cudaSuccess ? err : freed;
}

cudaError_t launch_flagged_logits(const SampleParams& p, const int32_t* flags, const int32_t* flagged_count,
                                  float* row_logits, const uint8_t* stored_tiles, cudaStream_t stream) {
  if (flags == nullptr || flagged_count == nullptr || row_logits == nullptr) return cudaErrorInvalidValue;
  Scratch scratch(p, stream);
  TakenWork t;
  cudaError_t err = take_work(p, scratch, stored_tiles, &t);
  if (err != cudaSuccess) return err;
  const Work& w = t.w;
  err = detail::launch_kernel(t.logits_kernel, dim3(static_cast<unsigned>(w.logit_blocks)), dim3(kLogitThreads), 0, stream,
                              detail::programmatic_launch_supported(), p, flags, flagged_count, w, row_logits);
  const cudaError_t freed = scratch.give_back(t.ws);
  return err != cudaSuccess ? err : freed;
}

}  // namespace cuda
}  // namespace flashsample
