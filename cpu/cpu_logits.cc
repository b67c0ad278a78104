// Logits on the CPU: dtype decoding, the products of H and W, and the tile routine both samplers call.
#include <math.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu_internal.h"
#include "cpu_sampler.h"

namespace flashsample {
namespace cpu {
namespace detail {

namespace {

inline float float_from_bits(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

// bf16 is the upper half of an IEEE float.
inline float bf16_to_float(uint16_t h) { return float_from_bits(static_cast<uint32_t>(h) << 16); }

// IEEE half -> float, exact for every input (normals, subnormals, ±0, ±Inf, NaN). Rebias the
// exponent by shifting; Inf/NaN get the float's all-ones exponent; subnormals are renormalized by
// one float subtraction (the "magic number" trick, F. Giesen). Branch-free enough to vectorize.
inline float f16_to_float(uint16_t h) {
  constexpr uint32_t kExponentMask = 0x7c00u << 13;  // half exponent, moved to float position
  uint32_t bits = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exponent = bits & kExponentMask;
  bits += (127u - 15u) << 23;                          // rebias
  if (exponent == kExponentMask) bits += (128u - 16u) << 23;  // Inf / NaN: exponent all ones
  float magnitude = float_from_bits(bits);
  if (exponent == 0) magnitude = float_from_bits(bits + (1u << 23)) - float_from_bits(113u << 23);
  uint32_t out;
  memcpy(&out, &magnitude, sizeof out);
  return float_from_bits(out | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

}  // namespace

void decode(const void* data, DType dtype, int64_t first, int64_t n, float* out) {
  switch (dtype) {
    case DType::kF32:
      memcpy(out, static_cast<const float*>(data) + first, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16: {
      const uint16_t* in = static_cast<const uint16_t*>(data) + first;
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_float(in[i]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* in = static_cast<const uint16_t*>(data) + first;
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
      return;
    }
  }
}

CpuIsa cpu_isa() {
  static const CpuIsa isa = [] {
    const char* e = std::getenv("FLASHSAMPLE_CPU_ISA");
    const std::string cap = e != nullptr ? e : "";
    if (cap == "baseline") return CpuIsa::kBaseline;
#ifdef FLASHSAMPLE_CPU_X86_KERNELS
    if (cap != "avx2" && __builtin_cpu_supports("avx512f")) return CpuIsa::kAvx512;
    if (__builtin_cpu_supports("avx2")) return CpuIsa::kAvx2;
#endif
    return CpuIsa::kBaseline;
  }();
  return isa;
}

namespace {

// The one product routine of the backend. Output (r, c) keeps 16 lane sums, lane k adding
// h[i + k] * w[i + k] for i = 0, 16, 32, ... in order (each product rounded, then the sum: no FMA,
// -ffp-contract=off), then the tail and a pairwise tree over the lanes. That order is the same
// whatever the block, the ISA or the vector width below, so every row's logits are the same bits
// on every x86 and Arm machine, in any batch slot.
constexpr int kLanes = 16;
using Floats4 = float __attribute__((vector_size(16)));   // SSE, NEON
using Floats8 = float __attribute__((vector_size(32)));   // AVX2
using Floats16 = float __attribute__((vector_size(64)));  // AVX-512

// The 16 lane sums of one output are kParts vectors of the ISA's width (a vector wider than the
// ISA's would live in memory, not in registers).
template <class Vec>
constexpr int kParts = kLanes * static_cast<int>(sizeof(float)) / static_cast<int>(sizeof(Vec));

template <class Vec>
__attribute__((always_inline)) inline float finish_lanes(const Vec* acc, const float* h,
                                                         const float* w, int64_t i, int64_t n) {
  constexpr int kWidth = kLanes / kParts<Vec>;
  float lane[kLanes];
  // (read by element: taking acc's address would keep the accumulators in memory)
  for (int k = 0; k < kLanes; ++k) lane[k] = acc[k / kWidth][k % kWidth];
  for (int k = 0; i < n; ++i, ++k) lane[k] += h[i] * w[i];  // tail: fewer than kLanes left
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int k = 0; k < width; ++k) lane[k] += lane[k + width];
  }
  return lane[0];
}

// kRows rows of H against kCols rows of W: each loaded vector serves kCols (or kRows) products.
template <class Vec, int kRows, int kCols>
__attribute__((always_inline)) inline void product_block(const float* h, int64_t h_stride,
                                                         const float* w, int64_t w_stride,
                                                         int64_t n, float* out, int64_t out_stride) {
  constexpr int kP = kParts<Vec>, kWidth = kLanes / kP;
  Vec acc[kRows * kCols * kP] = {};  // in registers once the constant loops are unrolled
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Vec wv[kCols * kP];
#pragma GCC unroll 16
    for (int j = 0; j < kCols * kP; ++j) {
      memcpy(&wv[j], w + (j / kP) * w_stride + i + (j % kP) * kWidth, sizeof(Vec));
    }
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      Vec hv[kP];
#pragma GCC unroll 16
      for (int q = 0; q < kP; ++q) memcpy(&hv[q], h + r * h_stride + i + q * kWidth, sizeof(Vec));
#pragma GCC unroll 16
      for (int j = 0; j < kCols * kP; ++j) acc[r * kCols * kP + j] += hv[j % kP] * wv[j];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kCols; ++c) {
      out[r * out_stride + c] =
          finish_lanes(acc + (r * kCols + c) * kP, h + r * h_stride, w + c * w_stride, i, n);
    }
  }
}

// out[r * out_stride + c] = h_r . w_c for r < rows, c < cols, in blocks of kRows x kCols outputs
// whose accumulators fit the register file (kRows x kCols x 64 bytes).
template <class Vec, int kRows, int kCols>
__attribute__((always_inline)) inline void products(const float* h, int64_t h_stride, int64_t rows,
                                                    const float* w, int64_t w_stride, int64_t cols,
                                                    int64_t n, float* out, int64_t out_stride) {
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows) {
    int64_t c = 0;
    for (; c + kCols <= cols; c += kCols) {
      product_block<Vec, kRows, kCols>(h + r * h_stride, h_stride, w + c * w_stride, w_stride, n,
                                       out + r * out_stride + c, out_stride);
    }
    for (; c < cols; ++c) {
      product_block<Vec, kRows, 1>(h + r * h_stride, h_stride, w + c * w_stride, w_stride, n,
                                   out + r * out_stride + c, out_stride);
    }
  }
  for (; r < rows; ++r) {
    int64_t c = 0;
    for (; c + kCols <= cols; c += kCols) {
      product_block<Vec, 1, kCols>(h + r * h_stride, h_stride, w + c * w_stride, w_stride, n,
                                   out + r * out_stride + c, out_stride);
    }
    for (; c < cols; ++c) {
      product_block<Vec, 1, 1>(h + r * h_stride, h_stride, w + c * w_stride, w_stride, n,
                               out + r * out_stride + c, out_stride);
    }
  }
}

using ProductsFn = void (*)(const float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t,
                            float*, int64_t);

#ifdef FLASHSAMPLE_CPU_X86_KERNELS
// 32 zmm registers: 16 accumulators, 4 of W, 1 of H.
__attribute__((target("avx512f"))) void products_avx512(const float* h, int64_t h_stride, int64_t rows,
                                                        const float* w, int64_t w_stride, int64_t cols,
                                                        int64_t n, float* out, int64_t out_stride) {
  products<Floats16, 4, 4>(h, h_stride, rows, w, w_stride, cols, n, out, out_stride);
}
// 16 ymm registers, two an output: 8 of accumulators, 4 of W, 2 of H.
__attribute__((target("avx2"))) void products_avx2(const float* h, int64_t h_stride, int64_t rows,
                                                   const float* w, int64_t w_stride, int64_t cols,
                                                   int64_t n, float* out, int64_t out_stride) {
  products<Floats8, 2, 2>(h, h_stride, rows, w, w_stride, cols, n, out, out_stride);
}
#endif

// 16 xmm (SSE2) or 32 NEON registers, four an output: 8 of accumulators, 8 of W (H from memory).
void products_baseline(const float* h, int64_t h_stride, int64_t rows, const float* w,
                       int64_t w_stride, int64_t cols, int64_t n, float* out, int64_t out_stride) {
  products<Floats4, 1, 2>(h, h_stride, rows, w, w_stride, cols, n, out, out_stride);
}

ProductsFn select_products() {
  switch (cpu_isa()) {
#ifdef FLASHSAMPLE_CPU_X86_KERNELS
    case CpuIsa::kAvx512: return products_avx512;
    case CpuIsa::kAvx2: return products_avx2;
#endif
    default: return products_baseline;
  }
}

const ProductsFn products_of = select_products();

// Bit j of a word, by lane: `word & kLaneBits.bit[j]` vectorizes (SSE2 has no per-lane shift).
struct LaneBits {
  uint32_t bit[32];
};
constexpr LaneBits lane_bits() {
  LaneBits t{};
  for (int j = 0; j < 32; ++j) t.bit[j] = 1u << j;
  return t;
}
constexpr LaneBits kLaneBits = lane_bits();

// dst[v - vocab_begin] = -Inf where bit v of the allowed mask is 0 (SEMANTICS.md §2), a word's 32
// values at a time and without branches: a mask's bits fall anywhere, and the branch a value cost
// a misprediction on every other one of a random half-vocabulary mask.
void mask_values(const uint32_t* mask, int64_t vocab_begin, int64_t vocab_end, float* dst) {
  auto one = [&](int64_t v) {
    const bool allowed = ((mask[v >> 5] >> (v & 31)) & 1u) != 0;
    dst[v - vocab_begin] = allowed ? dst[v - vocab_begin] : -INFINITY;
  };
  int64_t v = vocab_begin;
  for (; v < vocab_end && (v & 31) != 0; ++v) one(v);
  for (; v + 32 <= vocab_end; v += 32) {
    const uint32_t word = mask[v >> 5];
    float* d = dst + (v - vocab_begin);
    for (int j = 0; j < 32; ++j) d[j] = (word & kLaneBits.bit[j]) != 0 ? d[j] : -INFINITY;
  }
  for (; v < vocab_end; ++v) one(v);
}

}  // namespace

LogitSource::LogitSource(const SampleParams& p) : p_(p) {
  hidden_.resize(static_cast<size_t>(p.batch * p.dim));
  decode(p.hidden, p.dtype, 0, p.batch * p.dim, hidden_.data());
  // 64 KiB of converted W per chunk: stays in L2 while every row of H passes over it.
  chunk_rows_ = std::max<int64_t>(1, std::min<int64_t>(kVocabTile, 16384 / p.dim));
}

void LogitSource::compute(int64_t row_begin, int64_t row_end, int64_t vocab_begin,
                          int64_t vocab_end, float* out, int64_t out_stride,
                          std::vector<float>& scratch) const {
  const int64_t dim = p_.dim, rows = row_end - row_begin;
  const float* h = hidden_.data() + row_begin * dim;
  // W rows converted once per chunk, then used by every row of H.
  scratch.resize(static_cast<size_t>(chunk_rows_ * dim));
  for (int64_t chunk = vocab_begin; chunk < vocab_end; chunk += chunk_rows_) {
    const int64_t count = std::min(chunk_rows_, vocab_end - chunk);
    decode(p_.weight, p_.dtype, chunk * dim, count * dim, scratch.data());
    products_of(h, dim, rows, scratch.data(), dim, count, dim, out + (chunk - vocab_begin), out_stride);
  }
  // (Without a bias nothing is added, as + 0 would: a lane sum starts at +0, so no product is -0.)
  if (p_.bias != nullptr) {
    float bias[kVocabTile];
    for (int64_t v = vocab_begin; v < vocab_end; v += kVocabTile) {
      const int64_t count = std::min(kVocabTile, vocab_end - v);
      decode(p_.bias, p_.dtype, v, count, bias);
      for (int64_t b = 0; b < rows; ++b) {
        float* dst = out + b * out_stride + (v - vocab_begin);
        for (int64_t i = 0; i < count; ++i) dst[i] += bias[i];
      }
    }
  }
  // Per-row transforms of SEMANTICS.md §2: softcap, then the allowed mask (probability 0 = -Inf).
  const int64_t mask_words = (p_.vocab + 31) / 32;
  for (int64_t b = row_begin; b < row_end; ++b) {
    float* dst = out + (b - row_begin) * out_stride;
    if (p_.softcap > 0.0f) softcap_values(dst, vocab_end - vocab_begin, p_.softcap);
    if (p_.allowed != nullptr) mask_values(p_.allowed + b * mask_words, vocab_begin, vocab_end, dst);
    apply_listed(b, vocab_begin, vocab_end, dst);
  }
}

// SEMANTICS.md §2, steps 2a-2d, on the listed tokens of row b that fall in [vocab_begin, vocab_end):
// logit bias, bans, the repetition penalty, then the frequency and presence penalties, each in
// float32 in that order.
void LogitSource::apply_listed(int64_t b, int64_t vocab_begin, int64_t vocab_end, float* dst) const {
  const int64_t shift = listed_ids(p_).shift;  // a shard's own ids of global lists, as local ids
  auto in_block = [&](int64_t v) { return v >= vocab_begin && v < vocab_end; };
  // offsets clamped to the list's entries, as the CUDA table kernel does (unchecked lists)
  auto range = [&](const int32_t* offsets, int64_t n, int64_t& lo, int64_t& hi) {
    lo = std::min<int64_t>(std::max<int64_t>(offsets[b], 0), n);
    hi = std::min<int64_t>(std::max<int64_t>(offsets[b + 1], lo), n);
  };
  int64_t lo, hi;
  if (p_.bias_offsets != nullptr) {
    range(p_.bias_offsets, p_.bias_entries, lo, hi);
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t v = static_cast<int64_t>(p_.bias_tokens[i]) - shift;
      if (in_block(v) && std::isfinite(p_.bias_values[i])) dst[v - vocab_begin] += p_.bias_values[i];
    }
  }
  if (p_.banned_offsets != nullptr && (p_.banned_while == nullptr || p_.banned_while[b] > 0)) {
    range(p_.banned_offsets, p_.banned_entries, lo, hi);
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t v = static_cast<int64_t>(p_.banned_tokens[i]) - shift;
      if (in_block(v)) dst[v - vocab_begin] = -INFINITY;
    }
  }
  if (p_.penalty_offsets != nullptr) {
    const float r = p_.repetition_penalty ? p_.repetition_penalty[b] : 1.0f;
    const float f = p_.frequency_penalty ? p_.frequency_penalty[b] : 0.0f;
    const float pres = p_.presence_penalty ? p_.presence_penalty[b] : 0.0f;
    range(p_.penalty_offsets, p_.penalty_entries, lo, hi);
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t v = static_cast<int64_t>(p_.penalty_tokens[i]) - shift;
      const int32_t count = p_.penalty_counts[i];
      if (!in_block(v) || count < 0) continue;
      const bool in_prompt = p_.penalty_in_prompt != nullptr ? p_.penalty_in_prompt[i] != 0 : p_.penalty_in_prompt_i32[i] != 0;
      float& l = dst[v - vocab_begin];
      if (r != 1.0f && (count > 0 || in_prompt)) l = l > 0.0f ? l / r : l * r;
      if (count > 0) l -= std::fma(f, static_cast<float>(count), pres);
    }
  }
}

