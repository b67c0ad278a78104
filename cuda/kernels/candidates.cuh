// A row's one-pass candidates and tile summaries as the kernels after the filtered GEMM read them
// (kernels/filter_epilogue.cuh writes them): the decision (filters.cu) and a vocabulary shard's
// partial state (partial.cu). Blocks of kRowBlockThreads threads, one per row.
#pragma once

#include <stdint.h>

#include "filter_epilogue.cuh"
#include "row_select.cuh"

namespace flashsample {
namespace cuda {
namespace detail {

constexpr int kRowBlockThreads = 512;

// A row's candidates lie in slices, one a CTA of the split kernel, then the spill
// (FilterArgs::cand_val). The decision reads them in one order: slice by slice (the spill last),
// each slice's values (capped at its capacity) in quads. start[c] packs where slice c starts in
// that order, in quads (high word) and in values; slice c lies at slice_at(c).
struct CandidateSlices {
  unsigned long long start[kRowBlockThreads + 1];
  int num;        // slices, the spill included
  int slice_cap;  // values a CTA slice holds
  int spill_at;   // where the spill lies
  int64_t quads;  // quads over all slices
  int64_t n;      // values over all slices
};

// Every thread: the row's slices from their fills (slices < kRowBlockThreads: candidate_slices).
__device__ inline void load_candidate_slices(const FilterArgs& f, int64_t b, CandidateSlices& cs) {
  const int t = threadIdx.x;
  unsigned long long mine = 0ull;
  const uint32_t slice_cap = __ldcg(f.slice_cap);
  if (t <= f.slices) {
    const uint32_t fill = __ldcg(slice_fills(f, b) + t);
    const uint32_t room = t < f.slices ? slice_cap : static_cast<uint32_t>(f.cap - f.spill_at);
    const uint32_t held = fill < room ? fill : room;
    mine = (static_cast<unsigned long long>((held + 3u) >> 2) << 32) | held;
  }
  unsigned long long total;
  const unsigned long long before = block_exclusive_scan(mine, total);
  if (t <= f.slices) cs.start[t] = before;
  if (t == 0) {
    cs.start[f.slices + 1] = total;
    cs.num = f.slices + 1;
    cs.slice_cap = static_cast<int>(slice_cap);
    cs.spill_at = f.spill_at;
    cs.quads = static_cast<int64_t>(total >> 32);
    cs.n = static_cast<int64_t>(total & 0xffffffffu);
  }
  __syncthreads();
}

// Where slice c lies in the row's buffer.
__device__ __forceinline__ int64_t slice_at(const CandidateSlices& cs, int c) {
  return c == cs.num - 1 ? cs.spill_at : static_cast<int64_t>(c) * cs.slice_cap;
}

// The slice that holds position i of the read order (shift 32: in quads; 0: in values).
__device__ __forceinline__ int slice_of(const CandidateSlices& cs, int64_t i, int shift) {
  int lo = 0, hi = cs.num;  // start[lo] <= i < start[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (static_cast<int64_t>(shift ? cs.start[mid] >> 32 : cs.start[mid] & 0xffffffffu) <= i) lo = mid;
    else hi = mid;
  }
  return lo;
}

// The row's statistics from its tile summaries (TileSummary, or RawTileStats with inv_t 1): the max
// and counts first, then the sum of each tile's sum rescaled to the row's max (each thread's tiles
// in order, then a fixed reduction tree: the same sums whatever the schedule).
struct RowSummary {
  float m;
  double z;
  long long valid, posinf;
};

template <class Tile>
__device__ inline RowSummary block_summary(const Tile* ts, int64_t num_vtiles, double inv_t) {
  __shared__ float s_max[32];
  __shared__ long long s_valid[32], s_inf[32];
  float mx = -INFINITY;
  long long valid = 0, inf = 0;
  for (int64_t t = threadIdx.x; t < num_vtiles; t += blockDim.x) {
    mx = fmaxf(mx, ts[t].max_logit);
    valid += ts[t].valid;
    inf += ts[t].posinf;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    valid += __shfl_xor_sync(0xffffffffu, valid, o);
    inf += __shfl_xor_sync(0xffffffffu, inf, o);
  }
  if ((threadIdx.x & 31) == 0) {
    s_max[threadIdx.x >> 5] = mx;
    s_valid[threadIdx.x >> 5] = valid;
    s_inf[threadIdx.x >> 5] = inf;
  }
  __syncthreads();
  RowSummary r{-INFINITY, 0.0, 0, 0};
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) {
    r.m = fmaxf(r.m, s_max[w]);
    r.valid += s_valid[w];
    r.posinf += s_inf[w];
  }
  double z = 0.0;
  if (inv_t != 0.0 && r.m != -INFINITY)
    for (int64_t t = threadIdx.x; t < num_vtiles; t += blockDim.x)
      if (ts[t].max_logit != -INFINITY)
        z += static_cast<double>(ts[t].sum_exp) * exp((static_cast<double>(ts[t].max_logit) - r.m) * inv_t);
  r.z = block_reduce(z, Sum(), 0.0);
  return r;
}

// Quads of candidates a thread loads together in the decision (8192 values a block): their loads are
// in flight at once, so that ~11 K appended values (a top-p row at llama3-8b) take two round trips.
constexpr int kPrefixRounds = 4;

// The candidates' quads [base, base + kPrefixRounds * blockDim.x) of the read order, each thread's
// at threadIdx.x in each round of blockDim.x; NaN past a slice's fill (which no level keeps).
__device__ __forceinline__ void load_prefix_batch(const float* val, const uint32_t* idx, const CandidateSlices& cs,
                                                  int64_t base, float (&x)[kPrefixRounds][4],
                                                  uint32_t (&v)[kPrefixRounds][4]) {
#pragma unroll
  for (int r = 0; r < kPrefixRounds; ++r) {
    const int64_t q = base + static_cast<int64_t>(r) * blockDim.x + threadIdx.x;
    int64_t at = 0, held = 0;
    if (q < cs.quads) {
      const int c = slice_of(cs, q, 32);
      const int64_t off = 4 * (q - static_cast<int64_t>(cs.start[c] >> 32));
      at = slice_at(cs, c) + off;
      held = static_cast<int64_t>((cs.start[c + 1] & 0xffffffffu) - (cs.start[c] & 0xffffffffu)) - off;
    }
    if (held >= 4) {  // slices start 16-byte aligned
      const float4 qv = *reinterpret_cast<const float4*>(val + at);
      const uint4 w = *reinterpret_cast<const uint4*>(idx + at);
      x[r][0] = qv.x, x[r][1] = qv.y, x[r][2] = qv.z, x[r][3] = qv.w;
      v[r][0] = w.x, v[r][1] = w.y, v[r][2] = w.z, v[r][3] = w.w;
    } else {
#pragma unroll
      for (int o = 0; o < 4; ++o) {
        x[r][o] = o < held ? val[at + o] : __int_as_float(0x7fffffff);
        v[r][o] = o < held ? idx[at + o] : 0u;
      }
    }
  }
}

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
