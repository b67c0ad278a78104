// The engine's way in: NativeSampler (a sampler sized once: its row-parameter block, workspace,
// setRows, enqueue), NativeGraph (a captured CUDA graph) and the capture and stream functions.
// lib/sampler.ts validates every argument; the checks here only keep a bypassed JS layer from
// faulting.
#include <napi.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../cpu/cpu_sampler.h"
#include "../cuda/include/noise.h"
#include "../cuda/include/partial.h"
#include "../cuda/include/regions.h"
#include "cuda_api.h"
#include "napi_util.h"
#include "native_buffer.h"

namespace flashsample {
namespace binding {

SamplerBlock sampler_block_layout(int64_t max_batch, const int64_t capacity[kListKinds]) {
  SamplerBlock l;
  RegionLayout regions;
  auto take = [&](size_t bytes) { return regions.take(bytes); };
  const size_t B = static_cast<size_t>(max_batch);
  size_t row_bytes = 0;
  for (int f = 0; f < kRowFieldCount; ++f) {
    l.at[f] = take(B * row_field_bytes(f));
    row_bytes += row_field_bytes(f);
  }
  l.fallback = take(4);
  for (int k = 0; k < kListKinds; ++k) {
    ListTable& t = l.lists[k];
    t.capacity = capacity[k];
    if (t.capacity < 1) continue;
    const size_t slots = B * static_cast<size_t>(t.capacity);
    t.offsets = take(4 * (B + 1));
    for (int c = 0; c < list_columns(k); ++c) t.columns[c] = take(list_column_bytes(k, c) * slots);
  }
  l.unrecorded = take(4);
  l.list_invalid = take(4 * B);
  // setRows's packed rows: every field, each section 8-byte aligned.
  l.staging = take(B * row_bytes + 8 * kRowFieldCount);
  l.bytes = regions.bytes;
  return l;
}

RecordTargets record_targets_of(const EngineSampler& s, bool record, const int32_t* list_invalid) {
  uint8_t* block = static_cast<uint8_t*>(s.block->data());
  const ListTable& t = s.layout.lists[kListPenalty];
  RecordTargets r;
  r.record = record;
  r.list_invalid = list_invalid;
  r.capacity = static_cast<int32_t>(t.capacity);
  if (t.capacity > 0) {
    r.tokens = reinterpret_cast<int32_t*>(block + t.columns[0]);
    r.counts = reinterpret_cast<int32_t*>(block + t.columns[1]);
    r.in_prompt = block + t.columns[2];
    r.unrecorded = reinterpret_cast<int32_t*>(block + s.layout.unrecorded);
  }
  if (s.layout.lists[kListBanned].capacity > 0) r.min_tokens = reinterpret_cast<int32_t*>(block + s.layout.at[kFieldMinTokens]);
  return r;
}

namespace {

uint64_t stream_arg(const Napi::Value& v, const char* what) {
  if (v.IsUndefined() || v.IsNull()) return 0;
  if (!v.IsBigInt()) throw_error(v.Env(), std::string(what) + ": expected a bigint cudaStream_t handle");
  bool lossless = false;
  const uint64_t handle = v.As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) throw_error(v.Env(), std::string(what) + ": expected a 64-bit handle");
  return handle;
}

void refuse_during_capture(Napi::Env env, const char* what) {
  if (gpu_capturing()) {
    throw_error(env, std::string(what) + ": cannot run during graph capture (captureGraph): it allocates memory");
  }
}

Napi::FunctionReference* g_graph_constructor = nullptr;

class NativeGraph : public Napi::ObjectWrap<NativeGraph> {
 public:
  static Napi::Function Define(Napi::Env env) {
    Napi::Function cls = DefineClass(env, "NativeGraph",
                                     {InstanceMethod<&NativeGraph::Launch>("launch"),
                                      InstanceMethod<&NativeGraph::Dispose>("dispose"),
                                      InstanceAccessor<&NativeGraph::Disposed>("disposed")});
    g_graph_constructor = new Napi::FunctionReference(Napi::Persistent(cls));
    return cls;
  }
  explicit NativeGraph(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NativeGraph>(info) {}
  std::shared_ptr<GpuGraph> graph;

 private:
  // launch(stream?: bigint)
  Napi::Value Launch(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!graph) throw_error(env, "launch: the graph has been disposed");
    const std::string error = gpu_graph_launch(graph, stream_arg(info[0], "stream"));
    if (!error.empty()) throw_error(env, error);
    return env.Undefined();
  }
  // The graph's executable, samplers and tensors live on until its last launch completes.
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    graph.reset();
    return info.Env().Undefined();
  }
  Napi::Value Disposed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), !graph); }
};

