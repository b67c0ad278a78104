// The filtered epilogue's pieces (top-k, top-p, min-p, softcap, masks, logprobs, topLogprobs in the
// GEMM's one pass over W), shared by the kernel that gathers them (ws_split.cuh) and the kernel that
// decides each row from them (filters.cu).
//
// Per (row, vocabulary tile of 128) the epilogue writes a TileSummary: the tile's max and sum of
// exp((l - max) / T) (merged by the finalize in tile order, so the row's log-sum-exp does not depend
// on scheduling), its counts, and its best surviving Gumbel candidate with its logit (the logprob of
// an unfiltered draw). Per row it appends every value at or above a running threshold θ to a
// candidate buffer. θ is a heuristic (the k-th largest the grid has seen, a mass bound for top-p,
// the running max plus T ln(minP) for min-p): exactness never rests on it. Every value v with
// v >= theta_used (the largest θ any warp used for the row) and above max_dropped (the largest value
// a full buffer dropped) was appended and kept, so those candidates are a complete prefix of the
// row's order; the finalize decides the row from that prefix or sends it to the extra pass.
#pragma once

#include <stdint.h>

#include "common.cuh"

namespace flashsample {
namespace cuda {
namespace detail {

struct TileSummary {
  float max_logit;     // largest finite value of the tile (-Inf when none)
  float sum_exp;       // sum of exp((l - max_logit) / T) over the finite values (0 for greedy rows)
  uint32_t valid;      // values that can be drawn (finite or +Inf)
  uint32_t posinf;     // +Inf values
  uint32_t best_key;   // the tile's best Gumbel candidate that beat the running threshold, or kNoToken
  float best_logit;    // its value
};

// The candidate values' histogram: fixed buckets of a quarter logit over [-64, 64), clamped at both
// ends. The lower edge of a bucket whose count from the top reaches k is a lower bound of the k-th
// largest candidate (values outside the range only make that bound weaker).
constexpr int kHistBuckets = 512;
__device__ __forceinline__ int hist_bucket(float x) {
  const float b = floorf(x * 4.0f) + 256.0f;
  return b <= 0.0f ? 0 : b >= 511.0f ? 511 : static_cast<int>(b);
}
__device__ __forceinline__ float hist_lower_edge(int bucket) {
  return bucket == 0 ? -INFINITY : static_cast<float>(bucket - 256) * 0.25f;
}

// Order-preserving 32-bit encoding of a float (0 encodes nothing: below every float).
__device__ __forceinline__ uint32_t ordered_bits(float x) {
  const uint32_t b = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float from_ordered_bits(uint32_t o) {
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

// Device pointers of one filtered call (filters.cu allocates and zeroes them).
struct FilterArgs {
  TileSummary* tiles;      // [batch, num_vtiles]
  int64_t num_vtiles;      // ceil(vocab / 128)
  float* cand_val;         // [batch, cap]
  uint32_t* cand_idx;      // [batch, cap]
  uint32_t* cand_count;    // [batch]: appends attempted (may exceed cap)
  uint32_t* hist;          // [batch, kHistBuckets]: appended values per bucket
  uint32_t* top_bucket;    // [batch]: 1 + the highest bucket with an appended value (0: none)
  uint32_t* theta_used;    // [batch]: ordered_bits of the largest θ used
  uint32_t* max_dropped;   // [batch]: ordered_bits of the largest value a full buffer dropped
  int32_t cap;             // candidate buffer entries per row
  const int32_t* top_k;    // [batch] or nullptr (SampleParams)
  const float* top_p;
  const float* min_p;
  const uint32_t* allowed; // [batch, allowed_words] or nullptr
  int64_t allowed_words;
  float softcap;
  int32_t top_logprobs;
};

// Which threshold a row's candidates need. kNone: the row needs no candidates (no filter, no
// topLogprobs, or greedy: the winner decides it).
enum ThetaMode : int32_t { kThetaNone = 0, kThetaTopK = 1, kThetaTopP = 2, kThetaMinP = 3 };

struct FilterRow {
  int32_t mode;
  int32_t k;          // the rank whose value bounds the kept set (kThetaTopK), or the candidates a
                      // top-p row gathers beyond its mass bound (kThetaTopP)
  float param;        // kThetaTopP: top_p; kThetaMinP: ln(min_p)
};

// A top-p row keeps gathering the largest values up to this rank: its nucleus is decided from the
// candidates when it lies within them, like a top-k of this size (the extra pass otherwise).
constexpr int32_t kTopPRank = 2048;
// A top-p row's first tile in a CTA appends its 32 largest values (a heuristic like every θ: a
// nucleus with more than 32 tokens in one tile of 128 sends the row to the extra pass, still exact).
constexpr int kTopPFirstRank = 32;

// The threshold mode of row b: top-k (or topLogprobs alone) by rank, else top-p by mass, else min-p.
// A top-k above the buffer's reach gets no rank bound: its rows end in the extra pass.
__device__ __forceinline__ FilterRow filter_row(const FilterArgs& f, int64_t b, bool greedy) {
  FilterRow r{kThetaNone, 0, 0.0f};
  if (greedy) return r;
  const int32_t k = f.top_k ? f.top_k[b] : 0;
  const float p = f.top_p ? f.top_p[b] : 1.0f;
  const float m = f.min_p ? f.min_p[b] : 0.0f;
  if (k > 0) {
    r.mode = kThetaTopK;
    r.k = k;
  } else if (p < 1.0f) {
    r.mode = kThetaTopP;
    r.k = kTopPRank;
    r.param = p;
  } else if (m > 0.0f) {
    r.mode = kThetaMinP;
    r.param = logf(m) - 1e-3f;  // a hair below the cutoff: the CTA that holds the row's max must
                                // not put the complete prefix's level exactly on it
  } else if (f.top_logprobs > 0) {
    r.mode = kThetaTopK;
    r.k = f.top_logprobs;
  }
  return r;
}

// The k-th largest of the warp's 128 values (NaN: none), as a value lower bound: the largest key
// prefix (20 bits: sign, exponent, 11 mantissa bits) that at least k values reach. -Inf when fewer
// than k values are valid.
__device__ __forceinline__ float warp_kth_largest(const float (&x)[4], int k) {
  uint32_t key[4];
#pragma unroll
  for (int o = 0; o < 4; ++o) key[o] = x[o] == x[o] ? ordered_bits(x[o]) : 0u;
  uint32_t res = 0u;
#pragma unroll 1
  for (int bit = 31; bit >= 12; --bit) {
    const uint32_t cand = res | (1u << bit);
    uint32_t n = 0;
#pragma unroll
    for (int o = 0; o < 4; ++o) n += key[o] >= cand ? 1u : 0u;
    if (__reduce_add_sync(0xffffffffu, n) >= static_cast<uint32_t>(k)) res = cand;
  }
  return res == 0u ? -INFINITY : from_ordered_bits(res);
}

// The histogram bound for rank k: the lower edge of the highest bucket at which the appended
// values counted from the top reach k; `floor` when they do not (or when it is not higher).
// Scans down from the highest non-empty bucket, 32 buckets a step, never below floor's bucket.
__device__ __forceinline__ float hist_rank_bound(const FilterArgs& f, int64_t b, int k, float floor) {
  const int lane = threadIdx.x & 31;
  const uint32_t* h = f.hist + b * kHistBuckets;
  int top = static_cast<int>(*reinterpret_cast<volatile const uint32_t*>(f.top_bucket + b)) - 1;
  const int stop = floor == -INFINITY ? 0 : hist_bucket(floor);
  uint32_t above = 0;
  for (; top >= stop; top -= 32) {
    const int bucket = top - lane;
    uint32_t c = bucket >= stop ? *reinterpret_cast<volatile const uint32_t*>(h + bucket) : 0u;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {  // inclusive prefix from the top bucket down
      const uint32_t y = __shfl_up_sync(0xffffffffu, c, o);
      if (lane >= o) c += y;
    }
    const unsigned reached = __ballot_sync(0xffffffffu, above + c >= static_cast<uint32_t>(k));
    if (reached != 0u) {
      const int at = top - (__ffs(reached) - 1);
      const float edge = hist_lower_edge(at);
      return edge > floor ? edge : floor;
    }
    above += __shfl_sync(0xffffffffu, c, 31);
  }
  return floor;
}

// One column's share of a tile in the filtered epilogue (row b, vocabulary tile vtile), by the warp
// that owns the column: lane holds the values x[0..3] of vocabulary vq .. vq + 3 (NaN: cannot be
// drawn) and (bs, bk), its best Gumbel candidate that beat the running threshold. Writes the tile
// summary, updates this CTA's running max / sum of the row (run_m, run_z) and its threshold
// (run_theta), and appends the values at or above the threshold to the row's candidates.
__device__ __forceinline__ void filtered_column(const FilterArgs& f, int64_t b, int64_t vtile, int64_t vq, int64_t V,
                                                const float (&x)[4], float inv_t, float bs, uint32_t bk,
                                                const FilterRow& fr, float shared_theta, float& run_m,
                                                float& run_z, float& run_theta) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  const bool greedy = inv_t == 0.0f;
  uint32_t nvalid = 0, ninf = 0;
  float mx = -INFINITY;
#pragma unroll
  for (int o = 0; o < 4; ++o)
    if (x[o] == x[o]) {
      ++nvalid;
      if (x[o] == INFINITY) ++ninf;
      else mx = fmaxf(mx, x[o]);
    }
  nvalid = __reduce_add_sync(kAll, nvalid);
  ninf = __reduce_add_sync(kAll, ninf);
  const float tmax = from_ordered_bits(__reduce_max_sync(kAll, ordered_bits(mx)));
  float sum = 0.0f;
  if (!greedy && tmax != -INFINITY) {
#pragma unroll
    for (int o = 0; o < 4; ++o)
      if (x[o] == x[o] && x[o] != INFINITY) sum += expf((x[o] - tmax) * inv_t);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(kAll, sum, o);  // fixed tree: deterministic

  // the tile's best surviving candidate and its logit
  float bl = 0.0f;
  if (bk != kNoToken) {
    const int o = static_cast<int>(static_cast<int64_t>(bk & 0x7fffffffu) - vq);
    bl = o == 0 ? x[0] : o == 1 ? x[1] : o == 2 ? x[2] : x[3];
  }
  if (__any_sync(kAll, bk != kNoToken)) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float qs = __shfl_xor_sync(kAll, bs, o);
      const uint32_t qk = __shfl_xor_sync(kAll, bk, o);
      const float ql = __shfl_xor_sync(kAll, bl, o);
      if (candidate_better(qs, qk, bs, bk)) {
        bs = qs;
        bk = qk;
        bl = ql;
      }
    }
  }
  if (lane == 0) {
    TileSummary t;
    t.max_logit = tmax;
    t.sum_exp = sum;
    t.valid = nvalid;
    t.posinf = ninf;
    t.best_key = bk;
    t.best_logit = bl;
    f.tiles[b * f.num_vtiles + vtile] = t;
  }
  if (fr.mode == kThetaNone) return;

  // this CTA's running statistics of the row, then the threshold (every lane computes the same
  // values; lane 0 stores them between two __syncwarps: after every lane's reads, before the
  // column's next tile)
  float m = run_m, z = run_z;
  if (tmax != -INFINITY) {
    if (tmax > m) {
      z = z * expf((m - tmax) * inv_t) + sum;
      m = tmax;
    } else {
      z += sum * expf((tmax - m) * inv_t);
    }
  }
  // the grid's largest θ so far (prefetched at the item's start) lifts this CTA's own
  float theta = fmaxf(run_theta, shared_theta);
  const float theta_before = theta;
  if (tmax >= theta) {  // only a tile that can append refreshes the bound (global loads)
    if (m != -INFINITY && fr.mode != kThetaTopK) {
      // top-p: every value below m + T ln((1 - p) Z_seen / V) has less than (1 - p) Z / V of the
      // mass, so all of them together stay in the tail the nucleus leaves out. min-p: m + T ln(minP).
      const float bound = fr.mode == kThetaTopP ? m + (logf((1.0f - fr.param) * z) - logf(static_cast<float>(V))) / inv_t
                                                : m + fr.param / inv_t;
      theta = fmaxf(theta, bound);
    }
    // the tile's own k-th largest only before any bound exists (later it is far below θ). A top-p
    // row takes its tile's kTopPFirstRank-th: otherwise its first wave appends whole tiles
    if (theta_before == -INFINITY) {
      const int k = fr.mode == kThetaTopK ? fr.k : fr.mode == kThetaTopP ? kTopPFirstRank : 0;
      if (k > 0 && k <= 128 && nvalid >= static_cast<uint32_t>(k)) theta = fmaxf(theta, warp_kth_largest(x, k));
    }
    // the histogram bound (dependent global loads, one per 32 buckets scanned): for a top-k, any
    // tile that would append, so θ keeps rising with the grid's appends after the first wave; for
    // top-p (rank 2048: a longer scan) only a tile that would append many
    uint32_t n = 0;
#pragma unroll
    for (int o = 0; o < 4; ++o) n += x[o] == x[o] && x[o] != INFINITY && x[o] >= theta ? 1u : 0u;
    const uint32_t refresh_above = fr.mode == kThetaTopK ? 0u : 16u;
    if (fr.mode != kThetaMinP && __reduce_add_sync(kAll, n) > refresh_above) theta = hist_rank_bound(f, b, fr.k, theta);
  }
  __syncwarp();  // every lane has read run_m / run_z / run_theta before lane 0 overwrites them
  if (lane == 0) {
    if (theta > theta_before) atomicMax(f.theta_used + b, ordered_bits(theta));
    run_m = m;
    run_z = z;
    run_theta = theta;
  }
  __syncwarp();

  // appends: a warp-aggregated slot range, then each value at its slot (or dropped when full)
  uint32_t want = 0u;
#pragma unroll
  for (int o = 0; o < 4; ++o)
    if (x[o] == x[o] && x[o] != INFINITY && x[o] >= theta) want |= 1u << o;
  const uint32_t mine = __popc(want);
  uint32_t incl = mine;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t y = __shfl_up_sync(kAll, incl, o);
    if (lane >= o) incl += y;
  }
  const uint32_t total = __shfl_sync(kAll, incl, 31);
  if (total == 0u) return;
  uint32_t base = 0u;
  if (lane == 0) base = atomicAdd(f.cand_count + b, total);
  base = __shfl_sync(kAll, base, 0);
  uint32_t at = base + incl - mine;
  uint32_t dropped = 0u;
  int top = -1;
  const uint32_t cap = static_cast<uint32_t>(f.cap);
#pragma unroll
  for (int o = 0; o < 4; ++o)
    if ((want >> o) & 1u) {
      if (at < cap) {
        f.cand_val[b * cap + at] = x[o];
        f.cand_idx[b * cap + at] = static_cast<uint32_t>(vq + o);
        if (fr.mode != kThetaMinP) {  // the rank bounds' histogram
          const int bucket = hist_bucket(x[o]);
          atomicAdd(f.hist + b * kHistBuckets + bucket, 1u);
          top = bucket > top ? bucket : top;
        }
      } else {
        const uint32_t ob = ordered_bits(x[o]);
        dropped = ob > dropped ? ob : dropped;
      }
      ++at;
    }
  const uint32_t top_all = __reduce_max_sync(kAll, static_cast<uint32_t>(top + 1));
  const uint32_t dropped_all = __reduce_max_sync(kAll, dropped);
  if (lane == 0) {
    if (top_all != 0u) atomicMax(f.top_bucket + b, top_all);
    if (dropped_all != 0u) atomicMax(f.max_dropped + b, dropped_all);
  }
}

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
