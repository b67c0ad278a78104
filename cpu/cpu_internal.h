// Internals of the CPU backend, shared by the fused sampler (cpu_fused.cc), the reference
// (cpu_reference.cc) and the row logic both use (cpu_rows.cc). Not part of the public interface:
// the binding includes cpu_sampler.h only.
//
// The two samplers share every piece that decides a token: the logits (one tile routine, one dot
// product), the row's probability mass (tile partials combined in tile order), the kept-set
// decision of SEMANTICS.md §2 and the draws. They differ only in what they keep of the row: the
// reference keeps all of it, the fused pass keeps the kCandidateCap best logits and running
// Gumbel winners. So on the CPU, fused and reference(gumbel) agree token for token and their
// log-probabilities agree bit for bit.
#pragma once

#include <math.h>
#include <stdint.h>

#include <functional>
#include <string>
#include <vector>

#include "../cuda/include/noise.h"
#include "../cuda/include/params.h"

namespace flashsample {
namespace cpu {
namespace detail {

// Vocabulary tile of the fused pass, and the block of the row-mass partials in both samplers
// (the partials must be summed over the same blocks for fused and reference to agree bit for bit).
// A multiple of 4, so a Philox block (4 neighbours) never straddles two tiles.
constexpr int64_t kVocabTile = 256;
static_assert(kVocabTile % 4 == 0, "a noise block of 4 neighbours must not straddle tiles");

// SEMANTICS.md §5: the fused pass keeps this many of the largest logits per row.
constexpr int64_t kCandidateCap = 1024;

// The widest vector ISA the CPU has, capped by FLASHSAMPLE_CPU_ISA (avx2 or baseline; lib/device.ts
// refuses a value it does not know when the CPU device is opened), read once. The product and
// mass kernels of every ISA give the same bits (test/cpu-products.test.ts).
enum class CpuIsa { kBaseline, kAvx2, kAvx512 };
CpuIsa cpu_isa();
// Builds that carry the AVX2 and AVX-512 kernels (GCC's target attributes and pragmas on x86-64);
// elsewhere cpu_isa() is the baseline.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FLASHSAMPLE_CPU_X86_KERNELS 1
#endif

// ---- logits -------------------------------------------------------------------------------------

// Decodes n elements of a dtype array, starting at element `first`, into float.
void decode(const void* data, DType dtype, int64_t first, int64_t n, float* out);

// Produces the final logits of SEMANTICS.md §1-2 (dot + bias, softcap, allowed mask -> -Inf) for
// any block of rows x vocabulary entries. Both samplers take their logits from here, so they are
// bit-identical; the products keep one order of additions on every machine (cpu_logits.cc).
class LogitSource {
 public:
  explicit LogitSource(const SampleParams& p);

  // out[(b - row_begin) * out_stride + (v - vocab_begin)] for b in [row_begin, row_end),
  // v in [vocab_begin, vocab_end). `scratch` is the caller's (per thread) buffer for converted W.
  void compute(int64_t row_begin, int64_t row_end, int64_t vocab_begin, int64_t vocab_end,
               float* out, int64_t out_stride, std::vector<float>& scratch) const;