void BestEntries::push_tile(const float* logits, int64_t n, int64_t first) {
  if (cap_ == 0) return;
  // A block's values are written after the list and kept by a count (no branch a value: about half
  // of them are kept until the cutoff has risen); past the first cut a block with no value at or
  // above the cutoff's logit is passed over after one test a value (NaN and -Inf fail it).
  constexpr int64_t kBlock = 16;
  items_.reserve(static_cast<size_t>(2 * cap_ + kBlock));
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t end = std::min(n, i + kBlock);
    const bool cut_before = has_cutoff_;
    const Entry bound = cutoff_;
    if (cut_before) {
      bool any = false;
      for (int64_t j = i; j < end; ++j) any |= logits[j] >= bound.logit;
      if (!any) continue;
    }
    const size_t base = items_.size();
    items_.resize(base + static_cast<size_t>(end - i));
    Entry* out = items_.data() + base;
    int64_t kept = 0;
    for (int64_t j = i; j < end; ++j) {
      const Entry e{logits[j], static_cast<int32_t>(first + j)};
      out[kept] = e;
      // before any cut, every drawable value
      kept += cut_before ? entry_before_bit(e, bound) : static_cast<int64_t>(is_drawable(e.logit));
    }
    items_.resize(base + static_cast<size_t>(kept));
    if (static_cast<int64_t>(items_.size()) >= 2 * cap_) shrink();
  }
}

