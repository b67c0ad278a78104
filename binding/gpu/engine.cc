// The engine's way in on CUDA (cuda_api.h): samplers' row updates and launches that never wait,
// what their in-flight work holds, graph capture and replay, and streams for engines without one.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "../../cuda/include/launchers.h"
#include "../../cuda/include/merge.h"
#include "../cuda_api.h"
#include "host_steps.h"
#include "launch.h"
#include "pools.h"
#include "runtime.h"

static_assert(flashsample::binding::kRowFieldCount == flashsample::cuda::kRowFields, "the scatter kernel's fields");

namespace flashsample {
namespace binding {

using gpu_detail::cuda_message;
using gpu_detail::device_streams;
using gpu_detail::DeviceStreams;
using gpu_detail::event_pool;
using gpu_detail::HostStep;
using gpu_detail::timed;
using gpu_detail::launch_message;
using gpu_detail::pinned_pool;

struct GpuGraph {
  int ordinal = 0;
  cudaGraphExec_t exec = nullptr;
  std::vector<StorageRef> keep;
  std::vector<std::shared_ptr<EngineSampler>> samplers;  // distinct
  ~GpuGraph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
  }
};

struct GpuRead {
  int ordinal = 0;
  void* pinned = nullptr;
  size_t capacity = 0, bytes = 0;
  cudaEvent_t done = nullptr;
  std::shared_ptr<EngineSampler> sampler;
};

namespace {

cudaStream_t as_stream(uint64_t handle) {
  return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(handle));
}

// What enqueued work still uses (tensors, samplers, graphs, pinned blocks): released once an event
// recorded after that work has completed. Checked, never waited for, whenever new work is
// enqueued: nothing here blocks the JS thread.
struct Retired {
  cudaEvent_t done = nullptr;
  int ordinal = 0;
  std::vector<StorageRef> keep;
  std::shared_ptr<void> hold;
  void* pinned = nullptr;
  size_t pinned_capacity = 0;
};

std::mutex g_retired_mutex;
// Never destroyed: what is still queued at exit is not freed then (no CUDA calls at exit).
std::deque<Retired>& g_retired = *new std::deque<Retired>();

void release(Retired& r, bool completed) {
  if (completed) {
    event_pool().release(r.ordinal, r.done);
  } else {
    cudaEventDestroy(r.done);  // its state is unknown: not reused
  }
  pinned_pool().release(r.pinned, r.pinned_capacity);
}

void poll_retired() {
  std::vector<Retired> done;
  {
    std::lock_guard<std::mutex> lock(g_retired_mutex);
    while (!g_retired.empty()) {
      const cudaError_t q = cudaEventQuery(g_retired.front().done);
      if (q == cudaErrorNotReady) break;
      if (q != cudaSuccess) (void)cudaGetLastError();
      release(g_retired.front(), q == cudaSuccess);
      done.push_back(std::move(g_retired.front()));
      g_retired.pop_front();
    }
  }
  // `done` goes out of scope here, outside the lock: the last references free their memory.
}

// The prologue of the calls that run outside a capture (or begin one): the device's library
// streams, the device made current, the retired resources whose work completed freed.
std::string enter_device(int ordinal, DeviceStreams** streams) {
  std::string error = device_streams(ordinal, streams);
  if (!error.empty()) return error;
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  poll_retired();
  return "";
}

// Queues `r` behind the work enqueued so far on `stream`. If no event can be recorded, waits for
// the stream instead (an error path): freeing memory the device may still read is never an option.
void retire_after(int ordinal, cudaStream_t stream, Retired r) {
  r.ordinal = ordinal;
  cudaError_t e = event_pool().acquire(ordinal, &r.done);
  if (e == cudaSuccess) e = cudaEventRecord(r.done, stream);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    cudaStreamSynchronize(stream);
    (void)cudaGetLastError();
    if (r.done != nullptr) cudaEventDestroy(r.done);
    pinned_pool().release(r.pinned, r.pinned_capacity);
    return;
  }
  std::lock_guard<std::mutex> lock(g_retired_mutex);
  g_retired.push_back(std::move(r));
}

