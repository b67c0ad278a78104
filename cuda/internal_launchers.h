// The filtered samplers of the CUDA backend (top-k, top-p, min-p, softcap, allowed-token masks,
// logprobs, topLogprobs): docs/SEMANTICS.md §2, §4 and §5. Internal to cuda/.
#pragma once

#include <cuda_runtime.h>

#include "include/params.h"
#include "include/regions.h"
#include "kernels/filter_epilogue.cuh"

namespace flashsample {
namespace cuda {


// A launcher's temporary regions: carved in order from the caller's block (p.workspace) when it
// has one, else stream-ordered allocations. give_back frees what take allocated (nothing when
// carved); rest() is `p` with the part of the block not yet taken, for a nested launcher.
class Scratch {
 public:
  Scratch(const SampleParams& p, cudaStream_t stream)
      : base_(static_cast<uint8_t*>(p.workspace)), bytes_(p.workspace_bytes), stream_(stream) {}
  template <typename T>
  cudaError_t take(size_t bytes, T** region) {
    if (base_ == nullptr) return cudaMallocAsync(reinterpret_cast<void**>(region), bytes, stream_);
    const size_t rounded = (bytes + 255) / 256 * 256;
    if (used_ + rounded > bytes_) return cudaErrorInvalidValue;  // the caller sized it too small
    *region = reinterpret_cast<T*>(base_ + used_);
    used_ += rounded;
    return cudaSuccess;
  }
  cudaError_t give_back(void* region) {
    return base_ != nullptr || region == nullptr ? cudaSuccess : cudaFreeAsync(region, stream_);
  }
  SampleParams rest(const SampleParams& p) const {
    SampleParams q = p;
    if (base_ != nullptr) {
      q.workspace = base_ + used_;
      q.workspace_bytes = bytes_ - used_;
    }
    return q;
  }