// The exact cut: the k best, the k-th of them the cutoff.
void BestEntries::cut() {
  std::nth_element(items_.begin(), items_.begin() + (cap_ - 1), items_.end(), EntryBefore{});
  items_.resize(static_cast<size_t>(cap_));
  cutoff_ = items_.back();  // the k-th best: every kept entry is before or equal to it
  has_cutoff_ = true;
}

// A full buffer cut back to the entries at or before a threshold that at least k of them reach:
// every entry dropped, and every one pushed after and rejected, has k entries before it, so the k
// best are all kept. Cheaper than nth_element (~4 of its ~23 µs at 2048 entries).
void BestEntries::shrink() {
  if (!cut_at_sampled_threshold()) cut();
}

namespace {
constexpr int64_t kRankSamples = 64;
// e at or before t, without branches (a list's entries are drawable: never NaN)
inline int64_t reaches(const Entry& e, const Entry& t) { return 1 - entry_before_bit(t, e); }
}  // namespace

// An entry that about `want` of the list's n >= 4 * kRankSamples entries reach: of 64 evenly
// spaced ones, the one at that rank.
Entry BestEntries::sampled_rank(int64_t want) const {
  const int64_t n = static_cast<int64_t>(items_.size());
  Entry sample[kRankSamples];
  for (int64_t j = 0; j < kRankSamples; ++j) {
    sample[j] = items_[static_cast<size_t>(j * (n / kRankSamples))];
  }
  const int64_t rank = std::min(kRankSamples - 1, want * kRankSamples / n);
  std::nth_element(sample, sample + rank, sample + kRankSamples, EntryBefore{});
  return sample[rank];
}

