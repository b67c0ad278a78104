// SampleParams: everything one sampling call needs, shared by every backend (CUDA and CPU).
//
// Pointers live in the backend's memory space: device pointers for the CUDA launchers, host
// pointers for the CPU backend. The binding validates everything before filling this struct; the
// launchers re-check only what would otherwise fault.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace flashsample {

enum class DType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

inline size_t dtype_bytes(DType d) { return d == DType::kF32 ? 4 : 2; }

enum class ReferenceMethod : int32_t {
  kInverseCdf = 0,  // logits -> softmax -> cumulative sum -> one uniform per sample -> search
  kGumbel = 1,      // logits -> argmax(logit / T + g) with the same noise as the fused path
};

// The order of top-k, top-p and min-p (SEMANTICS §2): Hugging Face's (top-k, top-p, then min-p,
// the default) or vLLM's (min-p first, so top-p's mass is that of the min-p survivors).
enum class FilterOrder : int32_t { kHuggingFace = 0, kMinPFirst = 1 };

// Row status codes written to SampleParams::row_status.
enum RowStatus : int32_t {
  kRowOk = 0,
  kRowNoCandidate = 1,  // every logit of the row is NaN, -Inf or masked out: no token can be drawn
  kRowUndecided = 2,    // merge_partials: the shards' candidates do not settle the kept set
  kRowTableFull = 3,    // an engine sampler's penalty table had no free slot: drawn, not recorded
  kRowListInvalid = 4,  // an engine sampler's list tables hold an id outside [0, V) other than -1: skipped
  kRowShardMismatch = 5,  // merge_partials: the partial states do not fit together (batch, options, ranges)
};

struct SampleParams {
  // ---- operands --------------------------------------------------------------------------------
  const void* hidden = nullptr;  // [batch, dim] row-major, `dtype`
  const void* weight = nullptr;  // [vocab, dim] row-major, `dtype` (nn.Linear layout)
  const void* bias = nullptr;    // [vocab] `dtype`, added to the logits; nullptr = none
  DType dtype = DType::kBF16;
  int64_t batch = 0;             // B, 1 .. kMaxBatch
  int64_t vocab = 0;             // V
  int64_t dim = 0;               // D
  int32_t num_samples = 1;       // independent samples per row, 1 .. kMaxSamples

  // ---- per-row parameters, each [batch] ----------------------------------------------------------
  const float* temperature = nullptr;  // > 0, or 0 = greedy argmax (no noise)
  const uint64_t* seed = nullptr;      // Philox key
  const uint64_t* offset = nullptr;    // Philox counter words 2..3 (e.g. the decode step)
  bool per_row_seed = false;           // noise stream = per_row_seed ? 0 : row

  // ---- filters (issue 5); nullptr / 0 = off ---------------------------------------------------
  const int32_t* top_k = nullptr;      // [batch]: keep the k largest logits, 0 = off
  const float* top_p = nullptr;        // [batch]: nucleus mass in (0, 1], 1 = off
  const float* min_p = nullptr;        // [batch]: keep p >= min_p * p_max, 0 = off
  float softcap = 0.0f;                // logits -> softcap * tanh(logit / softcap) before T; 0 = off
  FilterOrder filter_order = FilterOrder::kHuggingFace;
  const uint32_t* allowed = nullptr;   // [batch, ceil(vocab / 32)] bitmask, bit set = allowed

