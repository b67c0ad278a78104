// Private to binding/gpu/ (CUDA builds only): CUDA error messages, and the library's streams and
// tensor pool per device.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace flashsample {
namespace binding {
namespace gpu_detail {

// "<what> failed: <error name> (<error string>)"
std::string cuda_message(const char* what, cudaError_t status);

// Returns cuda_message(what, ...) from the enclosing function when `expr` fails, after clearing the
// error so that the next call does not see it.
#define FS_CUDA_TRY(what, expr)                                                  \
  do {                                                                           \
    const cudaError_t fs_status_ = (expr);                                       \
    if (fs_status_ != cudaSuccess) {                                             \
      (void)cudaGetLastError();                                                  \
      return ::flashsample::binding::gpu_detail::cuda_message(what, fs_status_); \
    }                                                                            \
  } while (0)

// One compute stream and one copy stream per device, created on first use and kept for the life of
// the process (the driver reclaims them at exit). Non-blocking: no implicit ordering with the
// legacy default stream that other libraries may use.
// Per device: `compute` runs the library's sampling work (unless a call brings its own stream),
// `copy` brings results back, `transfer` allocates, fills and frees tensors, `graph` is what
// captureGraph captures when the engine brings no stream (never used outside a capture, so work
// that other threads put on `compute` cannot join it). Tensor allocation,
// upload and free never wait for `compute`: with hundreds of calls queued there, a device-wide
// cudaFree or a synchronize of `compute` on the JS thread stalled the event loop for seconds.
struct DeviceStreams {
  cudaStream_t compute = nullptr;
  cudaStream_t copy = nullptr;
  cudaStream_t transfer = nullptr;
  cudaStream_t graph = nullptr;
  // Tensors come from their own stream-ordered pool, which keeps at most
  // tensor_pool_keep_bytes() of freed memory for reuse: beyond that, memory a disposed tensor held
  // goes back to the driver at the next synchronization, so an engine sharing the GPU gets it
  // back (the default pool, tuned to keep per-call workspaces, keeps all).
  cudaMemPool_t tensor_pool = nullptr;
  bool ready = false;
};

// The streams and tensor pool of device `ordinal`, created on first use (thread-safe). Returns an
// empty string on success, else the error.
std::string device_streams(int ordinal, DeviceStreams** out);

}  // namespace gpu_detail
}  // namespace binding
}  // namespace flashsample
