// Small N-API helpers shared by the binding's files: a Promise-returning worker and argument
// readers. The TypeScript layer validates every user argument with uniform messages; these
// readers re-check cheaply and throw a plain Error naming the field if the JS layer was bypassed.
#pragma once

#include <napi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace flashsample {
namespace binding {

// Runs `work` on the libuv thread pool (never JS inside it) and settles a Promise: rejected with
// the returned message when it is non-empty, else resolved with `resolve(env)` on the JS thread.
class PromiseWorker : public Napi::AsyncWorker {
 public:
  using Work = std::function<std::string()>;
  using Resolve = std::function<Napi::Value(Napi::Env)>;

  static Napi::Promise Start(Napi::Env env, Work work, Resolve resolve) {
    auto* worker = new PromiseWorker(env, std::move(work), std::move(resolve));
    Napi::Promise promise = worker->deferred_.Promise();
    worker->Queue();
    return promise;
  }

 protected:
  void Execute() override {
    const std::string error = work_();
    if (!error.empty()) SetError(error);
  }
  void OnOK() override {
    Napi::Env env = Env();
    try {
      deferred_.Resolve(resolve_(env));
    } catch (const Napi::Error& e) {
      deferred_.Reject(e.Value());
    }
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  PromiseWorker(Napi::Env env, Work work, Resolve resolve)
      : Napi::AsyncWorker(env, "flashsample"),
        deferred_(Napi::Promise::Deferred::New(env)),
        work_(std::move(work)),
        resolve_(std::move(resolve)) {}
  Napi::Promise::Deferred deferred_;
  Work work_;
  Resolve resolve_;
};

inline Napi::Promise rejected(Napi::Env env, const std::string& message) {
  auto deferred = Napi::Promise::Deferred::New(env);
  deferred.Reject(Napi::Error::New(env, message).Value());
  return deferred.Promise();
}

[[noreturn]] inline void throw_error(Napi::Env env, const std::string& message) {
  throw Napi::Error::New(env, message);
}

inline int64_t get_int(const Napi::Object& o, const char* name, int64_t lo, int64_t hi) {
  Napi::Value v = o.Get(name);
  if (!v.IsNumber()) throw_error(o.Env(), std::string(name) + ": expected an integer");
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi)) ||
      d != static_cast<double>(static_cast<int64_t>(d))) {
    throw_error(o.Env(), std::string(name) + ": expected an integer in [" + std::to_string(lo) +
                             ", " + std::to_string(hi) + "], got " + std::to_string(d));
  }
  return static_cast<int64_t>(d);
}

inline double get_number(const Napi::Object& o, const char* name, double fallback) {
  Napi::Value v = o.Get(name);
  if (v.IsUndefined()) return fallback;
  if (!v.IsNumber()) throw_error(o.Env(), std::string(name) + ": expected a number");
  return v.As<Napi::Number>().DoubleValue();
}

// A bigint field as 64 bits (0 when undefined).
inline uint64_t get_u64(const Napi::Object& o, const char* name) {
  Napi::Value v = o.Get(name);
  if (v.IsUndefined()) return 0;
  if (!v.IsBigInt()) throw_error(o.Env(), std::string(name) + ": expected a bigint");
  bool lossless = false;
  const uint64_t x = v.As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) throw_error(o.Env(), std::string(name) + ": expected a 64-bit value");
  return x;
}

inline bool get_bool(const Napi::Object& o, const char* name) {
  Napi::Value v = o.Get(name);
  return v.IsBoolean() && v.As<Napi::Boolean>().Value();
}

// Copies an optional typed array field of exactly `length` elements (an empty vector when the
// field is undefined).
template <typename T, napi_typedarray_type kType>
std::vector<T> get_array(const Napi::Object& o, const char* name, size_t length) {
  Napi::Value v = o.Get(name);
  if (v.IsUndefined() || v.IsNull()) return {};
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != kType) {
    throw_error(o.Env(), std::string(name) + ": expected a typed array of the right element type");
  }
  auto array = v.As<Napi::TypedArrayOf<T>>();
  if (array.ElementLength() != length) {
    throw_error(o.Env(), std::string(name) + ": expected " + std::to_string(length) +
                             " elements, got " + std::to_string(array.ElementLength()));
  }
  return std::vector<T>(array.Data(), array.Data() + length);
}

// Copies an optional typed array field of any length (an empty vector when undefined).
template <typename T, napi_typedarray_type kType>
std::vector<T> get_whole_array(const Napi::Object& o, const char* name) {
  Napi::Value v = o.Get(name);
  if (v.IsUndefined() || v.IsNull()) return {};
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != kType) {
    throw_error(o.Env(), std::string(name) + ": expected a typed array of the right element type");
  }
  auto array = v.As<Napi::TypedArrayOf<T>>();
  return std::vector<T>(array.Data(), array.Data() + array.ElementLength());
}

template <typename T, napi_typedarray_type kType>
Napi::TypedArrayOf<T> to_typed_array(Napi::Env env, const std::vector<T>& values) {
  auto array = Napi::TypedArrayOf<T>::New(env, values.size(), kType);
  if (!values.empty()) std::copy(values.begin(), values.end(), array.Data());
  return array;
}

struct NcclComm;
// binding/nccl.cc: the communicator a NativeComm wraps; throws naming `name` for anything else.
std::shared_ptr<NcclComm> communicator_arg(Napi::Env env, Napi::Value v, const std::string& name);

}  // namespace binding
}  // namespace flashsample
