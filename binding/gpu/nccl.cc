// The NCCL communicator (cuda_api.h): libnccl loaded at run time with dlopen, so that nothing of
// NCCL is needed to build or to load the addon. Only the C entry points below are declared, with
// the ABI of NCCL 2.17 (ncclConfig_t v21700, which later versions accept by its size and version
// fields); ncclGetVersion refuses anything older.
//
// Communicators are non-blocking (config.blocking = 0): an init or a collective returns at once,
// and the caller polls ncclCommGetAsyncError against a deadline, aborting the communicator when it
// passes, so that a rank that never joins or a peer that died is an error, not a hang.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "../cuda_api.h"
#include "pools.h"
#include "runtime.h"

namespace flashsample {
namespace binding {

using gpu_detail::cuda_message;
using gpu_detail::device_streams;
using gpu_detail::DeviceStreams;
using gpu_detail::event_pool;

namespace {

using NcclResult = int;
constexpr NcclResult kNcclSuccess = 0;
constexpr NcclResult kNcclInProgress = 7;
constexpr int kNcclUint8 = 1;
constexpr int kNcclMinVersion = 21700;  // 2.17.0: ncclCommInitRankConfig with this config layout
using NcclCommPtr = void*;

struct NcclUniqueIdBytes {
  char internal[kNcclUniqueIdBytes];
};

struct NcclConfigV21700 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cga_cluster_size;
  int min_ctas;
  int max_ctas;
  const char* net_name;
  int split_share;
};

struct NcclLibrary {
  NcclStatus status;
  NcclResult (*get_version)(int*) = nullptr;
  const char* (*get_error_string)(NcclResult) = nullptr;
  const char* (*get_last_error)(NcclCommPtr) = nullptr;
  NcclResult (*get_unique_id)(NcclUniqueIdBytes*) = nullptr;
  NcclResult (*comm_init_rank_config)(NcclCommPtr*, int, NcclUniqueIdBytes, int, NcclConfigV21700*) = nullptr;
  NcclResult (*comm_init_all)(NcclCommPtr*, int, const int*) = nullptr;
  NcclResult (*comm_get_async_error)(NcclCommPtr, NcclResult*) = nullptr;
  NcclResult (*comm_abort)(NcclCommPtr) = nullptr;
  NcclResult (*all_gather)(const void*, void*, size_t, int, NcclCommPtr, cudaStream_t) = nullptr;
  NcclResult (*group_start)() = nullptr;
  NcclResult (*group_end)() = nullptr;
};

NcclLibrary load_nccl() {
  NcclLibrary lib;
  const char* named = std::getenv("FLASHSAMPLE_NCCL_LIB");
  std::vector<std::string> candidates;
  if (named != nullptr && named[0] != '\0') candidates.push_back(named);
  else candidates = {"libnccl.so.2", "libnccl.so"};
  void* handle = nullptr;
  std::string tried;
  for (const std::string& path : candidates) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      lib.status.path = path;
      break;
    }
    const char* why = dlerror();
    tried += (tried.empty() ? "" : "; ") + path + " (" + (why ? why : "not found") + ")";
  }
  if (handle == nullptr) {
    lib.status.error = "NCCL: cannot load libnccl: tried " + tried +
                       (named ? "" : "; set FLASHSAMPLE_NCCL_LIB to the library's path (PyTorch's wheel ships it as "
                                     "nvidia/nccl/lib/libnccl.so.2)");
    return lib;
  }
  bool missing = false;
  auto bind = [&](auto& fn, const char* name, bool required = true) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (fn == nullptr && required && !missing) {
      missing = true;
      lib.status.error = "NCCL: " + lib.status.path + " has no " + name;
    }
  };
  bind(lib.get_version, "ncclGetVersion");
  bind(lib.get_error_string, "ncclGetErrorString");
  bind(lib.get_last_error, "ncclGetLastError", false);
  bind(lib.get_unique_id, "ncclGetUniqueId");
  bind(lib.comm_init_rank_config, "ncclCommInitRankConfig");
  bind(lib.comm_init_all, "ncclCommInitAll");
  bind(lib.comm_get_async_error, "ncclCommGetAsyncError");
  bind(lib.comm_abort, "ncclCommAbort");
  bind(lib.all_gather, "ncclAllGather");
  bind(lib.group_start, "ncclGroupStart");
  bind(lib.group_end, "ncclGroupEnd");
  if (missing) return lib;
  int version = 0;
  if (lib.get_version(&version) != kNcclSuccess || version < kNcclMinVersion) {
    lib.status.error = "NCCL: " + lib.status.path + " is version " + std::to_string(version) +
                       "; flashsample needs NCCL >= 2.17 (21700)";
    return lib;
  }
  lib.status.version = version;
  lib.status.loaded = true;
  return lib;
}