// createSampler's tp ({comm, vocabOffset, vocabSize, candidates, rowsPassRows, maxShardVocab,
// optionsHash}; lib/sampler.ts checked them): the sharded step's buffers in one device block. Its
// calls' temporaries are stream-ordered allocations (a captured graph's own allocation nodes).
std::shared_ptr<ShardedStep> sharded_step(Napi::Env env, const EngineSampler& s, const Napi::Object& c) {
  const SampleParams& p = s.shape;
  if (!s.on_device) throw_error(env, "tp: a sharded sampler needs a 'cuda' device");
  auto t = std::make_shared<ShardedStep>();
  t->comm = communicator_arg(env, c.Get("comm"), "tp.comm");
  const NcclCommInfo info = nccl_comm_info(*t->comm);
  if (info.closed) throw_error(env, "tp.comm: the communicator was aborted or disposed");
  if (info.ordinal != s.ordinal) {
    throw_error(env, "tp.comm: a communicator of cuda:" + std::to_string(info.ordinal) + ", the sampler's device is cuda:" +
                         std::to_string(s.ordinal));
  }
  if (info.size > kMaxShards) throw_error(env, "tp.comm: at most " + std::to_string(kMaxShards) + " ranks");
  t->ranks = info.size;
  t->vocab_total = get_int(c, "vocabSize", p.vocab, INT32_MAX - 1);
  t->vocab_offset = get_int(c, "vocabOffset", 0, t->vocab_total - p.vocab);
  if (t->vocab_offset % 4 != 0) throw_error(env, "tp.vocabOffset: expected a multiple of 4");
  t->capacity = static_cast<int32_t>(get_int(c, "candidates", 0, kMaxPartialCapacity));
  t->rows_pass_rows = static_cast<int32_t>(get_int(c, "rowsPassRows", 0, s.max_batch));
  t->pitch = get_int(c, "maxShardVocab", p.vocab, t->vocab_total);
  t->options_hash = get_u64(c, "optionsHash");
  const size_t B = static_cast<size_t>(s.max_batch), ranks = static_cast<size_t>(t->ranks);
  // logprobsMode 'raw': the states carry their raw sections, the segments the rows' raw logits
  const bool raw = p.raw_logprobs != 0 && (s.logprobs || p.top_logprobs > 0);
  t->state_bytes = partial_bytes(static_cast<int32_t>(s.max_batch), p.num_samples, t->capacity, raw ? p.top_logprobs : -1);
  t->segment_bytes = t->rows_pass_rows > 0 ? row_values_bytes(t->rows_pass_rows, t->pitch, raw) : 0;
  RegionLayout regions;
  t->state = regions.take(t->state_bytes);
  t->states = regions.take(ranks * t->state_bytes);
  t->merge_status = regions.take(4 * 4);
  t->row_status = regions.take(4 * B);
  t->shard_flags = regions.take(4 * (B + 1));
  t->decide_flags = regions.take(4 * (B + 1));
  t->rows = regions.take(4 * static_cast<size_t>(t->rows_pass_rows));
  // the shard's [B, V shard] logits, then (stream order) the deciding side's [B, vocabSize] rows
  t->logits = regions.take(t->rows_pass_rows > 0 ? 4 * B * static_cast<size_t>(t->vocab_total) : 0);
  // the tiles of [B, V shard] a one-pass shard's top-p rows stored into the logits (read back)
  t->stored_tiles_bytes = t->rows_pass_rows > 0 ? B * static_cast<size_t>((p.vocab + 127) / 128) : 0;
  t->stored_tiles = regions.take(t->stored_tiles_bytes);
  t->segment = regions.take(t->segment_bytes);
  t->segments = regions.take(ranks * t->segment_bytes);
  std::string error;
  t->buffers = Storage::allocate(MemoryKind::kDevice, s.ordinal, regions.bytes, &error);
  if (!t->buffers) throw_error(env, "createSampler: the sharded step's " + std::to_string(regions.bytes) + " bytes: " + error);
  return t;
}

