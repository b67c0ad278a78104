// The filtered epilogue's pieces (top-k, top-p, min-p, softcap, masks, logprobs, topLogprobs in the
// GEMM's one pass over W), shared by the kernel that gathers them (ws_split.cuh) and the kernel that
// decides each row from them (filters.cu).
//
// Per (row, vocabulary tile of 128) the epilogue writes a TileSummary: the tile's max and sum of
// exp((l - max) / T) (merged by the finalize in tile order, so the row's log-sum-exp does not depend
// on scheduling), its counts, and its best surviving Gumbel candidate with its logit (the logprob of
// an unfiltered draw). Per row it appends every value at or above a running threshold θ to a
// candidate buffer, in the CTA's own slice of it (no atomic on the append's path). θ is a
// heuristic (the k-th largest the grid has seen, a mass bound for top-p, the running max plus
// T ln(minP) for min-p): exactness never rests on it. Every value v with v >= theta_used (the
// largest θ any warp used for the row) and above max_dropped (the largest value dropped when a
// slice and the spill were full) was appended and kept, so those candidates are a complete prefix
// of the row's order; the finalize decides the row from that prefix or sends it to the extra pass.
#pragma once

#include <stdint.h>

#include "common.cuh"
#include "listed.cuh"

namespace flashsample {
namespace cuda {
namespace detail {

struct alignas(8) TileSummary {
  float max_logit;     // largest finite value of the tile (-Inf when none)
  float sum_exp;       // sum of exp((l - max_logit) / T) over the finite values (0 for greedy rows
                       // and rows that need no mass: FilterRow::mass)
  uint32_t valid;      // values that can be drawn (finite or +Inf)
  uint32_t posinf;     // +Inf values
  uint32_t best_key;   // the tile's best Gumbel candidate that beat the running threshold, or kNoToken
                       // (a row the decision draws offers only its +Inf values)
  float best_logit;    // its value
};

// logprobsMode 'raw' (filters.cu's raw_tiles_path): per (row, vocabulary tile of 128) the raw
// distribution's statistics (softcapped logits, bias included, before the listed tokens' steps and
// the mask), merged in tile order as the TileSummary's are (candidates.cuh's block_summary, at
// T = 1), so that no statistic is read back from stored rows. The TileSummary's names.
struct alignas(16) RawTileStats {
  float max_logit;  // largest finite value (-Inf when none)
  float sum_exp;    // sum of exp(x - max_logit) over the finite values (0 when the tile holds a +Inf)
  uint32_t valid;   // finite or +Inf values
  uint32_t posinf;  // +Inf values
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
  float* cand_val;         // [batch, cap]: slice c (a CTA's appends, cta_slice) at c * slice_cap, then
                           // from spill_at the spill (what overflows any CTA's slice)
  uint32_t* cand_idx;      // [batch, cap]
  uint32_t* cand_count;    // [batch, slices + 1]: appends each slice's CTA attempted (may exceed
                           // slice_cap), then the spill's (an atomic counter; may exceed its room)
  uint32_t* hist;          // [batch, kHistBuckets]: appended values per bucket
  uint32_t* top_bucket;    // [batch]: 1 + the highest bucket with an appended value (0: none)
  uint32_t* theta_used;    // [batch]: ordered_bits of the largest θ used
  uint32_t* max_dropped;   // [batch]: ordered_bits of the largest value a full slice and spill dropped
  int32_t cap;             // candidate buffer entries per row
  int32_t slices;          // CTA slices a row at most (>= the split kernel's grid: a CTA per SM)
  int32_t spill_at;        // where the spill starts (the slices share the entries before it)
  uint32_t* slice_cap;     // [1], zeroed: the slices' size, published by the split kernel (cta_slice)
  const int32_t* top_k;    // [batch] or nullptr (SampleParams)
  const float* top_p;
  const float* min_p;
  const uint32_t* allowed; // [batch, allowed_words] or nullptr
  int64_t allowed_words;   // also the row stride of `listed`
  const uint2* listed;     // [batch, allowed_words] marks of the listed tokens, or nullptr
  const ListedEntry* listed_table;  // their steps 2a-2d (listed.cuh), or a deferred_listed_table
  float softcap;
  int32_t top_logprobs;
  int32_t logprobs;        // the sampled tokens' logprobs are written (SampleParams::logprobs set)
  float* row_logits;       // [batch, vocab]: the raw logits of the rows that store them
                           // (row_stores_logits), for the extra pass; nullptr when none may fall back
  int32_t store_all;       // every row stores them (logprobsMode 'raw': the raw log-probabilities)
  uint8_t* stored_tiles;   // [batch, num_vtiles], zeroed: 1 where a row that stores only some tiles
                           // (not store_all) stored that tile's logits; the extra pass recomputes the rest
  int32_t min_p_first;     // SampleParams::filter_order is vLLM's (FilterOrder::kMinPFirst)
  int32_t shard;           // a vocabulary shard's call (partial.cu): every row's summaries and winner
  RawTileStats* raw_tiles; // [batch, num_vtiles], or nullptr: the raw distribution's tile statistics
};

// Row b's raw statistics of one tile (FilterArgs::raw_tiles), from each lane's quad of softcapped
// raw logits (bit o of in_vocab: vq + o < V); every lane of the warp calls it, lane 0 stores when
// `live`. Out of line, so the trips keep their registers. The fp32 sum of 128 exponentials (exp2
// of a prescaled difference, a fixed tree) is within ~1e-6 of float64, as the tile summaries are.
static __device__ __noinline__ void raw_tile_stats(RawTileStats* out, float4 q, uint32_t in_vocab, bool live) {
  constexpr unsigned kAll = 0xffffffffu;
  const float x[4] = {q.x, q.y, q.z, q.w};
  float mx = -INFINITY;
  uint32_t counts = 0u;  // +Inf values << 16 | finite values (each at most 128)
#pragma unroll
  for (int o = 0; o < 4; ++o) {
    if (((in_vocab >> o) & 1u) == 0u) continue;
    if (x[o] == INFINITY) {
      counts += 0x10000u;
    } else if (x[o] > -INFINITY) {  // (NaN: neither)
      counts += 1u;
      mx = fmaxf(mx, x[o]);
    }
  }
  const float m = from_ordered_bits(__reduce_max_sync(kAll, ordered_bits(mx)));
  counts = __reduce_add_sync(kAll, counts);
  float sum = 0.0f;
  if (m != -INFINITY && (counts >> 16) == 0u) {  // warp-uniform
    float e[4];
#pragma unroll
    for (int o = 0; o < 4; ++o)
      e[o] = ((in_vocab >> o) & 1u) != 0u && x[o] > -INFINITY ? exp2_ftz((x[o] - m) * kLog2e) : 0.0f;
    sum = ((e[0] + e[1]) + e[2]) + e[3];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(kAll, sum, o);  // fixed tree: deterministic
  }
  if ((threadIdx.x & 31) == 0 && live) *out = RawTileStats{m, sum, (counts >> 16) + (counts & 0xffffu), counts >> 16};
}

// Which threshold a row's candidates need. kNone: the row needs no candidates (no filter, no
// topLogprobs, or greedy: the winner decides it).
enum ThetaMode : int32_t { kThetaNone = 0, kThetaTopK = 1, kThetaTopP = 2, kThetaMinP = 3 };

struct FilterRow {
  int32_t mode;
  int32_t k;          // the rank whose value bounds the kept set (kThetaTopK), or the candidates a
                      // top-p row gathers beyond its mass bound (kThetaTopP)
  float param;        // kThetaTopP: top_p; kThetaMinP: ln(min_p)
  // A row with top-k, top-p or min-p is drawn by the decision, over its kept prefix: the epilogue
  // offers it only its +Inf values (they take no filter, so their winner is the token).
  int32_t drawn_by_decision;
  // The decision reads the row's tile summaries (row_needs_stats); otherwise the winner alone is the
  // token and the epilogue writes no summaries for the row.
  int32_t stats;
  // The summaries carry the tile's sum of exponentials: the decision needs the row's whole mass only
  // for top-p (its target) and for logprobs over an unfiltered row; top-k and min-p rows take their
  // kept masses from the prefix.
  int32_t mass;
  // The epilogue may store the row's raw logits (row_stores_logits): the extra pass then reads them
  // instead of reading W again. 0: it does not; else it stores a tile while the row looks wide by
  // this gap (row_looks_wide).
  float dense_gap;
};

// Whether the decision needs a row's tile summaries: filters, logprobs or topLogprobs (a greedy row
// too: +Inf values change its logprob and send its topLogprobs to the extra pass). The epilogue
// (filter_row) and the decision (decide_one_pass_kernel) both ask this, from the same inputs.
__device__ __forceinline__ bool row_needs_stats(int32_t top_k, float top_p, float min_p, bool logprobs,
                                                int32_t top_logprobs) {
  return top_k > 0 || top_p < 1.0f || min_p > 0.0f || logprobs || top_logprobs > 0;
}

// Whether the epilogue gathers candidates for a row (filter_row gives it a θ mode) and the decision
// reads them: a sampled row with a filter or topLogprobs.
__device__ __forceinline__ bool row_gathers_candidates(int32_t top_k, float top_p, float min_p,
                                                       int32_t top_logprobs, bool greedy) {
  return !greedy && (top_k > 0 || top_p < 1.0f || min_p > 0.0f || top_logprobs > 0);
}

// A top-p row keeps gathering the largest values up to this rank: its nucleus is decided from the
// candidates when it lies within them, like a top-k of this size (the extra pass otherwise).
constexpr int32_t kTopPRank = 2048;

// Rows whose raw logits the filtered epilogue may store for the extra pass: the top-p rows without a
// top-k inside the gathered rank, whose nucleus can reach past the candidates (a flat row's, at the
// model cards' top-p): one 512-byte store a tile instead of a second read of W when they do.
__device__ __forceinline__ bool row_stores_logits(int32_t top_k, float top_p, bool greedy) {
  return !greedy && top_p < 1.0f && (top_k <= 0 || top_k > kTopPRank);
}

// A top-p row whose nucleus outgrows the candidates (a flat row's) is decided without the extra
// pass when one of its few best Gumbel candidates lies in the nucleus: the argmax over the nucleus
// is its first candidate in score order. With every tile stored, the decision kernel's check blocks
// (filters.cu) draw those candidates over the stored values and weigh the values above each one
// against p of the row's mass. The call decides on the host whether its drawn values are the
// stored ones (no softcap, mask or listed token), one sample, no logprobs (they need the nucleus's
// mass): filters.cu's runs_winner_check. The row checks when it has top-p alone (no top-k or min-p
// to intersect).
__device__ __forceinline__ bool row_checks_winner(int32_t top_k, float top_p, float min_p, bool greedy) {
  return row_stores_logits(top_k, top_p, greedy) && top_k <= 0 && min_p <= 0.0f;
}

// Such a row stores a tile on a CTA's first item of its batch chunk, and later only while it looks
// wide: the grid's top histogram bucket (its upper edge) less than kWideGap temperatures above the
// grid's θ. Past the first wave θ is near the rank-2048 value, and a Gaussian bulk of std s·T puts
// it ~2.3 s below the max: rows with s below ~3.5, whose nucleus at top-p 0.9 outgrows rank 2048,
// read as wide; rows with hot tokens or a wider spread do not, and skip the stores they would
// almost never read back. A heuristic: stored_tiles says what was stored, the extra pass computes
// the rest from W.
//
// A row in vLLM's order with min-p looks wide also while its min-p survivors reach below θ (the
// top edge less than -ln(min_p) temperatures above it), with a margin for the θ the decision ends
// with, above the one seen at the item's start: they are not all among the candidates, so the
// decision cannot count them and the row goes to the extra pass (model-like rows, top-p 0.95 +
// min-p 1e-6, B = 64: +181 % over plain without the margin, +65 % with 2). A top-k above an eighth of
// the candidates' capacity stores every tile: the CTA slices (~190 candidates each at 132 CTAs)
// fill before the grid's appends bound θ, so they drop values above its k-th and its rows go to
// the extra pass (every row at top-k 8000 and 30000, V = 128256, Gaussian; top-k 4000 is decided).
constexpr float kWideGap = 8.0f;
constexpr float kWideMinPMargin = 2.0f;
__device__ __forceinline__ float wide_gap(int32_t top_k, int32_t cap, bool min_p_first, float min_p) {
  if (top_k > cap / 8) return INFINITY;
  return min_p_first && min_p > 0.0f ? fmaxf(kWideGap, -logf(min_p) + kWideMinPMargin) : kWideGap;
}
__device__ __forceinline__ bool row_looks_wide(uint32_t theta_bits, uint32_t top, float inv_t, float wide) {
  if (wide == INFINITY) return true;
  if (theta_bits == 0u || top == 0u) return false;  // nothing appended yet
  const float gap = hist_lower_edge(static_cast<int>(top) - 1) + 0.25f - from_ordered_bits(theta_bits);
  return gap * inv_t < wide;
}
// A top-p row's first tile in a CTA appends at least its 16 largest values (a heuristic like every
// θ: a nucleus with more than 16 tokens in one tile of 128 may send the row to the extra pass;
// a tile holds ~2 of a 2048-token prefix; top-p 0.9 at B = 64: +28 % at 16, +30 % at 32).
constexpr int kTopPFirstRank = 16;
// A top-k row (k <= 128) the same, up to its k: a row with more than 16 of its top k in one CTA's
// first tile may take the extra pass, still exact. Top-k 50 at B = 128 / 256 -4 / -3 points against
// its 50th, the Gemma 3 default (top-k 64) -6 to -12 on small heads (H100, 2026-12-06).
constexpr int kTopKFirstRank = 16;

// The threshold mode of row b: top-k (or topLogprobs alone) by rank, else top-p by mass, else min-p.
// A top-k above the buffer's reach gets no rank bound: its rows end in the extra pass.
__device__ __forceinline__ FilterRow filter_row(const FilterArgs& f, int64_t b, bool greedy) {
  FilterRow r{kThetaNone, 0, 0.0f, 0, 0, 0, 0.0f};
  const int32_t k = f.top_k ? f.top_k[b] : 0;
  const float p = f.top_p ? f.top_p[b] : 1.0f;
  const float m = f.min_p ? f.min_p[b] : 0.0f;
  // A shard's partial state (partial.h) carries every row's counts, sum and winner, whatever its
  // options: the merge decides against the whole vocabulary's.
  r.stats = f.shard || row_needs_stats(k, p, m, f.logprobs != 0, f.top_logprobs);
  r.dense_gap = f.row_logits != nullptr && (f.store_all || row_stores_logits(k, p, greedy))
                    ? wide_gap(k, f.cap, f.min_p_first != 0, m)
                    : 0.0f;
  if (greedy) return r;  // (no masses)
  r.mass = f.shard || p < 1.0f || (k <= 0 && m <= 0.0f && (f.logprobs != 0 || f.top_logprobs > 0));
  // (a shard's filtered rows too: the merge draws them from their keys, SEMANTICS §6)
  r.drawn_by_decision = k > 0 || p < 1.0f || m > 0.0f;
  if (!row_gathers_candidates(k, p, m, f.top_logprobs, greedy)) return r;
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
  } else {  // topLogprobs alone
    r.mode = kThetaTopK;
    r.k = f.top_logprobs;
  }
  return r;
}

// The histogram bound for rank k: the lower edge of the highest bucket at which the appended
// values counted from the top reach k; `floor` when they do not (or when it is not higher). Counts
// down from bucket `top` (the row's highest non-empty bucket as prefetched at the item's start: a
// stale one only counts fewer values, a lower bound), 128 buckets per dependent load (a 16-byte
// load of 4 buckets per lane), never below floor's bucket.
__device__ __forceinline__ float hist_rank_bound(const FilterArgs& f, int64_t b, int k, float floor, int top) {
  const int lane = threadIdx.x & 31;
  const uint32_t* h = f.hist + b * kHistBuckets;
  const int stop = floor == -INFINITY ? 0 : hist_bucket(floor);
  uint32_t above = 0;
  for (int quad = top >> 2; 4 * quad + 3 >= stop; quad -= 32) {
    const int q = quad - lane;  // this lane's buckets 4q .. 4q + 3
    uint4 c = make_uint4(0u, 0u, 0u, 0u);
    if (q >= 0 && 4 * q + 3 >= stop) c = __ldcg(reinterpret_cast<const uint4*>(h + 4 * q));  // L2: the grid's appends
    if (4 * q + 0 < stop) c.x = 0u;
    if (4 * q + 1 < stop) c.y = 0u;
    if (4 * q + 2 < stop) c.z = 0u;
    const uint32_t mine = c.x + c.y + c.z + c.w;
    uint32_t incl = mine;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {  // inclusive prefix from the top quad down
      const uint32_t y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    const unsigned reached = __ballot_sync(0xffffffffu, above + incl >= static_cast<uint32_t>(k));
    if (reached != 0u) {
      const int src = __ffs(reached) - 1;
      int at = 0;
      if (lane == src) {  // the bucket of this quad at which the count from the top reaches k
        uint32_t n = above + incl - mine + c.w;
        at = n >= static_cast<uint32_t>(k) ? 4 * q + 3 : (n += c.z) >= static_cast<uint32_t>(k) ? 4 * q + 2
             : (n += c.y) >= static_cast<uint32_t>(k)                                  ? 4 * q + 1
                                                                                        : 4 * q;
      }
      at = __shfl_sync(0xffffffffu, at, src);
      const float edge = hist_lower_edge(at);
      return edge > floor ? edge : floor;
    }
    above += __shfl_sync(0xffffffffu, incl, 31);
  }
  return floor;
}

// The per-column state of the filtered epilogue, in the filtered kernel's static shared memory
// (beside the column's FilterRow): this CTA's running max and sum of the row and its threshold. The
// column's warp alone reads and writes it between parameter reloads.
struct alignas(16) ColumnState {
  float m, z, theta;
  uint32_t count;  // the row's appends by this CTA so far (its slice's fill, may exceed slice_cap)
};

// Row b's slice fills (cand_count): a word a CTA slice, then the spill's counter.
__device__ __forceinline__ uint32_t* slice_fills(const FilterArgs& f, int64_t b) {
  return f.cand_count + b * (f.slices + 1);
}

// A CTA's slice of its rows' candidates. A row is served by the CTAs of its batch chunk: every
// num_chunks-th CTA when the grid divides evenly (each CTA then stays on one chunk), else by all;
// those share the entries before spill_at (a multiple of 4 each).
struct CtaSlice {
  int32_t index;
  uint32_t cap;  // 0: no slice (a grid wider than the slices, which the launch never makes)
};
__device__ __forceinline__ CtaSlice cta_slice(const FilterArgs& f, int64_t num_chunks) {
  const bool even = gridDim.x % num_chunks == 0;
  const int64_t per_row = even ? gridDim.x / num_chunks : gridDim.x;
  CtaSlice c;
  c.index = static_cast<int32_t>(even ? blockIdx.x / num_chunks : blockIdx.x);
  c.cap = per_row <= f.slices ? static_cast<uint32_t>(f.spill_at / per_row) & ~3u : 0u;
  return c;
}

// A lower bound of the k[jj]-th largest of the warp's 128 values of each column with active[jj]
// (warp-uniform; NaN: none; k <= 32): the k-th largest of the lanes' maxima (k lanes hold a value at
// or above it), to 16 key bits (sign, exponent, 7 mantissa bits), one ballot a bit; -Inf when fewer
// than k lanes hold a valid value, or for an inactive column. Against the tile's own k-th (a
// bisection of four compares and a warp sum a bit, 20 bits): ~20 first-wave appends a tile instead of
// 16, top-k 50 at B = 128 -13 to -15 points on qwen3-0.6b, -2 on llama3-8b (H100, 2026-12-06).
template <int K>
__device__ __forceinline__ void warp_kth_largest_columns(const float (&x)[K][4], const int (&k)[K],
                                                         const bool (&active)[K], float (&out)[K]) {
  uint32_t lane_key[K], res[K];
#pragma unroll
  for (int jj = 0; jj < K; ++jj) {
    res[jj] = 0u;
    const float mx = fmaxf(fmaxf(x[jj][0], x[jj][1]), fmaxf(x[jj][2], x[jj][3]));  // (NaN only if all are)
    lane_key[jj] = mx == mx ? ordered_bits(mx) : 0u;
  }
#pragma unroll 1
  for (int bit = 31; bit >= 16; --bit) {
#pragma unroll
    for (int jj = 0; jj < K; ++jj) {
      const uint32_t cand = res[jj] | (1u << bit);
      if (__popc(__ballot_sync(0xffffffffu, lane_key[jj] >= cand)) >= k[jj]) res[jj] = cand;
    }
  }
#pragma unroll
  for (int jj = 0; jj < K; ++jj) out[jj] = !active[jj] || res[jj] == 0u ? -INFINITY : from_ordered_bits(res[jj]);
}

// One trip's K columns of a tile in the filtered epilogue (rows b[jj] of vocabulary tile vtile), by
// the warp that owns them; live[jj] (warp-uniform): the row exists. Lane holds the values x[jj][0..3]
// of vocabulary vq .. vq + 3 (NaN: cannot be drawn) and (bs, bk), its best Gumbel candidate that
// beat the running threshold. Writes the tile summaries, updates this CTA's running max / sum of
// each row and its threshold (state[jj]), and appends the values at or above the threshold to the
// row's candidates. The columns go through each step together, so that their dependent chains of
// warp reductions overlap; a tile that cannot append (its max below the threshold: most tiles
// after the first waves) ends after the summaries and the statistics. kGathers false: no row of
// the call has a threshold mode (no top-k, top-p, min-p or topLogprobs), so only the summaries.
// kTopP false: no row of the call is a top-p row (no top-p pointer), so no mass bound.
template <int K, bool kGathers, bool kTopP>
__device__ __forceinline__ void filtered_columns(const FilterArgs& f, const int64_t (&b)[K], const bool (&live)[K],
                                                 int64_t vtile, int64_t vq, int64_t base, int64_t V,
                                                 const float (&x)[K][4],
                                                 const float (&inv_t)[K], const float (&bs_lane)[K],
                                                 const uint32_t (&bk_lane)[K], const FilterRow (&fr)[K],
                                                 const float (&shared_theta)[K], const int (&shared_top)[K],
                                                 CtaSlice cs, ColumnState* const (&state)[K]) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x & 31;

  // the tile summaries: valid / +Inf counts in one word, the max, then the sums of exponentials
  // (exp2 of a prescaled difference: within 2^-22 + the argument's rounding, which the 1e-6 bound
  // of docs/SEMANTICS.md covers; a term below 2^-126 of the tile's max, flushed to 0, moves no sum)
  uint32_t counts[K];
  float tmax[K], sum[K];
  bool any_mass = false, finite[K];
#pragma unroll
  for (int jj = 0; jj < K; ++jj) {
    any_mass |= fr[jj].mass != 0;  // warp-uniform
    // The common tile: every value finite (v - v is NaN for NaN and +-Inf), hence all 128 valid,
    // no +Inf and no value to leave out of the max and the sum (logprobs at B = 256 cost +40 % over
    // plain without those tests, +48 % with them; llama3-8b, H200).
    const float d = (x[jj][0] - x[jj][0]) + (x[jj][1] - x[jj][1]) + (x[jj][2] - x[jj][2]) + (x[jj][3] - x[jj][3]);
    finite[jj] = __all_sync(kAll, d == 0.0f);
    float mx;
    if (finite[jj]) {
      counts[jj] = 128u;
      mx = fmaxf(fmaxf(x[jj][0], x[jj][1]), fmaxf(x[jj][2], x[jj][3]));
    } else {
      uint32_t c = 0u;
      mx = -INFINITY;
#pragma unroll
      for (int o = 0; o < 4; ++o) {
        const float v = x[jj][o];
        c += v == v ? (v == INFINITY ? 0x10001u : 1u) : 0u;
        mx = fmaxf(mx, v < INFINITY ? v : -INFINITY);  // finite values only (NaN < Inf is false)
      }
      counts[jj] = __reduce_add_sync(kAll, c);
    }
    tmax[jj] = from_ordered_bits(__reduce_max_sync(kAll, ordered_bits(mx)));
  }
#pragma unroll
  for (int jj = 0; jj < K; ++jj) sum[jj] = 0.0f;
  if (any_mass) {
#pragma unroll
    for (int jj = 0; jj < K; ++jj) {
      const float c2 = inv_t[jj] * kLog2e;
      float e[4];
#pragma unroll
      for (int o = 0; o < 4; ++o) e[o] = exp2_ftz((x[jj][o] - tmax[jj]) * c2);
      if (!finite[jj]) {
#pragma unroll
        for (int o = 0; o < 4; ++o) e[o] = x[jj][o] < INFINITY ? e[o] : 0.0f;
      }
      const float s = ((e[0] + e[1]) + e[2]) + e[3];  // index order on both paths: the same bits
      sum[jj] = fr[jj].mass ? s : 0.0f;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)  // fixed tree: deterministic
#pragma unroll
      for (int jj = 0; jj < K; ++jj) sum[jj] += __shfl_xor_sync(kAll, sum[jj], o);
  }

  // each tile's best surviving candidate and its logit
#pragma unroll
  for (int jj = 0; jj < K; ++jj) {
    if (inv_t[jj] == 0.0f) sum[jj] = 0.0f;  // greedy rows have no masses
    float bs = bs_lane[jj], bl = 0.0f;
    uint32_t bk = bk_lane[jj];
    if (bk != kNoToken) {
      const int o = static_cast<int>(static_cast<int64_t>(bk & 0x7fffffffu) - (vq + base));
      bl = o == 0 ? x[jj][0] : o == 1 ? x[jj][1] : o == 2 ? x[jj][2] : x[jj][3];
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
    if (lane == 0 && live[jj]) {
      static_assert(sizeof(TileSummary) == 24 && alignof(TileSummary) == 8, "three 8-byte stores");
      uint2* const t = reinterpret_cast<uint2*>(f.tiles + b[jj] * f.num_vtiles + vtile);
      t[0] = make_uint2(__float_as_uint(tmax[jj]), __float_as_uint(sum[jj]));
      t[1] = make_uint2(counts[jj] & 0xffffu, counts[jj] >> 16);
      t[2] = make_uint2(bk == kNoToken ? bk : bk - static_cast<uint32_t>(base), __float_as_uint(bl));
    }
  }
  if constexpr (!kGathers) return;

  // this CTA's running statistics of each row, then the threshold (every lane computes the same
  // values; lane 0 stores them between two __syncwarps: after every lane's reads, before the
  // column's next tile). The exponentials and logarithms below only steer θ, a heuristic.
  bool filtered[K], need[K];
  float m[K], z[K], theta[K], theta_before[K];
  uint32_t count[K];
  bool any_need = false;
#pragma unroll
  for (int jj = 0; jj < K; ++jj) {
    filtered[jj] = live[jj] && fr[jj].mode != kThetaNone;
    need[jj] = false;
    m[jj] = -INFINITY;
    z[jj] = 0.0f;
    theta[jj] = theta_before[jj] = INFINITY;
    count[jj] = 0u;
    if (!filtered[jj]) continue;
    const ColumnState s = *state[jj];
    m[jj] = s.m;
    z[jj] = s.z;
    count[jj] = s.count;
    if (tmax[jj] != -INFINITY) {  // (z: top-p's bound alone reads it)
      if (tmax[jj] > m[jj]) {
        if (kTopP && fr[jj].mode == kThetaTopP) z[jj] = z[jj] * __expf((m[jj] - tmax[jj]) * inv_t[jj]) + sum[jj];
        m[jj] = tmax[jj];
      } else if (kTopP && fr[jj].mode == kThetaTopP) {
        z[jj] += sum[jj] * __expf((tmax[jj] - m[jj]) * inv_t[jj]);
      }
    }
    // the grid's largest θ so far (prefetched at the item's start) lifts this CTA's own
    theta[jj] = theta_before[jj] = fmaxf(s.theta, shared_theta[jj]);
    need[jj] = tmax[jj] != -INFINITY && tmax[jj] >= theta[jj];  // some finite value can append
    any_need |= need[jj];
  }

  if (any_need) {
    // only a tile that can append refreshes the bound
    int kth_rank[K];
    bool kth[K], any_kth = false;
#pragma unroll
    for (int jj = 0; jj < K; ++jj) {
      kth[jj] = false;
      kth_rank[jj] = 0;
      if (!need[jj]) continue;
      if (m[jj] != -INFINITY && fr[jj].mode != kThetaTopK) {
        // top-p: every value below m + T ln((1 - p) Z_seen / V) has less than (1 - p) Z / V of the
        // mass, so all of them together stay in the tail the nucleus leaves out. min-p: m + T ln(minP).
        const float bound = kTopP && fr[jj].mode == kThetaTopP
                                ? m[jj] + (__logf((1.0f - fr[jj].param) * z[jj]) - __logf(static_cast<float>(V))) / inv_t[jj]
                                : m[jj] + fr[jj].param / inv_t[jj];
        theta[jj] = fmaxf(theta[jj], bound);
      }
      // a lower bound of the tile's own k-th largest only before any bound exists (later it is far
      // below θ). A top-p row takes its tile's kTopPFirstRank-th: otherwise its first wave appends
      // whole tiles
      if (theta_before[jj] == -INFINITY) {
        const int k = fr[jj].mode == kThetaTopK ? (fr[jj].k <= 128 && fr[jj].k > kTopKFirstRank ? kTopKFirstRank : fr[jj].k)
                      : kTopP && fr[jj].mode == kThetaTopP ? kTopPFirstRank : 0;
        kth[jj] = k > 0 && k <= 128 && (counts[jj] & 0xffffu) >= static_cast<uint32_t>(k);
        kth_rank[jj] = k;
        any_kth |= kth[jj];
      }
    }
    if (any_kth) {
      float kv[K];
      warp_kth_largest_columns<K>(x, kth_rank, kth, kv);
#pragma unroll
      for (int jj = 0; jj < K; ++jj) theta[jj] = fmaxf(theta[jj], kv[jj]);
    }
    // the histogram bound (a dependent global load per 128 buckets): for a top-k, a tile that would
    // append two or more, so θ keeps rising with the grid's appends after the first wave (a lone
    // value above θ is appended without the load: top-k 50 at B = 64 costs +16 % over plain against
    // +19 % with it, llama3-8b); for top-p (rank 2048: a longer scan) only a tile that would append
    // many. Not on a CTA's first tile of the row, where the tile's own k-th largest bounds it, unless
    // k > 128 (no such bound): θ then comes from the histogram once the first wave's whole tiles hold
    // k values; else no CTA raises θ and every row overflows its slices into the extra pass.
#pragma unroll
    for (int jj = 0; jj < K; ++jj) {
      const bool own_kth = theta_before[jj] == -INFINITY && (fr[jj].mode != kThetaTopK || fr[jj].k <= 128);
      if (!need[jj] || fr[jj].mode == kThetaMinP || own_kth) continue;
      uint32_t n = 0;
#pragma unroll
      for (int o = 0; o < 4; ++o) n += x[jj][o] < INFINITY && x[jj][o] >= theta[jj] ? 1u : 0u;
      const uint32_t refresh_above = fr[jj].mode == kThetaTopK ? 1u : 16u;
      if (__reduce_add_sync(kAll, n) > refresh_above)
        theta[jj] = hist_rank_bound(f, b[jj], fr[jj].k, theta[jj], shared_top[jj]);
    }
    if (lane == 0) {
#pragma unroll
      for (int jj = 0; jj < K; ++jj)
        if (need[jj] && theta[jj] > theta_before[jj]) atomicMax(f.theta_used + b[jj], ordered_bits(theta[jj]));
    }
  }
  __syncwarp();  // every lane has read the states before lane 0 overwrites them
  if (lane == 0) {
#pragma unroll
    for (int jj = 0; jj < K; ++jj)
      if (filtered[jj]) {
        state[jj]->m = m[jj];
        state[jj]->z = z[jj];
        state[jj]->theta = theta[jj];
      }
  }
  __syncwarp();
  if (!any_need) return;

  // appends: each value at its slot in the CTA's slice of the row, past its end in the row's spill
  // (or dropped when that is full too). The slice is this CTA's alone and the column's warp alone
  // appends to it here, so its fill is a register: a returned atomic on one counter a row held the
  // append's path ~1 µs a tile (10.8 % of the epilogue's stall samples at top-p 0.9, B = 64,
  // llama3-8b; ncu). Only a tile that overflows the slice reserves spill slots with one.
  uint32_t want[K], incl[K], total[K];
#pragma unroll
  for (int jj = 0; jj < K; ++jj) {
    want[jj] = 0u;
    if (need[jj]) {
#pragma unroll
      for (int o = 0; o < 4; ++o)
        if (x[jj][o] < INFINITY && x[jj][o] >= theta[jj]) want[jj] |= 1u << o;
    }
    incl[jj] = __popc(want[jj]);
  }
#pragma unroll
  for (int o = 1; o < 32; o <<= 1)
#pragma unroll
    for (int jj = 0; jj < K; ++jj) {
      const uint32_t y = __shfl_up_sync(kAll, incl[jj], o);
      if (lane >= o) incl[jj] += y;
    }
#pragma unroll
  for (int jj = 0; jj < K; ++jj) total[jj] = __shfl_sync(kAll, incl[jj], 31);
  // (a grid wider than the slices, which the launch never makes, spills every append)
  const bool own_slice = cs.cap != 0u;
  const uint32_t slice_cap = cs.cap;
  const int64_t slice = static_cast<int64_t>(cs.index) * cs.cap;
  const int64_t spill = f.spill_at;
  const uint32_t spill_cap = static_cast<uint32_t>(f.cap - spill);
  const uint32_t cap = static_cast<uint32_t>(f.cap);
#pragma unroll
  for (int jj = 0; jj < K; ++jj) {
    if (total[jj] == 0u) continue;  // warp-uniform
    // Append s of the column goes to slot first + s of the slice, written by lane s % 32: one
    // coalesced store a round of 32 appends, where each lane storing its own wanted values took
    // four scattered ones.
    const uint32_t first = count[jj], end = first + total[jj];
    const uint32_t spill_from = first > slice_cap ? first : slice_cap;  // appends from here spill
    uint32_t spill_base = 0u;
    if (end > slice_cap) {  // warp-uniform
      if (lane == 0) spill_base = atomicAdd(slice_fills(f, b[jj]) + f.slices, end - spill_from);
      spill_base = __shfl_sync(kAll, spill_base, 0);
    }
    if (lane == 0) {
      state[jj]->count = end;
      if (own_slice) slice_fills(f, b[jj])[cs.index] = end;
    }
    const uint32_t excl = incl[jj] - __popc(want[jj]);
    uint32_t dropped = 0u;
    int top = -1;
    const int64_t row = b[jj];
#pragma unroll 1
    for (uint32_t r0 = 0; r0 < total[jj]; r0 += 32) {  // warp-uniform
      const uint32_t s = r0 + static_cast<uint32_t>(lane);
      int src = 0;  // the lane holding append s: the first whose inclusive count exceeds s
#pragma unroll
      for (int step = 16; step > 0; step >>= 1)
        if (__shfl_sync(kAll, incl[jj], src + step - 1) <= s) src += step;
      const uint32_t w = __shfl_sync(kAll, want[jj], src);
      const uint32_t k = s - __shfl_sync(kAll, excl, src);  // append s is src's k-th wanted value
      float xs[4];
#pragma unroll
      for (int o = 0; o < 4; ++o) xs[o] = __shfl_sync(kAll, x[jj][o], src);
      if (s < total[jj]) {
        uint32_t m = w;
        if (k >= 1u) m &= m - 1u;
        if (k >= 2u) m &= m - 1u;
        if (k >= 3u) m &= m - 1u;
        const int o = __ffs(m) - 1;
        const float val = o == 0 ? xs[0] : o == 1 ? xs[1] : o == 2 ? xs[2] : xs[3];
        const uint32_t at = first + s;
        const uint32_t spilled = at < slice_cap ? 0u : spill_base + (at - spill_from);
        if (at < slice_cap || spilled < spill_cap) {
          const int64_t i = row * cap + (at < slice_cap ? slice + at : spill + spilled);
          f.cand_val[i] = val;
          f.cand_idx[i] = static_cast<uint32_t>(vq + 4 * (src - lane) + o);
          if (fr[jj].mode != kThetaMinP) {  // the rank bounds' histogram
            const int bucket = hist_bucket(val);
            atomicAdd(f.hist + row * kHistBuckets + bucket, 1u);
            top = bucket > top ? bucket : top;
          }
        } else {
          const uint32_t ob = ordered_bits(val);
          dropped = ob > dropped ? ob : dropped;
        }
      }
    }
    const uint32_t top_all = __reduce_max_sync(kAll, static_cast<uint32_t>(top + 1));
    const uint32_t dropped_all = __reduce_max_sync(kAll, dropped);
    if (lane == 0) {
      // Only a bucket above the one prefetched at the item's start (already in top_bucket) can
      // raise it: most appends sit just above θ, and their atomics on the row's one word cost ~6 µs
      // of the split kernel at B = 64 (top-p 0.9, llama3-8b, ncu).
      if (static_cast<int>(top_all) > shared_top[jj] + 1) atomicMax(f.top_bucket + row, top_all);
      if (dropped_all != 0u) atomicMax(f.max_dropped + row, dropped_all);
    }
  }
  __syncwarp();  // lane 0's slice fills, before the column's next tile reads them
}

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
