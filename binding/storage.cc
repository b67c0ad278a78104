#include "storage.h"

#include <cstdlib>
#include <new>

#include "cuda_api.h"

namespace flashsample {
namespace binding {

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
  return std::shared_ptr<Storage>(new Storage(kind, ordinal, data, bytes, true));
}

std::shared_ptr<Storage> Storage::wrap_external(int ordinal, void* pointer, size_t bytes) {
  return std::shared_ptr<Storage>(new Storage(MemoryKind::kDevice, ordinal, pointer, bytes, false));
}

Storage::~Storage() {
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