// The capture in progress (JS thread only; g_capturing is read by the guards).
struct Capture {
  int ordinal = 0;
  cudaStream_t stream = nullptr;
  std::vector<StorageRef> keep;
  std::vector<std::shared_ptr<EngineSampler>> samplers;
};
Capture& g_capture = *new Capture();  // never destroyed, like g_retired
std::atomic<bool> g_capturing{false};

// A sampler's work is one sequence whatever streams it is given: work on a stream other than the
// last one waits for the last one's (cheap: an event wait, no host synchronization).
cudaError_t order_after_last(EngineSampler* s, cudaStream_t target) {
  if (s->order_event == nullptr) {
    cudaEvent_t e = nullptr;
    const cudaError_t status = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (status != cudaSuccess) return status;
    s->order_event = e;
  }
  if (!s->used || as_stream(s->last_stream) == target) return cudaSuccess;
  return cudaStreamWaitEvent(target, static_cast<cudaEvent_t>(s->order_event), 0);
}

cudaError_t mark_last(EngineSampler* s, cudaStream_t target) {
  s->last_stream = reinterpret_cast<uint64_t>(target);
  s->used = true;
  return cudaEventRecord(static_cast<cudaEvent_t>(s->order_event), target);
}

std::mutex g_streams_mutex;
std::set<std::pair<int, uint64_t>> g_created_streams;

// An eager enqueue costs one ~5 us launch of JS-thread time per kernel (4 plain, ~11 filtered). A
// call that repeats the one before it (same rows, tensors and options: an engine's steady state)
// is captured once into a graph, on a private stream, and replayed from then on with a single
// cudaGraphLaunch; calls that change every time (a batch that grows and shrinks) keep launching
// directly and never pay for an instantiation. The graphs read the row parameters from device
// memory at replay, so they stay valid as rows change.
struct LaunchKey {
  int64_t batch = 0;
  const void* pointers[9] = {};
  bool advance = false, record = false;
  bool operator==(const LaunchKey& o) const {
    return batch == o.batch && advance == o.advance && record == o.record &&
           std::equal(pointers, pointers + 9, o.pointers);
  }
};

LaunchKey key_of(const SampleParams& p, bool advance, bool record) {
  LaunchKey k;
  k.batch = p.batch;
  k.advance = advance;
  k.record = record;
  const void* ptrs[9] = {p.hidden, p.weight, p.bias, p.allowed, p.tokens, p.row_status, p.logprobs,
                         p.top_tokens, p.top_token_logprobs};
  std::copy(ptrs, ptrs + 9, k.pointers);
  return k;
}

struct LaunchGraphs {
  static constexpr size_t kKept = 4;
  struct Entry {
    LaunchKey key;
    cudaGraphExec_t exec = nullptr;  // nullptr: capturing this call failed, launch it directly
  };
  std::vector<Entry> entries;  // most recently used first
  LaunchKey last;
  bool has_last = false;
  // In-flight executables are freed when their launches complete (cudaGraphExecDestroy).
  ~LaunchGraphs() {
    for (Entry& e : entries)
      if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
  }
  Entry* find(const LaunchKey& k) {
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].key == k) {
        std::rotate(entries.begin(), entries.begin() + i, entries.begin() + i + 1);
        return &entries[0];
      }
    }
    return nullptr;
  }
  void add(const LaunchKey& k, cudaGraphExec_t exec) {
    if (entries.size() == kKept) {
      if (entries.back().exec != nullptr) cudaGraphExecDestroy(entries.back().exec);
      entries.pop_back();
    }
    entries.insert(entries.begin(), Entry{k, exec});
  }
};

