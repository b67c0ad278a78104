// Benchmark support, run on a worker thread: the sampler's time per launch, and the device's read
// bandwidth (the ceiling the benchmark compares against).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../../cuda/include/launchers.h"
#include "../cuda_api.h"
#include "launch.h"
#include "runtime.h"

namespace flashsample {
namespace binding {

using gpu_detail::bind_scratch;
using gpu_detail::cuda_message;
using gpu_detail::device_streams;
using gpu_detail::DeviceStreams;
using gpu_detail::launch;
using gpu_detail::launch_message;
using gpu_detail::pack_inputs;
using gpu_detail::plan_scratch;
using gpu_detail::ScratchLayout;

std::string gpu_time_sampler(int ordinal, SamplerKind kind, const std::vector<SampleParams>& params,
                             const HostRowInputs& rows, int warmup, int iters,
                             std::vector<double>* microseconds) {
  DeviceStreams* s;
  std::string error = device_streams(ordinal, &s);
  if (!error.empty()) return error;
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  if (params.empty()) return "no inputs to time";
  cudaStream_t stream = s->compute;
  const ScratchLayout layout = plan_scratch(params[0], rows);
  const std::vector<uint8_t> staging = pack_inputs(layout, params[0], rows);
  void* scratch = nullptr;
  FS_CUDA_TRY("cudaMalloc (timing scratch)", cudaMalloc(&scratch, layout.total));
  std::vector<cudaEvent_t> events(2 * static_cast<size_t>(iters), nullptr);
  auto cleanup = [&] {
    for (cudaEvent_t e : events)
      if (e) cudaEventDestroy(e);
    cudaFree(scratch);
  };
  cudaError_t status =
      cudaMemcpy(scratch, staging.data(), staging.size(), cudaMemcpyHostToDevice);
  std::vector<SampleParams> bound = params;
  for (SampleParams& p : bound)
    bind_scratch(&p, layout, static_cast<uint8_t*>(scratch), rows, p.logprobs != nullptr);
  for (size_t i = 0; status == cudaSuccess && i < events.size(); ++i)
    status = cudaEventCreate(&events[i]);
  for (int i = 0; status == cudaSuccess && i < warmup; ++i)
    status = launch(kind, bound[static_cast<size_t>(i) % bound.size()], stream);
  for (int i = 0; status == cudaSuccess && i < iters; ++i) {
    const SampleParams& p = bound[static_cast<size_t>(i + warmup) % bound.size()];
    status = cudaEventRecord(events[2 * i], stream);
    if (status == cudaSuccess) status = launch(kind, p, stream);
    if (status == cudaSuccess) status = cudaEventRecord(events[2 * i + 1], stream);
  }
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  microseconds->assign(static_cast<size_t>(iters), 0.0);
  for (int i = 0; status == cudaSuccess && i < iters; ++i) {
    float ms = 0;
    status = cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]);
    (*microseconds)[i] = ms * 1000.0;
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    cudaStreamSynchronize(stream);
    cleanup();
    return launch_message(kind, status);
  }
  cleanup();
  return "";
}

std::string gpu_read_bandwidth(int ordinal, size_t bytes, int iters, double* bytes_per_second) {
  DeviceStreams* s;
  std::string error = device_streams(ordinal, &s);
  if (!error.empty()) return error;
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  bytes = bytes / 16 * 16;
  void* buffer = nullptr;
  unsigned int* sink = nullptr;
  FS_CUDA_TRY("cudaMalloc (bandwidth buffer)", cudaMalloc(&buffer, bytes));
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaError_t status = cudaMalloc(&sink, sizeof(unsigned int));
  // Non-zero data: zeros have been seen to run faster than real data on this hardware.
  if (status == cudaSuccess) status = cudaMemsetAsync(buffer, 0x5a, bytes, s->compute);
  if (status == cudaSuccess) status = cudaEventCreate(&start);
  if (status == cudaSuccess) status = cudaEventCreate(&stop);
  std::vector<double> seconds;
  for (int i = 0; status == cudaSuccess && i < iters + 2; ++i) {
    status = cudaEventRecord(start, s->compute);
    if (status == cudaSuccess) status = cuda::launch_read_stream(buffer, bytes, sink, s->compute);
    if (status == cudaSuccess) status = cudaEventRecord(stop, s->compute);
    if (status == cudaSuccess) status = cudaEventSynchronize(stop);
    float ms = 0;
    if (status == cudaSuccess) status = cudaEventElapsedTime(&ms, start, stop);
    if (i >= 2) seconds.push_back(ms * 1e-3);  // the first two are warm-up
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  cudaFree(sink);
  cudaFree(buffer);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return cuda_message("read-bandwidth kernel", status);
  }
  std::sort(seconds.begin(), seconds.end());
  *bytes_per_second = static_cast<double>(bytes) / seconds[seconds.size() / 2];
  return "";
}

}  // namespace binding
}  // namespace flashsample