 private:
  void apply_listed(int64_t b, int64_t vocab_begin, int64_t vocab_end, float* dst) const;
  const SampleParams& p_;
  std::vector<float> hidden_;  // [batch, dim] in float, converted once
  int64_t chunk_rows_;         // W rows converted per chunk: the chunk stays in L1/L2
};

// x[i] = softcap · tanh(x[i] / softcap) for n values (SEMANTICS §2, step 1; cpu_exp.cc: tanh from a
// float64 exp, the same bits on every ISA).
void softcap_values(float* x, int64_t n, float cap);

// Every row's final logits [batch, vocab] (LogitSource), the vocabulary's tiles split over up to
// `threads` threads.
std::vector<float> materialize_logits(const SampleParams& p, int threads);

// ---- row probability mass -----------------------------------------------------------------------

// z = logit / T in float64: the scale of probabilities and log-probabilities.
inline double scaled(float logit, double temperature) {
  return static_cast<double>(logit) / temperature;
}

// Σ exp(z - max_z) over the finite logits of one tile (masked, NaN, ±Inf excluded), in
// cpu_exp.cc's order of additions and with its exp: the same bits on every ISA.
struct MassPartial {
  double max_z = -INFINITY;
  double sum = 0.0;
};
MassPartial tile_mass(const float* logits, int64_t n, double temperature);

// Combines the partials of a row in tile order: max_z and Σ exp(z - max_z) of the whole row.
MassPartial combine_mass(const MassPartial* partials, int64_t count);

// ---- candidates ---------------------------------------------------------------------------------

// A token and its final logit. Order of SEMANTICS.md §2.5: logit descending, index ascending
// (+Inf first).
struct Entry {
  float logit;
  int32_t index;
};
inline bool entry_before(const Entry& a, const Entry& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.index < b.index);
}
// entry_before as a type, for the standard algorithms: a function pointer there is called, not
// inlined (its calls were ~2 % of a top-p call at B = 64).
struct EntryBefore {
  bool operator()(const Entry& a, const Entry& b) const { return entry_before(a, b); }
};
// entry_before as 0 or 1 without branches, for loops over entries that lie in no order.
inline int64_t entry_before_bit(const Entry& a, const Entry& b) {
  return static_cast<int64_t>((a.logit > b.logit) | ((a.logit == b.logit) & (a.index < b.index)));
}
inline bool is_drawable(float logit) { return logit > -INFINITY; }  // false for NaN and -Inf

// The k best entries pushed so far (k = kCandidateCap, or a partial's capacity). Amortized O(1)
// per push: entries go into a buffer of 2k, and a full buffer is cut back to at least its k best
// (shrink); after the first cut, entries that cannot make the k best are rejected by one
// comparison (a tile's values by blocks: push_tile).
class BestEntries {
 public:
  explicit BestEntries(int64_t cap = kCandidateCap) : cap_(cap) {}
  void push(const Entry& e) {
    if (cap_ == 0 || (has_cutoff_ && !entry_before(e, cutoff_))) return;
    items_.push_back(e);
    if (static_cast<int64_t>(items_.size()) >= 2 * cap_) shrink();
  }
  // Pushes the drawable values of a tile, logits[i] being token first + i.
  void push_tile(const float* logits, int64_t n, int64_t first);
  // Appends another list's entries (merging per-thread lists of one row).
  void absorb(const BestEntries& other);
  // The k best, sorted by entry_before. Leaves the object holding exactly them.
  const std::vector<Entry>& finish();
  // At least the m best (all k where m >= k), sorted by entry_before at the front of entries(); how
  // many. The k best stay in the list, so finish() may follow.
  int64_t sort_front(int64_t m);
  const Entry* entries() const { return items_.data(); }