LaunchGraphs& launch_graphs_of(EngineSampler* s) {
  if (!s->launch_graphs) {
    s->launch_graphs = std::shared_ptr<void>(new LaunchGraphs(), [](void* g) { delete static_cast<LaunchGraphs*>(g); });
  }
  return *static_cast<LaunchGraphs*>(s->launch_graphs.get());
}

cudaError_t launch_direct(const EngineSampler& s, const SampleParams& p, bool advance, bool record,
                          cudaStream_t stream) {
  cudaError_t e = cuda::launch_fused_sample(p, stream);
  // after the draw: the tokens counted, and rows whose list tables hold invalid ids reported
  if (e == cudaSuccess && (record || (p.listed_invalid != nullptr && p.row_status != nullptr)))
    e = cuda::launch_record_tokens(record_targets_of(s, record, p.listed_invalid), p.tokens, p.batch, p.row_status, stream);
  if (e == cudaSuccess && advance) e = cuda::launch_advance_offsets(const_cast<uint64_t*>(p.offset), p.batch, stream);
  return e;
}

// An engine's sharded step (ShardedStep): the shard's partial state, the all-gather of the ranks'
// states, their merge into p's outputs, the rows pass (its values all-gathered too) and the
// offsets' advance, all on `stream`; the kernels of a step without undecided rows return at once.
std::string launch_sharded_step(const EngineSampler& s, const SampleParams& p, bool advance, bool record,
                                cudaStream_t stream) {
  const ShardedStep& t = *s.sharded;
  uint8_t* base = static_cast<uint8_t*>(t.buffers->data());
  const uint64_t handle = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(stream));
  SampleParams shard = p;
  shard.partial = base + t.state;
  shard.partial_capacity = t.capacity;
  shard.partial_max_batch = static_cast<int32_t>(s.max_batch);
  shard.options_hash = t.options_hash;
  shard.vocab_offset = t.vocab_offset;
  shard.vocab_total = t.vocab_total;
  shard.row_status = nullptr;
  cudaError_t e = cudaSuccess;
  // the tiles the shard's one pass stores, for the rows pass to read back (only top-p rows store any)
  if (t.rows_pass_rows > 0 && p.top_p != nullptr) {
    shard.shard_row_logits = reinterpret_cast<float*>(base + t.logits);
    shard.shard_stored_tiles = base + t.stored_tiles;
    e = cudaMemsetAsync(base + t.stored_tiles, 0, t.stored_tiles_bytes, stream);
    if (e != cudaSuccess) return cuda_message("enqueue (clearing the stored tiles' marks)", e);
  }
  e = cuda::launch_fused_sample(shard, stream);
  if (e != cudaSuccess) return "enqueue (the shard's partial state): " + launch_message(SamplerKind::kFused, e);
  std::string error = nccl_all_gather_enqueue(*t.comm, s.ordinal, base + t.state, base + t.states, t.state_bytes, handle);
  if (!error.empty()) return error;
  // The merge takes the per-row options only: the shard's operands, mask, softcap and lists are in
  // its state.
  SampleParams merge = p;
  merge.hidden = merge.weight = merge.bias = nullptr;
  merge.allowed = nullptr;
  merge.softcap = 0.0f;
  merge.bias_offsets = merge.banned_offsets = merge.penalty_offsets = nullptr;
  merge.repetition_penalty = merge.frequency_penalty = merge.presence_penalty = nullptr;
  merge.banned_while = nullptr;
  merge.listed_entries = 0;
  merge.listed_invalid = nullptr;
  merge.vocab = t.vocab_total;
  merge.vocab_offset = 0;
  merge.vocab_total = 0;
  merge.options_hash = t.options_hash;
  merge.row_status = p.row_status != nullptr ? p.row_status : reinterpret_cast<int32_t*>(base + t.row_status);
  PartialSet set{};
  set.count = t.ranks;
  for (int i = 0; i < t.ranks; ++i) {
    set.blocks[i] = base + t.states + static_cast<size_t>(i) * t.state_bytes;
    set.bytes[i] = t.state_bytes;
  }
  e = cuda::launch_merge_partials(merge, set, reinterpret_cast<int32_t*>(base + t.merge_status), stream);
  if (e != cudaSuccess) return cuda_message("enqueue (the merge of the ranks' states)", e);
  if (t.rows_pass_rows > 0) {
    auto* shard_flags = reinterpret_cast<int32_t*>(base + t.shard_flags);
    auto* rows = reinterpret_cast<int32_t*>(base + t.rows);
    auto* logits = reinterpret_cast<float*>(base + t.logits);
    SampleParams values = shard;
    values.partial = nullptr;
    values.row_values = base + t.segment;
    values.value_rows = rows;
    values.value_row_count = t.rows_pass_rows;
    values.value_pitch = t.pitch;
    e = cuda::launch_rows_pass_values(values, merge.row_status, shard_flags, logits, stream);
    if (e != cudaSuccess) return cuda_message("enqueue (the rows pass's values)", e);
    error = nccl_all_gather_enqueue(*t.comm, s.ordinal, base + t.segment, base + t.segments, t.segment_bytes, handle);
    if (!error.empty()) return error;
    SampleParams decide = merge;
    decide.row_values = base + t.segments;
    decide.value_rows = rows;
    decide.value_row_count = t.rows_pass_rows;
    decide.value_pitch = t.pitch;
    decide.value_segments = t.ranks;
    e = cuda::launch_rows_pass_decide(decide, shard_flags + p.batch, logits,
                                      reinterpret_cast<int32_t*>(base + t.decide_flags), stream);
    if (e != cudaSuccess) return cuda_message("enqueue (the rows pass's decision)", e);
  }
  // after the draw, as an unsharded sampler: each rank counts the (same) tokens in its own tables
  if (record || (p.listed_invalid != nullptr && p.row_status != nullptr)) {
    e = cuda::launch_record_tokens(record_targets_of(s, record, p.listed_invalid), p.tokens, p.batch, merge.row_status,
                                   stream);
    if (e != cudaSuccess) return cuda_message("enqueue (recording the tokens)", e);
  }
  if (advance) {
    e = cuda::launch_advance_offsets(const_cast<uint64_t*>(p.offset), p.batch, stream);
    if (e != cudaSuccess) return cuda_message("enqueue (advancing the offsets)", e);
  }
  return "";
}

