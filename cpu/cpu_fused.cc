// The fused CPU sampler: one pass over the vocabulary in tiles of kVocabTile entries, never
// materializing [batch, vocab] (SEMANTICS.md §3, §5).
//
// Pass: each thread owns a range of tiles (and, when there are more threads than tiles, a slice of
// the samples). Per tile it computes the logits of every row, then per row
//   - greedy rows: the running argmax;
//   - rows that may draw from the whole row: the running Gumbel winner of every sample;
//   - with filters: the row's kCandidateCap best entries, the tile's mass partial, the tier counts.
// Second stage, per row: merge the threads' results (candidate_better / entry order: independent of
// the thread count), decide the kept set from the candidates or fall back to the materializing
// procedure for that row, then draw. A vocabulary shard (p.partial) instead writes what it found,
// with global token ids and noise, as its partial state (include/partial.h).
#include <string.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "../cuda/include/partial.h"
#include "cpu_internal.h"
#include "cpu_sampler.h"

namespace flashsample {
namespace cpu {

namespace {

using namespace detail;

// What one vocabulary part (a range of tiles) found, for every row.
struct VocabPart {
  std::vector<Winner> winners;      // [batch * num_samples]: rows that need running winners
  std::vector<Winner> argmax;       // [batch]: greedy rows
  std::vector<BestEntries> best;    // [batch]: with filters
  std::vector<int64_t> finite_count;  // [batch]: drawable finite tokens (with filters)
  std::vector<int64_t> inf_count;     // [batch]: drawable +Inf tokens (with filters)
};

struct RowSetup {
  RowFilters filters;
  // Running Gumbel winners, for the rows they may draw (winners_may_draw); the others are drawn in
  // the second stage among their kept candidates (cheaper with many samples), or fall back.
  bool needs_winners = false;
  // In a call with filters, what the second stage reads of the row: its largest entries (to cut
  // it, to draw from them or for topLogprobs) and its mass (the cuts' weights, logprobs). A row
  // without top-k, top-p, min-p or topLogprobs that the winners draw (a mask, softcap, lists or
  // logprobs alone) needs no candidates, and without logprobs no mass either.
  bool collects_candidates = false;
  bool needs_mass = false;
  // How many of the row's largest entries it keeps: a top-k row's kept set, and so its top
  // logprobs, lie within its k largest, and a shorter list fills and cuts less often (+Inf entries
  // past it send the row to the fallback). In vLLM's order min-p comes first and counts its
  // survivors among the candidates (decide_kept): such a row keeps them all.
  int64_t capacity = kCandidateCap;
};

// Per-thread working memory of the pass.
struct PassScratch {
  std::vector<float> logits;        // [batch, kVocabTile]
  std::vector<float> weight_rows;   // converted W
  double prune[kVocabTile];         // per entry: prune weight, 0 = not drawable
  double quad_prune[kVocabTile / 4];  // per noise block: the largest prune weight of its 4 entries
};

// The smallest uniform_open01 can return: a block whose every bound is below it is pruned whole,
// without computing its Philox block.
constexpr double kMinUniform = 0x1p-33;

// A tile's largest value and largest finite value (-Inf where it has none; NaN never counts), four
// lanes twice a step without branches: a mask's -Inf entries fall anywhere, and a branch a value
// cost the masked scan ~5x (1.5 µs a tile of 256 on the development machine, 0.17 µs here). A
// scaled logit (float times float, exact in double) orders a tile as its logit does, so the lead's
// index is that of the first value equal to the largest.
struct TileMaxima {
  float top, finite_top;
};
TileMaxima tile_maxima(const float* logits, int64_t count) {
  using Floats4 = float __attribute__((vector_size(16)));
  const Floats4 minus_inf = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, inf = -minus_inf;
  Floats4 top[2] = {minus_inf, minus_inf}, finite[2] = {minus_inf, minus_inf};
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    for (int h = 0; h < 2; ++h) {
      Floats4 x;
      memcpy(&x, logits + i + 4 * h, sizeof(x));
      top[h] = x > top[h] ? x : top[h];
      finite[h] = (x > finite[h]) & (x != inf) ? x : finite[h];
    }
  }
  TileMaxima m{-INFINITY, -INFINITY};
  auto take = [&m](float x) {
    m.top = x > m.top ? x : m.top;
    m.finite_top = x > m.finite_top && x != INFINITY ? x : m.finite_top;
  };
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      take(top[h][k]);  // (each lane's maxima are values of the tile)
      take(finite[h][k]);
    }
  }
  for (; i < count; ++i) take(logits[i]);
  return m;
}

