// The partial state of one vocabulary shard (docs/SEMANTICS.md §6): what a shard of the LM head
// (W rows [vocab_offset, vocab_offset + vocab_size) of a vocabulary of vocab_total) knows of each
// row, in a fixed-size block that ranks exchange as bytes and that merge_partials (merge.h)
// combines into the unsharded call's tokens. Shared by both backends and the binding, so a CPU
// shard and a CUDA shard write the same bytes.
//
// Layout: a PartialHeader, then max_batch rows of row_bytes each:
//   PartialRow | PartialWinner[num_samples] | uint64 candidate keys[capacity]
// and with kPartialRaw (logprobsMode 'raw'), after the keys:
//   PartialRawRow | float winners' raw logits[num_samples] | float candidates' raw logits[capacity]
//   | (to 8 bytes) | uint64 raw keys[raw_top]
// Only the first `batch` rows are written. Token ids are global throughout.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "noise.h"

namespace flashsample {

constexpr uint32_t kPartialMagic = 0x31505346u;  // "FSP1" in memory order
constexpr uint32_t kPartialVersion = 1u;
constexpr int32_t kMaxPartialCapacity = 1 << 20;  // candidates per row
constexpr int32_t kMaxShards = 64;                // partials one merge takes

enum PartialFlag : uint32_t {
  kPartialStats = 1u,  // rows carry z_max, sum and the tier counts (filters or logprobs)
  kPartialRaw = 2u,    // rows carry the raw distribution's section (logprobsMode 'raw'); the flags'
                       // upper 16 bits are its raw keys a row (topLogprobs)
};

struct PartialHeader {
  uint32_t magic;
  uint32_t version;
  int32_t batch;
  int32_t max_batch;
  int32_t num_samples;
  int32_t capacity;       // candidate keys per row
  uint64_t options_hash;  // lib/parallel.ts: the call's per-row options (temperature, seeds, filters...)
  int64_t vocab_offset;   // the shard's first global token id (a multiple of 4)
  int64_t vocab_size;     // the shard's rows of W
  int64_t vocab_total;    // the unsharded vocabulary
  uint32_t flags;         // PartialFlag
  uint32_t row_bytes;
};
static_assert(sizeof(PartialHeader) == 64, "the header is 64 bytes");

// What a shard knows of one row.
struct PartialRow {
  double z_max;           // max of logit / T (float64) over the shard's finite drawable tokens; -Inf: none
  double sum;             // Σ exp(z - z_max) over them
  int64_t finite_count;   // drawable finite tokens of the shard
  int64_t inf_count;      // +Inf tokens of the shard
  int32_t num_candidates; // keys written (the first num_candidates of the shard's order)
  int32_t complete;       // 1: the keys hold every drawable token of the shard
};
static_assert(sizeof(PartialRow) == 40, "PartialRow is 40 bytes");

// The raw distribution over the shard row (SEMANTICS §4, logprobsMode 'raw': the logits after
// softcap, every token, T = 1), for the merge's log-sum-exp and top tokens.
struct PartialRawRow {
  double z_max;        // max of the raw logits over the shard's finite ones; -Inf: none
  double sum;          // Σ exp(x - z_max) over them
  int64_t inf_count;   // +Inf raw logits
  int32_t num_keys;    // raw keys written (the first of the shard's raw order)
  int32_t reserved;
};
static_assert(sizeof(PartialRawRow) == 32, "PartialRawRow is 32 bytes");

// A sample's Gumbel winner over the whole shard row (greedy rows: the argmax, score = logit).
struct PartialWinner {
  float score;
  uint32_t key;  // global token id | kInfTierBit; kNoToken: none
  float logit;
  uint32_t reserved;
};
static_assert(sizeof(PartialWinner) == 16, "PartialWinner is 16 bytes");

// The raw section's bytes (raw_top < 0: none): its row, the raw logits (to 8 bytes), the raw keys.
FS_HD size_t partial_raw_bytes(int32_t num_samples, int32_t capacity, int32_t raw_top) {
  if (raw_top < 0) return 0;
  const size_t logits = 4u * (static_cast<size_t>(num_samples) + static_cast<size_t>(capacity));
  return sizeof(PartialRawRow) + (logits + 7u) / 8u * 8u + 8u * static_cast<size_t>(raw_top);
}
FS_HD uint32_t partial_row_bytes(int32_t num_samples, int32_t capacity, int32_t raw_top = -1) {
  return static_cast<uint32_t>(sizeof(PartialRow) + sizeof(PartialWinner) * static_cast<size_t>(num_samples) +
                               8u * static_cast<size_t>(capacity) + partial_raw_bytes(num_samples, capacity, raw_top));
}
FS_HD size_t partial_bytes(int32_t max_batch, int32_t num_samples, int32_t capacity, int32_t raw_top = -1) {
  return sizeof(PartialHeader) + static_cast<size_t>(max_batch) * partial_row_bytes(num_samples, capacity, raw_top);
}

// One shard's segment of the rows pass (SampleParams::value_rows): this header, then `rows` rows of
// `pitch` floats, row i holding the candidate values (softcap, the shard's bias, lists and mask
// applied; NaN where a token cannot be drawn) of its vocab_size tokens from global id vocab_offset.
constexpr uint32_t kRowValuesMagic = 0x31565346u;  // "FSV1" in memory order
// logprobsMode 'raw': the segment's rows of raw logits (softcap, the model's bias; no mask, no
// lists) follow its candidate values, `rows` rows of `pitch` more floats.
constexpr uint32_t kRowValuesRawMagic = 0x31525346u;  // "FSR1" in memory order
struct RowValuesHeader {
  uint32_t magic;
  int32_t rows;
  int64_t vocab_offset;
  int64_t vocab_size;
  int64_t pitch;
};
static_assert(sizeof(RowValuesHeader) == 32, "the segment header is 32 bytes");
// Segments lie back to back; each is rounded up to 16 bytes so that the next one's header (8-byte
// fields) stays aligned whatever the pitch (an odd pitch put it 4 bytes off: a misaligned load on
// a GPU).
constexpr size_t kRowValuesAlign = 16;
FS_HD size_t row_values_bytes(int64_t rows, int64_t pitch, bool raw = false) {
  const size_t bytes = sizeof(RowValuesHeader) + static_cast<size_t>(rows) * static_cast<size_t>(pitch) * (raw ? 8u : 4u);
  return (bytes + kRowValuesAlign - 1) / kRowValuesAlign * kRowValuesAlign;
}
FS_HD const RowValuesHeader* row_values_segment(const void* values, int64_t rows, int64_t pitch, int32_t r,
                                                bool raw = false) {
  return reinterpret_cast<const RowValuesHeader*>(static_cast<const char*>(values) +
                                                  r * row_values_bytes(rows, pitch, raw));
}
// Whether the decide call's segments are one round's: every header aligned (checked before it is
// read: a misaligned one would fault on a GPU), intact and sized as the call, and their ranges tile
// [0, vocab_total) exactly (each at most 64 segments: a quadratic check).
FS_HD bool row_values_segments_ok(const void* values, int64_t rows, int64_t pitch, int32_t segments,
                                  int64_t vocab_total, bool raw = false) {
  int64_t covered = 0;
  for (int32_t r = 0; r < segments; ++r) {
    const RowValuesHeader* at = row_values_segment(values, rows, pitch, r, raw);
    if (reinterpret_cast<uintptr_t>(at) % alignof(RowValuesHeader) != 0) return false;
    const RowValuesHeader& h = *at;
    if (h.magic != (raw ? kRowValuesRawMagic : kRowValuesMagic) || h.rows != rows || h.pitch != pitch || h.vocab_size < 1 ||
        h.vocab_size > pitch || h.vocab_offset < 0 || h.vocab_offset + h.vocab_size > vocab_total)
      return false;
    for (int32_t q = 0; q < r; ++q) {
      const RowValuesHeader& o = *row_values_segment(values, rows, pitch, q, raw);
      if (h.vocab_offset < o.vocab_offset + o.vocab_size && o.vocab_offset < h.vocab_offset + h.vocab_size) return false;
    }
    covered += h.vocab_size;
  }
  return covered == vocab_total;
}

// The raw keys a row of a block with kPartialRaw holds (-1: no raw section).
FS_HD int32_t partial_raw_top(const PartialHeader& h) {
  return (h.flags & kPartialRaw) ? static_cast<int32_t>(h.flags >> 16) : -1;
}

// Row b of a partial block: its row, winners and candidate keys; with kPartialRaw its raw section
// (else those pointers are null).
struct PartialRowView {
  PartialRow* row;
  PartialWinner* winners;
  uint64_t* keys;
  PartialRawRow* raw;
  float* winner_raw;  // [num_samples]: the raw logit of each sample's winner (0: none)
  float* key_raw;     // [capacity]: the raw logit of each candidate key's token
  uint64_t* raw_keys; // [raw_top]: partial_key(raw logit, global id), the shard's raw order
};
FS_HD PartialRowView partial_row(void* block, const PartialHeader& h, int64_t b) {
  char* base = static_cast<char*>(block) + sizeof(PartialHeader) + static_cast<size_t>(b) * h.row_bytes;
  PartialRowView v;
  v.row = reinterpret_cast<PartialRow*>(base);
  v.winners = reinterpret_cast<PartialWinner*>(base + sizeof(PartialRow));
  v.keys = reinterpret_cast<uint64_t*>(base + sizeof(PartialRow) + sizeof(PartialWinner) * static_cast<size_t>(h.num_samples));
  v.raw = nullptr;
  v.winner_raw = v.key_raw = nullptr;
  v.raw_keys = nullptr;
  if (partial_raw_top(h) >= 0) {
    char* raw = reinterpret_cast<char*>(v.keys + h.capacity);
    v.raw = reinterpret_cast<PartialRawRow*>(raw);
    v.winner_raw = reinterpret_cast<float*>(raw + sizeof(PartialRawRow));
    v.key_raw = v.winner_raw + h.num_samples;
    const size_t logits = 4u * (static_cast<size_t>(h.num_samples) + static_cast<size_t>(h.capacity));
    v.raw_keys = reinterpret_cast<uint64_t*>(raw + sizeof(PartialRawRow) + (logits + 7u) / 8u * 8u);
  }
  return v;
}

// 64-bit key whose unsigned order is the candidate order of SEMANTICS §2.5 (logit descending,
// global index ascending): larger key = earlier. Only drawable logits (finite or +Inf) are keyed.
FS_HD uint64_t partial_key(float logit, uint32_t index) {
  if (logit == 0.0f) logit = 0.0f;  // one encoding for -0 and +0
  uint32_t b;
  memcpy(&b, &logit, 4);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(b) << 32) | static_cast<uint64_t>(0xffffffffu - index);
}
FS_HD float partial_key_logit(uint64_t key) {
  uint32_t b = static_cast<uint32_t>(key >> 32);
  b = (b & 0x80000000u) ? (b & 0x7fffffffu) : ~b;
  float l;
  memcpy(&l, &b, 4);
  return l;
}
FS_HD uint32_t partial_key_index(uint64_t key) { return 0xffffffffu - static_cast<uint32_t>(key); }

