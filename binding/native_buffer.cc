#include "native_buffer.h"

#include <cstring>
#include <string>
#include <vector>

#include "cuda_api.h"
#include "half_encode.h"
#include "napi_util.h"

namespace flashsample {
namespace binding {

static Napi::FunctionReference* g_constructor = nullptr;

Napi::Function NativeBuffer::Define(Napi::Env env) {
  Napi::Function cls = DefineClass(
      env, "NativeBuffer",
      {StaticMethod<&NativeBuffer::Wrap>("wrap"),
       InstanceMethod<&NativeBuffer::Upload>("upload"),
       InstanceMethod<&NativeBuffer::UploadAsync>("uploadAsync"),
       InstanceMethod<&NativeBuffer::Download>("download"),
       InstanceMethod<&NativeBuffer::Dispose>("dispose"),
       InstanceAccessor<&NativeBuffer::Pointer>("pointer"),
       InstanceAccessor<&NativeBuffer::Bytes>("bytes"),
       InstanceAccessor<&NativeBuffer::Disposed>("disposed")});
  g_constructor = new Napi::FunctionReference(Napi::Persistent(cls));
  env.SetInstanceData<Napi::FunctionReference>(g_constructor);
  return cls;
}

StorageRef NativeBuffer::storage_of(const Napi::Value& value, const char* what) {
  Napi::Env env = value.Env();
  if (!value.IsObject() || !value.As<Napi::Object>().InstanceOf(g_constructor->Value())) {
    throw_error(env, std::string(what) + ": expected a tensor's native buffer");
  }
  NativeBuffer* self = Unwrap(value.As<Napi::Object>());
  if (!self->storage_) throw_error(env, std::string(what) + ": the tensor has been disposed");
  return self->storage_;
}

// new NativeBuffer(kind: 0 host | 1 device, ordinal, bytes)
NativeBuffer::NativeBuffer(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NativeBuffer>(info) {
  Napi::Env env = info.Env();
  if (info.Length() == 1 && info[0].IsExternal()) return;  // created by wrap(), filled there
  if (info.Length() != 3 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber()) {
    throw_error(env, "NativeBuffer(kind, ordinal, bytes): expected three numbers");
  }
  const auto kind = static_cast<MemoryKind>(info[0].As<Napi::Number>().Int32Value());
  const int ordinal = info[1].As<Napi::Number>().Int32Value();
  const double bytes = info[2].As<Napi::Number>().DoubleValue();
  if (!(bytes >= 0) || bytes > 9.0e15) throw_error(env, "bytes: expected a size >= 0");
  if (kind == MemoryKind::kDevice && gpu_capturing()) {
    throw_error(env, "tensor: cannot allocate device memory during graph capture (captureGraph): "
                     "allocate tensors before the capture");
  }
  std::string error;
  storage_ = Storage::allocate(kind, ordinal, static_cast<size_t>(bytes), &error);
  if (!storage_) throw_error(env, error);
  reported_bytes_ = static_cast<int64_t>(bytes);
  Napi::MemoryManagement::AdjustExternalMemory(env, reported_bytes_);
  add_reported_bytes(reported_bytes_);
}

NativeBuffer::~NativeBuffer() {
  // Finalizer path (the FinalizationRegistry fallback of lib/): the Storage itself frees the
  // memory once no in-flight call holds it. External memory accounting needs the env, which a
  // finalizer may not use for JS calls but may for this adjustment.
  if (storage_ && reported_bytes_) {
    Napi::MemoryManagement::AdjustExternalMemory(Env(), -reported_bytes_);
    add_reported_bytes(-reported_bytes_);
  }
}

void NativeBuffer::release(Napi::Env env) {
  if (!storage_) return;
  storage_.reset();
  if (reported_bytes_) {
    Napi::MemoryManagement::AdjustExternalMemory(env, -reported_bytes_);
    add_reported_bytes(-reported_bytes_);
  }
  reported_bytes_ = 0;
}

// NativeBuffer.wrap(ordinal, pointer: bigint, bytes): device memory owned by someone else.
Napi::Value NativeBuffer::Wrap(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 3 || !info[0].IsNumber() || !info[1].IsBigInt() || !info[2].IsNumber()) {
    throw_error(env, "wrap(ordinal, pointer, bytes): expected (number, bigint, number)");
  }
  const int ordinal = info[0].As<Napi::Number>().Int32Value();
  bool lossless = false;
  const uint64_t address = info[1].As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless || address == 0) throw_error(env, "ptr: expected a non-null 64-bit device address");
  std::string error = gpu_check_pointer(ordinal, reinterpret_cast<void*>(address));
  if (!error.empty()) throw_error(env, "ptr: " + error);
  Napi::Object object = g_constructor->New({Napi::External<void>::New(env, nullptr)});
  NativeBuffer* self = Unwrap(object);
  self->storage_ = Storage::wrap_external(ordinal, reinterpret_cast<void*>(address),
                                          static_cast<size_t>(info[2].As<Napi::Number>().DoubleValue()));
  return object;
}

namespace {

// What upload() and uploadAsync() were asked to copy, after the argument checks.
struct UploadRequest {
  const uint8_t* src = nullptr;  // the view's bytes
  size_t view_bytes = 0;
  size_t bytes = 0;  // bytes written into the buffer (half of view_bytes when encoding)
  HalfEncoding encoding = HalfEncoding::kNone;
};

// Checks upload(view, encoding)'s arguments against `storage`; the error message (prefixed with
// `method`) or "" with `*req` filled in.
std::string parse_upload(const Napi::CallbackInfo& info, const char* method, const Storage& storage,
                         UploadRequest* req) {
  const std::string m = method;
  if (info.Length() < 1 || info.Length() > 2 || !info[0].IsTypedArray() ||
      (info.Length() == 2 && !info[1].IsNumber())) {
    return m + ": expected a typed array and an optional encoding";
  }
  auto view = info[0].As<Napi::TypedArray>();
  req->encoding = static_cast<HalfEncoding>(info.Length() == 2 ? info[1].As<Napi::Number>().Int32Value() : 0);
  if (req->encoding != HalfEncoding::kNone && req->encoding != HalfEncoding::kF16 &&
      req->encoding != HalfEncoding::kBF16) {
    return m + ": encoding must be 0, 1 (f16) or 2 (bf16)";
  }
  if (req->encoding != HalfEncoding::kNone && view.TypedArrayType() != napi_float32_array) {
    return m + ": encoding f16 / bf16 needs a Float32Array";
  }
  req->view_bytes = view.ByteLength();
  req->bytes = req->encoding == HalfEncoding::kNone ? req->view_bytes : req->view_bytes / 2;
  if (req->bytes > storage.bytes()) return "upload: more bytes than the tensor holds";
  req->src = static_cast<const uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset();
  return "";
}

// The conversion (half_encode.h) and copy of an upload, on whichever thread calls it: straight
// into host memory, or through a staging vector and gpu_upload into device memory.
std::string copy_upload(const Storage& storage, const UploadRequest& req) {
  if (req.bytes == 0) return "";
  if (storage.kind() == MemoryKind::kHost) {
    if (req.encoding == HalfEncoding::kNone) {
      std::memcpy(storage.data(), req.src, req.bytes);
    } else {
      encode_half(req.src, static_cast<uint16_t*>(storage.data()), req.view_bytes / 4, req.encoding);
    }
    return "";
  }
  const uint8_t* from = req.src;
  std::vector<uint16_t> staging;
  if (req.encoding != HalfEncoding::kNone) {
    staging.resize(req.view_bytes / 4);
    encode_half(req.src, staging.data(), staging.size(), req.encoding);
    from = reinterpret_cast<const uint8_t*>(staging.data());
  }
  return gpu_upload(storage.ordinal(), storage.data(), from, req.bytes);
}

}  // namespace

// upload(view: ArrayBufferView, encode = 0): copies the bytes of `view` to the start of the
// buffer; with encode 1 (f16) or 2 (bf16), `view` is a Float32Array converted on the way
// (half_encode.h), so the tensor receives 2 bytes per value.
Napi::Value NativeBuffer::Upload(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!storage_) throw_error(env, "tensor: the tensor has been disposed");
  if (storage_->kind() == MemoryKind::kDevice && gpu_capturing()) {
    throw_error(env, "upload: cannot copy host data to the device during graph capture (captureGraph)");
  }
  UploadRequest req;
  std::string error = parse_upload(info, "upload", *storage_, &req);
  if (error.empty()) error = copy_upload(*storage_, req);
  if (!error.empty()) throw_error(env, error);
  return env.Undefined();
}