cudaStream_t g_private_streams[64];  // JS thread only: where repeated enqueues are captured

cudaError_t capture_launches(const EngineSampler& s, const SampleParams& p, bool advance, bool record,
                             cudaGraphExec_t* exec) {
  cudaStream_t& stream = g_private_streams[s.ordinal];
  cudaError_t e = stream ? cudaSuccess : cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) return e;
  if ((e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal)) != cudaSuccess) return e;
  e = launch_direct(s, p, advance, record, stream);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (e == cudaSuccess) e = ended;
  if (e == cudaSuccess) e = cudaGraphInstantiate(exec, graph, 0);
  if (graph != nullptr) cudaGraphDestroy(graph);
  return e;
}

// Launches p's work on `target`: a graph for a repeated call, else the kernels one by one.
cudaError_t launch_eager(EngineSampler* s, const SampleParams& p, bool advance, bool record, cudaStream_t target) {
  LaunchGraphs& graphs = launch_graphs_of(s);
  const LaunchKey key = key_of(p, advance, record);
  cudaGraphExec_t exec = nullptr;
  if (LaunchGraphs::Entry* e = graphs.find(key)) {
    exec = e->exec;
  } else if (graphs.has_last && graphs.last == key) {
    if (capture_launches(*s, p, advance, record, &exec) != cudaSuccess) {
      (void)cudaGetLastError();
      exec = nullptr;
    }
    graphs.add(key, exec);
  }
  graphs.last = key;
  graphs.has_last = true;
  return exec != nullptr ? cudaGraphLaunch(exec, target) : launch_direct(*s, p, advance, record, target);
}

}  // namespace

EngineSampler::~EngineSampler() {
  if (order_event != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(order_event));
}

