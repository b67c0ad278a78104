// Per-row semantics shared by both samplers: the filters' kept set (SEMANTICS.md §2, §5),
// log-probabilities (§4) and the draws (§3).
#include <algorithm>

#include "cpu_internal.h"

namespace flashsample {
namespace cpu {
namespace detail {

RowFilters row_filters(const SampleParams& p, int64_t row) {
  RowFilters f;
  const float temperature = p.temperature[row];
  f.greedy = !(temperature > 0.0f);
  f.temperature = f.greedy ? 0.0 : static_cast<double>(temperature);
  f.inv_temperature = f.greedy ? 0.0f : 1.0f / temperature;  // make_candidate's float factor
  if (p.top_k != nullptr && p.top_k[row] > 0) f.top_k = p.top_k[row];
  if (p.top_p != nullptr && p.top_p[row] < 1.0f) f.top_p = p.top_p[row];
  if (p.min_p != nullptr && p.min_p[row] > 0.0f) f.min_p = p.min_p[row];
  f.min_p_first = p.filter_order == FilterOrder::kMinPFirst;
  return f;
}

namespace {

double prefix_weight(const TierView& tier, int64_t count) {
  double sum = 0.0;
  for (int64_t i = 0; i < count; ++i) sum += tier.weight(tier.best[i]);
  return sum;
}

// Every sum below runs over the tier's order, or is the tier's total from the tile partials: the
// same additions in the same order whether the caller knows the whole tier (reference) or its
// kCandidateCap best (fused), so both reach the same kept set and the same log-mass.
}  // namespace

KeptDecision decide_kept(const TierView& tier, const RowFilters& filters, int64_t top_logprobs) {
  KeptDecision kept;
  kept.size = tier.size;
  kept.total = tier.total;
  const KeptDecision fallback{0, 0.0, true};
  // The +Inf tier shares the mass uniformly: top-k, top-p and min-p cannot rank equal infinite
  // logits and are not applied (docs/SEMANTICS.md §2.3).
  const bool rank_filters = !tier.inf_tier;
  // top-k: the k first of the order.
  auto top_k = [&] {
    if (rank_filters && filters.top_k > 0 && filters.top_k < kept.size) {
      kept.size = filters.top_k;
      if (kept.size > tier.num_best) return false;
      kept.total = prefix_weight(tier, kept.size);
    }
    return true;
  };
  // top-p: the shortest prefix whose mass reaches p of the total kept so far.
  auto top_p = [&] {
    if (rank_filters && filters.top_p < 1.0) {
      const double target = filters.top_p * kept.total;
      double cumulative = 0.0;
      for (int64_t i = 0; i < kept.size; ++i) {
        if (i >= tier.num_best) return false;
        cumulative += tier.weight(tier.best[i]);
        if (cumulative >= target) {
          kept.size = i + 1;
          kept.total = cumulative;
          break;
        }
      }
    }
    return true;
  };
  // min-p: z >= z_max + log(m); the first token (p = p_max) always stays. In the +Inf tier every
  // token has p = p_max.
  auto min_p = [&] {
    if (filters.min_p > 0.0 && !tier.inf_tier) {
      const double threshold = tier.z_max + log(filters.min_p);
      for (int64_t i = 1; i < kept.size; ++i) {
        if (i >= tier.num_best) return false;
        if (tier.z(tier.best[i]) < threshold) {
          kept.size = i;
          kept.total = prefix_weight(tier, i);
          break;
        }
      }
    }
    return true;
  };
  // Hugging Face's order (default): top-k, top-p, min-p. vLLM's: min-p first, so top-p's mass is
  // that of the min-p survivors (SEMANTICS §2, filterOrder).
  const bool ok = filters.min_p_first ? (min_p() && top_k() && top_p()) : (top_k() && top_p() && min_p());
  if (!ok) return fallback;
  if (std::min(top_logprobs, kept.size) > tier.num_best) return fallback;
  return kept;
}

namespace {

void write_top_logprobs(const SampleParams& p, int64_t row, int64_t count, const Entry* entries,
                        const RowPlan& plan) {
  if (p.top_logprobs <= 0) return;
  int32_t* tokens = p.top_tokens + row * p.top_logprobs;
  float* logprobs = p.top_token_logprobs + row * p.top_logprobs;
  for (int64_t i = 0; i < p.top_logprobs; ++i) {
    const bool present = i < count;
    tokens[i] = present ? entries[i].index : -1;
    logprobs[i] = present ? static_cast<float>(plan.logprob(entries[i].logit)) : -INFINITY;
  }
}

}  // namespace

void finish_trivial_plan(const SampleParams& p, int64_t row, RowPlan& plan) {
  plan.status = plan.greedy && plan.greedy_token >= 0 ? kRowOk : kRowNoCandidate;
  if (p.top_logprobs > 0) {
    // Greedy: a point mass on the argmax (log-probability 0); no candidate: nothing.
    int32_t* tokens = p.top_tokens + row * p.top_logprobs;
    float* logprobs = p.top_token_logprobs + row * p.top_logprobs;
    std::fill(tokens, tokens + p.top_logprobs, -1);
    std::fill(logprobs, logprobs + p.top_logprobs, -INFINITY);
    if (plan.status == kRowOk) {
      tokens[0] = plan.greedy_token;
      logprobs[0] = 0.0f;
    }
  }
  if (p.row_status != nullptr) p.row_status[row] = plan.status;
}

void finish_plan(const SampleParams& p, int64_t row, const TierView& tier,
                 const KeptDecision& kept, bool keep_list, RowPlan& plan) {
  plan.status = kRowOk;
  plan.inf_tier = tier.inf_tier;
  plan.temperature = tier.temperature;
  plan.z_max = tier.z_max;
  plan.log_mass = tier.z_max + log(kept.total);
  if (keep_list) {
    plan.kept.assign(tier.best, tier.best + kept.size);
    std::sort(plan.kept.begin(), plan.kept.end(),
              [](const Entry& a, const Entry& b) { return a.index < b.index; });
  }
  write_top_logprobs(p, row, std::min<int64_t>(kept.size, p.top_logprobs), tier.best, plan);
  if (p.row_status != nullptr) p.row_status[row] = plan.status;
}

void reference_row_plan(const SampleParams& p, int64_t row, const float* logits, RowPlan& plan) {
  const RowFilters filters = row_filters(p, row);
  const int64_t vocab = p.vocab;
  plan = RowPlan();
  plan.greedy = filters.greedy;
  plan.temperature = filters.greedy ? 1.0 : filters.temperature;
  plan.inv_temperature = filters.inv_temperature;

  // The tier: the +Inf tokens if there are any, else the finite drawable ones (in index order).
  std::vector<Entry> entries;
  for (int64_t v = 0; v < vocab; ++v) {
    if (logits[v] == INFINITY) entries.push_back(Entry{logits[v], static_cast<int32_t>(v)});
  }
  const bool inf_tier = !entries.empty();
  if (!inf_tier) {
    for (int64_t v = 0; v < vocab; ++v) {
      if (is_drawable(logits[v])) entries.push_back(Entry{logits[v], static_cast<int32_t>(v)});
    }
  }
  if (entries.empty() || filters.greedy) {
    if (!entries.empty()) {
      plan.greedy_token = std::min_element(entries.begin(), entries.end(), EntryBefore{})->index;
    }
    finish_trivial_plan(p, row, plan);
    return;
  }

  TierView tier;
  tier.inf_tier = inf_tier;
  tier.size = static_cast<int64_t>(entries.size());
  tier.temperature = filters.temperature;
  if (inf_tier) {
    tier.z_max = 0.0;
    tier.total = static_cast<double>(tier.size);
  } else {
    // The row mass over the same kVocabTile blocks as the fused pass.
    std::vector<MassPartial> partials;
    for (int64_t v0 = 0; v0 < vocab; v0 += kVocabTile) {
      const int64_t count = std::min(kVocabTile, vocab - v0);
      partials.push_back(tile_mass(logits + v0, count, tier.temperature));
    }
    const MassPartial mass = combine_mass(partials.data(), static_cast<int64_t>(partials.size()));
    tier.z_max = mass.max_z;
    tier.total = mass.sum;
  }
  // Order the tier. Without top-k/top-p/min-p only the topLogprobs prefix is ever read in order.
  const bool order_matters = (filters.top_k > 0 && filters.top_k < tier.size) ||
                             filters.top_p < 1.0 || filters.min_p > 0.0;
  if (order_matters) {
    std::sort(entries.begin(), entries.end(), EntryBefore{});
  } else {
    const int64_t head = std::min<int64_t>(p.top_logprobs, tier.size);
    std::partial_sort(entries.begin(), entries.begin() + head, entries.end(), EntryBefore{});
  }
  tier.best = entries.data();
  tier.num_best = tier.size;
  const KeptDecision kept = decide_kept(tier, filters, p.top_logprobs);  // complete: no fallback
  finish_plan(p, row, tier, kept, true, plan);
}

void prepare_draw(RowPlan& plan, ReferenceMethod method) {
  if (plan.status != kRowOk || plan.greedy || plan.from_winners) return;
  plan.kept_aux.resize(plan.kept.size());
  if (method == ReferenceMethod::kGumbel) {
    plan.c_ref = -INFINITY;
    for (const Entry& e : plan.kept) {
      if (e.logit != INFINITY) {
        plan.c_ref = std::max(plan.c_ref, static_cast<double>(e.logit) * plan.inv_temperature);
      }
    }
    for (size_t i = 0; i < plan.kept.size(); ++i) {
      const float logit = plan.kept[i].logit;
      plan.kept_aux[i] =
          logit == INFINITY ? INFINITY : prune_weight(logit, plan.inv_temperature, plan.c_ref);
    }
  } else {
    // Cumulative float64 mass in index order (SEMANTICS.md §3, inverse cdf).
    double cumulative = 0.0;
    for (size_t i = 0; i < plan.kept.size(); ++i) {
      const Entry& e = plan.kept[i];
      cumulative += plan.inf_tier ? 1.0 : exp(scaled(e.logit, plan.temperature) - plan.z_max);
      plan.kept_aux[i] = cumulative;
    }
  }
}

void draw_samples(const SampleParams& p, int64_t row, const RowPlan& plan, ReferenceMethod method,
                  int64_t sample_begin, int64_t sample_end, const Winner* winners) {
  int32_t* tokens = p.tokens + row * p.num_samples;
  float* logprobs = p.logprobs != nullptr ? p.logprobs + row * p.num_samples : nullptr;
  auto emit = [&](int64_t j, int32_t token, double logprob) {
    tokens[j] = token;
    if (logprobs != nullptr) logprobs[j] = static_cast<float>(logprob);
  };
  if (plan.status != kRowOk) {
    for (int64_t j = sample_begin; j < sample_end; ++j) emit(j, -1, -INFINITY);
    return;
  }
  if (plan.greedy) {
    for (int64_t j = sample_begin; j < sample_end; ++j) emit(j, plan.greedy_token, 0.0);
    return;
  }
  if (plan.from_winners) {
    for (int64_t j = sample_begin; j < sample_end; ++j) {
      emit(j, winner_token(winners[j]), plan.logprob(winners[j].logit));
    }
    return;
  }
  const uint64_t seed = p.seed[row], offset = p.offset[row];
  const uint32_t stream = noise_stream(p, row);
  const std::vector<Entry>& kept = plan.kept;
  const size_t count = kept.size();
  if (method == ReferenceMethod::kGumbel) {
    for (int64_t j = sample_begin; j < sample_end; ++j) {
      Winner best;
      double factor = INFINITY;
      uint32_t quad = UINT32_MAX;
      Philox4 block{};
      for (size_t i = 0; i < count; ++i) {
        const uint32_t v = static_cast<uint32_t>(kept[i].index);
        if ((v >> 2) != quad) {  // kept is sorted by index: neighbours share one Philox block
          quad = v >> 2;
          block = noise_block(seed, offset, stream, static_cast<uint32_t>(j), quad);
        }
        offer(kept[i].logit, v, block.x[v & 3], plan.kept_aux[i], plan.inv_temperature, plan.c_ref,
              best, factor);
      }
      emit(j, winner_token(best), plan.logprob(best.logit));
    }
  } else {
    const double total = plan.kept_aux.back();
    for (int64_t j = sample_begin; j < sample_end; ++j) {
      // Counter (j, stream, offset): a different family from the Gumbel noise's (SEMANTICS.md §3).
      const uint32_t x =
          philox4x32_10(static_cast<uint32_t>(j), stream, static_cast<uint32_t>(offset),
                        static_cast<uint32_t>(offset >> 32), static_cast<uint32_t>(seed),
                        static_cast<uint32_t>(seed >> 32))
              .x[0];
      const double u = (static_cast<double>(x) + 0.5) * 0x1p-32;
      // The first index whose cumulative mass exceeds u * total.
      size_t i = std::upper_bound(plan.kept_aux.begin(), plan.kept_aux.end(), u * total) -
                 plan.kept_aux.begin();
      i = std::min(i, count - 1);
      emit(j, kept[i].index, plan.logprob(kept[i].logit));
    }
  }
}

void draw_all(const SampleParams& p, const std::vector<RowPlan>& plans, ReferenceMethod method,
              const std::vector<const Winner*>& winners, int num_threads) {
  // Blocks of samples, so that one row with a million samples still spreads over the threads.
  constexpr int64_t kSampleBlock = 4096;
  const int64_t blocks_per_row = (p.num_samples + kSampleBlock - 1) / kSampleBlock;
  parallel_for(p.batch * blocks_per_row, num_threads, [&](int64_t item) {
    const int64_t row = item / blocks_per_row;
    const int64_t begin = (item % blocks_per_row) * kSampleBlock;
    const int64_t end = std::min<int64_t>(begin + kSampleBlock, p.num_samples);
    draw_samples(p, row, plans[row], method, begin, end, winners.empty() ? nullptr : winners[row]);
  });
}

}  // namespace detail
}  // namespace cpu
}  // namespace flashsample