 private:
  void cut();
  void shrink();
  bool cut_at_sampled_threshold();
  Entry sampled_rank(int64_t want) const;
  int64_t cap_;
  std::vector<Entry> items_;
  Entry cutoff_{0.0f, 0};
  bool has_cutoff_ = false;
};

// ---- Gumbel-max scan ----------------------------------------------------------------------------

// A running winner of the Gumbel argmax: the Candidate of noise.h plus the winner's logit (for its
// log-probability).
struct Winner {
  float score = -INFINITY;
  uint32_t key = kNoToken;
  float logit = 0.0f;
};
inline bool winner_better(const Winner& a, const Winner& b) {
  return candidate_better(a.score, a.key, b.score, b.key);
}
inline bool has_token(const Winner& w) { return w.key != kNoToken; }
inline int32_t winner_token(const Winner& w) {
  return has_token(w) ? static_cast<int32_t>(w.key & ~kInfTierBit) : -1;
}

// Exact pruning of the noise. A finite token v can only beat the running best score s if its
// uniform u satisfies u <= exp(c_v - s) (c_v = logit * invT), because g = -log(-log1p(-u)) is
// at most -log(u). Testing that costs a multiply instead of the two logarithms of the Gumbel
// transform, so most tokens never pay for them. To avoid an exp per test it is split as
// prune_weight(v) = exp(c_v - c_ref) (once per token) times prune_factor(c_ref, s) (once per change
// of the best). The factor carries a margin of 1e-3 + 1e-6 |s| nats: far more than the float
// rounding of the Gumbel transform (~1e-6) and of the score (one ulp of s), so a pruned token
// provably has a score below s and the winner is exactly the one of the unpruned scan.
inline double prune_weight(float logit, float inv_temperature, double c_ref) {
  const double weight =
      exp(static_cast<double>(logit) * static_cast<double>(inv_temperature) - c_ref);
  // Subnormal or zero weights have lost their relative precision: never prune on them.
  return weight >= 1e-300 ? weight : INFINITY;
}
inline double prune_factor(double c_ref, float best_score) {
  const double best = best_score;
  return exp(c_ref - best + 1e-3 + 1e-6 * fabs(best));  // best = -Inf: +Inf, nothing pruned
}
// out[i] = prune_weight(logits[i], ...) for the finite logits of a tile (c_ref: their largest
// scaled value), +Inf for +Inf, 0 for −Inf and NaN (not drawable); vectorized (cpu_exp.cc), its
// exp within ~1 ulp of libm's: far inside the factor's margin.
void prune_weights(const float* logits, int64_t n, float inv_temperature, double c_ref, double* out);

// A lower bound of uniform_open01(bits) without its fmaf/fminf (library calls on baseline x86-64):
// the float rounding there is at most 2^-24 relative, and the clamp at 1 - 2^-24 stays above it.
inline double uniform_lower_bound(uint32_t bits) {
  return static_cast<double>(bits) * (0x1p-32 * (1.0 - 0x1p-23));
}

// Offers drawable token v (logit, its 32 noise bits) to the running winner. `weight` is the
// token's prune weight, `factor` the current prune factor, updated here when the winner changes.
inline void offer(float logit, uint32_t v, uint32_t bits, double weight, float inv_temperature,
                  double c_ref, Winner& best, double& factor) {
  if (logit == INFINITY) {
    const Candidate c = make_candidate(logit, inv_temperature, false, gumbel_from_bits(bits), v);
    if (candidate_better(c.score, c.key, best.score, best.key)) {
      best = Winner{c.score, c.key, logit};
    }
    return;  // the +Inf tier has no pruning: scores there are g alone
  }
  if (best.key & kInfTierBit) return;  // a finite logit never beats the +Inf tier
  // A NaN bound (weight +Inf times factor 0) compares false: not pruned.
  if (uniform_lower_bound(bits) > weight * factor) return;
  const Candidate c = make_candidate(logit, inv_temperature, false, gumbel_from_bits(bits), v);
  if (candidate_better(c.score, c.key, best.score, best.key)) {
    best = Winner{c.score, c.key, logit};
    factor = prune_factor(c_ref, best.score);
  }
}

// ---- per-row semantics -------------------------------------------------------------------------

struct RowFilters {
  double temperature = 0.0;   // 0 = greedy
  float inv_temperature = 0.0f;
  bool greedy = true;
  int64_t top_k = 0;          // 0 = off
  double top_p = 1.0;         // >= 1 = off
  double min_p = 0.0;         // <= 0 = off
  bool min_p_first = false;   // vLLM's filter order: min-p, then top-k and top-p
};
RowFilters row_filters(const SampleParams& p, int64_t row);
inline uint32_t noise_stream(const SampleParams& p, int64_t row) {
  return p.per_row_seed ? 0u : static_cast<uint32_t>(row);
}

// What is known of a row's tier (the +Inf tokens if it has any, else its finite drawable tokens):
// the first `num_best` entries of the tier in order, and the exact size and mass of the whole tier.
struct TierView {
  const Entry* best = nullptr;
  int64_t num_best = 0;
  int64_t size = 0;        // tokens in the tier
  bool inf_tier = false;
  double z_max = 0.0;      // 0 in the +Inf tier
  double total = 0.0;      // Σ exp(z - z_max) over the tier; its size in the +Inf tier
  double temperature = 1.0;
  bool complete() const { return num_best == size; }
  double z(const Entry& e) const { return inf_tier ? 0.0 : scaled(e.logit, temperature); }
  double weight(const Entry& e) const { return inf_tier ? 1.0 : exp(z(e) - z_max); }
};

// The kept set of SEMANTICS.md §2.5-2.7: the first `size` entries of the tier's order, with
// total = Σ weight over them. `fallback`: the known entries do not settle it (fused path only).
struct KeptDecision {
  int64_t size = 0;
  double total = 0.0;
  bool fallback = false;
};
KeptDecision decide_kept(const TierView& tier, const RowFilters& filters, int64_t top_logprobs);

// Everything the draw of one row needs.
struct RowPlan {
  RowStatus status = kRowNoCandidate;
  bool greedy = false;
  int32_t greedy_token = -1;
  bool from_winners = false;  // fused: the running Gumbel winners are the draw (kept = whole row)
  bool inf_tier = false;
  double temperature = 1.0;
  float inv_temperature = 1.0f;
  double z_max = 0.0;
  double log_mass = 0.0;           // log Σ exp(z) over the kept set
  std::vector<Entry> kept;         // the kept set sorted by index (draws from the list)
  std::vector<double> kept_aux;    // prune weights (Gumbel) or cumulative masses (inverse cdf)
  double c_ref = 0.0;              // reference of the prune weights