  // ---- logit bias, banned tokens and penalties (SEMANTICS §2, steps 2a-2d): per-row sparse lists
  // in CSR form (row b's entries at [offsets[b], offsets[b + 1])); nullptr = none ---------------
  const int32_t* bias_offsets = nullptr;     // [batch + 1]
  const int32_t* bias_tokens = nullptr;      // token ids, distinct within a row
  const float* bias_values = nullptr;        // added to the logit
  const int32_t* banned_offsets = nullptr;   // [batch + 1]
  const int32_t* banned_tokens = nullptr;    // probability 0 (min_tokens bans)
  const int32_t* banned_while = nullptr;     // [batch] or null: row b's banned list applies while > 0
  const int32_t* penalty_offsets = nullptr;  // [batch + 1]
  const int32_t* penalty_tokens = nullptr;   // token ids, distinct within a row
  const int32_t* penalty_counts = nullptr;   // occurrences in the output so far (>= 0)
  const uint8_t* penalty_in_prompt = nullptr;  // 1: the token occurs in the prompt
  const int32_t* penalty_in_prompt_i32 = nullptr;  // the same as i32 (device-tensor lists), when the above is null
  const float* repetition_penalty = nullptr;   // [batch] r > 0, 1 = off
  const float* frequency_penalty = nullptr;    // [batch], 0 = off
  const float* presence_penalty = nullptr;     // [batch], 0 = off
  int64_t listed_entries = 0;  // the three lists' entries together (the CUDA table's size)
  // Each list's entries (the length of its tokenIds): offsets are clamped to them, so that lists
  // nothing checked (device tensors, an engine's tables) never read out of bounds.
  int64_t bias_entries = 0, banned_entries = 0, penalty_entries = 0;
  int32_t* listed_invalid = nullptr;  // [batch] or null: set to 1 where row b's lists hold an invalid
                                      // entry (an id outside [0, V) other than -1, a non-finite bias, a
                                      // negative count) or offsets out of order, else 0; such entries
                                      // are skipped

  // ---- built by the CUDA launchers from the lists above (callers leave them null) ---------------
  const uint32_t* listed_marks = nullptr;  // [batch, ceil(vocab / 32)] pairs: bits, first table index
  const float* listed_table = nullptr;     // [listed_entries, 4]: kernels/listed.cuh's ListedEntry

  // ---- outputs -----------------------------------------------------------------------------------
  int32_t* tokens = nullptr;           // [batch, num_samples]
  int32_t* row_status = nullptr;       // [batch] RowStatus; nullptr = not reported
  float* logprobs = nullptr;           // [batch, num_samples] log p(token); nullptr = not computed
  int32_t top_logprobs = 0;            // n most likely tokens reported per row, 0 = off
  int32_t* top_tokens = nullptr;       // [batch, top_logprobs]
  float* top_token_logprobs = nullptr; // [batch, top_logprobs]
  // logprobs and top_token_logprobs of the raw distribution (softmax of the softcapped logits, bias
  // included, before the listed tokens' steps, the mask, the temperature and the filters:
  // SEMANTICS §4) instead of the one drawn from
  int32_t raw_logprobs = 0;
  int32_t* fallback_rows = nullptr;    // [1]: rows that left the fused path for the materializing one

  // ---- vocabulary shards (SEMANTICS §6): W holds rows [vocab_offset, vocab_offset + vocab) of a
  // vocabulary of vocab_total; the noise and the token ids are global. With `partial` set, the call
  // writes the shard's partial state there (include/partial.h) instead of tokens and outputs ----
  int64_t vocab_offset = 0;        // a multiple of 4 (one Philox block serves an aligned quad)
  bool listed_global_ids = false;  // the lists' ids are global ([0, vocab_total)): ids outside the
                                   // shard are skipped here (an engine's tables of a sharded sampler)
  int64_t vocab_total = 0;         // 0: vocab (not sharded)
  void* partial = nullptr;         // partial_bytes(partial_max_batch, num_samples, partial_capacity)
  int32_t partial_capacity = 0;    // candidate keys per row
  int32_t partial_max_batch = 0;   // rows the block is sized for (>= batch)
  uint64_t options_hash = 0;       // written to the header; merge_partials checks it
  // An engine's sharded step: where a one-pass shard's top-p rows store the tiles they choose
  // ([batch, vocab] fp32, raw) and which ones ([batch, ceil(vocab / 128)], zeroed by the caller),
  // so that the rows pass reads them back instead of W (null: not stored).
  float* shard_row_logits = nullptr;
  uint8_t* shard_stored_tiles = nullptr;
  // The rows pass (SEMANTICS §6; include/partial.h, RowValuesHeader), for the rows a merge left
  // undecided. A shard call (`partial` and `row_values` set) writes one segment there instead of
  // its partial state: the candidate values of rows value_rows[0 .. value_row_count). A decide call
  // (cuda::launch_decide_row_values, cpu::decide_row_values) reads value_segments segments of
  // row_values_bytes(value_row_count, value_pitch) bytes each, one a shard, and draws those rows
  // from their whole rows, writing their outputs only.
  const int32_t* value_rows = nullptr;  // [value_row_count] batch rows, ascending
  int64_t value_row_count = 0;
  void* row_values = nullptr;
  int64_t value_pitch = 0;              // floats per row in a segment (>= every shard's vocab)
  int32_t value_segments = 0;           // decide call: segments in row_values

