// The slice of the CUDA runtime the binding uses, available whether or not the addon was built
// with CUDA. Without CUDA every call reports "built without CUDA", so the rest of the binding
// needs no #ifdefs. Implemented in binding/gpu/, one file per concern (no_cuda.cc without CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../cuda/include/merge.h"
#include "../cuda/include/params.h"
#include "storage.h"

namespace flashsample {
namespace binding {

struct GpuInfo {
  bool compiled_with_cuda = false;
  int device_count = 0;
  std::string reason;                 // why no GPU is usable; empty when one is
  std::vector<std::string> names;     // one per device
  std::vector<int> sm_versions;       // major * 10 + minor
  std::vector<int> sm_counts;
  std::vector<size_t> memory_bytes;
};

// Queries the driver once (cached): never throws, never exits.
const GpuInfo& gpu_info();

// Every function returns an empty string on success, else a message that includes the CUDA error.
std::string gpu_malloc(int ordinal, size_t bytes, void** pointer);
std::string gpu_free(int ordinal, void* pointer);
std::string gpu_upload(int ordinal, void* device_dst, const void* host_src, size_t bytes);
std::string gpu_download(int ordinal, void* host_dst, const void* device_src, size_t bytes);
// Checks that `pointer` is device (or managed) memory usable from device `ordinal`.
std::string gpu_check_pointer(int ordinal, const void* pointer);

// An in-flight GPU call: its launch happened on the JS thread (so stream order follows call
// order); `wait` blocks a worker thread until the stream reached the call's end, then copies the
// small outputs back and releases the call's temporaries.
struct GpuCall;

struct GpuOutputs {
  std::vector<int32_t> tokens;   // empty when the tokens went to a device tensor
  std::vector<int32_t> row_status;
  std::vector<float> logprobs;
  std::vector<int32_t> top_tokens;
  std::vector<float> top_logprobs;
  int32_t fallback_rows = 0;
  int32_t merge_error = 0;  // mergePartials: a PartialError, and the index of the partial
  int32_t merge_which = 0;
  int32_t merge_largest_shard = 0;  // the most rows of W any merged shard holds
};

// Per-row inputs as the JS layer expanded them (host vectors), or device pointers for seeds and
// offsets that already live on the GPU (graph capture).
struct HostRowInputs {
  std::vector<float> temperature;
  std::vector<uint64_t> seed, offset;
  const uint64_t* device_seed = nullptr;
  const uint64_t* device_offset = nullptr;
  std::vector<int32_t> top_k;
  std::vector<float> top_p, min_p;
  std::vector<uint32_t> allowed;
  const uint32_t* device_allowed = nullptr;
  // Logit bias, bans and penalties (CSR per row), uploaded with the other per-row inputs on CUDA.
  std::vector<int32_t> bias_offsets, bias_tokens, banned_offsets, banned_tokens;
  std::vector<float> bias_values;
  std::vector<int32_t> penalty_offsets, penalty_tokens, penalty_counts;
  std::vector<uint8_t> penalty_in_prompt;
  std::vector<float> repetition_penalty, frequency_penalty, presence_penalty;
  // A list given as tensors on the GPU (host tensors are copied into the vectors above), used
  // where it lives: offsets [B + 1], then per entry the token ids and the bias values or the
  // output counts and prompt flags (i32).
  struct DeviceList {
    const int32_t* offsets = nullptr;
    const int32_t* tokens = nullptr;
    const float* values = nullptr;
    const int32_t* counts = nullptr;
    const int32_t* in_prompt = nullptr;
    int64_t entries = 0;
  };
  DeviceList device_bias, device_banned, device_penalty;
  // Some list came as tensors, which lib/ cannot check: the table kernel (or the CPU backend)
  // reports their invalid rows, and the call turns them into an error.
  bool lists_unchecked = false;
};

// Where each per-row input lives in a GPU call's scratch block (binding/gpu/launch.cc lays it out;
// the CPU backend binds the host vectors and leaves these at 0).
struct RowInputSlots {
  size_t temperature = 0, seed = 0, offset = 0, top_k = 0, top_p = 0, min_p = 0, allowed = 0;
  size_t bias_offsets = 0, bias_tokens = 0, bias_values = 0, banned_offsets = 0, banned_tokens = 0;
  size_t penalty_offsets = 0, penalty_tokens = 0, penalty_counts = 0, penalty_in_prompt = 0;
  size_t repetition = 0, frequency = 0, presence = 0;
};

// Points the per-row input fields of `p` at the arrays of `rows`, once for both backends:
// `at(vector, slot)` is one array's address, the host vector's data (CPU) or its copy at `slot`
// of the scratch block (GPU). An optional array that was not given stays null; a list's fields
// are bound when its offsets were given (an empty tokenIds is valid: its offsets are all 0); a
// device tensor (seed, offset, allowed) is used as it is.
template <class At>
void bind_row_inputs(SampleParams* p, const HostRowInputs& rows, const RowInputSlots& l, At at) {
  auto optional = [&](const auto& v, size_t slot) { return v.empty() ? nullptr : at(v, slot); };
  p->temperature = at(rows.temperature, l.temperature);
  p->seed = rows.device_seed ? rows.device_seed : at(rows.seed, l.seed);
  p->offset = rows.device_offset ? rows.device_offset : at(rows.offset, l.offset);
  p->top_k = optional(rows.top_k, l.top_k);
  p->top_p = optional(rows.top_p, l.top_p);
  p->min_p = optional(rows.min_p, l.min_p);
  p->allowed = rows.device_allowed ? rows.device_allowed : optional(rows.allowed, l.allowed);
  if (!rows.bias_offsets.empty()) {
    p->bias_offsets = at(rows.bias_offsets, l.bias_offsets);
    p->bias_tokens = at(rows.bias_tokens, l.bias_tokens);
    p->bias_values = at(rows.bias_values, l.bias_values);
    p->bias_entries = static_cast<int64_t>(rows.bias_tokens.size());
  } else if (rows.device_bias.offsets != nullptr) {
    p->bias_offsets = rows.device_bias.offsets;
    p->bias_tokens = rows.device_bias.tokens;
    p->bias_values = rows.device_bias.values;
    p->bias_entries = rows.device_bias.entries;
  }
  if (!rows.banned_offsets.empty()) {
    p->banned_offsets = at(rows.banned_offsets, l.banned_offsets);
    p->banned_tokens = at(rows.banned_tokens, l.banned_tokens);
    p->banned_entries = static_cast<int64_t>(rows.banned_tokens.size());
  } else if (rows.device_banned.offsets != nullptr) {
    p->banned_offsets = rows.device_banned.offsets;
    p->banned_tokens = rows.device_banned.tokens;
    p->banned_entries = rows.device_banned.entries;
  }
  if (!rows.penalty_offsets.empty() || rows.device_penalty.offsets != nullptr) {
    if (!rows.penalty_offsets.empty()) {
      p->penalty_offsets = at(rows.penalty_offsets, l.penalty_offsets);
      p->penalty_tokens = at(rows.penalty_tokens, l.penalty_tokens);
      p->penalty_counts = at(rows.penalty_counts, l.penalty_counts);
      p->penalty_in_prompt = at(rows.penalty_in_prompt, l.penalty_in_prompt);
      p->penalty_entries = static_cast<int64_t>(rows.penalty_tokens.size());
    } else {
      p->penalty_offsets = rows.device_penalty.offsets;
      p->penalty_tokens = rows.device_penalty.tokens;
      p->penalty_counts = rows.device_penalty.counts;
      p->penalty_in_prompt_i32 = rows.device_penalty.in_prompt;
      p->penalty_entries = rows.device_penalty.entries;
    }
    p->repetition_penalty = optional(rows.repetition_penalty, l.repetition);
    p->frequency_penalty = optional(rows.frequency_penalty, l.frequency);
    p->presence_penalty = optional(rows.presence_penalty, l.presence);
  }
  p->listed_entries = p->bias_entries + p->banned_entries + p->penalty_entries;
}

enum class SamplerKind : int32_t { kFused = 0, kReferenceGumbel = 1, kReferenceInverseCdf = 2 };

// Launches one sampling call on `stream` (0: the library's stream for the device). `p` carries
// device operand pointers and sizes; the per-row arrays are uploaded from `rows`. When
// `device_tokens` is non-null the tokens are written there and not copied back.
std::string gpu_launch_sample(int ordinal, SamplerKind kind, const SampleParams& p,
                              const HostRowInputs& rows, int32_t* device_tokens,
                              uint64_t stream_handle, GpuCall** call);
std::string gpu_wait(GpuCall* call, GpuOutputs* outputs);  // also frees `call`
// Launches merge_partials (include/merge.h) over `set`'s device blocks; gpu_wait completes it. With
// p.row_values set (and `set` empty): the rows pass's decision (cuda::launch_decide_row_values).
std::string gpu_launch_merge(int ordinal, const SampleParams& params, const HostRowInputs& rows,
                             const PartialSet& set, uint64_t stream_handle, GpuCall** call);

// Benchmark support, run on a worker thread: times `iters` launches (after `warmup`) rotating over
// `params`, each with CUDA events; microseconds per launch.
std::string gpu_time_sampler(int ordinal, SamplerKind kind, const std::vector<SampleParams>& params,
                             const HostRowInputs& rows, int warmup, int iters,
                             std::vector<double>* microseconds);
std::string gpu_read_bandwidth(int ordinal, size_t bytes, int iters, double* bytes_per_second);

// ---- NCCL (binding/gpu/nccl.cc): libnccl loaded at run time (FLASHSAMPLE_NCCL_LIB or libnccl.so.2) ----
constexpr size_t kNcclUniqueIdBytes = 128;
struct NcclStatus {
  bool loaded = false;
  std::string path;   // the library that was loaded
  std::string error;  // why none was: every path tried, with dlerror's reason
  int version = 0;    // ncclGetVersion's code (e.g. 22703)
};
NcclStatus nccl_status();  // loads the library on the first call
std::string nccl_unique_id(std::vector<uint8_t>* id);
struct NcclComm;  // a communicator of one rank
struct NcclCommInfo {
  int rank, size, ordinal;
  bool closed;  // aborted or destroyed
};
NcclCommInfo nccl_comm_info(const NcclComm& comm);
// Blocking (a worker thread): ncclCommInitRankConfig, aborted after timeout_ms if the other ranks
// do not join.
std::string nccl_init_rank(const uint8_t* id, int nranks, int rank, int ordinal, int timeout_ms,
                           std::shared_ptr<NcclComm>* out);
// Blocking: ncclCommInitAll, one communicator per device of this process.
std::string nccl_init_all(const std::vector<int>& ordinals, std::vector<std::shared_ptr<NcclComm>>* out);
// JS thread: all-gathers `bytes` from send[i] into recv[i] (size x bytes) on comms[i], one NCCL
// group when there are several, on `stream` (0: each device's library stream); nccl_wait then
// waits on a worker thread for completion, a communicator's error or timeout_ms (then every
// communicator of the call is aborted), and frees `wait`.
struct NcclWait;
std::string nccl_all_gather(const std::vector<std::shared_ptr<NcclComm>>& comms,
                            const std::vector<const void*>& send, const std::vector<void*>& recv, size_t bytes,
                            uint64_t stream, NcclWait** wait);
std::string nccl_wait(NcclWait* wait, int timeout_ms);
// Enqueues one all-gather of `bytes` from `send` into `recv` (size x bytes) on `stream` and returns
// once NCCL has enqueued it (captured, when the stream is capturing): no wait for completion, no
// timeout (an engine's sharded step). Refuses a communicator of another device than `ordinal`.
std::string nccl_all_gather_enqueue(NcclComm& comm, int ordinal, const void* send, void* recv, size_t bytes,
                                    uint64_t stream);
void nccl_abort(NcclComm& comm);
void nccl_destroy(NcclComm& comm);

// ---- The engine's way in (binding/gpu/engine.cc): samplers sized once, enqueue, CUDA graphs ----

// An engine sampler's row-parameter fields, in the order of their bits and of their regions.
enum RowField : int {
  kFieldTemperature = 0,  // f32
  kFieldTopK = 1,         // i32
  kFieldTopP = 2,         // f32
  kFieldMinP = 3,         // f32
  kFieldSeed = 4,         // u64
  kFieldOffset = 5,       // u64
  kFieldRepetitionPenalty = 6,  // f32
  kFieldFrequencyPenalty = 7,   // f32
  kFieldPresencePenalty = 8,    // f32
  kFieldMinTokens = 9,          // i32: the row's banned list applies while > 0
  kRowFieldCount = 10
};
// The most slots a row of an engine sampler's list tables has (and maxBatch * capacity < 2^31: a
// table is read as CSR with 32-bit offsets).
constexpr int64_t kMaxListCapacity = 65536;

// An engine sampler's list tables: a call's penalty, logit-bias and banned lists, kept on the
// device with `capacity` slots a row (row b's at b * capacity of each column, so that rows never
// shift). Column 0 is the token id (-1: a free slot); then the penalty table's output counts (i32)
// and prompt flags (u8), the bias table's values (f32); the banned table has none.
enum ListKind : int { kListPenalty = 0, kListBias = 1, kListBanned = 2, kListKinds = 3 };
constexpr int kListMaxColumns = 3;
inline int list_columns(int kind) { return kind == kListPenalty ? 3 : kind == kListBias ? 2 : 1; }
inline size_t list_column_bytes(int kind, int column) {
  return column == 0 ? 4 : kind == kListPenalty && column == 2 ? 1 : 4;
}
struct ListTable {
  int64_t capacity = 0;                 // 0: the sampler has no such table
  size_t offsets = 0;                   // i32 [max_batch + 1]: b * capacity (the CSR the kernels read)
  size_t columns[kListMaxColumns] = {};
};
inline size_t row_field_bytes(int field) { return field == kFieldSeed || field == kFieldOffset ? 8 : 4; }

// The parameter block of a sampler of `max_batch` rows: one region of max_batch elements per
// field (256-byte aligned, at at[field]), the fallback-row counter, the list tables the sampler
// has, the count of tokens a full penalty table did not record, and (device samplers) the staging
// region that setRows copies into before scattering. readRows copies everything before the
// staging region.
struct SamplerBlock {
  size_t at[kRowFieldCount] = {};
  size_t fallback = 0;
  ListTable lists[kListKinds];
  size_t unrecorded = 0;
  size_t list_invalid = 0;  // i32 [max_batch]: the table kernel's report of invalid ids (with any table)
  size_t staging = 0, bytes = 0;
};
SamplerBlock sampler_block_layout(int64_t max_batch, const int64_t capacity[kListKinds]);

// A sampler's state, shared by its JS object, the graphs that captured it and its work in flight.
// An engine sampler whose head is one rank's vocabulary shard (createSampler's tp): enqueue writes
// the shard's partial state, all-gathers the ranks' states, merges them into the outputs and runs
// the rows pass (its values all-gathered too), every step on the stream (capturable). One device
// block holds every buffer, at the offsets below.
struct ShardedStep {
  std::shared_ptr<NcclComm> comm;
  int ranks = 1;
  int64_t vocab_offset = 0, vocab_total = 0;
  int32_t capacity = 0;       // candidates a row
  int32_t rows_pass_rows = 0; // undecided rows the rows pass takes per step
  int64_t pitch = 0;          // floats a row in a rows-pass segment (every rank's largest shard)
  uint64_t options_hash = 0;
  size_t state_bytes = 0, segment_bytes = 0;
  StorageRef buffers;
  size_t state = 0, states = 0, merge_status = 0, row_status = 0, shard_flags = 0, decide_flags = 0, rows = 0,
         logits = 0, stored_tiles = 0, segment = 0, segments = 0;
  size_t stored_tiles_bytes = 0;
};

struct EngineSampler {
  int ordinal = 0;
  bool on_device = false;
  int64_t max_batch = 0;
  // dtype, vocab, dim, num_samples, softcap, top_logprobs, per_row_seed; the per-row pointers point
  // into `block` (nullptr for the filters the sampler was created without); workspace set.
  SampleParams shape;
  bool logprobs = false;       // enqueue writes logprobs
  bool allowed_tokens = false; // enqueue takes an allowed-token mask
  SamplerBlock layout;
  StorageRef block, workspace;
  uint64_t last_stream = 0;    // where its last work went (CUDA): a call on another stream waits for it
  bool used = false;
  void* order_event = nullptr; // cudaEvent_t that joins a new stream to last_stream
  std::shared_ptr<void> launch_graphs;  // CUDA: graphs of repeated enqueues (binding/gpu/engine.cc)
  std::shared_ptr<ShardedStep> sharded;  // a rank's shard (createSampler's tp), else null
  ~EngineSampler();
};

// The sampler's penalty table (capacity 0 without one) and minTokens (with a banned table) as the
// after-draw update takes them (cuda::launch_record_tokens, cpu::record_tokens); list_invalid: the
// rows whose tables held invalid ids when the call read them, or null.
RecordTargets record_targets_of(const EngineSampler& s, bool record, const int32_t* list_invalid);

// The workspace launch_fused_sample needs for any call of a sampler shaped like `p` (batch =
// maxBatch): cuda::fused_workspace_bytes on device `ordinal`.
std::string gpu_workspace_bytes(int ordinal, const SampleParams& p, size_t* bytes);

// Copies rows [first, first + count) of the `fields` (bit per RowField) from `staging` (field f
// packed at staging_at[f]) into the sampler's block, stream-ordered: one copy of the staging
// bytes through a pinned block, then a scatter kernel. Never waits.
std::string gpu_set_rows(EngineSampler* s, int64_t first, int64_t count, uint32_t fields,
                         const uint8_t* staging, size_t staging_bytes,
                         const uint32_t staging_at[kRowFieldCount], uint64_t stream);

// Launches the fused sampler for `p` (device pointers, the sampler's rows and workspace) on
// `stream` (0: the stream being captured, else the library's); then, with record_tokens, counts
// each row's token in the sampler's penalty table and counts its minTokens down, and with
// advance_offset, adds 1 to the first p.batch offsets. `keep` stays alive until the work completes, or as long as the
// graph being captured.
std::string gpu_enqueue(const std::shared_ptr<EngineSampler>& s, const SampleParams& p,
                        bool advance_offset, bool record_tokens, uint64_t stream, std::vector<StorageRef> keep);

// Replaces rows [first, first + count) of the sampler's list table `kind`: columns[c] holds
// count * capacity slots of column c (token -1: free), copied stream-ordered through a pinned
// block. Never waits.
std::string gpu_set_list_rows(EngineSampler* s, int kind, int64_t first, int64_t count,
                              const uint8_t* const columns[kListMaxColumns], uint64_t stream);

// The sampler's block copied to the host after its last work: start on the JS thread, wait on a
// worker thread.
struct GpuRead;
std::string gpu_read_block_start(const std::shared_ptr<EngineSampler>& s, GpuRead** read);
std::string gpu_read_block_wait(GpuRead* read, std::vector<uint8_t>* bytes);  // also frees `read`
// The work enqueued so far on `stream` (0: the library's), waited for with gpu_read_block_wait
// (no bytes).
std::string gpu_synchronize_start(int ordinal, uint64_t stream, GpuRead** read);

// Graph capture, on the JS thread, in cudaStreamCaptureModeThreadLocal. While one is active,
// gpu_capturing() is true and the binding refuses what would break it (allocations, host
// copies, waits) with an error naming the operation.
bool gpu_capturing();
// Begins capturing `stream` (0: the library's graph stream of the device).
std::string gpu_capture_begin(int ordinal, uint64_t stream);
struct GpuGraph;
// Ends the capture and instantiates its graph, which holds every sampler and tensor it uses.
std::string gpu_capture_end(std::shared_ptr<GpuGraph>* graph);
void gpu_capture_abort();  // ends the capture, discarding it
// Launches the graph on `stream` (0: the library's stream), after the last work of its samplers.
std::string gpu_graph_launch(const std::shared_ptr<GpuGraph>& graph, uint64_t stream);
int gpu_graph_ordinal(const GpuGraph& graph);

std::string gpu_stream_create(int ordinal, uint64_t* stream);
std::string gpu_stream_destroy(int ordinal, uint64_t stream);

// Diagnostics for the stress script's event-loop check: the time spent in each host-side CUDA step
// of tensor management and call launch (all of which run on the JS thread), since the process
// started. Not part of the public API.
struct HostStepStats {
  const char* name;
  uint64_t calls = 0;
  double total_ms = 0, max_ms = 0;
  uint64_t over_10ms = 0;  // calls of the step that took longer than 10 ms
};
std::vector<HostStepStats> host_step_stats();

}  // namespace binding
}  // namespace flashsample