// The threshold leaves ~9k / 8 entries at or before it. Too few (or more than 3k / 2: little
// gained) and nothing is changed.
bool BestEntries::cut_at_sampled_threshold() {
  const int64_t n = static_cast<int64_t>(items_.size());
  if (n < 4 * kRankSamples) return false;
  const Entry t = sampled_rank(cap_ * 9 / 8);
  int64_t count = 0;
  for (const Entry& e : items_) count += reaches(e, t);
  if (count < cap_ || count > cap_ + cap_ / 2) return false;
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Entry e = items_[static_cast<size_t>(i)];
    items_[static_cast<size_t>(kept)] = e;
    kept += reaches(e, t);
  }
  items_.resize(static_cast<size_t>(kept));
  cutoff_ = t;
  has_cutoff_ = true;
  return true;
}

// Those at or before a sampled threshold that about 2m reach, moved to the front and sorted (the
// others after them); where fewer than m or more than k reach it, or the list is short, finish().
int64_t BestEntries::sort_front(int64_t m) {
  const int64_t n = static_cast<int64_t>(items_.size());
  if (m >= std::min(n, cap_) || n < 4 * kRankSamples) return static_cast<int64_t>(finish().size());
  const Entry t = sampled_rank(2 * m);
  int64_t count = 0;
  for (const Entry& e : items_) count += reaches(e, t);
  if (count < m || count > cap_) return static_cast<int64_t>(finish().size());
  std::vector<Entry> rest(static_cast<size_t>(n - count + 1));  // (+1: every entry is written there)
  int64_t front = 0, back = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Entry e = items_[static_cast<size_t>(i)];
    const int64_t in_front = reaches(e, t);
    items_[static_cast<size_t>(front)] = e;  // (front <= i: nothing unread is overwritten)
    rest[static_cast<size_t>(back)] = e;
    front += in_front;
    back += 1 - in_front;
  }
  std::copy(rest.begin(), rest.begin() + (n - count), items_.begin() + count);
  std::sort(items_.begin(), items_.begin() + count, EntryBefore{});
  return count;
}