FS_HD void init_partial_header(PartialHeader* h, int32_t batch, int32_t max_batch, int32_t num_samples,
                                      int32_t capacity, uint64_t options_hash, int64_t vocab_offset,
                                      int64_t vocab_size, int64_t vocab_total, bool stats,
                                      int32_t raw_top = -1) {
  h->magic = kPartialMagic;
  h->version = kPartialVersion;
  h->batch = batch;
  h->max_batch = max_batch;
  h->num_samples = num_samples;
  h->capacity = capacity;
  h->options_hash = options_hash;
  h->vocab_offset = vocab_offset;
  h->vocab_size = vocab_size;
  h->vocab_total = vocab_total;
  h->flags = (stats ? kPartialStats : 0u) |
             (raw_top >= 0 ? kPartialRaw | (static_cast<uint32_t>(raw_top) << 16) : 0u);
  h->row_bytes = partial_row_bytes(num_samples, capacity, raw_top);
}

// Why a set of partials cannot be merged (merge_partials writes it with the index of the partial).
enum PartialError : int32_t {
  kPartialOk = 0,
  kPartialNotAPartial = 1,   // magic or version wrong: not a partial block
  kPartialBatch = 2,         // another batch size than the merge's
  kPartialSamples = 3,       // another numSamples
  kPartialOptions = 4,       // another options hash: another call's options
  kPartialVocabTotal = 5,    // another vocabulary size
  kPartialCoverage = 6,      // the shards do not cover [0, vocab_total) exactly once
  kPartialStatsMissing = 7,  // made without stats, merged with filters or logprobs
  kPartialLayout = 8,        // row_bytes disagrees with num_samples and capacity
  kPartialRawMissing = 9,    // made without the raw section (or another topLogprobs), merged raw
};

}  // namespace flashsample