  double logprob(float logit) const {
    return (inf_tier ? 0.0 : scaled(logit, temperature)) - log_mass;
  }
};

// Fills the plan's kept set and log-mass from a decision, writes the row's status and
// topLogprobs. `keep_list`: copy the kept entries (the draw uses them).
void finish_plan(const SampleParams& p, int64_t row, const TierView& tier,
                 const KeptDecision& kept, bool keep_list, RowPlan& plan);
// For rows without a token (status kRowNoCandidate) and greedy rows: status and topLogprobs.
void finish_trivial_plan(const SampleParams& p, int64_t row, RowPlan& plan);

// The whole reference procedure for one row from its materialized logits [vocab]: tier, sort,
// decision, plan (with the kept list). Used by the reference and by the fused path's fallback.
void reference_row_plan(const SampleParams& p, int64_t row, const float* logits, RowPlan& plan);

// Draws samples [sample_begin, sample_end) of a row into p.tokens / p.logprobs. `winners` (the
// row's [num_samples] running winners) is used when plan.from_winners.
void draw_samples(const SampleParams& p, int64_t row, const RowPlan& plan, ReferenceMethod method,
                  int64_t sample_begin, int64_t sample_end, const Winner* winners);
// Precomputes the plan's kept_aux for `method`.
void prepare_draw(RowPlan& plan, ReferenceMethod method);

// Draws every row of `plans` in parallel over (row, block of samples).
void draw_all(const SampleParams& p, const std::vector<RowPlan>& plans, ReferenceMethod method,
              const std::vector<const Winner*>& winners, int num_threads);

// ---- entry points' shared pieces -------------------------------------------------------------

// Non-empty when the params are impossible (null pointers, sizes out of range): the binding
// validates user input before, so this only guards against faults.
std::string validate(const SampleParams& p);

// ---- threads ------------------------------------------------------------------------------------

int resolve_threads(int requested);
// Runs body(t) for t in [0, count) on count threads (the caller's thread is one of them); the first
// exception thrown by any body is rethrown after all have joined.
void run_threads(int count, const std::function<void(int)>& body);
// Runs body(i) for i in [0, items), items handed out dynamically to up to num_threads threads.
void parallel_for(int64_t items, int num_threads, const std::function<void(int64_t)>& body);

// logprobsMode 'raw' (SampleParams::raw_logprobs, SEMANTICS §4), after the draw: each row's drawn
// tokens' and top tokens' log-probabilities under softmax of its softcapped logits (bias included;
// no mask, no listed steps, T = 1), in float64, over the logits `compute` gives (the same fp32).
// Nothing when the call asks for no logprobs.
void write_raw_logprobs(const SampleParams& p, int num_threads);
// ... of row b from its raw logits x[0, p.vocab) (the rows pass assembles them from its segments).
void write_raw_row(const SampleParams& p, int64_t b, const float* x);
// p without the mask and the listed tokens: LogitSource then gives the raw logits.
SampleParams raw_logits_params(const SampleParams& p);
// A vocabulary shard's raw section (include/partial.h, kPartialRaw) for logprobsMode 'raw', after
// its rows were written: the same logits as write_raw_logprobs, their statistics, the raw logits of
// the winners and candidate keys, and the shard's first p.top_logprobs raw keys.
void write_partial_raw(const SampleParams& p, int num_threads);

}  // namespace detail
}  // namespace cpu
}  // namespace flashsample
