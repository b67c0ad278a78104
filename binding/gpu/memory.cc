// Tensor memory on the device: allocation from the device's tensor pool, free, copies in and out,
// and the check of a pointer the caller brings.
#include <cuda_runtime.h>

#include <string>

#include "../cuda_api.h"
#include "host_steps.h"
#include "runtime.h"

namespace flashsample {
namespace binding {

using gpu_detail::cuda_message;
using gpu_detail::device_streams;
using gpu_detail::DeviceStreams;
using gpu_detail::HostStep;
using gpu_detail::timed;

std::string gpu_malloc(int ordinal, size_t bytes, void** pointer) {
  DeviceStreams* s;
  std::string error = device_streams(ordinal, &s);
  if (!error.empty()) return error;
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  // Waits for `transfer` only (the allocation itself): afterwards any stream may use the memory.
  *pointer = nullptr;
  const cudaError_t status = timed(HostStep::kTensorAlloc, [&] {
    const cudaError_t e = cudaMallocFromPoolAsync(pointer, bytes, s->tensor_pool, s->transfer);
    return e != cudaSuccess ? e : cudaStreamSynchronize(s->transfer);
  });
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: the next call must not see this error
    if (*pointer != nullptr) cudaFreeAsync(*pointer, s->transfer);
    *pointer = nullptr;
    return cuda_message("cudaMallocFromPoolAsync", status);
  }
  return "";
}

// Called when the last reference to a tensor goes: no call of the library still uses it (calls
// hold references until their work has completed), so a stream-ordered free on `transfer` is safe
// and does not wait.
std::string gpu_free(int ordinal, void* pointer) {
  DeviceStreams* s;
  std::string error = device_streams(ordinal, &s);
  if (!error.empty()) return error;
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  FS_CUDA_TRY("cudaFreeAsync",
              timed(HostStep::kTensorFree, [&] { return cudaFreeAsync(pointer, s->transfer); }));
  return "";
}

std::string gpu_upload(int ordinal, void* device_dst, const void* host_src, size_t bytes) {
  DeviceStreams* s;
  std::string error = device_streams(ordinal, &s);
  if (!error.empty()) return error;
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  // Only fresh tensors are filled (Device.tensor): nothing queued elsewhere reads them yet, so the
  // copy goes on `transfer` and waits for itself only; the calls that read the tensor are enqueued
  // after this returns.
  FS_CUDA_TRY("cudaMemcpyAsync (host to device)", timed(HostStep::kTensorUpload, [&] {
                const cudaError_t e = cudaMemcpyAsync(device_dst, host_src, bytes,
                                                      cudaMemcpyHostToDevice, s->transfer);
                return e != cudaSuccess ? e : cudaStreamSynchronize(s->transfer);
              }));
  return "";
}

std::string gpu_download(int ordinal, void* host_dst, const void* device_src, size_t bytes) {
  DeviceStreams* s;
  std::string error = device_streams(ordinal, &s);
  if (!error.empty()) return error;
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  // Ordered after the library's own work on that tensor (this runs on a worker thread).
  FS_CUDA_TRY("cudaMemcpyAsync (device to host)",
              cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, s->compute));
  FS_CUDA_TRY("cudaStreamSynchronize", cudaStreamSynchronize(s->compute));
  return "";
}

std::string gpu_check_pointer(int ordinal, const void* pointer) {
  cudaPointerAttributes attributes;
  const cudaError_t status = cudaPointerGetAttributes(&attributes, pointer);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return cuda_message("cudaPointerGetAttributes", status);
  }
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
    return "the pointer is not device memory (cudaPointerGetAttributes says host or unregistered)";
  }
  if (attributes.type == cudaMemoryTypeDevice && attributes.device != ordinal) {
    return "the pointer belongs to cuda:" + std::to_string(attributes.device) + ", not cuda:" +
           std::to_string(ordinal);
  }
  return "";
}

}  // namespace binding
}  // namespace flashsample
