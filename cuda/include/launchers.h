// Host launchers of the CUDA backend. Each takes a SampleParams whose pointers are device
// pointers, enqueues its work on `stream` and returns the first CUDA error (never exits, never
// synchronizes the host). Temporary workspace is allocated stream-ordered (cudaMallocAsync /
// cudaFreeAsync), so a call can be captured in a CUDA graph.
#pragma once

#include <cuda_runtime.h>

#include "params.h"

namespace flashsample {
namespace cuda {

// The fused LM-head GEMM + Gumbel-max sampler: never materializes [batch, vocab].
// Returns cudaErrorNotSupported for options the fused CUDA path does not implement yet.
cudaError_t launch_fused_sample(const SampleParams& p, cudaStream_t stream);

// The materializing reference: fp32 logits [batch, vocab] in device memory, then `method`.
cudaError_t launch_reference_sample(const SampleParams& p, ReferenceMethod method,
                                    cudaStream_t stream);

// Ceiling measurement for the benchmark: streams `bytes` of `buffer` with 16-byte loads and
// writes a checksum to `sink` (so the loads cannot be elided).
cudaError_t launch_read_stream(const void* buffer, size_t bytes, unsigned int* sink,
                               cudaStream_t stream);

}  // namespace cuda
}  // namespace flashsample