void BestEntries::absorb(const BestEntries& other) {
  for (const Entry& e : other.items_) push(e);
}

const std::vector<Entry>& BestEntries::finish() {
  if (static_cast<int64_t>(items_.size()) > cap_) cut();
  std::sort(items_.begin(), items_.end(), EntryBefore{});
  return items_;
}

}  // namespace detail

namespace detail {

std::vector<float> materialize_logits(const SampleParams& p, int threads) {
  const int64_t vocab = p.vocab;
  const int64_t tiles = (vocab + kVocabTile - 1) / kVocabTile;
  LogitSource source(p);
  std::vector<float> logits(static_cast<size_t>(p.batch * vocab));
  const int64_t parts = std::min<int64_t>(threads, tiles);
  run_threads(static_cast<int>(parts), [&](int part) {
    std::vector<float> scratch;
    const int64_t v_begin = std::min(vocab, tiles * part / parts * kVocabTile);
    const int64_t v_end = std::min(vocab, tiles * (part + 1) / parts * kVocabTile);
    source.compute(0, p.batch, v_begin, v_end, logits.data() + v_begin, vocab, scratch);
  });
  return logits;
}

void write_raw_row(const SampleParams& p, int64_t b, const float* x) {
  const int64_t V = p.vocab, S = p.num_samples, n = p.top_logprobs;
  const int64_t inf = std::count(x, x + V, INFINITY);
  const MassPartial mass = tile_mass(x, V, 1.0);  // the finite values at T = 1
  const double lse = mass.max_z + std::log(mass.sum);
  auto kept = [&](float v) { return inf > 0 ? v == INFINITY : v > -INFINITY; };
  auto logprob = [&](float v) -> float {
    if (!kept(v)) return -INFINITY;
    return static_cast<float>(inf > 0 ? -std::log(static_cast<double>(inf)) : static_cast<double>(v) - lse);
  };
  if (p.logprobs != nullptr)
    for (int64_t j = 0; j < S; ++j) {
      const int32_t t = p.tokens[b * S + j];
      if (t >= 0) p.logprobs[b * S + j] = logprob(x[t]);
    }
  if (n <= 0) return;
  std::vector<Entry> order;
  for (int64_t v = 0; v < V; ++v)
    if (kept(x[v])) order.push_back(Entry{x[v], static_cast<int32_t>(v)});
  const int64_t take = std::min<int64_t>(n, static_cast<int64_t>(order.size()));
  std::partial_sort(order.begin(), order.begin() + take, order.end(), EntryBefore{});
  for (int64_t i = 0; i < n; ++i) {
    p.top_tokens[b * n + i] = i < take ? order[static_cast<size_t>(i)].index : -1;
    p.top_token_logprobs[b * n + i] = i < take ? logprob(order[static_cast<size_t>(i)].logit) : -INFINITY;
  }
}

SampleParams raw_logits_params(const SampleParams& p) {
  SampleParams q = p;
  q.allowed = nullptr;
  q.bias_offsets = q.banned_offsets = q.penalty_offsets = nullptr;
  return q;
}

namespace {

// each(b, x) for every row b, x its raw logits [0, p.vocab): the same source without the mask and
// the listed tokens (raw_logits_params), a row at a time.
template <class Each>
void for_each_raw_row(const SampleParams& p, int num_threads, Each each) {
  const SampleParams q = raw_logits_params(p);  // (LogitSource keeps a reference to it)
  const LogitSource source(q);
  const int64_t V = p.vocab;
  parallel_for(p.batch, num_threads, [&](int64_t b) {
    std::vector<float> x(static_cast<size_t>(V)), scratch;
    source.compute(b, b + 1, 0, V, x.data(), V, scratch);
    each(b, x.data());
  });
}

}  // namespace

void write_raw_logprobs(const SampleParams& p, int num_threads) {
  if (!reports_raw_logprobs(p)) return;
  for_each_raw_row(p, num_threads, [&](int64_t b, const float* x) { write_raw_row(p, b, x); });
}

void write_partial_raw(const SampleParams& p, int num_threads) {
  const PartialHeader& h = *static_cast<const PartialHeader*>(p.partial);
  if (partial_raw_top(h) < 0) return;
  const int64_t V = p.vocab, base = p.vocab_offset, n = partial_raw_top(h);
  for_each_raw_row(p, num_threads, [&](int64_t b, const float* x) {
    const PartialRowView v = partial_row(p.partial, h, b);
    const MassPartial mass = tile_mass(x, V, 1.0);  // the finite values at T = 1
    std::vector<Entry> order;  // the drawable ones (finite or +Inf), in the raw order
    int64_t inf = 0;
    for (int64_t i = 0; i < V; ++i) {
      const float l = x[i];
      inf += l == INFINITY ? 1 : 0;
      if (l > -INFINITY) order.push_back(Entry{l, static_cast<int32_t>(i)});
    }
    const int64_t take = std::min<int64_t>(n, static_cast<int64_t>(order.size()));
    std::partial_sort(order.begin(), order.begin() + take, order.end(), EntryBefore{});
    *v.raw = PartialRawRow{mass.max_z, mass.sum, inf, static_cast<int32_t>(take), 0};
    for (int64_t i = 0; i < take; ++i)
      v.raw_keys[i] = partial_key(order[static_cast<size_t>(i)].logit,
                                  static_cast<uint32_t>(base + order[static_cast<size_t>(i)].index));
    auto raw_of = [&](uint32_t global) {
      const int64_t local = static_cast<int64_t>(global) - base;
      return local >= 0 && local < V ? x[local] : NAN;
    };
    for (int32_t j = 0; j < h.num_samples; ++j)
      v.winner_raw[j] = v.winners[j].key == kNoToken ? 0.0f : raw_of(v.winners[j].key & 0x7fffffffu);
    const int32_t count = v.row->num_candidates;
    for (int32_t i = 0; i < count; ++i) v.key_raw[i] = raw_of(partial_key_index(v.keys[i]));
  });
}

}  // namespace detail