// Running Gumbel winners of samples [sample_begin, sample_end) of one row over one tile.
void scan_tile(const SampleParams& p, int64_t row, const RowFilters& filters, const float* logits,
               int64_t vocab_begin, int64_t count, int64_t sample_begin, int64_t sample_end,
               Winner* winners, PassScratch& s) {
  // c_ref: the tile's largest finite scaled logit, the reference of its prune weights.
  // lead: the entry offered first (the first +Inf entry, else the first of the largest finite).
  const TileMaxima m = tile_maxima(logits, count);
  if (m.top == -INFINITY) return;
  int64_t lead = 0;
  while (logits[lead] != m.top) ++lead;
  const double c_ref = static_cast<double>(m.finite_top) * filters.inv_temperature;
  prune_weights(logits, count, filters.inv_temperature, c_ref, s.prune);
  const int64_t quads = (count + 3) / 4;
  for (int64_t i = count; i < 4 * quads; ++i) s.prune[i] = 0.0;  // the last block's padding
  for (int64_t q = 0; q < quads; ++q) {
    double largest = 0.0;
    for (int64_t i = 4 * q; i < 4 * q + 4; ++i) largest = std::max(largest, s.prune[i]);
    s.quad_prune[q] = largest;
  }
  const uint64_t seed = p.seed[row], offset = p.offset[row];
  const uint32_t stream = noise_stream(p, row);
  const uint32_t first_quad = static_cast<uint32_t>(vocab_begin >> 2);
  const uint32_t lead_quad = first_quad + static_cast<uint32_t>(lead >> 2);
  for (int64_t j = sample_begin; j < sample_end; ++j) {
    Winner best = winners[j];
    double factor = prune_factor(c_ref, best.score);
    // The lead first: its score is the likeliest winner, so the bound prunes most of the others.
    // The order of the offers does not change the winner (candidate_better is a total order).
    const Philox4 lead_block =
        noise_block(seed, offset, stream, static_cast<uint32_t>(j), lead_quad);
    offer(logits[lead], static_cast<uint32_t>(vocab_begin + lead), lead_block.x[lead & 3],
          s.prune[lead], filters.inv_temperature, c_ref, best, factor);
    for (int64_t q = 0; q < quads; ++q) {
      if (s.quad_prune[q] * factor < kMinUniform) continue;  // no entry of the block can win
      const Philox4 block =
          q == (lead >> 2) ? lead_block
                           : noise_block(seed, offset, stream, static_cast<uint32_t>(j),
                                         first_quad + static_cast<uint32_t>(q));
      for (int64_t lane = 0; lane < 4; ++lane) {
        // offer's own bound tested first, with the entry's other tests, without a branch on each:
        // a mask's -Inf entries (weight 0) fall anywhere, and most entries fail the bound (a NaN
        // bound, weight +Inf times factor 0, passes it as it does in offer)
        const int64_t i = 4 * q + lane;
        const double weight = s.prune[i];
        const bool bounded = uniform_lower_bound(block.x[lane]) > weight * factor;
        if ((weight == 0.0) | (i == lead) | bounded) continue;
        offer(logits[i], static_cast<uint32_t>(vocab_begin + i), block.x[lane], weight,
              filters.inv_temperature, c_ref, best, factor);
      }
    }
    winners[j] = best;
  }
}

void update_argmax(const float* logits, int64_t vocab_begin, int64_t count, Winner& argmax) {
  for (int64_t i = 0; i < count; ++i) {
    if (!is_drawable(logits[i])) continue;
    const Candidate c =
        make_candidate(logits[i], 0.0f, true, 0.0f, static_cast<uint32_t>(vocab_begin + i));
    if (candidate_better(c.score, c.key, argmax.score, argmax.key)) {
      argmax = Winner{c.score, c.key, logits[i]};
    }
  }
}

// ---- second stage: what the parts found for row b, merged (independent of the thread count) ----

Winner merged_argmax(const std::vector<VocabPart>& parts, int64_t b) {
  Winner argmax = parts[0].argmax[b];
  for (const VocabPart& part : parts) {
    if (winner_better(part.argmax[b], argmax)) argmax = part.argmax[b];
  }
  return argmax;
}

