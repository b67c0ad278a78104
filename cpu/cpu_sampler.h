// The CPU backend: the same two samplers as the CUDA backend, on host pointers, with the same
// SampleParams and the same noise header. Used by CI, laptops and GPU-less servers.
#pragma once

#include <string>

#include "../cuda/include/merge.h"
#include "../cuda/include/params.h"

namespace flashsample {
namespace cpu {

// Both return an empty string on success, else a message naming what is wrong. Per-row
// conditions (a row with no drawable token) go to p.row_status, not to the message.
// `num_threads` <= 0 means std::thread::hardware_concurrency().

// Fused: walks the vocabulary tile by tile, keeps a running winner per (row, sample); never
// allocates [batch, vocab].
std::string sample_fused(const SampleParams& p, int num_threads);

// The vector ISA the product and exp kernels run: "avx512", "avx2" or "baseline" (the widest the
// CPU has, capped by FLASHSAMPLE_CPU_ISA), so that a test of a capped path can see it in force.
const char* kernel_isa();

// Reference: materializes the logits [batch, vocab] (the fused path's fp32 dot product, so on the
// CPU both see bit-identical logits), applies the filters per row in float64, samples by `method`.
// With kGumbel it draws exactly the fused path's tokens.
std::string sample_reference(const SampleParams& p, ReferenceMethod method, int num_threads);

// Merges vocabulary shards' partial states (include/partial.h, written by sample_fused with
// p.partial set) into p's outputs, as the unsharded call would have drawn (SEMANTICS §6).
// status[0]: a PartialError (then nothing is written), status[1]: the partial it concerns,
// status[2]: the most rows of W a shard holds.
std::string merge_partials(const SampleParams& p, const PartialSet& set, int32_t* status, int num_threads);

// The rows pass (SampleParams::row_values; SEMANTICS §6). A shard's side, which sample_fused runs
// when p.row_values is set: its segment of the rows' candidate values. The decision: those rows
// drawn from the segments, whole, as the unsharded call draws them (rows whose segments are not one
// round's get kRowUndecided).
std::string shard_row_values(const SampleParams& p, int num_threads);
std::string decide_row_values(const SampleParams& p, int num_threads);

// The rows whose lists nothing checked (tensors, an engine's tables) hold an invalid entry (an id
// outside [0, V) other than -1, a non-finite bias, a negative count, an id repeated within the
// bias or penalty list) or offsets outside [0, entries] or out of order: flags[b] = 1, else 0.
// The CUDA table kernel's report (params.h, listed_invalid); the backends skip such entries.
void find_invalid_lists(const SampleParams& p, int32_t* flags);

// cuda::launch_record_tokens on host memory: the same counts, slots, statuses and order.
void record_tokens(const RecordTargets& t, const int32_t* drawn, int64_t batch, int32_t* row_status);

}  // namespace cpu
}  // namespace flashsample