void find_invalid_lists(const SampleParams& p, int32_t* flags) {
  const int64_t V = p.vocab;
  // (a shard's global ids: valid in the whole vocabulary; repeats counted among its own rows, as
  // the CUDA table kernel counts them)
  const ListedIds ids = listed_ids(p);
  const int64_t shift = ids.shift, valid_end = ids.valid_end;
  for (int64_t b = 0; b < p.batch; ++b) {
    bool invalid = false;
    // one list: offsets clamped to [0, n], then its entries (`usable` on those in range)
    auto check = [&](const int32_t* offsets, int64_t n, const int32_t* tokens, bool distinct, auto&& usable) {
      if (offsets == nullptr) return;
      const int64_t lo = std::min<int64_t>(std::max<int64_t>(offsets[b], 0), n);
      const int64_t hi = std::min<int64_t>(std::max<int64_t>(offsets[b + 1], lo), n);
      invalid |= offsets[b] != lo || offsets[b + 1] != hi;
      std::vector<int32_t> seen;
      for (int64_t i = lo; i < hi; ++i) {
        const int32_t t = tokens[i];
        if (t < 0 || t >= valid_end || !usable(i)) {
          invalid |= t != -1;
          continue;
        }
        if (distinct && t - shift >= 0 && t - shift < V) seen.push_back(t);
      }
      std::sort(seen.begin(), seen.end());
      invalid |= std::adjacent_find(seen.begin(), seen.end()) != seen.end();
    };
    check(p.bias_offsets, p.bias_entries, p.bias_tokens, true, [&](int64_t i) { return std::isfinite(p.bias_values[i]); });
    if (p.banned_while == nullptr || p.banned_while[b] > 0) {
      check(p.banned_offsets, p.banned_entries, p.banned_tokens, false, [](int64_t) { return true; });
    }
    check(p.penalty_offsets, p.penalty_entries, p.penalty_tokens, true, [&](int64_t i) { return p.penalty_counts[i] >= 0; });
    flags[b] = invalid ? 1 : 0;
  }
}