class NativeSampler : public Napi::ObjectWrap<NativeSampler> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NativeSampler",
                       {InstanceMethod<&NativeSampler::SetRows>("setRows"),
                        InstanceMethod<&NativeSampler::SetListRows>("setListRows"),
                        InstanceMethod<&NativeSampler::Enqueue>("enqueue"),
                        InstanceMethod<&NativeSampler::ReadRows>("readRows"),
                        InstanceMethod<&NativeSampler::Dispose>("dispose"),
                        InstanceAccessor<&NativeSampler::Pointer>("pointer"),
                        InstanceAccessor<&NativeSampler::Layout>("layout"),
                        InstanceAccessor<&NativeSampler::WorkspaceBytes>("workspaceBytes")});
  }

  // new NativeSampler({device, ordinal, maxBatch, dtype, vocab, dim, numSamples, topK, topP, minP,
  //                    logprobs, topLogprobs, softcap, allowedTokens, filterOrder, logprobsMode, penaltyCapacity,
  //                    logitBiasCapacity, bannedCapacity})
  explicit NativeSampler(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NativeSampler>(info) {
    Napi::Env env = info.Env();
    if (info.Length() != 1 || !info[0].IsObject()) throw_error(env, "NativeSampler(config): expected an object");
    refuse_during_capture(env, "createSampler");
    const Napi::Object c = info[0].As<Napi::Object>();
    auto s = std::make_shared<EngineSampler>();
    s->on_device = get_int(c, "device", 0, 1) == 1;
    s->ordinal = static_cast<int>(get_int(c, "ordinal", 0, 63));
    s->max_batch = get_int(c, "maxBatch", 1, kMaxBatch);
    SampleParams& p = s->shape;
    p.dtype = static_cast<DType>(get_int(c, "dtype", 0, 2));
    p.batch = s->max_batch;
    p.vocab = get_int(c, "vocab", 1, INT32_MAX - 1);
    p.dim = get_int(c, "dim", 1, INT32_MAX);
    p.num_samples = static_cast<int32_t>(get_int(c, "numSamples", 1, kMaxSamples));
    p.per_row_seed = true;
    p.softcap = static_cast<float>(get_number(c, "softcap", 0.0));
    p.filter_order = static_cast<FilterOrder>(get_int(c, "filterOrder", 0, 1));
    p.raw_logprobs = static_cast<int32_t>(get_int(c, "logprobsMode", 0, 1));
    p.top_logprobs = static_cast<int32_t>(get_int(c, "topLogprobs", 0, 1 << 20));
    s->logprobs = get_bool(c, "logprobs");
    s->allowed_tokens = get_bool(c, "allowedTokens");
    static const char* kCapacityNames[kListKinds] = {"penaltyCapacity", "logitBiasCapacity", "bannedCapacity"};
    int64_t capacity[kListKinds];
    for (int k = 0; k < kListKinds; ++k) {
      capacity[k] = get_int(c, kCapacityNames[k], 0, kMaxListCapacity);
      if (capacity[k] * s->max_batch > INT32_MAX)
        throw_error(env, std::string("createSampler: maxBatch * ") + kCapacityNames[k] + " must be below 2^31");
    }
    if ((capacity[kListPenalty] > 0 || capacity[kListBanned] > 0) && p.num_samples != 1)
      throw_error(env, "createSampler: penaltyCapacity and bannedCapacity need numSamples 1");
    s->layout = sampler_block_layout(s->max_batch, capacity);

    const MemoryKind kind = s->on_device ? MemoryKind::kDevice : MemoryKind::kHost;
    std::string error;
    s->block = Storage::allocate(kind, s->ordinal, s->layout.bytes, &error);
    if (!s->block) throw_error(env, "createSampler: " + error);
    uint8_t* block = static_cast<uint8_t*>(s->block->data());
    // Defaults: temperature 1, filters and penalties off, seed 0, offset 0; every penalty slot free.
    std::vector<uint8_t> init(s->layout.bytes, 0);
    const size_t B = static_cast<size_t>(s->max_batch);
    const float one = 1.0f;
    for (size_t b = 0; b < B; ++b) {
      std::memcpy(&init[s->layout.at[kFieldTemperature] + 4 * b], &one, 4);
      std::memcpy(&init[s->layout.at[kFieldTopP] + 4 * b], &one, 4);
      std::memcpy(&init[s->layout.at[kFieldRepetitionPenalty] + 4 * b], &one, 4);
    }
    for (const ListTable& t : s->layout.lists) {
      if (t.capacity < 1) continue;
      for (size_t b = 0; b <= B; ++b) {
        const int32_t offset = static_cast<int32_t>(b * static_cast<size_t>(t.capacity));
        std::memcpy(&init[t.offsets + 4 * b], &offset, 4);
      }
      std::memset(&init[t.columns[0]], 0xff, 4 * B * static_cast<size_t>(t.capacity));  // -1: free
    }
    if (s->on_device) {
      error = gpu_upload(s->ordinal, block, init.data(), init.size());
      if (!error.empty()) throw_error(env, "createSampler: " + error);
    } else {
      std::memcpy(block, init.data(), init.size());
    }
    p.temperature = reinterpret_cast<const float*>(block + s->layout.at[kFieldTemperature]);
    p.seed = reinterpret_cast<const uint64_t*>(block + s->layout.at[kFieldSeed]);
    p.offset = reinterpret_cast<const uint64_t*>(block + s->layout.at[kFieldOffset]);
    if (get_bool(c, "topK")) p.top_k = reinterpret_cast<const int32_t*>(block + s->layout.at[kFieldTopK]);
    if (get_bool(c, "topP")) p.top_p = reinterpret_cast<const float*>(block + s->layout.at[kFieldTopP]);
    if (get_bool(c, "minP")) p.min_p = reinterpret_cast<const float*>(block + s->layout.at[kFieldMinP]);
    p.fallback_rows = reinterpret_cast<int32_t*>(block + s->layout.fallback);
    // The tables as the calls' CSR lists: row b's slots at b * capacity; free slots (-1) are
    // skipped like any id outside [0, V).
    auto i32 = [&](size_t at) { return reinterpret_cast<const int32_t*>(block + at); };
    const ListTable* t = s->layout.lists;
    if (t[kListPenalty].capacity > 0) {
      p.penalty_offsets = i32(t[kListPenalty].offsets);
      p.penalty_tokens = i32(t[kListPenalty].columns[0]);
      p.penalty_counts = i32(t[kListPenalty].columns[1]);
      p.penalty_in_prompt = block + t[kListPenalty].columns[2];
      p.penalty_entries = static_cast<int64_t>(B) * t[kListPenalty].capacity;
      p.repetition_penalty = reinterpret_cast<const float*>(block + s->layout.at[kFieldRepetitionPenalty]);
      p.frequency_penalty = reinterpret_cast<const float*>(block + s->layout.at[kFieldFrequencyPenalty]);
      p.presence_penalty = reinterpret_cast<const float*>(block + s->layout.at[kFieldPresencePenalty]);
    }
    if (t[kListBias].capacity > 0) {
      p.bias_offsets = i32(t[kListBias].offsets);
      p.bias_tokens = i32(t[kListBias].columns[0]);
      p.bias_values = reinterpret_cast<const float*>(block + t[kListBias].columns[1]);
      p.bias_entries = static_cast<int64_t>(B) * t[kListBias].capacity;
    }
    if (t[kListBanned].capacity > 0) {
      p.banned_offsets = i32(t[kListBanned].offsets);
      p.banned_tokens = i32(t[kListBanned].columns[0]);
      p.banned_while = i32(s->layout.at[kFieldMinTokens]);
      p.banned_entries = static_cast<int64_t>(B) * t[kListBanned].capacity;
    }
    p.listed_entries = static_cast<int64_t>(B) * (t[kListPenalty].capacity + t[kListBias].capacity + t[kListBanned].capacity);
    if (p.listed_entries > 0) p.listed_invalid = reinterpret_cast<int32_t*>(block + s->layout.list_invalid);

    const Napi::Value tp = c.Get("tp");
    if (!tp.IsUndefined()) {
      if (!tp.IsObject()) throw_error(env, "tp: expected an object");
      s->sharded = sharded_step(env, *s, tp.As<Napi::Object>());
      p.listed_global_ids = true;  // (the tables hold global ids, as the tokens recorded into them)
    } else if (s->on_device) {
      // Sized with stand-ins for the per-call pointers whose presence picks the path.
      static float marker;
      static uint32_t allowed_marker;
      SampleParams sizing = p;
      sizing.logprobs = s->logprobs ? &marker : nullptr;
      sizing.allowed = s->allowed_tokens ? &allowed_marker : nullptr;
      size_t bytes = 0;
      error = gpu_workspace_bytes(s->ordinal, sizing, &bytes);
      if (!error.empty()) throw_error(env, "createSampler: " + error);
      s->workspace = Storage::allocate(MemoryKind::kDevice, s->ordinal, bytes, &error);
      if (!s->workspace) throw_error(env, "createSampler: workspace of " + std::to_string(bytes) + " bytes: " + error);
      p.workspace = s->workspace->data();
      p.workspace_bytes = bytes;
    }
    sampler_ = std::move(s);
  }

 private:
  EngineSampler& live(Napi::Env env, const char* what) {
    if (!sampler_) throw_error(env, std::string(what) + ": the sampler has been disposed");
    return *sampler_;
  }

  // setRows(first, count, fields, staging: Uint8Array, stagingAt: Uint32Array(6), stream?)
  Napi::Value SetRows(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    EngineSampler& s = live(env, "setRows");
    if (info.Length() < 5 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber() ||
        !info[3].IsTypedArray() || !info[4].IsTypedArray()) {
      throw_error(env, "setRows(first, count, fields, staging, stagingAt, stream?): bad arguments");
    }
    const int64_t first = info[0].As<Napi::Number>().Int64Value();
    const int64_t count = info[1].As<Napi::Number>().Int64Value();
    const uint32_t fields = info[2].As<Napi::Number>().Uint32Value();
    auto staging = info[3].As<Napi::Uint8Array>();
    auto at = info[4].As<Napi::Uint32Array>();
    if (first < 0 || count < 1 || first + count > s.max_batch || at.ElementLength() != kRowFieldCount ||
        fields >= (1u << kRowFieldCount)) {
      throw_error(env, "setRows: rows or fields out of range");
    }
    const uint8_t* src = staging.Data();
    for (int f = 0; f < kRowFieldCount; ++f) {
      if ((fields & (1u << f)) && at[f] + count * row_field_bytes(f) > staging.ByteLength())
        throw_error(env, "setRows: staging block too small");
    }
    const uint64_t stream = stream_arg(info.Length() > 5 ? info[5] : env.Undefined(), "stream");
    if (s.on_device) {
      const std::string error =
          gpu_set_rows(&s, first, count, fields, src, staging.ByteLength(), at.Data(), stream);
      if (!error.empty()) throw_error(env, error);
      return env.Undefined();
    }
    uint8_t* block = static_cast<uint8_t*>(s.block->data());
    for (int f = 0; f < kRowFieldCount; ++f) {
      if (!(fields & (1u << f))) continue;
      const size_t elem = row_field_bytes(f);
      std::memcpy(block + s.layout.at[f] + static_cast<size_t>(first) * elem, src + at[f], count * elem);
    }
    return env.Undefined();
  }

  // setListRows(kind, first, count, columns: [Int32Array tokens, ...], stream?): rows [first,
  // first + count) of list table `kind` (ListKind), capacity slots a row in each column.
  Napi::Value SetListRows(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    EngineSampler& s = live(env, "setListRows");
    if (info.Length() < 4 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber() || !info[3].IsArray()) {
      throw_error(env, "setListRows(kind, first, count, columns, stream?): bad arguments");
    }
    const int kind = info[0].As<Napi::Number>().Int32Value();
    if (kind < 0 || kind >= kListKinds || s.layout.lists[kind].capacity < 1) {
      throw_error(env, "setListRows: the sampler has no such list table");
    }
    const ListTable& t = s.layout.lists[kind];
    const int64_t first = info[1].As<Napi::Number>().Int64Value();
    const int64_t count = info[2].As<Napi::Number>().Int64Value();
    if (first < 0 || count < 1 || first + count > s.max_batch) throw_error(env, "setListRows: rows out of range");
    const Napi::Array given = info[3].As<Napi::Array>();
    const int n = list_columns(kind);
    if (static_cast<int>(given.Length()) != n) throw_error(env, "setListRows: wrong number of columns");
    const size_t slots = static_cast<size_t>(count) * static_cast<size_t>(t.capacity);
    const uint8_t* columns[kListMaxColumns] = {};
    for (int c = 0; c < n; ++c) {
      const Napi::Value v = given.Get(static_cast<uint32_t>(c));
      if (!v.IsTypedArray()) throw_error(env, "setListRows: columns must be typed arrays");
      const Napi::TypedArray a = v.As<Napi::TypedArray>();
      if (a.ByteLength() != list_column_bytes(kind, c) * slots) throw_error(env, "setListRows: a column of the wrong size");
      columns[c] = static_cast<const uint8_t*>(a.ArrayBuffer().Data()) + a.ByteOffset();
    }
    const uint64_t stream = stream_arg(info.Length() > 4 ? info[4] : env.Undefined(), "stream");
    if (s.on_device) {
      const std::string error = gpu_set_list_rows(&s, kind, first, count, columns, stream);
      if (!error.empty()) throw_error(env, error);
      return env.Undefined();
    }
    uint8_t* block = static_cast<uint8_t*>(s.block->data());
    const size_t at = static_cast<size_t>(first) * static_cast<size_t>(t.capacity);
    for (int c = 0; c < n; ++c) {
      const size_t elem = list_column_bytes(kind, c);
      std::memcpy(block + t.columns[c] + elem * at, columns[c], elem * slots);
    }
    return env.Undefined();
  }

  // enqueue({hidden, weight, bias?, allowed?, out, status?, logprobs?, topTokens?, topLogprobs?,
  //          batch, stream?, advanceOffset, recordTokens})
  Napi::Value Enqueue(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    live(env, "enqueue");
    if (info.Length() != 1 || !info[0].IsObject()) throw_error(env, "enqueue(spec): expected an object");
    const std::shared_ptr<EngineSampler> s = sampler_;
    const Napi::Object spec = info[0].As<Napi::Object>();
    SampleParams p = s->shape;
    p.batch = get_int(spec, "batch", 1, s->max_batch);
    const size_t B = static_cast<size_t>(p.batch), S = static_cast<size_t>(p.num_samples);
    const size_t n = static_cast<size_t>(p.top_logprobs), elem = dtype_bytes(p.dtype);
    std::vector<StorageRef> keep;
    keep.reserve(10);
    keep.push_back(s->block);
    if (s->workspace) keep.push_back(s->workspace);
    auto operand = [&](const char* name, size_t bytes) -> void* {
      StorageRef r = NativeBuffer::storage_of(spec.Get(name), name);
      if (r->bytes() < bytes) {
        throw_error(env, std::string(name) + ": the tensor holds " + std::to_string(r->bytes()) +
                             " bytes, expected at least " + std::to_string(bytes));
      }
      if ((r->kind() == MemoryKind::kDevice) != s->on_device || r->ordinal() != s->ordinal) {
        throw_error(env, std::string(name) + ": the tensor lives on another device than the sampler");
      }
      keep.push_back(r);
      return r->data();
    };
    auto optional = [&](const char* name, size_t bytes) -> void* {
      return spec.Get(name).IsUndefined() ? nullptr : operand(name, bytes);
    };
    p.hidden = operand("hidden", B * static_cast<size_t>(p.dim) * elem);
    p.weight = operand("weight", static_cast<size_t>(p.vocab) * static_cast<size_t>(p.dim) * elem);
    p.bias = optional("bias", static_cast<size_t>(p.vocab) * elem);
    p.tokens = static_cast<int32_t*>(operand("out", B * S * 4));
    p.row_status = static_cast<int32_t*>(optional("status", B * 4));
    p.logprobs = static_cast<float*>(optional("logprobs", B * S * 4));
    if ((p.logprobs != nullptr) != s->logprobs) throw_error(env, "logprobsOut: required exactly when the sampler was created with logprobs");
    if (n > 0) {
      p.top_tokens = static_cast<int32_t*>(operand("topTokens", B * n * 4));
      p.top_token_logprobs = static_cast<float*>(operand("topLogprobs", B * n * 4));
    }
    const size_t words = B * static_cast<size_t>((p.vocab + 31) / 32);
    p.allowed = static_cast<const uint32_t*>(optional("allowed", words * 4));
    if ((p.allowed != nullptr) != s->allowed_tokens) throw_error(env, "allowedTokens: required exactly when the sampler was created with allowedTokens");
    const bool advance = get_bool(spec, "advanceOffset");
    const bool record = get_bool(spec, "recordTokens");
    if (record && s->layout.lists[kListPenalty].capacity < 1 && s->layout.lists[kListBanned].capacity < 1)
      throw_error(env, "recordTokens: the sampler has no penalty or banned-token table");
    const uint64_t stream = stream_arg(spec.Get("stream"), "stream");
    if (s->on_device) {
      const std::string error = gpu_enqueue(s, p, advance, record, stream, std::move(keep));
      if (!error.empty()) throw_error(env, error);
      return env.Undefined();
    }
    const std::string error = cpu::sample_fused(p, 0);
    if (!error.empty()) throw_error(env, "enqueue: " + error);
    // after the draw, as on the GPU: the rows whose tables held invalid ids when the call read them
    std::vector<int32_t> invalid;
    if (p.row_status != nullptr && p.listed_entries > 0) {
      invalid.assign(B, 0);
      cpu::find_invalid_lists(p, invalid.data());
    }
    cpu::record_tokens(record_targets_of(*s, record, invalid.empty() ? nullptr : invalid.data()), p.tokens,
                       p.batch, p.row_status);
    if (advance) {
      auto* offset = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(s->block->data()) + s->layout.at[kFieldOffset]);
      for (size_t b = 0; b < B; ++b) offset[b] += 1;
    }
    return env.Undefined();
  }

  // readRows(): Promise<ArrayBuffer>, the block's fields after the sampler's last work.
  Napi::Value ReadRows(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    live(env, "readRows");
    const std::shared_ptr<EngineSampler> s = sampler_;
    auto bytes = std::make_shared<std::vector<uint8_t>>();
    auto resolve = [bytes](Napi::Env env) -> Napi::Value {
      Napi::ArrayBuffer out = Napi::ArrayBuffer::New(env, bytes->size());
      if (!bytes->empty()) std::memcpy(out.Data(), bytes->data(), bytes->size());
      return out;
    };
    if (!s->on_device) {
      const auto* data = static_cast<const uint8_t*>(s->block->data());
      bytes->assign(data, data + s->layout.staging);
      return PromiseWorker::Start(env, [] { return std::string(); }, resolve);
    }
    GpuRead* read = nullptr;
    const std::string error = gpu_read_block_start(s, &read);
    if (!error.empty()) return rejected(env, error);
    return PromiseWorker::Start(env, [read, bytes] { return gpu_read_block_wait(read, bytes.get()); }, resolve);
  }

  // Work in flight and captured graphs keep the sampler's memory until they are done with it.
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    sampler_.reset();
    return info.Env().Undefined();
  }

  Napi::Value Pointer(const Napi::CallbackInfo& info) {
    EngineSampler& s = live(info.Env(), "pointer");
    return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(s.block->data())));
  }

  Napi::Value Layout(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    EngineSampler& s = live(env, "layout");
    static const char* kNames[kRowFieldCount] = {"temperature",       "topK",           "topP",
                                                  "minP",              "seed",           "offset",
                                                  "repetitionPenalty", "frequencyPenalty", "presencePenalty",
                                                  "minTokens"};
    Napi::Object o = Napi::Object::New(env);
    for (int f = 0; f < kRowFieldCount; ++f) o.Set(kNames[f], static_cast<double>(s.layout.at[f]));
    o.Set("fallbackRows", static_cast<double>(s.layout.fallback));
    // the list tables: their capacities, and each column's offset where the table exists
    static const char* kCapacity[kListKinds] = {"penaltyCapacity", "logitBiasCapacity", "bannedCapacity"};
    static const char* kColumns[kListKinds][kListMaxColumns] = {
        {"penaltyTokenIds", "penaltyCounts", "penaltyInPrompt"}, {"logitBiasTokenIds", "logitBiasValues", nullptr},
        {"bannedTokenIds", nullptr, nullptr}};
    for (int k = 0; k < kListKinds; ++k) {
      const ListTable& t = s.layout.lists[k];
      o.Set(kCapacity[k], static_cast<double>(t.capacity));
      if (t.capacity < 1) continue;
      for (int c = 0; c < list_columns(k); ++c) o.Set(kColumns[k][c], static_cast<double>(t.columns[c]));
    }
    o.Set("unrecordedTokens", static_cast<double>(s.layout.unrecorded));
    o.Set("bytes", static_cast<double>(s.layout.staging));
    return o;
  }

  Napi::Value WorkspaceBytes(const Napi::CallbackInfo& info) {
    EngineSampler& s = live(info.Env(), "workspaceBytes");
    return Napi::Number::New(info.Env(), static_cast<double>(s.workspace ? s.workspace->bytes() : 0));
  }

  std::shared_ptr<EngineSampler> sampler_;
};