const NcclLibrary& nccl() {
  static const NcclLibrary lib = load_nccl();
  return lib;
}

std::string nccl_message(const char* what, NcclResult r, NcclCommPtr comm) {
  const NcclLibrary& lib = nccl();
  std::string m = std::string(what) + " failed: " + lib.get_error_string(r);
  const char* last = lib.get_last_error ? lib.get_last_error(comm) : nullptr;
  if (last != nullptr && last[0] != '\0') m += std::string(" (") + last + ")";
  return m;
}

using Clock = std::chrono::steady_clock;

// Polls a non-blocking communicator until its pending call settled: "" when it did, else the
// error (the communicator is then aborted).
std::string settle(NcclCommPtr comm, const char* what, Clock::time_point deadline, const std::string& on_timeout) {
  const NcclLibrary& lib = nccl();
  for (;;) {
    NcclResult state = kNcclSuccess;
    const NcclResult r = lib.comm_get_async_error(comm, &state);
    if (r != kNcclSuccess) state = r;
    if (state == kNcclSuccess) return "";
    if (state != kNcclInProgress) {
      const std::string m = nccl_message(what, state, comm);
      lib.comm_abort(comm);
      return m;
    }
    if (Clock::now() > deadline) {
      lib.comm_abort(comm);
      return on_timeout;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace

struct NcclComm {
  NcclCommPtr comm = nullptr;
  int rank = 0, size = 0, ordinal = 0;
  bool aborted = false, destroyed = false;
  std::mutex mutex;
};

struct NcclWait {
  std::vector<std::shared_ptr<NcclComm>> comms;
  std::vector<cudaEvent_t> done;
};

NcclStatus nccl_status() { return nccl().status; }

std::string nccl_unique_id(std::vector<uint8_t>* id) {
  const NcclLibrary& lib = nccl();
  if (!lib.status.loaded) return lib.status.error;
  NcclUniqueIdBytes uid;
  const NcclResult r = lib.get_unique_id(&uid);
  if (r != kNcclSuccess) return nccl_message("ncclGetUniqueId", r, nullptr);
  id->assign(uid.internal, uid.internal + kNcclUniqueIdBytes);
  return "";
}

std::string nccl_init_rank(const uint8_t* id, int nranks, int rank, int ordinal, int timeout_ms,
                           std::shared_ptr<NcclComm>* out) {
  const NcclLibrary& lib = nccl();
  if (!lib.status.loaded) return lib.status.error;
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  NcclUniqueIdBytes uid;
  std::memcpy(uid.internal, id, kNcclUniqueIdBytes);
  NcclConfigV21700 config{sizeof(NcclConfigV21700), 0xcafebeefu, static_cast<unsigned>(kNcclMinVersion), 0,
                          INT_MIN, INT_MIN, INT_MIN, nullptr, INT_MIN};
  NcclCommPtr comm = nullptr;
  const NcclResult r = lib.comm_init_rank_config(&comm, nranks, uid, rank, &config);
  if (r != kNcclSuccess && r != kNcclInProgress) {
    if (comm != nullptr) lib.comm_abort(comm);
    return nccl_message("ncclCommInitRankConfig", r, comm);
  }
  const std::string error =
      settle(comm, "ncclCommInitRankConfig", Clock::now() + std::chrono::milliseconds(timeout_ms),
             "initRank: timed out after " + std::to_string(timeout_ms) + " ms waiting for the other " +
                 std::to_string(nranks - 1) + " ranks to join (rank " + std::to_string(rank) + " of " +
                 std::to_string(nranks) + " on cuda:" + std::to_string(ordinal) + "); the communicator was aborted");
  if (!error.empty()) return error;
  auto c = std::make_shared<NcclComm>();
  c->comm = comm;
  c->rank = rank;
  c->size = nranks;
  c->ordinal = ordinal;
  *out = c;
  return "";
}

std::string nccl_init_all(const std::vector<int>& ordinals, std::vector<std::shared_ptr<NcclComm>>* out) {
  const NcclLibrary& lib = nccl();
  if (!lib.status.loaded) return lib.status.error;
  std::vector<NcclCommPtr> comms(ordinals.size(), nullptr);
  const NcclResult r = lib.comm_init_all(comms.data(), static_cast<int>(ordinals.size()), ordinals.data());
  if (r != kNcclSuccess) return nccl_message("ncclCommInitAll", r, nullptr);
  out->clear();
  for (size_t i = 0; i < ordinals.size(); ++i) {
    auto c = std::make_shared<NcclComm>();
    c->comm = comms[i];
    c->rank = static_cast<int>(i);
    c->size = static_cast<int>(ordinals.size());
    c->ordinal = ordinals[i];
    out->push_back(c);
  }
  return "";
}

NcclCommInfo nccl_comm_info(const NcclComm& c) { return NcclCommInfo{c.rank, c.size, c.ordinal, c.aborted || c.destroyed}; }

std::string nccl_all_gather(const std::vector<std::shared_ptr<NcclComm>>& comms,
                            const std::vector<const void*>& send, const std::vector<void*>& recv, size_t bytes,
                            uint64_t stream_handle, NcclWait** out_wait) {
  const NcclLibrary& lib = nccl();
  if (!lib.status.loaded) return lib.status.error;
  auto wait = std::make_unique<NcclWait>();
  wait->comms = comms;
  std::vector<cudaStream_t> streams;
  for (const auto& c : comms) {
    if (c->aborted || c->destroyed) return "allGather: the communicator of rank " + std::to_string(c->rank) + " was aborted or destroyed";
    DeviceStreams* s = nullptr;
    const std::string error = device_streams(c->ordinal, &s);
    if (!error.empty()) return error;
    streams.push_back(stream_handle ? reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(stream_handle)) : s->compute);
  }
  // A thread that drives several GPUs issues their collectives in one group (NCCL's rule).
  const bool group = comms.size() > 1;
  if (group) lib.group_start();
  std::string error;
  for (size_t i = 0; i < comms.size() && error.empty(); ++i) {
    if (cudaSetDevice(comms[i]->ordinal) != cudaSuccess) {
      (void)cudaGetLastError();
      error = "cudaSetDevice failed for rank " + std::to_string(comms[i]->rank);
      break;
    }
    const NcclResult r = lib.all_gather(send[i], recv[i], bytes, kNcclUint8, comms[i]->comm, streams[i]);
    if (r != kNcclSuccess && r != kNcclInProgress) error = nccl_message("ncclAllGather", r, comms[i]->comm);
  }
  if (group) {
    const NcclResult r = lib.group_end();
    if (error.empty() && r != kNcclSuccess && r != kNcclInProgress) error = nccl_message("ncclGroupEnd", r, comms[0]->comm);
  }
  for (size_t i = 0; i < comms.size() && error.empty(); ++i) {
    error = settle(comms[i]->comm, "ncclAllGather", Clock::now() + std::chrono::seconds(10),
                   "allGather: NCCL did not enqueue the collective within 10 s; the communicator was aborted");
    if (!error.empty()) comms[i]->aborted = true;
  }
  if (!error.empty()) return error;
  for (size_t i = 0; i < comms.size(); ++i) {
    cudaEvent_t e = nullptr;
    cudaSetDevice(comms[i]->ordinal);
    cudaError_t status = event_pool().acquire(comms[i]->ordinal, &e);
    if (status == cudaSuccess) status = cudaEventRecord(e, streams[i]);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      return cuda_message("cudaEventRecord (allGather)", status);
    }
    wait->done.push_back(e);
  }
  *out_wait = wait.release();
  return "";
}

std::string nccl_wait(NcclWait* raw_wait, int timeout_ms) {
  std::unique_ptr<NcclWait> wait(raw_wait);
  const NcclLibrary& lib = nccl();
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::vector<bool> done(wait->done.size(), false);
  std::string error;
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < wait->done.size(); ++i) {
      if (done[i]) continue;
      const cudaError_t q = cudaEventQuery(wait->done[i]);
      if (q == cudaSuccess) done[i] = true;
      else if (q != cudaErrorNotReady) error = cuda_message("allGather", q);
      all = all && done[i];
    }
    for (const auto& c : wait->comms) {
      NcclResult state = kNcclSuccess;
      if (error.empty() && lib.comm_get_async_error(c->comm, &state) == kNcclSuccess && state != kNcclSuccess &&
          state != kNcclInProgress)
        error = nccl_message("allGather", state, c->comm) + " on rank " + std::to_string(c->rank);
    }
    if (!error.empty() || all) break;
    if (Clock::now() > deadline) {
      const auto& c = wait->comms[0];
      error = "allGather: timed out after " + std::to_string(timeout_ms) + " ms waiting for the other ranks (rank " +
              std::to_string(c->rank) + " of " + std::to_string(c->size) + " on cuda:" + std::to_string(c->ordinal) +
              "); the communicator was aborted";
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  if (!error.empty()) {
    for (const auto& c : wait->comms) {
      std::lock_guard<std::mutex> lock(c->mutex);
      if (!c->aborted && !c->destroyed) lib.comm_abort(c->comm);
      c->aborted = true;
    }
    for (cudaEvent_t e : wait->done) cudaEventDestroy(e);  // state unknown after an abort: not reused
    return error;
  }
  for (size_t i = 0; i < wait->done.size(); ++i) event_pool().release(wait->comms[i]->ordinal, wait->done[i]);
  return "";
}

std::string nccl_all_gather_enqueue(NcclComm& c, int ordinal, const void* send, void* recv, size_t bytes,
                                    uint64_t stream) {
  const NcclLibrary& lib = nccl();
  if (!lib.status.loaded) return lib.status.error;
  if (c.aborted || c.destroyed) return "enqueue: the communicator of rank " + std::to_string(c.rank) + " was aborted or disposed";
  if (c.ordinal != ordinal) {
    return "enqueue: the communicator is on cuda:" + std::to_string(c.ordinal) + ", the sampler on cuda:" + std::to_string(ordinal);
  }
  const NcclResult r = lib.all_gather(send, recv, bytes, kNcclUint8, c.comm,
                                      reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(stream)));
  if (r != kNcclSuccess && r != kNcclInProgress) return nccl_message("ncclAllGather", r, c.comm);
  // A non-blocking communicator may return before the collective is enqueued: settle it (bounded).
  std::string error = settle(c.comm, "ncclAllGather", Clock::now() + std::chrono::seconds(10),
                             "enqueue: NCCL did not enqueue the all-gather within 10 s; the communicator was aborted");
  if (!error.empty()) c.aborted = true;
  return error;
}

void nccl_abort(NcclComm& c) {
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.aborted || c.destroyed || !nccl().status.loaded) return;
  nccl().comm_abort(c.comm);
  c.aborted = true;
}

// ncclCommAbort frees the communicator without waiting for a collective that a dead peer left
// pending (ncclCommDestroy of a non-blocking communicator would need its finalize first).
void nccl_destroy(NcclComm& c) {
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.destroyed) return;
  c.destroyed = true;
  if (!c.aborted && nccl().status.loaded) nccl().comm_abort(c.comm);
}

}  // namespace binding
}  // namespace flashsample
