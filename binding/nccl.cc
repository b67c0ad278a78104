// The NCCL communicator's N-API glue (cuda_api.h's nccl_* entry points): status, unique ids,
// communicators, and the all-gather that vocabulary shards exchange their partial states with.
#include <napi.h>

#include <memory>

#include "cuda_api.h"
#include "napi_util.h"
#include "native_buffer.h"

namespace flashsample {
namespace binding {

namespace {

Napi::FunctionReference* g_comm_constructor = nullptr;

class NativeComm : public Napi::ObjectWrap<NativeComm> {
 public:
  static Napi::Function Define(Napi::Env env) {
    Napi::Function cls = DefineClass(env, "NativeComm",
                                     {InstanceMethod<&NativeComm::Abort>("abort"),
                                      InstanceMethod<&NativeComm::Dispose>("dispose"),
                                      InstanceAccessor<&NativeComm::Info>("info")});
    g_comm_constructor = new Napi::FunctionReference(Napi::Persistent(cls));
    return cls;
  }
  explicit NativeComm(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NativeComm>(info) {}
  ~NativeComm() override {
    if (comm) nccl_destroy(*comm);
  }
  std::shared_ptr<NcclComm> comm;

  static Napi::Object Wrap(Napi::Env env, std::shared_ptr<NcclComm> c) {
    Napi::Object object = g_comm_constructor->New({});
    NativeComm::Unwrap(object)->comm = std::move(c);
    (void)env;
    return object;
  }

 private:
  Napi::Value Abort(const Napi::CallbackInfo& info) {
    if (comm) nccl_abort(*comm);
    return info.Env().Undefined();
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    if (comm) nccl_destroy(*comm);
    return info.Env().Undefined();
  }
  // {rank, size, ordinal, closed}
  Napi::Value Info(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    const NcclCommInfo i = comm ? nccl_comm_info(*comm) : NcclCommInfo{0, 0, 0, true};
    o.Set("rank", i.rank);
    o.Set("size", i.size);
    o.Set("ordinal", i.ordinal);
    o.Set("closed", i.closed);
    return o;
  }
};

}  // namespace

std::shared_ptr<NcclComm> communicator_arg(Napi::Env env, Napi::Value v, const std::string& name) {
  if (!v.IsObject() || !v.As<Napi::Object>().InstanceOf(g_comm_constructor->Value())) {
    throw_error(env, name + ": expected a communicator");
  }
  return NativeComm::Unwrap(v.As<Napi::Object>())->comm;
}

namespace {

// ncclStatus(): {loaded, path, version, error}
Napi::Value Status(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const NcclStatus s = nccl_status();
  Napi::Object o = Napi::Object::New(env);
  o.Set("loaded", s.loaded);
  o.Set("path", s.path);
  o.Set("version", s.version);
  o.Set("error", s.error);
  return o;
}

// ncclUniqueId(): Uint8Array(128)
Napi::Value UniqueId(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::vector<uint8_t> id;
  const std::string error = nccl_unique_id(&id);
  if (!error.empty()) throw_error(env, error);
  Napi::Uint8Array out = Napi::Uint8Array::New(env, id.size());
  std::copy(id.begin(), id.end(), out.Data());
  return out;
}

// ncclInitRank(id: Uint8Array(128), nranks, rank, ordinal, timeoutMs): Promise<NativeComm>
Napi::Value InitRank(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 5 || !info[0].IsTypedArray()) throw_error(env, "ncclInitRank: bad arguments");
  Napi::Uint8Array id = info[0].As<Napi::Uint8Array>();
  if (id.ByteLength() != kNcclUniqueIdBytes) throw_error(env, "id: expected 128 bytes");
  auto bytes = std::make_shared<std::vector<uint8_t>>(id.Data(), id.Data() + kNcclUniqueIdBytes);
  const int nranks = info[1].As<Napi::Number>().Int32Value();
  const int rank = info[2].As<Napi::Number>().Int32Value();
  const int ordinal = info[3].As<Napi::Number>().Int32Value();
  const int timeout_ms = info[4].As<Napi::Number>().Int32Value();
  auto out = std::make_shared<std::shared_ptr<NcclComm>>();
  return PromiseWorker::Start(
      env, [=]() { return nccl_init_rank(bytes->data(), nranks, rank, ordinal, timeout_ms, out.get()); },
      [out](Napi::Env env) -> Napi::Value { return NativeComm::Wrap(env, *out); });
}

// ncclInitAll(ordinals: number[]): Promise<NativeComm[]>
Napi::Value InitAll(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsArray()) throw_error(env, "ncclInitAll: expected an array of device ordinals");
  Napi::Array list = info[0].As<Napi::Array>();
  auto ordinals = std::make_shared<std::vector<int>>();
  for (uint32_t i = 0; i < list.Length(); ++i) ordinals->push_back(list.Get(i).As<Napi::Number>().Int32Value());
  auto out = std::make_shared<std::vector<std::shared_ptr<NcclComm>>>();
  return PromiseWorker::Start(
      env, [=]() { return nccl_init_all(*ordinals, out.get()); },
      [out](Napi::Env env) -> Napi::Value {
        Napi::Array comms = Napi::Array::New(env, out->size());
        for (uint32_t i = 0; i < out->size(); ++i) comms.Set(i, NativeComm::Wrap(env, (*out)[i]));
        return comms;
      });
}

// ncclAllGather(comms, sends, recvs, bytes, stream?: bigint, timeoutMs): Promise<void>. Every
// comms[i] all-gathers `bytes` of sends[i] into recvs[i] (size x bytes), in one NCCL group.
Napi::Value AllGather(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 6 || !info[0].IsArray() || !info[1].IsArray() || !info[2].IsArray()) {
    throw_error(env, "ncclAllGather(comms, sends, recvs, bytes, stream, timeoutMs): bad arguments");
  }
  Napi::Array comms_js = info[0].As<Napi::Array>(), sends_js = info[1].As<Napi::Array>(),
              recvs_js = info[2].As<Napi::Array>();
  const size_t bytes = static_cast<size_t>(info[3].As<Napi::Number>().Int64Value());
  uint64_t stream = 0;
  if (info[4].IsBigInt()) {
    bool lossless = false;
    stream = info[4].As<Napi::BigInt>().Uint64Value(&lossless);
  }
  const int timeout_ms = info[5].As<Napi::Number>().Int32Value();
  std::vector<std::shared_ptr<NcclComm>> comms;
  std::vector<const void*> sends;
  std::vector<void*> recvs;
  auto keep = std::make_shared<std::vector<StorageRef>>();
  for (uint32_t i = 0; i < comms_js.Length(); ++i) {
    auto c = communicator_arg(env, comms_js.Get(i), "comms[" + std::to_string(i) + "]");
    const NcclCommInfo ci = nccl_comm_info(*c);
    StorageRef send = NativeBuffer::storage_of(sends_js.Get(i), "send");
    StorageRef recv = NativeBuffer::storage_of(recvs_js.Get(i), "recv");
    if (send->kind() != MemoryKind::kDevice || recv->kind() != MemoryKind::kDevice)
      throw_error(env, "allGather: the buffers must be CUDA device memory");
    if (send->bytes() < bytes || recv->bytes() < bytes * static_cast<size_t>(ci.size))
      throw_error(env, "allGather: the buffers are smaller than bytes (send) and size x bytes (recv)");
    keep->push_back(send);
    keep->push_back(recv);
    comms.push_back(c);
    sends.push_back(send->data());
    recvs.push_back(recv->data());
  }
  NcclWait* wait = nullptr;
  const std::string error = nccl_all_gather(comms, sends, recvs, bytes, stream, &wait);
  if (!error.empty()) return rejected(env, error);
  return PromiseWorker::Start(
      env, [wait, timeout_ms, keep]() { return nccl_wait(wait, timeout_ms); },
      [](Napi::Env env) -> Napi::Value { return env.Undefined(); });
}

}  // namespace

void register_nccl(Napi::Env env, Napi::Object exports) {
  exports.Set("NativeComm", NativeComm::Define(env));
  exports.Set("ncclStatus", Napi::Function::New<Status>(env, "ncclStatus"));
  exports.Set("ncclUniqueId", Napi::Function::New<UniqueId>(env, "ncclUniqueId"));
  exports.Set("ncclInitRank", Napi::Function::New<InitRank>(env, "ncclInitRank"));
  exports.Set("ncclInitAll", Napi::Function::New<InitAll>(env, "ncclInitAll"));
  exports.Set("ncclAllGather", Napi::Function::New<AllGather>(env, "ncclAllGather"));
}

}  // namespace binding
}  // namespace flashsample