void record_tokens(const RecordTargets& t, const int32_t* drawn, int64_t batch, int32_t* row_status) {
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t token = t.record ? drawn[b] : -1;
    if (token >= 0 && t.min_tokens != nullptr && t.min_tokens[b] > 0) t.min_tokens[b] -= 1;
    if (token >= 0 && t.capacity > 0) {
      // the slot holding the token, else the first free one (the smallest index either way)
      const int64_t row = b * t.capacity;
      int64_t found = -1, free = -1;
      for (int64_t i = row; i < row + t.capacity && found < 0; ++i) {
        if (t.tokens[i] == token) found = i;
        if (t.tokens[i] < 0 && free < 0) free = i;
      }
      if (found >= 0) {
        t.counts[found] += 1;
      } else if (free >= 0) {
        t.tokens[free] = token;
        t.counts[free] = 1;
        t.in_prompt[free] = 0;
      } else {
        if (row_status != nullptr) row_status[b] = kRowTableFull;
        *t.unrecorded += 1;
      }
    }
    if (row_status != nullptr && t.list_invalid != nullptr && t.list_invalid[b] != 0) row_status[b] = kRowListInvalid;
  }
}

const char* kernel_isa() {
  switch (detail::cpu_isa()) {
    case detail::CpuIsa::kAvx512: return "avx512";
    case detail::CpuIsa::kAvx2: return "avx2";
    case detail::CpuIsa::kBaseline: break;
  }
  return "baseline";
}

}  // namespace cpu
}  // namespace flashsample