// The row's running winners, merged into parts[0]'s (which it returns).
Winner* merge_winners(std::vector<VocabPart>& parts, int64_t b, int64_t samples) {
  Winner* merged = parts[0].winners.data() + b * samples;
  for (size_t k = 1; k < parts.size(); ++k) {
    const Winner* other = parts[k].winners.data() + b * samples;
    for (int64_t j = 0; j < samples; ++j) {
      if (winner_better(other[j], merged[j])) merged[j] = other[j];
    }
  }
  return merged;
}

// The row's candidates (parts[0]'s list, moved, absorbing the others) and tier counts.
struct RowFindings {
  BestEntries best;
  int64_t finite_count = 0, inf_count = 0;
};
RowFindings merge_findings(std::vector<VocabPart>& parts, int64_t b) {
  RowFindings f{std::move(parts[0].best[b]), parts[0].finite_count[b], parts[0].inf_count[b]};
  for (size_t k = 1; k < parts.size(); ++k) {
    f.best.absorb(parts[k].best[b]);
    f.finite_count += parts[k].finite_count[b];
    f.inf_count += parts[k].inf_count[b];
  }
  return f;
}

// Row b of a shard's partial state from the parts' findings.
void write_partial_row(const SampleParams& p, const PartialHeader& h, int64_t b, const RowSetup& r,
                       std::vector<VocabPart>& parts, const MassPartial* tile_masses, int64_t tiles) {
  const PartialRowView v = partial_row(p.partial, h, b);
  const int64_t samples = p.num_samples;
  *v.row = PartialRow{-INFINITY, 0.0, 0, 0, 0, 1};
  if (r.filters.greedy) {
    const Winner argmax = merged_argmax(parts, b);
    for (int64_t j = 0; j < samples; ++j) v.winners[j] = PartialWinner{argmax.score, argmax.key, argmax.logit, 0u};
    return;
  }
  const Winner* merged = merge_winners(parts, b, samples);
  for (int64_t j = 0; j < samples; ++j) v.winners[j] = PartialWinner{merged[j].score, merged[j].key, merged[j].logit, 0u};
  if (!(h.flags & kPartialStats)) return;
  RowFindings found = merge_findings(parts, b);
  v.row->finite_count = found.finite_count;
  v.row->inf_count = found.inf_count;
  const MassPartial mass = combine_mass(tile_masses + b * tiles, tiles);
  v.row->z_max = mass.max_z;
  v.row->sum = mass.sum;
  const std::vector<Entry>& sorted = found.best.finish();
  for (size_t i = 0; i < sorted.size(); ++i) {
    v.keys[i] = partial_key(sorted[i].logit, static_cast<uint32_t>(sorted[i].index));
  }
  v.row->num_candidates = static_cast<int32_t>(sorted.size());
  v.row->complete = static_cast<int64_t>(sorted.size()) == v.row->finite_count + v.row->inf_count ? 1 : 0;
}

// The candidates a row's decision sorts first (sort_front): a nucleus of top-p 0.9 over Gaussian
// logits of std 4 holds ~2-25 tokens at T 0.6, ~60-390 at T 1.
constexpr int64_t kSortedFirst = 64;

// Whether the running winners may draw a row whose tier is wider than the candidates: its kept set
// is then the whole tier, when nothing cuts it or when a top-k above the candidates does not (k at
// least the tier). A row that top-p or min-p cuts is decided from the candidates or falls back
// (decide_kept): it never reads them.
bool winners_may_draw(const RowFilters& f) {
  return f.top_p >= 1.0 && f.min_p <= 0.0 && (f.top_k <= 0 || f.top_k > kCandidateCap);
}

}  // namespace