bool gpu_capturing() { return g_capturing.load(); }

std::string gpu_workspace_bytes(int ordinal, const SampleParams& p, size_t* bytes) {
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  FS_CUDA_TRY("sizing the sampler's workspace", cuda::fused_workspace_bytes(p, bytes));
  return "";
}

namespace {

// The end of a stream-ordered write into a sampler's block from a pinned staging copy (status: how
// the copies went): the sampler's last work marked, the pinned copy and the block held until the
// write is done, and the error, if any, as a message naming `what`.
std::string finish_block_write(EngineSampler* s, cudaStream_t target, void* pinned, size_t capacity,
                               cudaError_t status, const std::string& what) {
  if (status == cudaSuccess) status = mark_last(s, target);
  Retired r;
  r.pinned = pinned;
  r.pinned_capacity = capacity;
  r.keep.push_back(s->block);
  retire_after(s->ordinal, target, std::move(r));
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return cuda_message(what.c_str(), status);
  }
  return "";
}

}  // namespace

std::string gpu_set_rows(EngineSampler* s, int64_t first, int64_t count, uint32_t fields,
                         const uint8_t* staging, size_t staging_bytes,
                         const uint32_t staging_at[kRowFieldCount], uint64_t stream) {
  if (gpu_capturing()) {
    return "setRows: cannot run during graph capture (it copies from host memory, which a replay "
           "would read again): set rows between replays, or write the parameter block with your "
           "own kernels";
  }
  if (staging_bytes > s->layout.bytes - s->layout.staging) return "setRows: staging block too large";
  DeviceStreams* streams;
  std::string error = enter_device(s->ordinal, &streams);
  if (!error.empty()) return error;
  cudaStream_t target = stream ? as_stream(stream) : streams->compute;
  size_t capacity = 0;
  void* pinned = pinned_pool().acquire(staging_bytes, &capacity);
  if (pinned == nullptr) return "cudaHostAlloc failed: no pinned host memory for setRows";
  std::memcpy(pinned, staging, staging_bytes);
  uint8_t* block = static_cast<uint8_t*>(s->block->data());
  cuda::RowScatter scatter;
  scatter.staging = block + s->layout.staging;
  for (int f = 0; f < kRowFieldCount; ++f) {
    scatter.dst[f] = block + s->layout.at[f];
    scatter.staging_at[f] = staging_at[f];
    scatter.elem_bytes[f] = static_cast<uint32_t>(row_field_bytes(f));
  }
  scatter.fields = fields;
  scatter.first = first;
  scatter.count = count;
  cudaError_t status = order_after_last(s, target);
  if (status == cudaSuccess) {
    status = cudaMemcpyAsync(block + s->layout.staging, pinned, staging_bytes, cudaMemcpyHostToDevice, target);
  }
  if (status == cudaSuccess) status = cuda::launch_scatter_rows(scatter, target);
  return finish_block_write(s, target, pinned, capacity, status, "setRows (copy and scatter)");
}