  // ---- workspace -------------------------------------------------------------------------------
  // The fused launchers' temporary arrays: carved from this caller-owned device block (256-byte
  // aligned, at least fused_workspace_bytes) when set, so nothing is allocated per call (an
  // engine's sampler, a captured graph); else stream-ordered allocations per call.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// What an engine sampler updates after a draw (cuda::launch_record_tokens, cpu::record_tokens). The
// penalty table (capacity 0: none): row b's `capacity` slots at b * capacity of each array, a token
// id (negative: a free slot), its count in the output so far and its prompt flag; the lists a call
// reads are this table as CSR (offsets b * capacity), whose free slots the kernels skip. min_tokens
// (or null): the row's banned list applies while min_tokens[b] > 0.
struct RecordTargets {
  int32_t* tokens = nullptr;
  int32_t* counts = nullptr;
  uint8_t* in_prompt = nullptr;
  int32_t capacity = 0;
  int32_t* unrecorded = nullptr;  // tokens a full table could not count
  int32_t* min_tokens = nullptr;
  const int32_t* list_invalid = nullptr;  // or null: rows whose list tables hold invalid ids (p.listed_invalid)
  bool record = false;                    // count the tokens (else only report list_invalid)
};

// Host and device (merge.h's row merge runs on both).
#if defined(__CUDACC__)
#define FS_PARAMS_HD __host__ __device__
#else
#define FS_PARAMS_HD
#endif

inline FS_PARAMS_HD bool has_penalties(const SampleParams& p) {
  return p.bias_offsets != nullptr || p.banned_offsets != nullptr || p.penalty_offsets != nullptr;
}

// The ids of a call's lists: a shard's lists in global ids (listed_global_ids) are valid in
// [0, vocab_total) and apply, as local ids id - shift, where they fall in the shard.
struct ListedIds {
  int64_t shift, valid_end;
};
inline FS_PARAMS_HD ListedIds listed_ids(const SampleParams& p) {
  const bool global = p.listed_global_ids;
  return ListedIds{global ? p.vocab_offset : 0, global && p.vocab_total > 0 ? p.vocab_total : p.vocab};
}

// Whether a call truncates rows: top-k, top-p or min-p (the filters that keep a part of the row
// decided from its order or mass, and so may send a row past the candidates).
inline FS_PARAMS_HD bool has_truncation(const SampleParams& p) {
  return p.top_k != nullptr || p.top_p != nullptr || p.min_p != nullptr;
}

// Whether a call takes the filtered path: filters, masks, softcap, logprobs or listed tokens.
inline FS_PARAMS_HD bool has_filters(const SampleParams& p) {
  return has_truncation(p) || p.allowed != nullptr ||
         p.softcap > 0.0f || p.logprobs != nullptr || p.top_logprobs > 0 || has_penalties(p);
}

// Whether a call reports raw log-probabilities: logprobsMode 'raw' with anything to report.
inline FS_PARAMS_HD bool reports_raw_logprobs(const SampleParams& p) {
  return p.raw_logprobs != 0 && (p.logprobs != nullptr || p.top_logprobs > 0);
}

}  // namespace flashsample
