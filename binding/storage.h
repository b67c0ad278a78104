// Native memory behind a Tensor: host memory (CPU backend) or device memory (CUDA backend),
// owned by us or wrapped from another engine. Shared by every in-flight call that reads or writes
// it, so that dispose() while a call is in flight only frees the memory once the call is done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace flashsample {
namespace binding {

enum class MemoryKind : int32_t { kHost = 0, kDevice = 1 };

class Storage {
 public:
  // Allocates `bytes` (at least 1) of host memory (64-byte aligned) or device memory on `ordinal`.
  // Returns nullptr and fills `error` on failure.
  static std::shared_ptr<Storage> allocate(MemoryKind kind, int ordinal, size_t bytes,
                                           std::string* error);
  // Wraps device memory owned elsewhere: never freed here.
  static std::shared_ptr<Storage> wrap_external(int ordinal, void* pointer, size_t bytes);

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  MemoryKind kind() const { return kind_; }
  int ordinal() const { return ordinal_; }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  bool owned() const { return owned_; }

 private:
  Storage(MemoryKind kind, int ordinal, void* data, size_t bytes, bool owned)
      : kind_(kind), ordinal_(ordinal), data_(data), bytes_(bytes), owned_(owned) {}
  MemoryKind kind_;
  int ordinal_;
  void* data_;
  size_t bytes_;
  bool owned_;
};

using StorageRef = std::shared_ptr<Storage>;

// Process-wide counts of the Storage objects alive (owned or wrapped) and of the bytes that
// NativeBuffers have reported to V8 with napi_adjust_external_memory and not yet taken back. The
// stress script reads them (native.memoryStats()) to check that every allocation is freed and every
// report undone, independently of what the allocator or V8 do with RSS.
struct StorageStats {
  int64_t host_buffers;
  int64_t host_bytes;
  int64_t device_buffers;
  int64_t device_bytes;
  int64_t external_buffers;  // wrapped with fromDevicePointer (never freed here)
  int64_t reported_bytes;
};
StorageStats storage_stats();
void add_reported_bytes(int64_t delta);

}  // namespace binding
}  // namespace flashsample