std::string gpu_set_list_rows(EngineSampler* s, int kind, int64_t first, int64_t count,
                              const uint8_t* const columns[kListMaxColumns], uint64_t stream) {
  static const char* kWhat[kListKinds] = {"setPenaltyTokens", "setLogitBias", "setBannedTokens"};
  if (gpu_capturing()) {
    return std::string(kWhat[kind]) +
           ": cannot run during graph capture (it copies from host memory, which a replay would read "
           "again): set the lists between replays, or write the table with your own kernels";
  }
  const ListTable& t = s->layout.lists[kind];
  const size_t slots = static_cast<size_t>(count) * static_cast<size_t>(t.capacity);
  const size_t at = static_cast<size_t>(first) * static_cast<size_t>(t.capacity);
  const int n = list_columns(kind);
  size_t total = 0;
  for (int c = 0; c < n; ++c) total += list_column_bytes(kind, c) * slots;
  DeviceStreams* streams;
  std::string error = enter_device(s->ordinal, &streams);
  if (!error.empty()) return error;
  cudaStream_t target = stream ? as_stream(stream) : streams->compute;
  size_t capacity = 0;
  uint8_t* pinned = static_cast<uint8_t*>(pinned_pool().acquire(total, &capacity));
  if (pinned == nullptr) return std::string("cudaHostAlloc failed: no pinned host memory for ") + kWhat[kind];
  uint8_t* block = static_cast<uint8_t*>(s->block->data());
  cudaError_t status = order_after_last(s, target);
  size_t staged = 0;
  for (int c = 0; c < n && status == cudaSuccess; ++c) {
    const size_t elem = list_column_bytes(kind, c);
    std::memcpy(pinned + staged, columns[c], elem * slots);
    status = cudaMemcpyAsync(block + t.columns[c] + elem * at, pinned + staged, elem * slots, cudaMemcpyHostToDevice,
                             target);
    staged += elem * slots;
  }
  return finish_block_write(s, target, pinned, capacity, status, std::string(kWhat[kind]) + " (copy)");
}

std::string gpu_enqueue(const std::shared_ptr<EngineSampler>& s, const SampleParams& p,
                        bool advance_offset, bool record_tokens, uint64_t stream, std::vector<StorageRef> keep) {
  const bool capturing = gpu_capturing();
  cudaStream_t target = nullptr;
  std::string error = timed(HostStep::kEnqueuePrologue, [&]() -> std::string {
    DeviceStreams* streams;
    std::string e = device_streams(s->ordinal, &streams);
    if (!e.empty()) return e;
    if (capturing) {
      if (g_capture.ordinal != s->ordinal) return "enqueue: the graph being captured is on another device";
      target = stream ? as_stream(stream) : g_capture.stream;
      cudaStreamCaptureStatus capture_status = cudaStreamCaptureStatusNone;
      FS_CUDA_TRY("cudaStreamIsCapturing", cudaStreamIsCapturing(target, &capture_status));
      if (capture_status != cudaStreamCaptureStatusActive) {
        return "enqueue: stream is not the stream being captured (pass captureGraph's stream, or none)";
      }
    } else {
      poll_retired();
      target = stream ? as_stream(stream) : streams->compute;
    }
    FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(s->ordinal));
    const cudaError_t ordered = capturing ? cudaSuccess : order_after_last(s.get(), target);
    if (ordered != cudaSuccess) {
      (void)cudaGetLastError();
      return cuda_message("enqueue (ordering after the sampler's last work)", ordered);
    }
    return "";
  });
  if (!error.empty()) return error;
  cudaError_t status = cudaSuccess;
  std::string step_error;  // a sharded step's (it names its step, NCCL's message)
  status = timed(HostStep::kEnqueueKernels, [&] {
    if (s->sharded) {
      step_error = launch_sharded_step(*s, p, advance_offset, record_tokens, target);
      return cudaSuccess;
    }
    return capturing ? launch_direct(*s, p, advance_offset, record_tokens, target)
                     : launch_eager(s.get(), p, advance_offset, record_tokens, target);
  });
  if (status == cudaSuccess) status = cudaGetLastError();
  if (capturing) {
    // Held by the graph even if the launches failed: the capture may already reference them.
    g_capture.keep.insert(g_capture.keep.end(), keep.begin(), keep.end());
    if (std::find(g_capture.samplers.begin(), g_capture.samplers.end(), s) == g_capture.samplers.end())
      g_capture.samplers.push_back(s);
  } else {
    timed(HostStep::kEnqueueBookkeeping, [&] {
      if (status == cudaSuccess) status = mark_last(s.get(), target);
      Retired r;
      r.keep = std::move(keep);
      r.hold = s;
      retire_after(s->ordinal, target, std::move(r));
    });
  }
  if (!step_error.empty()) {
    (void)cudaGetLastError();
    return step_error;
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return "enqueue: " + launch_message(SamplerKind::kFused, status);
  }
  return "";
}