 private:
  uint8_t* base_;
  size_t bytes_;
  size_t used_ = 0;
  cudaStream_t stream_;
};

// The listed tokens' marks and table (kernels/listed.cuh) for p's lists, in scratch's next region,
// by one kernel on `stream`: *q is p with listed_marks and listed_table set (p itself when it lists
// nothing), *region what to give back to scratch once the call's kernels are enqueued.
cudaError_t build_listed_table(const SampleParams& p, Scratch& scratch, SampleParams* q, void** region,
                               cudaStream_t stream);
size_t listed_table_bytes(const SampleParams& p);  // 0 when p lists nothing
// The two halves of build_listed_table: the regions (*q points at them, nothing built yet), then
// the kernel that builds them (nothing when q lists nothing); `programmatic`: it lets the next
// kernel start at once and completes only after the kernel before it.
cudaError_t take_listed_table(const SampleParams& p, Scratch& scratch, SampleParams* q, void** region);
cudaError_t launch_build_listed(const SampleParams& q, bool programmatic, cudaStream_t stream);

// The workspace of launch_fused_filtered (every path `p`'s options may take) and of
// launch_extra_pass, in bytes, the way fused_workspace_bytes promises.
cudaError_t filtered_workspace_bytes(const SampleParams& p, size_t* bytes);
cudaError_t extra_pass_workspace_bytes(const SampleParams& p, size_t* bytes);

// The LM-head product for vocabulary rows [v_begin, v_begin + v_count) of every batch row, plus
// the bias, stored as fp32 `logits[b * v_count + (v - v_begin)]`: the fused kernel's main loop
// with its store epilogue (reference.cu), so every path sees the same logits bit for bit.
cudaError_t launch_logits_store(const SampleParams& p, int64_t v_begin, int64_t v_count,
                                float* logits, cudaStream_t stream);

// Whether launch_filtered_gemm runs for `p`: compute capability 9.0 with tensor-core operands
// (dispatch.cuh's filtered row), except for a few shapes where the chunked path is faster.
bool filtered_gemm_supported(const SampleParams& p);
// Whether it may run for `p` at some batch size up to p.batch (a workspace sized for p.batch must
// then hold the one-pass path's too).
bool filtered_gemm_possible(const SampleParams& p);

// The one-pass filtered GEMM: the split kernel with the filtered epilogue (filter_epilogue.cuh),
// winners into `winners` ([batch], zeroed), summaries and candidates into `f`. `programmatic`:
// launched programmatically, after a zeroing kernel that releases its dependents.
// cudaErrorNotSupported when the shape's tensor maps cannot be encoded (nothing was launched).
cudaError_t launch_filtered_gemm(const SampleParams& p, unsigned long long* winners,
                                 const detail::FilterArgs& f, bool programmatic, cudaStream_t stream);

// The plain sampling GEMM on the transformed logits (softcap, mask, listed tokens: f's softcap,
// allowed, allowed_words, listed and listed_table), winners into `winners` ([batch], zeroed);
// `programmatic` as launch_filtered_gemm. cudaErrorNotSupported where launch_filtered_gemm would
// not run (nothing was launched).
cudaError_t launch_transformed_gemm(const SampleParams& p, unsigned long long* winners,
                                    const detail::FilterArgs& f, bool programmatic, cudaStream_t stream);

// A vocabulary shard's call (p.partial set; SEMANTICS §6) on the one-pass path: the filtered GEMM
// with every row's summaries and winner, then launch_partial_from_candidates (and with logprobsMode
// 'raw', every row's logits stored, launch_partial_raw). numSamples 1.
// cudaErrorNotSupported where the one-pass GEMM does not run for `p` (the caller materializes).
cudaError_t launch_shard_one_pass(const SampleParams& p, cudaStream_t stream);
// The shard's partial state (partial.cu) from the one-pass GEMM's tile summaries, winners ([batch])
// and candidates: each row's statistics, sample 0's winner and the best keys of its complete prefix.
cudaError_t launch_partial_from_candidates(const SampleParams& p, const detail::FilterArgs& f,
                                           const unsigned long long* winners, cudaStream_t stream);
// logprobsMode 'raw' (partial.cu): the raw section of the state's rows, after their winners and
// candidate keys were written, from the shard's logits [batch, vocab] (bias included, before
// softcap); its temporaries from `scratch`. Nothing for a call that reports no raw logprobs.
cudaError_t launch_partial_raw(const SampleParams& p, const float* logits, Scratch& scratch, cudaStream_t stream);
// The rows pass's decision, logprobsMode 'raw' (partial.cu): after the draw, the raw logprobs and
// top tokens of the value rows (the first *live of them where `live` is set) from the raw logits
// their segments carry. Nothing for a call that reports no raw logprobs.
cudaError_t launch_decide_raw_rows(const SampleParams& p, const int32_t* live, cudaStream_t stream);

// Fused: the vocabulary in L2-sized chunks (the [B, chunk] logits live in L2, never [B, V] in
// HBM), an exact online log-sum-exp and the top kCandidateCap candidates per row, then the exact
// selection; rows whose candidates cannot prove the kept set fall back to a materialized row.
cudaError_t launch_fused_filtered(const SampleParams& p, cudaStream_t stream);

// The extra pass of the one-pass path (extra_pass.cu): the rows flagged in `flags` ([batch],
// nonzero = flagged; *flagged_count of them, on the device) decided exactly from their whole rows,
// with the decision and the noise of whole_rows_kernel, logits written for those rows only into
// `row_logits` ([batch, vocab] fp32), every sample of a row. A row flagged 2 was stored there by the
// one-pass epilogue: wholly, or with `stored_tiles` ([batch, ceil(vocab / 128)]) the tiles marked 1,
// and only the others are computed. Fixed grids from B, V and D; the kernels return at once when
// no row is flagged, so the call can be captured in a CUDA graph.
cudaError_t launch_extra_pass(const SampleParams& p, const int32_t* flags, const int32_t* flagged_count,
                              float* row_logits, const uint8_t* stored_tiles, cudaStream_t stream);

// The extra pass's first kernel alone: raw logits (bias included) of the rows flagged in `flags`
// (*flagged_count of them, on the device) into `row_logits` ([batch, vocab] fp32); rows flagged 2
// keep the tiles `stored_tiles` marks (as launch_extra_pass). Returns at once when none is flagged.
// An engine's sharded step computes its rows pass's values with it.
cudaError_t launch_flagged_logits(const SampleParams& p, const int32_t* flags, const int32_t* flagged_count,
                                  float* row_logits, const uint8_t* stored_tiles, cudaStream_t stream);

// whole_rows_kernel (filters.cu) over the rows set in `only_rows` ([batch]): raw logits (bias
// included) in `logits` ([batch, vocab]), decided in place, one block per row, Gumbel draws; every
// block returns at once when *any is 0 (only_rows is then not read). Launched programmatically
// (after the extra pass's kernels) where the device allows.
cudaError_t launch_whole_rows(const SampleParams& p, float* logits, const int32_t* only_rows,
                              const int32_t* any, cudaStream_t stream);

// A shard's partial state (p.partial set): whether its vocabulary range and sizes are valid.
bool partial_params_ok(const SampleParams& p);
// The reference (launch_reference_sample): materializes [B, V] and decides each whole row by
// `method` (whole_rows_kernel), with or without options.
cudaError_t launch_reference_rows(const SampleParams& p, ReferenceMethod method,
                                  cudaStream_t stream);

}  // namespace cuda
}  // namespace flashsample
