#include "storage.h"

#include <atomic>
#include <cstdlib>
#include <new>

#include "cuda_api.h"

namespace flashsample {
namespace binding {

namespace {
// Storages are created on the JS thread but may be destroyed on a worker thread (the last
// reference of a call in flight): atomics.
std::atomic<int64_t> g_host_buffers{0}, g_host_bytes{0}, g_device_buffers{0}, g_device_bytes{0},
    g_external_buffers{0}, g_reported_bytes{0};

void count(MemoryKind kind, bool owned, size_t bytes, int64_t sign) {
  if (!owned) {
    g_external_buffers += sign;
  } else if (kind == MemoryKind::kHost) {
    g_host_buffers += sign;
    g_host_bytes += sign * static_cast<int64_t>(bytes);
  } else {
    g_device_buffers += sign;
    g_device_bytes += sign * static_cast<int64_t>(bytes);
  }
}
}  // namespace

StorageStats storage_stats() {
  return {g_host_buffers.load(), g_host_bytes.load(), g_device_buffers.load(),
          g_device_bytes.load(), g_external_buffers.load(), g_reported_bytes.load()};
}

void add_reported_bytes(int64_t delta) { g_reported_bytes += delta; }

std::shared_ptr<Storage> Storage::allocate(MemoryKind kind, int ordinal, size_t bytes,
                                           std::string* error) {
  const size_t request = bytes == 0 ? 1 : bytes;
  void* data = nullptr;
  if (kind == MemoryKind::kHost) {
    // 64-byte alignment: whole cache lines, and wide vector loads in the CPU backend.
    data = std::aligned_alloc(64, (request + 63) / 64 * 64);
    if (!data) {
      *error = "out of host memory allocating " + std::to_string(bytes) + " bytes";
      return nullptr;
    }
  } else {
    *error = gpu_malloc(ordinal, request, &data);
    if (!error->empty()) return nullptr;
  }
  count(kind, true, bytes, +1);
  return std::shared_ptr<Storage>(new Storage(kind, ordinal, data, bytes, true));
}

std::shared_ptr<Storage> Storage::wrap_external(int ordinal, void* pointer, size_t bytes) {
  count(MemoryKind::kDevice, false, bytes, +1);
  return std::shared_ptr<Storage>(new Storage(MemoryKind::kDevice, ordinal, pointer, bytes, false));
}

Storage::~Storage() {
  count(kind_, owned_, bytes_, -1);
  if (!owned_ || !data_) return;
  if (kind_ == MemoryKind::kHost) {
    std::free(data_);
  } else {
    // A stream-ordered free that does not wait (gpu_free); a failure here has nowhere to go but
    // is harmless (the context is being torn down or already lost).
    (void)gpu_free(ordinal_, data_);
  }
}

}  // namespace binding
}  // namespace flashsample