std::string gpu_read_block_start(const std::shared_ptr<EngineSampler>& s, GpuRead** out) {
  if (gpu_capturing()) return "readRows: a host read cannot happen during graph capture";
  DeviceStreams* streams;
  std::string error = enter_device(s->ordinal, &streams);
  if (!error.empty()) return error;
  auto read = std::make_unique<GpuRead>();
  read->ordinal = s->ordinal;
  read->bytes = s->layout.staging;  // the fields and the fallback counter, not the staging region
  read->sampler = s;
  read->pinned = pinned_pool().acquire(read->bytes, &read->capacity);
  if (read->pinned == nullptr) return "cudaHostAlloc failed: no pinned host memory for readRows";
  cudaStream_t target = s->used ? as_stream(s->last_stream) : streams->compute;
  cudaError_t status = event_pool().acquire(s->ordinal, &read->done);
  if (status == cudaSuccess) {
    status = cudaMemcpyAsync(read->pinned, s->block->data(), read->bytes, cudaMemcpyDeviceToHost, target);
  }
  if (status == cudaSuccess) status = cudaEventRecord(read->done, target);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    cudaStreamSynchronize(target);
    (void)cudaGetLastError();
    pinned_pool().release(read->pinned, read->capacity);
    if (read->done != nullptr) cudaEventDestroy(read->done);
    return cuda_message("readRows (device to host copy)", status);
  }
  *out = read.release();
  return "";
}

std::string gpu_synchronize_start(int ordinal, uint64_t stream, GpuRead** out) {
  if (gpu_capturing()) return "synchronize: cannot wait for the GPU during graph capture";
  DeviceStreams* streams;
  std::string error = enter_device(ordinal, &streams);
  if (!error.empty()) return error;
  auto read = std::make_unique<GpuRead>();
  read->ordinal = ordinal;
  cudaError_t status = event_pool().acquire(ordinal, &read->done);
  if (status == cudaSuccess) status = cudaEventRecord(read->done, stream ? as_stream(stream) : streams->compute);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    if (read->done != nullptr) cudaEventDestroy(read->done);
    return cuda_message("synchronize: cudaEventRecord", status);
  }
  *out = read.release();
  return "";
}

std::string gpu_read_block_wait(GpuRead* read, std::vector<uint8_t>* bytes) {
  std::unique_ptr<GpuRead> owned(read);
  cudaSetDevice(read->ordinal);
  const cudaError_t status = cudaEventSynchronize(read->done);
  if (status == cudaSuccess) {
    if (read->bytes) bytes->assign(static_cast<uint8_t*>(read->pinned), static_cast<uint8_t*>(read->pinned) + read->bytes);
    event_pool().release(read->ordinal, read->done);
  } else {
    (void)cudaGetLastError();
    cudaEventDestroy(read->done);
  }
  pinned_pool().release(read->pinned, read->capacity);
  return status == cudaSuccess ? "" : cuda_message("waiting for the GPU", status);
}

std::string gpu_capture_begin(int ordinal, uint64_t stream) {
  if (gpu_capturing()) return "captureGraph: a capture is already in progress (captures do not nest)";
  // (enter_device frees what is due now, not inside the capture)
  DeviceStreams* streams;
  std::string error = enter_device(ordinal, &streams);
  if (!error.empty()) return error;
  cudaStream_t target = stream ? as_stream(stream) : streams->graph;
  cudaStreamCaptureStatus capture_status = cudaStreamCaptureStatusNone;
  FS_CUDA_TRY("cudaStreamIsCapturing", cudaStreamIsCapturing(target, &capture_status));
  if (capture_status != cudaStreamCaptureStatusNone) return "captureGraph: the stream is already being captured";
  FS_CUDA_TRY("cudaStreamBeginCapture", cudaStreamBeginCapture(target, cudaStreamCaptureModeThreadLocal));
  g_capture = Capture();
  g_capture.ordinal = ordinal;
  g_capture.stream = target;
  g_capturing = true;
  return "";
}