// captureBegin(ordinal, stream?)
Napi::Value CaptureBegin(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) throw_error(env, "captureBegin(ordinal, stream?): bad arguments");
  const std::string error =
      gpu_capture_begin(info[0].As<Napi::Number>().Int32Value(), stream_arg(info.Length() > 1 ? info[1] : env.Undefined(), "stream"));
  if (!error.empty()) throw_error(env, error);
  return env.Undefined();
}

// captureEnd(): NativeGraph
Napi::Value CaptureEnd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::shared_ptr<GpuGraph> graph;
  const std::string error = gpu_capture_end(&graph);
  if (!error.empty()) throw_error(env, error);
  Napi::Object object = g_graph_constructor->New({});
  NativeGraph::Unwrap(object)->graph = std::move(graph);
  return object;
}

Napi::Value CaptureAbort(const Napi::CallbackInfo& info) {
  gpu_capture_abort();
  return info.Env().Undefined();
}

Napi::Value Capturing(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), gpu_capturing()); }

// createStream(ordinal): bigint
Napi::Value CreateStream(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsNumber()) throw_error(env, "createStream(ordinal): bad arguments");
  uint64_t stream = 0;
  const std::string error = gpu_stream_create(info[0].As<Napi::Number>().Int32Value(), &stream);
  if (!error.empty()) throw_error(env, error);
  return Napi::BigInt::New(env, stream);
}

