// merge_partials: the unsharded call's tokens from its shards' partial states (partial.h,
// docs/SEMANTICS.md §6). One implementation for both backends: the CPU loops over rows, the CUDA
// kernel (cuda/partial.cu) runs a block per row. Allocation-free: the caller gives each row room
// for its shards' keys together (MergeScratch).
//
// The decision is SEMANTICS §2.5-2.7 and §5 on the merged candidates: the keys of every shard
// are a prefix of that shard's order, so the merged keys down to the largest last key of an
// incomplete shard are a complete prefix of the row's order. A row whose kept set or topLogprobs
// reach past that prefix is kRowUndecided: the shards must send more candidates. A row's merge is
// a few steps (setup, the prefix placed in the row's order, its keys' weights, its chunks' masses,
// the decision, the draw) that one CPU thread runs in turn and a GPU block runs with a thread per
// key or chunk.
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
                                    bool need_stats, int32_t* which, int32_t raw_top = -1) {
  int64_t covered = 0;
  int32_t starts_at_zero = 0;
  for (int32_t i = 0; i < set.count; ++i) {
    *which = i;
    const PartialHeader& h = partial_header(set.blocks[i]);
    if (set.bytes[i] < sizeof(PartialHeader) || h.magic != kPartialMagic || h.version != kPartialVersion)
      return kPartialNotAPartial;
    if (h.num_samples < 1 || h.num_samples > kMaxSamples || h.capacity < 0 || h.capacity > kMaxPartialCapacity ||
        h.batch < 1 || h.batch > h.max_batch ||
        h.row_bytes != partial_row_bytes(h.num_samples, h.capacity, partial_raw_top(h)) ||
        partial_bytes(h.max_batch, h.num_samples, h.capacity, partial_raw_top(h)) > set.bytes[i])
      return kPartialLayout;
    if (h.batch != p.batch) return kPartialBatch;
    if (h.num_samples != p.num_samples) return kPartialSamples;
    if (h.vocab_total != p.vocab) return kPartialVocabTotal;
    if (h.options_hash != options_hash) return kPartialOptions;
    if (need_stats && !(h.flags & kPartialStats)) return kPartialStatsMissing;
    if (raw_top >= 0 && partial_raw_top(h) != raw_top) return kPartialRawMissing;
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

// A merged row's keys are summed in chunks of this many (each chunk in order from 0.0, then the
// chunks' sums in order): the same additions whether one CPU thread takes the chunks in turn or a
// GPU thread takes each.
constexpr int64_t kMergeChunk = 256;

// The merge's working memory for one row: its complete prefix's keys in the row's order and their
// chunks' masses. Rows `stride` keys apart (>= the keys the shards hold for a row together).
struct MergeScratch {
  uint64_t* merged;     // [rows, stride]
  double* weight;       // [rows, stride]
  double* chunk_mass;   // [rows, merge_chunks(stride)]
  int64_t stride;
};
FS_HD int64_t merge_chunks(int64_t keys) { return (keys + kMergeChunk - 1) / kMergeChunk; }

// Keys a row's MergeScratch holds for the (checked) partials of a merge of batch p.batch: what
// their blocks can hold for a row (a block of `bytes` holds at most (bytes - header) / (8 batch)
// keys a row), at most the vocabulary.
inline int64_t merge_scratch_keys(const SampleParams& p, const PartialSet& set) {
  int64_t keys = 0;
  for (int32_t i = 0; i < set.count; ++i) {
    const uint64_t body = set.bytes[i] > sizeof(PartialHeader) ? set.bytes[i] - sizeof(PartialHeader) : 0;
    keys += static_cast<int64_t>(body / (8u * static_cast<uint64_t>(p.batch)));
    if (keys >= p.vocab) return p.vocab;
  }
  return keys > 0 ? keys : 1;
}

struct MergedTier {
  bool inf_tier;
  int64_t size;      // tokens in the tier (the +Inf tokens if any, else the finite drawable ones)
  double z_max;      // 0 in the +Inf tier
  double total;      // Σ exp(z - z_max) over the tier; its size in the +Inf tier
  double temperature;
};

FS_HD double merged_z(const MergedTier& t, float logit) {
  return t.inf_tier ? 0.0 : static_cast<double>(logit) / t.temperature;
}
FS_HD double merged_weight(const MergedTier& t, float logit) {
  return t.inf_tier ? 1.0 : exp(merged_z(t, logit) - t.z_max);
}

// One row of a merge: its shards' keys (each sorted descending, a prefix of that shard's order),
// its tier, and its complete prefix: the merged keys down to the largest last key of a shard whose
// keys are not all of its tokens (merged_prefix_length of them, each shard's first in_prefix).
struct MergeRow {
  const uint64_t* keys[kMaxShards];
  int32_t count[kMaxShards];      // keys held (capped at the header's capacity)
  int32_t in_prefix[kMaxShards];  // of them, those in the complete prefix
  int32_t shards;
  MergedTier t;
  int64_t prefix;                 // merged keys in the complete prefix (at most t.size)
  bool winners;                   // every shard with drawable tokens offered its winners (a CUDA
                                  // one-pass shard's filtered rows do not: their draws are the keys')
  uint64_t* merged;               // the prefix in the row's order (merge_place)
  double* weight;                 // its keys' exp(z - z_max) (merge_weights)
  double* chunk_mass;             // its chunks' masses (merge_chunk_masses)
};

// The kept set of a row (SEMANTICS §2.5-2.7 on the complete prefix).
struct MergedKept {
  int64_t size;
  double total;
  double log_mass;  // z_max + log(total): the logprobs' normalizer
  bool undecided;
};

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

// Keys of shard list [keys, keys + n) (descending) above `key`: a binary search.
FS_HD int32_t keys_above(const uint64_t* keys, int32_t n, uint64_t key) {
  int32_t lo = 0, hi = n;
  while (lo < hi) {
    const int32_t mid = (lo + hi) >> 1;
    if (keys[mid] > key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// Row b's merge, first step (one thread): greedy rows, rows without filters (the shards' winners)
// and rows with nothing to draw are written here (false); otherwise *r is the row's merge inputs,
// its prefix to be placed in `scratch` (true).
FS_HD bool merge_row_setup(const SampleParams& p, const PartialSet& set, int64_t b, const MergeScratch& scratch,
                           MergeRow* r) {
  const float temperature = p.temperature[b];
  const int32_t S = p.num_samples;
  if (!(temperature > 0.0f)) {  // greedy: the largest logit, ties to the smallest index
    const PartialWinner w = merged_winner(set, b, 0);
    merged_point_row(p, b, w.key == kNoToken ? kRowNoCandidate : kRowOk, static_cast<int32_t>(w.key & 0x7fffffffu));
    return false;
  }
  if (!has_filters(p)) {  // the whole row is kept: the shards' winners are the draw
    for (int32_t j = 0; j < S; ++j) {
      const PartialWinner w = merged_winner(set, b, j);
      p.tokens[b * S + j] = w.key == kNoToken ? -1 : static_cast<int32_t>(w.key & 0x7fffffffu);
    }
    if (p.row_status != nullptr) p.row_status[b] = p.tokens[b * S] < 0 ? kRowNoCandidate : kRowOk;
    return false;
  }
  r->shards = set.count;
  r->winners = true;
  int64_t finite = 0, inf = 0;
  double z_max = -INFINITY;
  uint64_t bound = 0;  // keys >= bound are a complete prefix; UINT64_MAX: none is
  for (int32_t s = 0; s < set.count; ++s) {
    const PartialHeader& h = partial_header(set.blocks[s]);
    const PartialRowView v = partial_row(const_cast<void*>(set.blocks[s]), h, b);
    // A count past the capacity (a corrupted or foreign state) is not read past the block.
    const int32_t n = v.row->num_candidates;
    r->keys[s] = v.keys;
    r->count[s] = n < 0 ? 0 : n > h.capacity ? h.capacity : n;
    finite += v.row->finite_count;
    inf += v.row->inf_count;
    if (v.row->finite_count + v.row->inf_count > 0 && v.winners[0].key == kNoToken) r->winners = false;
    if (v.row->z_max > z_max) z_max = v.row->z_max;
    if (!v.row->complete || r->count[s] != n) {
      const uint64_t last = r->count[s] > 0 ? v.keys[r->count[s] - 1] : UINT64_MAX;
      if (last > bound) bound = last;
    }
  }
  if (finite + inf == 0) {
    merged_point_row(p, b, kRowNoCandidate, -1);
    return false;
  }
  MergedTier& t = r->t;
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
      const PartialRow& row = *partial_row(const_cast<void*>(set.blocks[s]), h, b).row;
      if (row.sum > 0.0) t.total += row.sum * exp(row.z_max - z_max);
    }
  }
  int64_t prefix = 0;
  for (int32_t s = 0; s < set.count; ++s) {
    // keys >= bound: all but those below it (bound == 0: every key)
    r->in_prefix[s] = bound == UINT64_MAX ? 0 : bound == 0 ? r->count[s] : keys_above(r->keys[s], r->count[s], bound - 1);
    prefix += r->in_prefix[s];
  }
  r->prefix = prefix < t.size ? prefix : t.size;
  if (r->prefix > scratch.stride) r->prefix = scratch.stride;  // (a corrupted state's counts)
  r->merged = scratch.merged + b * scratch.stride;
  r->weight = scratch.weight + b * scratch.stride;
  r->chunk_mass = scratch.chunk_mass + b * merge_chunks(scratch.stride);
  return true;
}

// Second step: places the prefix's keys at their ranks in the row's order (a key's rank: its place
// in its shard plus the other shards' keys above it). Threads take keys first, first + step, ...
FS_HD void merge_place(const MergeRow& r, int64_t first, int64_t step) {
  for (int32_t s = 0; s < r.shards; ++s) {
    for (int64_t i = first; i < r.in_prefix[s]; i += step) {
      const uint64_t k = r.keys[s][i];
      int64_t rank = i;
      for (int32_t o = 0; o < r.shards; ++o)
        if (o != s) rank += keys_above(r.keys[o], r.in_prefix[o], k);
      if (rank < r.prefix) r.merged[rank] = k;
    }
  }
}

FS_HD double merged_key_weight(const MergeRow& r, int64_t i) { return r.weight[i]; }

// Third step: the keys' weights (threads take keys first, first + step, ...), so that the sums
// below and the decision's are chains of additions, not of exponentials; then, after the caller's
// barrier, merge_chunk_masses.
FS_HD void merge_weights(const MergeRow& r, int64_t first, int64_t step) {
  for (int64_t i = first; i < r.prefix; i += step) r.weight[i] = merged_weight(r.t, partial_key_logit(r.merged[i]));
}

// Fourth step: each chunk's mass (threads take chunks first, first + step, ...).
FS_HD void merge_chunk_masses(const MergeRow& r, int64_t first, int64_t step) {
  for (int64_t c = first; c < merge_chunks(r.prefix); c += step) {
    const int64_t end = (c + 1) * kMergeChunk < r.prefix ? (c + 1) * kMergeChunk : r.prefix;
    double sum = 0.0;
    for (int64_t i = c * kMergeChunk; i < end; ++i) sum += merged_key_weight(r, i);
    r.chunk_mass[c] = sum;
  }
}

// The mass of the merged keys [0, count) (count <= prefix): whole chunks, then the rest in order.
FS_HD double merge_mass(const MergeRow& r, int64_t count) {
  double sum = 0.0;
  int64_t c = 0;
  for (; (c + 1) * kMergeChunk <= count; ++c) sum += r.chunk_mass[c];
  double part = 0.0;
  for (int64_t i = c * kMergeChunk; i < count; ++i) part += merged_key_weight(r, i);
  return sum + part;
}

// Fifth step (one thread): SEMANTICS §2.5-2.7 with row b's filters on the complete prefix (the
// CPU backend's decide_kept on merged keys). A filter whose cut lies past the prefix leaves the row
// undecided.
FS_HD MergedKept merge_decide(const SampleParams& p, const MergeRow& r, int64_t b) {
  const int64_t top_k = p.top_k != nullptr ? p.top_k[b] : 0;
  const double top_p = p.top_p != nullptr && p.top_p[b] < 1.0f ? static_cast<double>(p.top_p[b]) : 1.0;
  const double min_p = p.min_p != nullptr && p.min_p[b] > 0.0f ? static_cast<double>(p.min_p[b]) : 0.0;
  const bool min_p_first = p.filter_order == FilterOrder::kMinPFirst;
  const MergedTier& t = r.t;
  MergedKept kept;
  kept.size = t.size;
  kept.total = t.total;
  kept.undecided = false;
  const bool rank_filters = !t.inf_tier;
  bool ok = true;
  for (int step = 0; step < 3 && ok; ++step) {
    // Hugging Face's order: top-k, top-p, min-p; vLLM's: min-p, top-k, top-p.
    const int which = min_p_first ? (step == 0 ? 2 : step - 1) : step;
    const int64_t reach = kept.size < r.prefix ? kept.size : r.prefix;
    if (which == 0 && rank_filters && top_k > 0 && top_k < kept.size) {
      kept.size = top_k;
      if (top_k > r.prefix) ok = false;
      else kept.total = merge_mass(r, top_k);
    } else if (which == 1 && rank_filters && top_p < 1.0) {
      // the first key at which the running mass reaches top_p of the kept mass
      const double target = top_p * kept.total;
      double before = 0.0;  // the whole chunks before chunk c
      int64_t c = 0;
      while ((c + 1) * kMergeChunk <= reach && before + r.chunk_mass[c] < target) before += r.chunk_mass[c++];
      double part = 0.0;
      bool cut = false;
      for (int64_t i = c * kMergeChunk; i < reach && i < (c + 1) * kMergeChunk; ++i) {
        part += merged_key_weight(r, i);
        if (before + part >= target) {
          kept.size = i + 1;
          kept.total = before + part;
          cut = true;
          break;
        }
      }
      if (!cut && reach < kept.size) ok = false;
    } else if (which == 2 && min_p > 0.0 && !t.inf_tier) {
      // the first key from 1 on below z_max + ln(min_p): a binary search (z falls along the order)
      const double threshold = t.z_max + log(min_p);
      int64_t lo = 1, hi = reach;
      while (lo < hi) {
        const int64_t mid = (lo + hi) >> 1;
        if (merged_z(t, partial_key_logit(r.merged[mid])) < threshold) hi = mid;
        else lo = mid + 1;
      }
      if (lo < reach) {
        kept.size = lo;
        kept.total = merge_mass(r, lo);
      } else if (kept.size > 1 && reach < kept.size) {
        ok = false;
      }
    }
  }
  const int64_t reported = p.top_logprobs < kept.size ? p.top_logprobs : kept.size;
  if (!ok || reported > r.prefix) kept.undecided = true;
  kept.log_mass = t.z_max + log(kept.total);
  return kept;
}

// The Gumbel argmax of sample j over merged keys first, first + step, ... of the kept set, with
// the noise of their global ids: candidate_better's order, so any split of the keys gives one best.
struct MergedPick {
  float score;
  uint32_t key;
  float logit;
};
FS_HD MergedPick merge_pick(const SampleParams& p, const MergeRow& r, int64_t b, int32_t j, int64_t kept,
                            int64_t first, int64_t step) {
  const float inv_temperature = 1.0f / p.temperature[b];  // make_candidate's float factor
  const uint64_t seed = p.seed[b], offset = p.offset[b];
  const uint32_t stream = p.per_row_seed ? 0u : static_cast<uint32_t>(b);
  MergedPick best{-INFINITY, kNoToken, 0.0f};
  for (int64_t i = first; i < kept; i += step) {
    const uint64_t k = r.merged[i];
    const float l = partial_key_logit(k);
    const uint32_t v = partial_key_index(k);
    const Candidate c = make_candidate(l, inv_temperature, false, gumbel_noise(seed, offset, stream, j, v), v);
    if (candidate_better(c.score, c.key, best.score, best.key)) best = MergedPick{c.score, c.key, l};
  }
  return best;
}
FS_HD void merge_better(MergedPick* a, const MergedPick& b) {
  if (candidate_better(b.score, b.key, a->score, a->key)) *a = b;
}

// Whether the kept set is the whole row and every shard offered its winners: those are the draw.
FS_HD bool merge_draws_winners(const MergeRow& r, const MergedKept& kept) { return kept.size == r.t.size && r.winners; }

// Last step: sample j's token and logprob (`best` its pick over the kept keys, or with the whole
// row kept the shards' winner).
FS_HD void merge_write_sample(const SampleParams& p, const PartialSet& set, const MergeRow& r, int64_t b,
                              const MergedKept& kept, int32_t j, MergedPick best) {
  const int32_t S = p.num_samples;
  if (merge_draws_winners(r, kept)) {
    const PartialWinner w = merged_winner(set, b, j);
    best = MergedPick{w.score, w.key, w.logit};
  }
  p.tokens[b * S + j] = static_cast<int32_t>(best.key & 0x7fffffffu);
  if (p.logprobs != nullptr) p.logprobs[b * S + j] = static_cast<float>(merged_z(r.t, best.logit) - kept.log_mass);
}
// ... and topLogprobs entry i, and the row's status.
FS_HD void merge_write_top(const SampleParams& p, const MergeRow& r, int64_t b, const MergedKept& kept, int32_t i) {
  const bool present = i < kept.size;
  const uint64_t k = present ? r.merged[i] : 0u;
  p.top_tokens[b * p.top_logprobs + i] = present ? static_cast<int32_t>(partial_key_index(k)) : -1;
  p.top_token_logprobs[b * p.top_logprobs + i] =
      present ? static_cast<float>(merged_z(r.t, partial_key_logit(k)) - kept.log_mass) : -INFINITY;
}

// Whether a decided row draws from its kept keys (else it is undecided, or keeps the whole row and
// draws the shards' winners); without winners a whole row kept is drawn from its keys too.
FS_HD bool merge_draws_keys(const MergeRow& r, const MergedKept& kept) {
  return !kept.undecided && !merge_draws_winners(r, kept);
}
// (A one-pass shard's candidates hold no +Inf token: such a row without winners is undecided.)
FS_HD bool merge_undecided(const MergeRow& r, const MergedKept& kept) {
  return kept.undecided || (!merge_draws_winners(r, kept) && kept.size > r.prefix) ||
         (r.t.inf_tier && !r.winners);
}

// logprobsMode 'raw' (SEMANTICS §4), after the row's draw: the drawn tokens' and the top tokens'
// log-probabilities under the raw distribution, from the shards' raw sections (partials checked with
// their raw_top = p.top_logprobs). A row the merge left undecided is left to the rows pass.
// The raw distribution of row b over the shards: its log-sum-exp (the shards' sums rescaled to the
// largest z_max, added in the order of the partials) and its +Inf count.
struct MergedRaw {
  double lse;
  int64_t inf;
};
FS_HD MergedRaw merged_raw(const PartialSet& set, int64_t b) {
  double z_max = -INFINITY, total = 0.0;
  int64_t inf = 0;
  for (int32_t s = 0; s < set.count; ++s) {
    const PartialHeader& h = partial_header(set.blocks[s]);
    const PartialRawRow& raw = *partial_row(const_cast<void*>(set.blocks[s]), h, b).raw;
    inf += raw.inf_count;
    if (raw.z_max > z_max) z_max = raw.z_max;
  }
  for (int32_t s = 0; s < set.count; ++s) {
    const PartialHeader& h = partial_header(set.blocks[s]);
    const PartialRawRow& raw = *partial_row(const_cast<void*>(set.blocks[s]), h, b).raw;
    if (raw.sum > 0.0) total += raw.sum * exp(raw.z_max - z_max);
  }
  return MergedRaw{z_max + log(total), inf};
}
// A raw logit's log-probability (NaN and -Inf: probability 0; +Inf tokens share the mass).
FS_HD float merged_raw_logprob(const MergedRaw& r, float x) {
  if (r.inf > 0) return x == INFINITY ? static_cast<float>(-log(static_cast<double>(r.inf))) : -INFINITY;
  return x > -INFINITY && x < INFINITY ? static_cast<float>(static_cast<double>(x) - r.lse) : -INFINITY;
}
// Token t's raw logit in row b, which only its shard has: its winner's, or from that shard's
// candidate keys those at i = first, first + step, ... (a block's threads share the scan); NaN where
// this scan does not find it.
FS_HD float merged_raw_logit(const PartialSet& set, int64_t b, int32_t t, int32_t first, int32_t step) {
  for (int32_t s = 0; s < set.count; ++s) {
    const PartialHeader& h = partial_header(set.blocks[s]);
    if (t < h.vocab_offset || t >= h.vocab_offset + h.vocab_size) continue;
    const PartialRowView v = partial_row(const_cast<void*>(set.blocks[s]), h, b);
    for (int32_t k = 0; k < h.num_samples; ++k)
      if (v.winners[k].key != kNoToken && static_cast<int32_t>(v.winners[k].key & 0x7fffffffu) == t) return v.winner_raw[k];
    const int32_t count = v.row->num_candidates < 0 ? 0 : v.row->num_candidates > h.capacity ? h.capacity : v.row->num_candidates;
    for (int32_t i = first; i < count; i += step)
      if (partial_key_index(v.keys[i]) == static_cast<uint32_t>(t)) return v.key_raw[i];
  }
  return NAN;
}
// The topLogprobs best of the shards' raw keys (each a prefix of its shard's raw order) by repeated
// maxima; with +Inf raw logits only the +Inf ones.
FS_HD void merge_write_raw_top(const SampleParams& p, const PartialSet& set, int64_t b, const MergedRaw& r) {
  const int32_t n = p.top_logprobs;
  int32_t taken[kMaxShards];
  for (int32_t s = 0; s < set.count; ++s) taken[s] = 0;
  for (int32_t i = 0; i < n; ++i) {
    uint64_t best = 0u;
    int32_t from = -1;
    for (int32_t s = 0; s < set.count; ++s) {
      const PartialHeader& h = partial_header(set.blocks[s]);
      const PartialRowView v = partial_row(const_cast<void*>(set.blocks[s]), h, b);
      const int32_t count = v.raw->num_keys < 0 ? 0 : v.raw->num_keys > n ? n : v.raw->num_keys;
      if (taken[s] < count && v.raw_keys[taken[s]] > best) {
        best = v.raw_keys[taken[s]];
        from = s;
      }
    }
    if (from >= 0) ++taken[from];
    if (r.inf > 0 && from >= 0 && partial_key_logit(best) != INFINITY) from = -1;  // only the +Inf tier is kept
    p.top_tokens[b * n + i] = from >= 0 ? static_cast<int32_t>(partial_key_index(best)) : -1;
    p.top_token_logprobs[b * n + i] = from >= 0 ? merged_raw_logprob(r, partial_key_logit(best)) : -INFINITY;
  }
}
// All of it on one thread (the CPU's merge, and the GPU's rows its setup wrote).
FS_HD void merge_write_raw(const SampleParams& p, const PartialSet& set, int64_t b) {
  if (p.row_status != nullptr && p.row_status[b] == kRowUndecided) return;
  const MergedRaw r = merged_raw(set, b);
  const int32_t S = p.num_samples;
  if (p.logprobs != nullptr)
    for (int32_t j = 0; j < S; ++j) {
      const int32_t t = p.tokens[b * S + j];
      if (t < 0) continue;
      const float x = merged_raw_logit(set, b, t, 0, 1);
      p.logprobs[b * S + j] = x != x ? NAN : merged_raw_logprob(r, x);  // (NaN: no shard holds it)
    }
  merge_write_raw_top(p, set, b, r);
}

// Merges row b of the (checked) partials into p's outputs, the steps above in turn (the CPU).
FS_HD void merge_partial_row(const SampleParams& p, const PartialSet& set, int64_t b, const MergeScratch& scratch) {
  MergeRow r;
  if (!merge_row_setup(p, set, b, scratch, &r)) return;
  merge_place(r, 0, 1);
  merge_weights(r, 0, 1);
  merge_chunk_masses(r, 0, 1);
  const MergedKept kept = merge_decide(p, r, b);
  if (merge_undecided(r, kept)) {
    merged_point_row(p, b, kRowUndecided, -1);
    return;
  }
  for (int32_t j = 0; j < p.num_samples; ++j) {
    const MergedPick best = merge_draws_keys(r, kept) ? merge_pick(p, r, b, j, kept.size, 0, 1) : MergedPick{};
    merge_write_sample(p, set, r, b, kept, j, best);
  }
  for (int32_t i = 0; i < p.top_logprobs; ++i) merge_write_top(p, r, b, kept, i);
  if (p.row_status != nullptr) p.row_status[b] = kRowOk;
}

}  // namespace flashsample