std::string gpu_capture_end(std::shared_ptr<GpuGraph>* out) {
  if (!gpu_capturing()) return "captureGraph: no capture in progress";
  g_capturing = false;
  Capture capture = std::move(g_capture);
  g_capture = Capture();
  cudaGraph_t graph = nullptr;
  cudaError_t status = cudaStreamEndCapture(capture.stream, &graph);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    if (graph != nullptr) cudaGraphDestroy(graph);
    return cuda_message("captureGraph: the capture was invalidated; cudaStreamEndCapture", status);
  }
  auto g = std::make_shared<GpuGraph>();
  g->ordinal = capture.ordinal;
  status = cudaGraphInstantiate(&g->exec, graph, 0);
  cudaGraphDestroy(graph);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    g->exec = nullptr;
    return cuda_message("captureGraph: cudaGraphInstantiate", status);
  }
  g->keep = std::move(capture.keep);
  g->samplers = std::move(capture.samplers);
  *out = std::move(g);
  return "";
}

void gpu_capture_abort() {
  if (!gpu_capturing()) return;
  g_capturing = false;
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(g_capture.stream, &graph);
  (void)cudaGetLastError();
  if (graph != nullptr) cudaGraphDestroy(graph);
  g_capture = Capture();
}

std::string gpu_graph_launch(const std::shared_ptr<GpuGraph>& g, uint64_t stream) {
  if (gpu_capturing()) return "launch: a graph cannot be launched during a capture";
  DeviceStreams* streams;
  std::string error = enter_device(g->ordinal, &streams);
  if (!error.empty()) return error;
  cudaStream_t target = stream ? as_stream(stream) : streams->compute;
  cudaError_t status = cudaSuccess;
  for (const auto& s : g->samplers) {
    if (status == cudaSuccess) status = order_after_last(s.get(), target);
  }
  if (status == cudaSuccess) status = timed(HostStep::kGraphLaunch, [&] { return cudaGraphLaunch(g->exec, target); });
  for (const auto& s : g->samplers) {
    if (status == cudaSuccess) status = mark_last(s.get(), target);
  }
  Retired r;
  r.hold = g;
  retire_after(g->ordinal, target, std::move(r));
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return cuda_message("launch: cudaGraphLaunch", status);
  }
  return "";
}

int gpu_graph_ordinal(const GpuGraph& graph) { return graph.ordinal; }

std::string gpu_stream_create(int ordinal, uint64_t* stream) {
  if (gpu_capturing()) return "createStream: cannot run during graph capture";
  DeviceStreams* streams;
  std::string error = device_streams(ordinal, &streams);
  if (!error.empty()) return error;
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  cudaStream_t s = nullptr;
  FS_CUDA_TRY("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  *stream = reinterpret_cast<uint64_t>(s);
  std::lock_guard<std::mutex> lock(g_streams_mutex);
  g_created_streams.insert({ordinal, *stream});
  return "";
}

std::string gpu_stream_destroy(int ordinal, uint64_t stream) {
  if (gpu_capturing() && as_stream(stream) == g_capture.stream) {
    return "destroyStream: the stream is being captured";
  }
  {
    std::lock_guard<std::mutex> lock(g_streams_mutex);
    if (g_created_streams.erase({ordinal, stream}) == 0) {
      return "stream: expected a stream that createStream made on this device and not yet destroyed";
    }
  }
  FS_CUDA_TRY("cudaSetDevice", cudaSetDevice(ordinal));
  // Work already enqueued on it still completes (cudaStreamDestroy does not wait); the plain
  // calls' winner words it kept are freed after that work.
  FS_CUDA_TRY("release_stream_words", cuda::release_stream_words(as_stream(stream)));
  FS_CUDA_TRY("cudaStreamDestroy", cudaStreamDestroy(as_stream(stream)));
  return "";
}

}  // namespace binding
}  // namespace flashsample