// destroyStream(ordinal, stream)
Napi::Value DestroyStream(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsNumber()) throw_error(env, "destroyStream(ordinal, stream): bad arguments");
  const std::string error = gpu_stream_destroy(info[0].As<Napi::Number>().Int32Value(), stream_arg(info[1], "stream"));
  if (!error.empty()) throw_error(env, error);
  return env.Undefined();
}

// synchronize(ordinal, stream?): Promise<void> once the stream's work so far is done.
Napi::Value Synchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) throw_error(env, "synchronize(ordinal, stream?): bad arguments");
  GpuRead* read = nullptr;
  const std::string error = gpu_synchronize_start(info[0].As<Napi::Number>().Int32Value(),
                                                  stream_arg(info.Length() > 1 ? info[1] : env.Undefined(), "stream"), &read);
  if (!error.empty()) return rejected(env, error);
  auto bytes = std::make_shared<std::vector<uint8_t>>();
  return PromiseWorker::Start(env, [read, bytes] { return gpu_read_block_wait(read, bytes.get()); },
                              [](Napi::Env env) -> Napi::Value { return env.Undefined(); });
}

}  // namespace

void register_engine(Napi::Env env, Napi::Object exports) {
  exports.Set("NativeSampler", NativeSampler::Define(env));
  exports.Set("NativeGraph", NativeGraph::Define(env));
  exports.Set("captureBegin", Napi::Function::New<CaptureBegin>(env, "captureBegin"));
  exports.Set("captureEnd", Napi::Function::New<CaptureEnd>(env, "captureEnd"));
  exports.Set("captureAbort", Napi::Function::New<CaptureAbort>(env, "captureAbort"));
  exports.Set("capturing", Napi::Function::New<Capturing>(env, "capturing"));
  exports.Set("createStream", Napi::Function::New<CreateStream>(env, "createStream"));
  exports.Set("destroyStream", Napi::Function::New<DestroyStream>(env, "destroyStream"));
  exports.Set("synchronize", Napi::Function::New<Synchronize>(env, "synchronize"));
}

}  // namespace binding
}  // namespace flashsample
