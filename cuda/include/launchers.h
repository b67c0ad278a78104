// Host launchers of the CUDA backend. Each takes a SampleParams whose pointers are device
// pointers, enqueues its work on `stream` and returns the first CUDA error (never exits, never
// synchronizes the host). Temporary workspace comes from SampleParams::workspace when the caller
// preallocated it (fused sampler), else it is allocated stream-ordered (cudaMallocAsync /
// cudaFreeAsync); either way a call can be captured in a CUDA graph.
#pragma once

#include <cuda_runtime.h>

#include "params.h"

namespace flashsample {

struct PartialSet;  // merge.h
namespace cuda {

// The fused LM-head GEMM + Gumbel-max sampler: never materializes [batch, vocab].
// Returns cudaErrorNotSupported for options the fused CUDA path does not implement yet.
cudaError_t launch_fused_sample(const SampleParams& p, cudaStream_t stream);

// A plain call without a caller's workspace keeps its winner words per stream, zeroed between
// calls (fused_sample.cu, StreamWords); this frees `stream`'s (stream-ordered, after its enqueued
// work), for a stream about to be destroyed. A no-op for a stream that has none.
cudaError_t release_stream_words(cudaStream_t stream);

// The workspace launch_fused_sample needs for `p`, and for any call that differs from `p` only in
// its pointers, a smaller batch or per-row values (an engine's sampler sized once): the largest
// of the paths `p`'s options may take.
cudaError_t fused_workspace_bytes(const SampleParams& p, size_t* bytes);

// Engine samplers' row parameters. scatter: for each of the `fields` (bit i = field i) rows
// [0, count) of the packed staging block (field i at staging + staging_at[i], element size
// elem_bytes[i]) go to rows [first, first + count) of dst[i]. advance: offset[b] += 1 for b < batch
// (the decode step of the next draw).
constexpr int kRowFields = 10;
struct RowScatter {
  const uint8_t* staging = nullptr;
  uint8_t* dst[kRowFields] = {};
  uint32_t staging_at[kRowFields] = {};
  uint32_t elem_bytes[kRowFields] = {};
  uint32_t fields = 0;
  int64_t first = 0, count = 0;
};
cudaError_t launch_scatter_rows(const RowScatter& s, cudaStream_t stream);
cudaError_t launch_advance_offsets(uint64_t* offset, int64_t batch, cudaStream_t stream);

// RecordTargets (params.h): what an engine sampler updates after a draw.
// For each row b < batch: with `record` and drawn[b] >= 0, the token's count + 1 in the penalty
// table (a token not in it takes the row's first free slot, count 1, not in the prompt; a full row
// gets row_status[b] = kRowTableFull when row_status is given and adds 1 to *unrecorded), and
// min_tokens[b] - 1 where it is > 0; then row_status[b] = kRowListInvalid where list_invalid[b].
cudaError_t launch_record_tokens(const RecordTargets& t, const int32_t* drawn, int64_t batch, int32_t* row_status,
                                 cudaStream_t stream);

// A vocabulary shard's partial state with filters or logprobs (p.partial set; include/partial.h,
// SEMANTICS §6): W holds rows [p.vocab_offset, p.vocab_offset + p.vocab) of p.vocab_total.
// launch_fused_sample calls it (and writes a plain shard's state itself).
cudaError_t launch_partial_sample(const SampleParams& p, cudaStream_t stream);

// The rows pass's decision (SampleParams::row_values): rows value_rows[] of p (p.vocab: the
// unsharded vocabulary) drawn from the shards' segments of their candidate values, whole, as the
// unsharded call draws them; only those rows' outputs are written.
cudaError_t launch_decide_row_values(const SampleParams& p, cudaStream_t stream);

// An engine's sharded step (a sampler created with a communicator), its rows pass on the device
// with fixed grids, so that the step can be captured: each kernel returns at once when no row is
// undecided. The shard's side: the first p.value_row_count rows that the merge left undecided
// (row_status), listed into p.value_rows (-1 past them; their count in flags[p.batch]; flags [batch
// + 1]), their logits computed into `logits` ([batch, p.vocab] fp32; the tiles the shard's pass
// stored there when p.shard_row_logits is `logits`, marked in p.shard_stored_tiles, are kept) and
// their candidate values written into the segment p.row_values (value_pitch floats a row, every
// slot's place reserved).
cudaError_t launch_rows_pass_values(const SampleParams& p, const int32_t* row_status, int32_t* flags, float* logits,
                                    cudaStream_t stream);
// The deciding side: as launch_decide_row_values, for the first *live rows of p.value_rows only,
// with the caller's `rows` ([batch, p.vocab] fp32) and `flags` ([batch + 1] int32).
cudaError_t launch_rows_pass_decide(const SampleParams& p, const int32_t* live, float* rows, int32_t* flags,
                                    cudaStream_t stream);

// merge_partials (include/merge.h) over `set`'s device blocks into p's outputs (p.vocab: the
// unsharded vocabulary); status[0] = PartialError, status[1] = the partial it concerns, status[2]
// the most rows of W a shard holds.
cudaError_t launch_merge_partials(const SampleParams& p, const PartialSet& set, int32_t* status,
                                  cudaStream_t stream);

// The materializing reference: fp32 logits [batch, vocab] in device memory, then `method`.
cudaError_t launch_reference_sample(const SampleParams& p, ReferenceMethod method,
                                    cudaStream_t stream);

// Ceiling measurement for the benchmark: streams `bytes` of `buffer` with 16-byte loads and
// writes a checksum to `sink` (so the loads cannot be elided).
cudaError_t launch_read_stream(const void* buffer, size_t bytes, unsigned int* sink,
                               cudaStream_t stream);

}  // namespace cuda
}  // namespace flashsample
