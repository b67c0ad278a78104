// merge_partials: the unsharded call's tokens from its shards' partial states (partial.h,
// docs/SEMANTICS.md §6). One implementation for both backends: the CPU loops over rows, the CUDA
// kernel (cuda/partial.cu) runs one row per thread. Sequential and allocation-free on purpose:
// a row reads at most shards x capacity keys, through a k-way merge of the shards' sorted keys.
//
// The decision is SEMANTICS §2.5-2.7 and §5 on the merged candidates: the keys of every shard
// are a prefix of that shard's order, so the merged keys down to the largest last key of an
// incomplete shard are a complete prefix of the row's order. A row whose kept set or topLogprobs
// reach past that prefix is kRowUndecided: the shards must send more candidates.
#pragma once

#include <math.h>
#include <stdint.h>

#include "noise.h"
#include "params.h"
#include "partial.h"

namespace flashsample {

// The partial blocks of one merge, in any order.
struct PartialSet {
  const void* blocks[kMaxShards];
  uint64_t bytes[kMaxShards];  // each block's size: a header claiming more is refused, not read
  int32_t count;
};

FS_HD const PartialHeader& partial_header(const void* block) {
  return *static_cast<const PartialHeader*>(block);
}

// Checks the partials against the merge call `p` (batch, num_samples, vocab = the unsharded
// vocabulary). kPartialOk, or the error and in *which the index of the partial it concerns.
FS_HD int32_t check_partials(const SampleParams& p, const PartialSet& set, uint64_t options_hash,
                                    bool need_stats, int32_t* which) {
  int64_t covered = 0;
  int32_t starts_at_zero = 0;
  for (int32_t i = 0; i < set.count; ++i) {
    *which = i;
    const PartialHeader& h = partial_header(set.blocks[i]);
    if (set.bytes[i] < sizeof(PartialHeader) || h.magic != kPartialMagic || h.version != kPartialVersion)
      return kPartialNotAPartial;
    if (h.num_samples < 1 || h.num_samples > kMaxSamples || h.capacity < 0 || h.capacity > kMaxPartialCapacity ||
        h.batch < 1 || h.batch > h.max_batch || h.row_bytes != partial_row_bytes(h.num_samples, h.capacity) ||
        partial_bytes(h.max_batch, h.num_samples, h.capacity) > set.bytes[i])
      return kPartialLayout;
    if (h.batch != p.batch) return kPartialBatch;
    if (h.num_samples != p.num_samples) return kPartialSamples;
    if (h.vocab_total != p.vocab) return kPartialVocabTotal;
    if (h.options_hash != options_hash) return kPartialOptions;
    if (need_stats && !(h.flags & kPartialStats)) return kPartialStatsMissing;
    // Exact tiling of [0, V): distinct starts, one at 0, every end another's start or V, sizes
    // summing to V (then every shard is exactly [its start, the next start)).
    const int64_t end = h.vocab_offset + h.vocab_size;
    bool end_ok = end == h.vocab_total;
    for (int32_t j = 0; j < set.count; ++j) {
      const PartialHeader& o = partial_header(set.blocks[j]);
      if (j != i && o.vocab_offset == h.vocab_offset) return kPartialCoverage;
      end_ok = end_ok || o.vocab_offset == end;
    }
    if (h.vocab_offset < 0 || h.vocab_size < 1 || !end_ok) return kPartialCoverage;
    covered += h.vocab_size;
    starts_at_zero += h.vocab_offset == 0 ? 1 : 0;
  }
  *which = 0;
  if (covered != p.vocab || starts_at_zero != 1) return kPartialCoverage;
  return kPartialOk;
}

// The most rows of W any of the (checked) partials' shards holds: candidates that many settle
// every row.
FS_HD int32_t largest_shard(const PartialSet& set) {
  int64_t most = 0;
  for (int32_t i = 0; i < set.count; ++i) {
    const int64_t rows = partial_header(set.blocks[i]).vocab_size;
    if (rows > most) most = rows;
  }
  return static_cast<int32_t>(most);
}

// The merged candidate order of one row: a k-way merge of the shards' keys (each sorted
// descending). `at(i)` walks forward from the last position, restarting when asked to go back.
struct MergedKeys {
  const uint64_t* keys[kMaxShards];
  int32_t count[kMaxShards];
  int32_t pos[kMaxShards];
  int32_t shards;
  int64_t next_index;  // the index of the key the next step yields
  uint64_t last;

