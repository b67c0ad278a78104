// Private to binding/gpu/ (CUDA builds only): what a sampling launch needs, shared by the calls
// (call.cc) and the benchmark's timing loop (timing.cc): one device block for a call's per-row
// inputs and outputs, and the dispatch to the CUDA launchers by SamplerKind.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../cuda_api.h"

namespace flashsample {
namespace binding {
namespace gpu_detail {

// Carves one stream-ordered allocation into the per-call arrays.
struct ScratchLayout : RowInputSlots {
  size_t tokens = 0, row_status = 0, logprobs = 0, top_tokens = 0, top_logprobs = 0, fallback = 0;
  size_t merge_status = 0;  // mergePartials: PartialError, partial index, largest shard
  size_t list_invalid = 0;  // lists given as tensors: the table kernel's report per row
  size_t input_bytes = 0, total = 0;
};

ScratchLayout plan_scratch(const SampleParams& p, const HostRowInputs& rows);

// The per-row inputs laid out as the first l.input_bytes of the scratch block, to be copied there.
std::vector<uint8_t> pack_inputs(const ScratchLayout& l, const SampleParams& p,
                                 const HostRowInputs& rows);

// Points the per-row and output fields of `p` into the scratch block at `base`.
void bind_scratch(SampleParams* p, const ScratchLayout& l, uint8_t* base, const HostRowInputs& rows,
                  bool want_logprobs);

// Enqueues the sampler `kind` on `stream`.
cudaError_t launch(SamplerKind kind, const SampleParams& p, cudaStream_t stream);

// The error message for a failed launch of `kind`.
std::string launch_message(SamplerKind kind, cudaError_t status);

}  // namespace gpu_detail
}  // namespace binding
}  // namespace flashsample