// uploadAsync(view, encoding = 0): Promise<void>; upload()'s conversion and copy on a worker
// thread, so large tensors do not block the JS thread. `view` is kept alive until the promise
// settles; it must not be modified before then.
Napi::Value NativeBuffer::UploadAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!storage_) return rejected(env, "tensor: the tensor has been disposed");
  if (storage_->kind() == MemoryKind::kDevice && gpu_capturing()) {
    return rejected(env, "upload: cannot copy host data to the device during graph capture (captureGraph)");
  }
  UploadRequest req;
  const std::string error = parse_upload(info, "uploadAsync", *storage_, &req);
  if (!error.empty()) return rejected(env, error);
  // Released on the JS thread: the worker and its captures are destroyed there.
  auto keep = std::make_shared<Napi::ObjectReference>(Napi::Persistent(info[0].As<Napi::Object>()));
  StorageRef storage = storage_;
  return PromiseWorker::Start(
      env, [storage, req, keep]() -> std::string { return copy_upload(*storage, req); },
      [keep](Napi::Env env) -> Napi::Value { return env.Undefined(); });
}

// download(): Promise<ArrayBuffer> with the buffer's bytes, copied on a worker thread.
Napi::Value NativeBuffer::Download(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!storage_) return rejected(env, "tensor: the tensor has been disposed");
  if (storage_->kind() == MemoryKind::kDevice && gpu_capturing()) {
    return rejected(env, "toArray: a host read of device memory cannot happen during graph capture (captureGraph)");
  }
  StorageRef storage = storage_;
  auto bytes = std::make_shared<std::vector<uint8_t>>(storage->bytes());
  return PromiseWorker::Start(
      env,
      [storage, bytes]() -> std::string {
        if (bytes->empty()) return "";
        if (storage->kind() == MemoryKind::kHost) {
          std::memcpy(bytes->data(), storage->data(), bytes->size());
          return "";
        }
        return gpu_download(storage->ordinal(), bytes->data(), storage->data(), bytes->size());
      },
      [bytes](Napi::Env env) -> Napi::Value {
        auto out = Napi::ArrayBuffer::New(env, bytes->size());
        if (!bytes->empty()) std::memcpy(out.Data(), bytes->data(), bytes->size());
        return out;
      });
}

Napi::Value NativeBuffer::Dispose(const Napi::CallbackInfo& info) {
  release(info.Env());
  return info.Env().Undefined();
}

Napi::Value NativeBuffer::Pointer(const Napi::CallbackInfo& info) {
  if (!storage_) throw_error(info.Env(), "tensor: the tensor has been disposed");
  return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(
                                           reinterpret_cast<uintptr_t>(storage_->data())));
}

Napi::Value NativeBuffer::Bytes(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), storage_ ? static_cast<double>(storage_->bytes()) : 0.0);
}

Napi::Value NativeBuffer::Disposed(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), !storage_);
}

}  // namespace binding
}  // namespace flashsample