std::string sample_fused(const SampleParams& p, int num_threads) {
  const std::string invalid = validate(p);
  if (!invalid.empty()) return invalid;
  if (p.row_values != nullptr) return shard_row_values(p, num_threads);
  try {
    const int threads = resolve_threads(num_threads);
    const bool filtered = has_filters(p);
    const int64_t batch = p.batch, samples = p.num_samples;
    const int64_t tiles = (p.vocab + kVocabTile - 1) / kVocabTile;
    // A shard's tokens and noise are global: tile v0 of W is token vocab_offset + v0.
    const bool partial = p.partial != nullptr;
    const int64_t base = p.vocab_offset;
    const int64_t capacity = partial ? p.partial_capacity : kCandidateCap;

    std::vector<RowSetup> rows(static_cast<size_t>(batch));
    bool any_winners = false;
    for (int64_t b = 0; b < batch; ++b) {
      RowSetup& r = rows[b];
      r.filters = row_filters(p, b);
      const bool small_top_k = r.filters.top_k > 0 && r.filters.top_k <= kCandidateCap;
      const bool truncated = r.filters.top_k > 0 || r.filters.top_p < 1.0 || r.filters.min_p > 0.0;
      r.needs_winners = !r.filters.greedy &&
                        (partial || !filtered || (p.vocab > kCandidateCap && winners_may_draw(r.filters)));
      any_winners = any_winners || r.needs_winners;
      // (a shard's partial state carries every row's candidates and mass: partial.h)
      r.collects_candidates =
          filtered && (partial || truncated || p.top_logprobs > 0 || !r.needs_winners);
      r.needs_mass = filtered && (partial || truncated || p.top_logprobs > 0 || p.logprobs != nullptr);
      const bool min_p_first = r.filters.min_p_first && r.filters.min_p > 0.0;
      r.capacity = partial ? capacity : small_top_k && !min_p_first ? r.filters.top_k : kCandidateCap;
    }

    // Thread layout: tile ranges first; spare threads split the samples (small vocabularies with
    // many samples spend their time in the noise, not in the logits).
    const int64_t vocab_parts = std::min<int64_t>(threads, tiles);
    const int64_t sample_parts =
        any_winners ? std::max<int64_t>(1, std::min<int64_t>(threads / vocab_parts, samples)) : 1;

    LogitSource source(p);
    std::vector<VocabPart> parts(static_cast<size_t>(vocab_parts));
    for (VocabPart& part : parts) {
      if (any_winners) part.winners.resize(static_cast<size_t>(batch * samples));
      part.argmax.resize(static_cast<size_t>(batch));
      if (filtered) {
        part.best.reserve(static_cast<size_t>(batch));
        for (const RowSetup& r : rows) part.best.emplace_back(r.capacity);
        part.finite_count.assign(static_cast<size_t>(batch), 0);
        part.inf_count.assign(static_cast<size_t>(batch), 0);
      }
    }
    std::vector<MassPartial> mass(filtered ? static_cast<size_t>(batch * tiles) : 0);

    run_threads(static_cast<int>(vocab_parts * sample_parts), [&](int thread) {
      const int64_t vp = thread / sample_parts, sp = thread % sample_parts;
      VocabPart& part = parts[vp];
      const int64_t tile_begin = tiles * vp / vocab_parts;
      const int64_t tile_end = tiles * (vp + 1) / vocab_parts;
      const int64_t sample_begin = samples * sp / sample_parts;
      const int64_t sample_end = samples * (sp + 1) / sample_parts;
      const bool collects = sp == 0;  // one thread per part collects the per-row data
      PassScratch s;
      s.logits.resize(static_cast<size_t>(batch * kVocabTile));
      for (int64_t t = tile_begin; t < tile_end; ++t) {
        const int64_t v0 = t * kVocabTile, count = std::min(kVocabTile, p.vocab - v0);
        source.compute(0, batch, v0, v0 + count, s.logits.data(), kVocabTile, s.weight_rows);
        for (int64_t b = 0; b < batch; ++b) {
          const float* logits = s.logits.data() + b * kVocabTile;
          const RowSetup& r = rows[b];
          if (r.filters.greedy) {
            if (collects) update_argmax(logits, base + v0, count, part.argmax[b]);
            continue;
          }
          if (filtered && collects) {
            if (r.needs_mass) mass[b * tiles + t] = tile_mass(logits, count, r.filters.temperature);
            int64_t finite = 0, inf = 0;  // (without branches: a mask's -Inf entries fall anywhere)
            for (int64_t i = 0; i < count; ++i) {
              finite += is_drawable(logits[i]) && logits[i] != INFINITY;
              inf += logits[i] == INFINITY;
            }
            part.finite_count[b] += finite;
            part.inf_count[b] += inf;
            if (r.collects_candidates) part.best[b].push_tile(logits, count, base + v0);
          }
          if (r.needs_winners) {
            scan_tile(p, b, r.filters, logits, base + v0, count, sample_begin, sample_end,
                      part.winners.data() + b * samples, s);
          }
        }
      }
    });

    if (partial) {
      PartialHeader& h = *static_cast<PartialHeader*>(p.partial);
      init_partial_header(&h, static_cast<int32_t>(batch), p.partial_max_batch, p.num_samples,
                          static_cast<int32_t>(capacity), p.options_hash, base, p.vocab,
                          p.vocab_total > 0 ? p.vocab_total : p.vocab, filtered,
                          reports_raw_logprobs(p) ? p.top_logprobs : -1);
      parallel_for(batch, threads, [&](int64_t b) { write_partial_row(p, h, b, rows[b], parts, mass.data(), tiles); });
      write_partial_raw(p, threads);
      return std::string();
    }

    // Second stage, per row: merge the parts, decide the kept set, plan the draw.
    std::vector<RowPlan> plans(static_cast<size_t>(batch));
    std::vector<const Winner*> row_winners(static_cast<size_t>(batch), nullptr);
    std::atomic<int64_t> fallbacks{0};
    parallel_for(batch, threads, [&](int64_t b) {
      const RowSetup& r = rows[b];
      RowPlan& plan = plans[b];
      plan.greedy = r.filters.greedy;
      plan.temperature = r.filters.greedy ? 1.0 : r.filters.temperature;
      plan.inv_temperature = r.filters.inv_temperature;
      if (r.filters.greedy) {
        plan.greedy_token = winner_token(merged_argmax(parts, b));
        finish_trivial_plan(p, b, plan);
        return;
      }
      if (r.needs_winners) row_winners[b] = merge_winners(parts, b, samples);
      if (!filtered) {  // no filters: the kept set is the whole row, the winners are the draw
        plan.from_winners = true;
        plan.status = has_token(row_winners[b][0]) ? kRowOk : kRowNoCandidate;
        if (p.row_status != nullptr) p.row_status[b] = plan.status;
        return;
      }

      RowFindings found = merge_findings(parts, b);
      const int64_t finite_count = found.finite_count, inf_count = found.inf_count;
      if (finite_count + inf_count == 0) {
        finish_trivial_plan(p, b, plan);
        return;
      }
      TierView tier;
      tier.temperature = r.filters.temperature;
      if (inf_count > 0) {  // the +Inf entries lead the order
        tier.inf_tier = true;
        tier.size = inf_count;
        tier.total = static_cast<double>(inf_count);
      } else {
        const MassPartial row_mass = combine_mass(mass.data() + b * tiles, tiles);
        tier.size = finite_count;
        tier.z_max = row_mass.max_z;
        tier.total = row_mass.sum;
      }
      // The kept set from the first `sorted` candidates in order. The whole row is kept and the
      // running winners have drawn from it; otherwise the kept set must lie within them.
      bool use_winners = false;
      auto decide = [&](int64_t sorted) {
        tier.best = found.best.entries();
        tier.num_best = tier.inf_tier ? std::min<int64_t>(inf_count, sorted) : sorted;
        KeptDecision k = decide_kept(tier, r.filters, p.top_logprobs);
        use_winners = !k.fallback && k.size == tier.size && r.needs_winners;
        if (!use_winners && k.size > tier.num_best) k.fallback = true;
        return k;
      };
      // Most rows are decided by their first candidates (a nucleus at T < 1, min-p's survivors,
      // the top logprobs): those are sorted first, and all of them only for a row that reads past
      // them. A decision from fewer candidates that does not fall back is the decision from all.
      const int64_t front = found.best.sort_front(kSortedFirst);
      KeptDecision kept = decide(front);
      if (kept.fallback) {
        const int64_t all = static_cast<int64_t>(found.best.finish().size());
        if (all > front) kept = decide(all);
      }
      if (kept.fallback) {
        fallbacks.fetch_add(1, std::memory_order_relaxed);
        std::vector<float> row_logits(static_cast<size_t>(p.vocab)), scratch;
        source.compute(b, b + 1, 0, p.vocab, row_logits.data(), p.vocab, scratch);
        reference_row_plan(p, b, row_logits.data(), plan);
        row_winners[b] = nullptr;
      } else {
        finish_plan(p, b, tier, kept, !use_winners, plan);
        plan.from_winners = use_winners;
      }
      prepare_draw(plan, ReferenceMethod::kGumbel);
    });
    if (p.fallback_rows != nullptr) *p.fallback_rows = static_cast<int32_t>(fallbacks.load());

    draw_all(p, plans, ReferenceMethod::kGumbel, row_winners, threads);
    write_raw_logprobs(p, threads);
    return std::string();
  } catch (const std::bad_alloc&) {
    return "sample_fused: out of host memory";
  } catch (const std::exception& e) {
    return std::string("sample_fused: ") + e.what();
  }
}

}  // namespace cpu
}  // namespace flashsample
