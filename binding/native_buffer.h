// NativeBuffer: the JS handle of one Storage (the memory behind a lib/ Tensor).
#pragma once

#include <napi.h>

#include "storage.h"

namespace flashsample {
namespace binding {

class NativeBuffer : public Napi::ObjectWrap<NativeBuffer> {
 public:
  static Napi::Function Define(Napi::Env env);
  // Unwraps `value` (a NativeBuffer that is not disposed) or throws an Error naming `what`.
  static StorageRef storage_of(const Napi::Value& value, const char* what);

  explicit NativeBuffer(const Napi::CallbackInfo& info);
  ~NativeBuffer() override;

 private:
  static Napi::Value Wrap(const Napi::CallbackInfo& info);
  Napi::Value Upload(const Napi::CallbackInfo& info);
  Napi::Value UploadAsync(const Napi::CallbackInfo& info);
  Napi::Value Download(const Napi::CallbackInfo& info);
  Napi::Value Dispose(const Napi::CallbackInfo& info);
  Napi::Value Pointer(const Napi::CallbackInfo& info);
  Napi::Value Bytes(const Napi::CallbackInfo& info);
  Napi::Value Disposed(const Napi::CallbackInfo& info);
  void release(Napi::Env env);

  StorageRef storage_;
  int64_t reported_bytes_ = 0;  // reported to V8 as external memory (owned memory only)
};

}  // namespace binding
}  // namespace flashsample