  FS_HD void restart() {
    for (int32_t s = 0; s < shards; ++s) pos[s] = 0;
    next_index = 0;
  }
  FS_HD uint64_t step() {
    int32_t best = -1;
    for (int32_t s = 0; s < shards; ++s) {
      if (pos[s] < count[s] && (best < 0 || keys[s][pos[s]] > keys[best][pos[best]])) best = s;
    }
    last = keys[best][pos[best]++];
    ++next_index;
    return last;
  }
  // The i-th key of the merged order (i < the total count).
  FS_HD uint64_t at(int64_t i) {
    if (i < next_index - 1) restart();
    while (next_index <= i) step();
    return last;
  }
};

struct MergedTier {
  bool inf_tier;
  int64_t size;      // tokens in the tier (the +Inf tokens if any, else the finite drawable ones)
  int64_t listed;    // merged keys
  uint64_t bound;    // merged keys >= bound are a complete prefix of the tier's order (UINT64_MAX: none)
  double z_max;      // 0 in the +Inf tier
  double total;      // Σ exp(z - z_max) over the tier; its size in the +Inf tier
  double temperature;
};

// Whether merged key i lies in the complete prefix (monotone in i). Asked only as far as a decision
// reads, so that a row's merge walks its kept keys, not every shard's candidates: counting the whole
// prefix first cost 300-500 µs a row (one GPU thread, 2 x 1024 candidates, H200).
FS_HD bool merged_in_prefix(const MergedTier& t, MergedKeys& m, int64_t i) {
  return i < t.size && i < t.listed && t.bound != UINT64_MAX && m.at(i) >= t.bound;
}

FS_HD double merged_z(const MergedTier& t, float logit) {
  return t.inf_tier ? 0.0 : static_cast<double>(logit) / t.temperature;
}
FS_HD double merged_weight(const MergedTier& t, float logit) {
  return t.inf_tier ? 1.0 : exp(merged_z(t, logit) - t.z_max);
}

struct MergedKept {
  int64_t size;
  double total;
  bool undecided;
};

FS_HD double merged_prefix_weight(const MergedTier& t, MergedKeys& m, int64_t count) {
  double sum = 0.0;
  for (int64_t i = 0; i < count; ++i) sum += merged_weight(t, partial_key_logit(m.at(i)));
  return sum;
}

// SEMANTICS §2.5-2.7 on the merged prefix (the CPU backend's decide_kept, walking merged keys).
FS_HD MergedKept merged_decide(const MergedTier& t, MergedKeys& m, int64_t top_k, double top_p,
                                      double min_p, bool min_p_first, int64_t top_logprobs) {
  MergedKept kept;
  kept.size = t.size;
  kept.total = t.total;
  kept.undecided = false;
  const bool rank_filters = !t.inf_tier;
  bool ok = true;
  for (int step = 0; step < 3 && ok; ++step) {
    // Hugging Face's order: top-k, top-p, min-p; vLLM's: min-p, top-k, top-p.
    const int which = min_p_first ? (step == 0 ? 2 : step - 1) : step;
    if (which == 0 && rank_filters && top_k > 0 && top_k < kept.size) {
      kept.size = top_k;
      if (!merged_in_prefix(t, m, kept.size - 1)) ok = false;
      else kept.total = merged_prefix_weight(t, m, kept.size);
    } else if (which == 1 && rank_filters && top_p < 1.0) {
      const double target = top_p * kept.total;
      double cumulative = 0.0;
      for (int64_t i = 0; i < kept.size; ++i) {
        if (!merged_in_prefix(t, m, i)) {
          ok = false;
          break;
        }
        cumulative += merged_weight(t, partial_key_logit(m.at(i)));
        if (cumulative >= target) {
          kept.size = i + 1;
          kept.total = cumulative;
          break;
        }
      }
    } else if (which == 2 && min_p > 0.0 && !t.inf_tier) {
      const double threshold = t.z_max + log(min_p);
      for (int64_t i = 1; i < kept.size; ++i) {
        if (!merged_in_prefix(t, m, i)) {
          ok = false;
          break;
        }
        if (merged_z(t, partial_key_logit(m.at(i))) < threshold) {
          kept.size = i;
          kept.total = merged_prefix_weight(t, m, i);
          break;
        }
      }
    }
  }
  const int64_t reported = top_logprobs < kept.size ? top_logprobs : kept.size;
  if (!ok || (reported > 0 && !merged_in_prefix(t, m, reported - 1))) kept.undecided = true;
  return kept;
}

// Writes row b's outputs when nothing can be drawn (status) or the row is greedy (token).
FS_HD void merged_point_row(const SampleParams& p, int64_t b, int32_t status, int32_t token) {
  for (int32_t j = 0; j < p.num_samples; ++j) {
    p.tokens[b * p.num_samples + j] = status == kRowOk ? token : -1;
    if (p.logprobs != nullptr) p.logprobs[b * p.num_samples + j] = status == kRowOk ? 0.0f : -INFINITY;
  }
  for (int32_t i = 0; i < p.top_logprobs; ++i) {
    const bool first = i == 0 && status == kRowOk;
    p.top_tokens[b * p.top_logprobs + i] = first ? token : -1;
    p.top_token_logprobs[b * p.top_logprobs + i] = first ? 0.0f : -INFINITY;
  }
  if (p.row_status != nullptr) p.row_status[b] = status;
}

FS_HD PartialWinner merged_winner(const PartialSet& set, int64_t b, int32_t j) {
  PartialWinner best;
  best.score = -INFINITY;
  best.key = kNoToken;
  best.logit = 0.0f;
  best.reserved = 0u;
  for (int32_t s = 0; s < set.count; ++s) {
    const PartialHeader& h = partial_header(set.blocks[s]);
    const PartialWinner w = partial_row(const_cast<void*>(set.blocks[s]), h, b).winners[j];
    if (candidate_better(w.score, w.key, best.score, best.key)) best = w;
  }
  return best;
}

// Merges row b of the (checked) partials into p's outputs: tokens, logprobs, topLogprobs, status.
FS_HD void merge_partial_row(const SampleParams& p, const PartialSet& set, int64_t b) {
  const float temperature = p.temperature[b];
  const int32_t S = p.num_samples;
  if (!(temperature > 0.0f)) {  // greedy: the largest logit, ties to the smallest index
    const PartialWinner w = merged_winner(set, b, 0);
    merged_point_row(p, b, w.key == kNoToken ? kRowNoCandidate : kRowOk, static_cast<int32_t>(w.key & 0x7fffffffu));
    return;
  }
  if (!has_filters(p)) {  // the whole row is kept: the shards' winners are the draw
    for (int32_t j = 0; j < S; ++j) {
      const PartialWinner w = merged_winner(set, b, j);
      p.tokens[b * S + j] = w.key == kNoToken ? -1 : static_cast<int32_t>(w.key & 0x7fffffffu);
    }
    if (p.row_status != nullptr) p.row_status[b] = p.tokens[b * S] < 0 ? kRowNoCandidate : kRowOk;
    return;
  }

  MergedKeys m;
  m.shards = set.count;
  int64_t finite = 0, inf = 0, listed = 0;
  double z_max = -INFINITY;
  uint64_t bound = 0;  // keys >= bound are a complete prefix; UINT64_MAX: none is
  for (int32_t s = 0; s < set.count; ++s) {
    const PartialHeader& h = partial_header(set.blocks[s]);
    const PartialRowView v = partial_row(const_cast<void*>(set.blocks[s]), h, b);
    // A count past the capacity (a corrupted or foreign state) is not read past the block.
    const int32_t n = v.row->num_candidates;
    m.keys[s] = v.keys;
    m.count[s] = n < 0 ? 0 : n > h.capacity ? h.capacity : n;
    listed += m.count[s];
    finite += v.row->finite_count;
    inf += v.row->inf_count;
    if (v.row->z_max > z_max) z_max = v.row->z_max;
    if (!v.row->complete || m.count[s] != n) {
      const uint64_t last = m.count[s] > 0 ? v.keys[m.count[s] - 1] : UINT64_MAX;
      if (last > bound) bound = last;
    }
  }
  if (finite + inf == 0) {
    merged_point_row(p, b, kRowNoCandidate, -1);
    return;
  }
  MergedTier t;
  t.inf_tier = inf > 0;
  t.temperature = temperature;
  if (t.inf_tier) {
    t.size = inf;
    t.z_max = 0.0;
    t.total = static_cast<double>(inf);
  } else {
    t.size = finite;
    t.z_max = z_max;
    t.total = 0.0;
    for (int32_t s = 0; s < set.count; ++s) {  // the shards' sums in shard order
      const PartialHeader& h = partial_header(set.blocks[s]);
      const PartialRow& r = *partial_row(const_cast<void*>(set.blocks[s]), h, b).row;
      if (r.sum > 0.0) t.total += r.sum * exp(r.z_max - z_max);
    }
  }
  m.restart();
  t.listed = listed;
  t.bound = bound;

  const int64_t top_k = p.top_k != nullptr ? p.top_k[b] : 0;
  const double top_p = p.top_p != nullptr && p.top_p[b] < 1.0f ? static_cast<double>(p.top_p[b]) : 1.0;
  const double min_p = p.min_p != nullptr && p.min_p[b] > 0.0f ? static_cast<double>(p.min_p[b]) : 0.0;
  const MergedKept kept = merged_decide(t, m, top_k, top_p, min_p, p.filter_order == FilterOrder::kMinPFirst,
                                        p.top_logprobs);
  const bool use_winners = !kept.undecided && kept.size == t.size;
  if (kept.undecided || (!use_winners && !merged_in_prefix(t, m, kept.size - 1))) {
    merged_point_row(p, b, kRowUndecided, -1);
    return;
  }
  const double log_mass = t.z_max + log(kept.total);
  const float inv_temperature = 1.0f / temperature;  // make_candidate's float factor
  const uint64_t seed = p.seed[b], offset = p.offset[b];
  const uint32_t stream = p.per_row_seed ? 0u : static_cast<uint32_t>(b);
  for (int32_t j = 0; j < S; ++j) {
    float logit = 0.0f;
    uint32_t key = kNoToken;
    if (use_winners) {
      const PartialWinner w = merged_winner(set, b, j);
      logit = w.logit;
      key = w.key;
    } else {  // the Gumbel argmax over the kept prefix, with the noise of the global token ids
      float best = -INFINITY;
      for (int64_t i = 0; i < kept.size; ++i) {
        const uint64_t k = m.at(i);
        const float l = partial_key_logit(k);
        const uint32_t v = partial_key_index(k);
        const Candidate c = make_candidate(l, inv_temperature, false, gumbel_noise(seed, offset, stream, j, v), v);
        if (candidate_better(c.score, c.key, best, key)) {
          best = c.score;
          key = c.key;
          logit = l;
        }
      }
    }
    p.tokens[b * S + j] = static_cast<int32_t>(key & 0x7fffffffu);
    if (p.logprobs != nullptr) p.logprobs[b * S + j] = static_cast<float>(merged_z(t, logit) - log_mass);
  }
  for (int32_t i = 0; i < p.top_logprobs; ++i) {
    const bool present = i < kept.size;
    const uint64_t k = present ? m.at(i) : 0u;
    p.top_tokens[b * p.top_logprobs + i] = present ? static_cast<int32_t>(partial_key_index(k)) : -1;
    p.top_token_logprobs[b * p.top_logprobs + i] =
        present ? static_cast<float>(merged_z(t, partial_key_logit(k)) - log_mass) : -INFINITY;
  }
  if (p.row_status != nullptr) p.row_status[b] = kRowOk;
}

}  // namespace flashsample
