// sample(spec) and the benchmark entry points: a validated JS spec -> SampleParams -> the CPU
// backend on a worker thread, or the CUDA launchers on the JS thread (so stream order follows call
// order) with a worker thread waiting for completion.
#include <napi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "../cpu/cpu_sampler.h"
#include "../cuda/include/noise.h"
#include "../cuda/include/partial.h"
#include "cuda_api.h"
#include "napi_util.h"
#include "native_buffer.h"

namespace flashsample {
namespace binding {

namespace {

// Everything one call holds on to until it completes: the memory it reads and writes stays alive
// even if the JS side disposes the tensors meanwhile.
struct CallInputs {
  SamplerKind kind = SamplerKind::kFused;
  bool on_device = false;
  int ordinal = 0;
  SampleParams params;  // operand pointers and sizes; per-row pointers bound per backend
  HostRowInputs rows;
  bool want_logprobs = false;
  uint64_t stream = 0;
  std::vector<StorageRef> keep_alive;
  int32_t* out_tokens = nullptr;  // the `out` tensor's memory, or nullptr
  PartialSet partials{};          // mergePartials: the shards' blocks
};

uint64_t get_stream(const Napi::Object& spec) {
  Napi::Value v = spec.Get("stream");
  if (v.IsUndefined() || v.IsNull()) return 0;
  if (!v.IsBigInt()) throw_error(spec.Env(), "stream: expected a bigint cudaStream_t handle");
  bool lossless = false;
  const uint64_t handle = v.As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) throw_error(spec.Env(), "stream: expected a 64-bit handle");
  return handle;
}

// A per-row u64 array given either as BigUint64Array (host) or as a tensor's native buffer.
void read_u64_rows(const Napi::Object& spec, const char* name, size_t batch, CallInputs* call,
                   std::vector<uint64_t>* host, const uint64_t** device) {
  Napi::Value v = spec.Get(name);
  if (v.IsTypedArray()) {
    *host = get_array<uint64_t, napi_biguint64_array>(spec, name, batch);
    return;
  }
  StorageRef storage = NativeBuffer::storage_of(v, name);
  if (storage->bytes() < batch * 8) throw_error(spec.Env(), std::string(name) + ": tensor too small");
  call->keep_alive.push_back(storage);
  if (storage->kind() == MemoryKind::kHost) {
    const auto* data = static_cast<const uint64_t*>(storage->data());
    host->assign(data, data + batch);
  } else {
    *device = static_cast<const uint64_t*>(storage->data());
  }
}

// A list given as tensors, spec[name] = {offsets, tokens, values?, counts?, inPrompt?, entries}
// (lib/options.ts checked their dtypes, devices and sizes, not their contents): host tensors are
// copied into the row vectors, device tensors used where they live; either way unchecked. Returns
// whether the list was given so.
bool read_tensor_list(const Napi::Object& spec, const char* name, size_t batch, CallInputs* call,
                      std::vector<int32_t>* offsets, std::vector<int32_t>* tokens, std::vector<float>* values,
                      std::vector<int32_t>* counts, std::vector<uint8_t>* in_prompt, HostRowInputs::DeviceList* device) {
  Napi::Value v = spec.Get(name);
  if (v.IsUndefined()) return false;
  if (!v.IsObject()) throw_error(spec.Env(), std::string(name) + ": expected the list's tensors");
  const Napi::Object o = v.As<Napi::Object>();
  const size_t n = static_cast<size_t>(get_int(o, "entries", 0, INT32_MAX));
  call->rows.lists_unchecked = true;
  auto field = [&](const char* f, size_t elems) -> const void* {
    Napi::Value fv = o.Get(f);
    if (fv.IsUndefined()) return nullptr;
    StorageRef s = NativeBuffer::storage_of(fv, name);
    if (s->bytes() < elems * 4) throw_error(spec.Env(), std::string(name) + "." + f + ": tensor too small");
    if ((s->kind() == MemoryKind::kDevice) != call->on_device) {
      throw_error(spec.Env(), std::string(name) + ": tensors on another device than the call's");
    }
    call->keep_alive.push_back(s);
    return s->data();
  };
  const auto* o32 = static_cast<const int32_t*>(field("offsets", batch + 1));
  const auto* t32 = static_cast<const int32_t*>(field("tokens", n));
  const auto* vf = static_cast<const float*>(field("values", n));
  const auto* c32 = static_cast<const int32_t*>(field("counts", n));
  const auto* p32 = static_cast<const int32_t*>(field("inPrompt", n));
  if (o32 == nullptr || t32 == nullptr) throw_error(spec.Env(), std::string(name) + ": offsets and tokens are required");
  if (call->on_device) {
    *device = HostRowInputs::DeviceList{o32, t32, vf, c32, p32, static_cast<int64_t>(n)};
    return true;
  }
  offsets->assign(o32, o32 + batch + 1);
  tokens->assign(t32, t32 + n);
  if (vf != nullptr && values != nullptr) values->assign(vf, vf + n);
  if (c32 != nullptr && counts != nullptr) counts->assign(c32, c32 + n);
  if (p32 != nullptr && in_prompt != nullptr) {
    in_prompt->resize(n);
    for (size_t i = 0; i < n; ++i) (*in_prompt)[i] = p32[i] != 0 ? 1 : 0;
  }
  return true;
}

// `merge`: a mergePartials spec (no operands; the partial blocks instead).
std::unique_ptr<CallInputs> parse_spec(const Napi::Object& spec, bool merge = false) {
  Napi::Env env = spec.Env();
  auto call = std::make_unique<CallInputs>();
  call->kind = static_cast<SamplerKind>(get_int(spec, "kind", 0, 2));
  call->on_device = get_int(spec, "device", 0, 1) == 1;
  call->ordinal = static_cast<int>(get_int(spec, "ordinal", 0, 63));
  SampleParams& p = call->params;
  p.dtype = static_cast<DType>(get_int(spec, "dtype", 0, 2));
  p.batch = get_int(spec, "batch", 1, kMaxBatch);
  p.vocab = get_int(spec, "vocab", 1, INT32_MAX - 1);
  p.dim = get_int(spec, "dim", 1, INT32_MAX);
  p.num_samples = static_cast<int32_t>(get_int(spec, "numSamples", 1, kMaxSamples));
  p.per_row_seed = get_bool(spec, "perRowSeed");
  p.softcap = static_cast<float>(get_number(spec, "softcap", 0.0));
  p.top_logprobs = static_cast<int32_t>(get_int(spec, "topLogprobs", 0, 1 << 20));
  if (!spec.Get("logprobsMode").IsUndefined()) p.raw_logprobs = static_cast<int32_t>(get_int(spec, "logprobsMode", 0, 1));
  if (!spec.Get("filterOrder").IsUndefined()) {
    p.filter_order = static_cast<FilterOrder>(get_int(spec, "filterOrder", 0, 1));
  }
  call->want_logprobs = get_bool(spec, "logprobs");
  call->stream = get_stream(spec);

  const size_t B = static_cast<size_t>(p.batch);
  const size_t elem = dtype_bytes(p.dtype);
  auto operand = [&](const char* name, size_t elements) -> const void* {
    StorageRef s = NativeBuffer::storage_of(spec.Get(name), name);
    if (s->bytes() < elements * elem) {
      throw_error(env, std::string(name) + ": the tensor holds " + std::to_string(s->bytes()) +
                           " bytes, expected at least " + std::to_string(elements * elem));
    }
    if ((s->kind() == MemoryKind::kDevice) != call->on_device) {
      throw_error(env, std::string(name) + ": the tensor lives on another device");
    }
    call->keep_alive.push_back(s);
    return s->data();
  };
  if (!merge) {
    p.hidden = operand("hidden", B * static_cast<size_t>(p.dim));
    p.weight = operand("weight", static_cast<size_t>(p.vocab) * static_cast<size_t>(p.dim));
    if (!spec.Get("bias").IsUndefined()) p.bias = operand("bias", static_cast<size_t>(p.vocab));
  }
  // Vocabulary shards (lib/parallel.ts checked the ranges).
  p.options_hash = get_u64(spec, "optionsHash");
  if (!spec.Get("partial").IsUndefined()) {
    p.vocab_offset = get_int(spec, "vocabOffset", 0, INT32_MAX - 1);
    p.vocab_total = get_int(spec, "vocabTotal", 1, INT32_MAX - 1);
    p.partial_capacity = static_cast<int32_t>(get_int(spec, "partialCapacity", 0, kMaxPartialCapacity));
    p.partial_max_batch = static_cast<int32_t>(get_int(spec, "partialMaxBatch", p.batch, kMaxBatch));
    p.listed_global_ids = get_bool(spec, "listedGlobalIds");
    if (p.vocab_offset % 4 != 0 || p.vocab_offset + p.vocab > p.vocab_total)
      throw_error(env, "vocabOffset: expected a multiple of 4 with vocabOffset + V <= vocabSize");
    StorageRef s = NativeBuffer::storage_of(spec.Get("partial"), "partial");
    // (logprobsMode 'raw': each row carries its raw section; p.logprobs is bound below)
    const int32_t raw_top = p.raw_logprobs != 0 && (call->want_logprobs || p.top_logprobs > 0) ? p.top_logprobs : -1;
    if (s->bytes() < partial_bytes(p.partial_max_batch, p.num_samples, p.partial_capacity, raw_top))
      throw_error(env, "partial: the tensor is smaller than the partial state");
    if ((s->kind() == MemoryKind::kDevice) != call->on_device) throw_error(env, "partial: the tensor lives on another device");
    call->keep_alive.push_back(s);
    p.partial = s->data();
  }
  // The rows pass (lib/parallel.ts built the rows and sized the segments): a shard call writes its
  // segment (rowValues, one), a decide call (merge) reads valueSegments of them.
  if (!spec.Get("rowValues").IsUndefined()) {
    p.value_row_count = get_int(spec, "valueRowCount", 1, p.batch);
    p.value_pitch = get_int(spec, "valuePitch", merge ? 1 : p.vocab, INT32_MAX);
    p.value_segments = merge ? static_cast<int32_t>(get_int(spec, "valueSegments", 1, kMaxShards)) : 1;
    if (!merge && p.partial == nullptr) throw_error(env, "rowValues: expected a shard call (partial)");
    StorageRef values = NativeBuffer::storage_of(spec.Get("rowValues"), "rowValues");
    StorageRef rows = NativeBuffer::storage_of(spec.Get("valueRows"), "valueRows");
    // (logprobsMode 'raw': the segments carry the rows' raw logits too; p.logprobs is bound below)
    const bool raw = p.raw_logprobs != 0 && (call->want_logprobs || p.top_logprobs > 0);
    if (values->bytes() < static_cast<size_t>(p.value_segments) * row_values_bytes(p.value_row_count, p.value_pitch, raw))
      throw_error(env, "rowValues: the tensor is smaller than its segments");
    if (rows->bytes() < static_cast<size_t>(p.value_row_count) * 4) throw_error(env, "valueRows: the tensor is too small");
    for (const StorageRef& s : {values, rows}) {
      if ((s->kind() == MemoryKind::kDevice) != call->on_device)
        throw_error(env, "rowValues, valueRows: tensors on another device than the call's");
      call->keep_alive.push_back(s);
    }
    p.row_values = values->data();
    p.value_rows = static_cast<const int32_t*>(rows->data());
  }
  if (merge && p.row_values == nullptr) {
    Napi::Value list = spec.Get("partials");
    if (!list.IsArray()) throw_error(env, "partials: expected an array");
    Napi::Array blocks = list.As<Napi::Array>();
    if (blocks.Length() < 1 || blocks.Length() > static_cast<uint32_t>(kMaxShards))
      throw_error(env, "partials: expected 1 .. 64 partial states");
    // partialStride: one buffer of `partialCount` blocks of that many bytes (an all-gather's output).
    const int64_t stride = spec.Get("partialStride").IsUndefined() ? 0 : get_int(spec, "partialStride", 64, INT64_MAX / 2);
    const int64_t count = stride ? get_int(spec, "partialCount", 1, kMaxShards) : blocks.Length();
    for (int64_t i = 0; i < count; ++i) {
      StorageRef s = NativeBuffer::storage_of(blocks.Get(stride ? 0u : static_cast<uint32_t>(i)), "partials[]");
      if ((s->kind() == MemoryKind::kDevice) != call->on_device)
        throw_error(env, "partials[" + std::to_string(i) + "]: the tensor lives on another device");
      if (stride && s->bytes() < static_cast<size_t>(stride * count))
        throw_error(env, "partials: the buffer is smaller than partialCount x partialStride");
      call->keep_alive.push_back(s);
      call->partials.blocks[i] = static_cast<const uint8_t*>(s->data()) + i * stride;
      call->partials.bytes[i] = stride ? static_cast<uint64_t>(stride) : s->bytes();
    }
    call->partials.count = static_cast<int32_t>(count);
  }

  HostRowInputs& rows = call->rows;
  rows.temperature = get_array<float, napi_float32_array>(spec, "temperature", B);
  if (rows.temperature.empty()) throw_error(env, "temperature: expected a Float32Array");
  read_u64_rows(spec, "seed", B, call.get(), &rows.seed, &rows.device_seed);
  read_u64_rows(spec, "offset", B, call.get(), &rows.offset, &rows.device_offset);
  rows.top_k = get_array<int32_t, napi_int32_array>(spec, "topK", B);
  rows.top_p = get_array<float, napi_float32_array>(spec, "topP", B);
  rows.min_p = get_array<float, napi_float32_array>(spec, "minP", B);
  const size_t words = B * static_cast<size_t>((p.vocab + 31) / 32);
  Napi::Value allowed = spec.Get("allowed");
  if (allowed.IsTypedArray()) {
    rows.allowed = get_array<uint32_t, napi_uint32_array>(spec, "allowed", words);
  } else if (!allowed.IsUndefined()) {
    StorageRef s = NativeBuffer::storage_of(allowed, "allowedTokens");
    if (s->bytes() < words * 4) throw_error(env, "allowedTokens: tensor too small");
    call->keep_alive.push_back(s);
    if (s->kind() == MemoryKind::kHost) {
      const auto* data = static_cast<const uint32_t*>(s->data());
      rows.allowed.assign(data, data + words);
    } else {
      rows.device_allowed = static_cast<const uint32_t*>(s->data());
    }
  }
  // Sparse per-row lists (lib/options.ts checked offsets, ids and lengths).
  rows.bias_offsets = get_array<int32_t, napi_int32_array>(spec, "biasOffsets", B + 1);
  rows.bias_tokens = get_whole_array<int32_t, napi_int32_array>(spec, "biasTokens");
  rows.bias_values = get_whole_array<float, napi_float32_array>(spec, "biasValues");
  rows.banned_offsets = get_array<int32_t, napi_int32_array>(spec, "bannedOffsets", B + 1);
  rows.banned_tokens = get_whole_array<int32_t, napi_int32_array>(spec, "bannedTokens");
  rows.penalty_offsets = get_array<int32_t, napi_int32_array>(spec, "penaltyOffsets", B + 1);
  rows.penalty_tokens = get_whole_array<int32_t, napi_int32_array>(spec, "penaltyTokens");
  rows.penalty_counts = get_whole_array<int32_t, napi_int32_array>(spec, "penaltyCounts");
  rows.penalty_in_prompt = get_whole_array<uint8_t, napi_uint8_array>(spec, "penaltyInPrompt");
  rows.repetition_penalty = get_array<float, napi_float32_array>(spec, "repetitionPenalty", B);
  rows.frequency_penalty = get_array<float, napi_float32_array>(spec, "frequencyPenalty", B);
  rows.presence_penalty = get_array<float, napi_float32_array>(spec, "presencePenalty", B);
  const bool bias_tensors = read_tensor_list(spec, "biasList", B, call.get(), &rows.bias_offsets, &rows.bias_tokens,
                                             &rows.bias_values, nullptr, nullptr, &rows.device_bias);
  const bool banned_tensors = read_tensor_list(spec, "bannedList", B, call.get(), &rows.banned_offsets,
                                               &rows.banned_tokens, nullptr, nullptr, nullptr, &rows.device_banned);
  const bool penalty_tensors =
      read_tensor_list(spec, "penaltyList", B, call.get(), &rows.penalty_offsets, &rows.penalty_tokens, nullptr,
                       &rows.penalty_counts, &rows.penalty_in_prompt, &rows.device_penalty);
  // A list given as tensors is checked by the table kernel or the CPU backend; the others here.
  auto check_csr = [&](bool tensors, const std::vector<int32_t>& offsets, size_t entries, const char* name) {
    if (tensors) return;
    if (!offsets.empty() && (offsets.front() != 0 || static_cast<size_t>(offsets.back()) != entries))
      throw_error(env, std::string(name) + ": offsets do not match the entries");
  };
  check_csr(bias_tensors, rows.bias_offsets, rows.bias_tokens.size(), "logitBias");
  if (rows.bias_values.size() != rows.bias_tokens.size()) throw_error(env, "logitBias: values and tokenIds differ in length");
  check_csr(banned_tensors, rows.banned_offsets, rows.banned_tokens.size(), "bannedTokens");
  check_csr(penalty_tensors, rows.penalty_offsets, rows.penalty_tokens.size(), "penaltyTokens");
  if (rows.penalty_counts.size() != rows.penalty_tokens.size() || rows.penalty_in_prompt.size() != rows.penalty_tokens.size())
    throw_error(env, "penaltyTokens: outputCounts, inPrompt and tokenIds differ in length");
  p.listed_entries = static_cast<int64_t>(rows.bias_tokens.size() + rows.banned_tokens.size() + rows.penalty_tokens.size()) +
                     rows.device_bias.entries + rows.device_banned.entries + rows.device_penalty.entries;
  Napi::Value out = spec.Get("out");
  if (!out.IsUndefined()) {
    StorageRef s = NativeBuffer::storage_of(out, "out");
    if (s->bytes() < B * static_cast<size_t>(p.num_samples) * 4) {
      throw_error(env, "out: the tensor is smaller than batch * numSamples int32 tokens");
    }
    call->keep_alive.push_back(s);
    call->out_tokens = static_cast<int32_t*>(s->data());
  }
  if (!call->on_device && (rows.device_seed || rows.device_offset || rows.device_allowed)) {
    throw_error(env, "seed/offset/allowedTokens: device tensors cannot feed the CPU backend");
  }
  // Marks which outputs are wanted; the backends bind the real pointers.
  static float logprobs_marker;
  p.logprobs = call->want_logprobs ? &logprobs_marker : nullptr;
  return call;
}

// Points the per-row fields of `p` at the host vectors of `rows` and the outputs at `out`.
void bind_host(SampleParams* p, const HostRowInputs& rows, bool want_logprobs, int32_t* out_tokens,
               GpuOutputs* out) {
  const size_t B = static_cast<size_t>(p->batch), S = static_cast<size_t>(p->num_samples);
  const size_t n = static_cast<size_t>(p->top_logprobs);
  bind_row_inputs(p, rows, RowInputSlots{}, [](const auto& v, size_t) { return v.data(); });
  if (!out_tokens) out->tokens.assign(B * S, -1);
  p->tokens = out_tokens ? out_tokens : out->tokens.data();
  out->row_status.assign(B, kRowOk);
  p->row_status = out->row_status.data();
  if (want_logprobs) out->logprobs.assign(B * S, 0.0f);
  p->logprobs = want_logprobs ? out->logprobs.data() : nullptr;
  out->top_tokens.assign(B * n, -1);
  out->top_logprobs.assign(B * n, 0.0f);
  p->top_tokens = n ? out->top_tokens.data() : nullptr;
  p->top_token_logprobs = n ? out->top_logprobs.data() : nullptr;
  out->fallback_rows = 0;
  p->fallback_rows = &out->fallback_rows;
}

std::string run_cpu(SamplerKind kind, const SampleParams& p) {
  switch (kind) {
    case SamplerKind::kFused:
      return cpu::sample_fused(p, 0);
    case SamplerKind::kReferenceGumbel:
      return cpu::sample_reference(p, ReferenceMethod::kGumbel, 0);
    case SamplerKind::kReferenceInverseCdf:
      return cpu::sample_reference(p, ReferenceMethod::kInverseCdf, 0);
  }
  return "unknown sampler";
}

Napi::Value results_to_js(Napi::Env env, const GpuOutputs& out, bool tokens_on_output) {
  Napi::Object result = Napi::Object::New(env);
  if (!tokens_on_output) {
    result.Set("tokens", to_typed_array<int32_t, napi_int32_array>(env, out.tokens));
  }
  result.Set("rowStatus", to_typed_array<int32_t, napi_int32_array>(env, out.row_status));
  if (!out.logprobs.empty()) {
    result.Set("logprobs", to_typed_array<float, napi_float32_array>(env, out.logprobs));
  }
  if (!out.top_tokens.empty()) {
    result.Set("topTokens", to_typed_array<int32_t, napi_int32_array>(env, out.top_tokens));
    result.Set("topLogprobs", to_typed_array<float, napi_float32_array>(env, out.top_logprobs));
  }
  result.Set("fallbackRows", Napi::Number::New(env, out.fallback_rows));
  return result;
}

// sample(spec): Promise<{tokens?, rowStatus, logprobs?, topTokens?, topLogprobs?, fallbackRows}>
Napi::Value Sample(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsObject()) throw_error(env, "sample(spec): expected an object");
  std::shared_ptr<CallInputs> call = parse_spec(info[0].As<Napi::Object>());
  if (call->on_device && gpu_capturing()) {
    throw_error(env, "sampleFused: cannot run during graph capture (captureGraph): it allocates, copies "
                     "from the host and waits for the GPU; use a sampler's enqueue");
  }
  auto results = std::make_shared<GpuOutputs>();
  const bool tokens_on_output = call->out_tokens != nullptr;

  if (!call->on_device) {
    return PromiseWorker::Start(
        env,
        [call, results]() -> std::string {
          SampleParams p = call->params;
          bind_host(&p, call->rows, call->want_logprobs, call->out_tokens, results.get());
          const std::string error = run_cpu(call->kind, p);
          // lists given as tensors: their invalid rows, as the CUDA table kernel reports them
          if (error.empty() && call->rows.lists_unchecked) {
            std::vector<int32_t> invalid(static_cast<size_t>(p.batch));
            cpu::find_invalid_lists(p, invalid.data());
            for (size_t b = 0; b < invalid.size(); ++b)
              if (invalid[b]) p.row_status[b] = kRowListInvalid;
          }
          return error;
        },
        [results, tokens_on_output](Napi::Env env) {
          return results_to_js(env, *results, tokens_on_output);
        });
  }

  GpuCall* gpu_call = nullptr;
  const std::string error =
      gpu_launch_sample(call->ordinal, call->kind, call->params, call->rows, call->out_tokens,
                        call->stream, &gpu_call);
  if (!error.empty()) return rejected(env, error);
  return PromiseWorker::Start(
      env,
      [call, results, gpu_call]() -> std::string { return gpu_wait(gpu_call, results.get()); },
      [call, results, tokens_on_output](Napi::Env env) {
        return results_to_js(env, *results, tokens_on_output);
      });
}

// mergePartials(spec): Promise<{tokens, rowStatus, logprobs?, topTokens?, topLogprobs?,
// mergeError, mergeWhich, largestShard}>: the shards' partial states merged as the unsharded call
// draws; with spec.rowValues, the rows pass's decision over the shards' segments instead (only the
// rows in valueRows are written).
Napi::Value MergePartials(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsObject()) throw_error(env, "mergePartials(spec): expected an object");
  std::shared_ptr<CallInputs> call = parse_spec(info[0].As<Napi::Object>(), true);
  auto results = std::make_shared<GpuOutputs>();
  auto to_js = [results](Napi::Env env) {
    Napi::Object out = results_to_js(env, *results, false).As<Napi::Object>();
    out.Set("mergeError", Napi::Number::New(env, results->merge_error));
    out.Set("mergeWhich", Napi::Number::New(env, results->merge_which));
    out.Set("largestShard", Napi::Number::New(env, results->merge_largest_shard));
    return out;
  };
  if (!call->on_device) {
    return PromiseWorker::Start(
        env,
        [call, results]() -> std::string {
          SampleParams p = call->params;
          bind_host(&p, call->rows, call->want_logprobs, nullptr, results.get());
          int32_t status[3] = {0, 0, 0};
          const std::string error = p.row_values != nullptr ? cpu::decide_row_values(p, 0)
                                                             : cpu::merge_partials(p, call->partials, status, 0);
          results->merge_error = status[0];
          results->merge_which = status[1];
          results->merge_largest_shard = status[2];
          return error;
        },
        to_js);
  }
  if (gpu_capturing()) throw_error(env, "mergePartials: cannot run during graph capture: it copies results to the host");
  GpuCall* gpu_call = nullptr;
  const std::string error =
      gpu_launch_merge(call->ordinal, call->params, call->rows, call->partials, call->stream, &gpu_call);
  if (!error.empty()) return rejected(env, error);
  return PromiseWorker::Start(
      env, [call, results, gpu_call]() -> std::string { return gpu_wait(gpu_call, results.get()); }, to_js);
}

// timeSampler(spec, inputs: {hidden, weight}[], warmup, iters): Promise<Float64Array> of
// microseconds per call. CUDA: events around each launch. CPU: steady clock around each call.
Napi::Value TimeSampler(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 4 || !info[0].IsObject() || !info[1].IsArray() || !info[2].IsNumber() ||
      !info[3].IsNumber()) {
    throw_error(env, "timeSampler(spec, inputs, warmup, iters): bad arguments");
  }
  std::shared_ptr<CallInputs> call = parse_spec(info[0].As<Napi::Object>());
  if (call->on_device && gpu_capturing()) throw_error(env, "timeSampler: cannot run during graph capture");
  const int warmup = info[2].As<Napi::Number>().Int32Value();
  const int iters = info[3].As<Napi::Number>().Int32Value();
  if (iters < 1 || warmup < 0) throw_error(env, "iters: expected >= 1 (and warmup >= 0)");
  auto inputs = info[1].As<Napi::Array>();
  auto params = std::make_shared<std::vector<SampleParams>>();
  const size_t elem = dtype_bytes(call->params.dtype);
  for (uint32_t i = 0; i < inputs.Length(); ++i) {
    Napi::Object pair = inputs.Get(i).As<Napi::Object>();
    StorageRef h = NativeBuffer::storage_of(pair.Get("hidden"), "inputs[].hidden");
    StorageRef w = NativeBuffer::storage_of(pair.Get("weight"), "inputs[].weight");
    if (h->bytes() < static_cast<size_t>(call->params.batch * call->params.dim) * elem ||
        w->bytes() < static_cast<size_t>(call->params.vocab * call->params.dim) * elem) {
      throw_error(env, "inputs[" + std::to_string(i) + "]: tensors smaller than the shape");
    }
    call->keep_alive.push_back(h);
    call->keep_alive.push_back(w);
    SampleParams p = call->params;
    p.hidden = h->data();
    p.weight = w->data();
    params->push_back(p);
  }
  if (params->empty()) throw_error(env, "inputs: expected at least one {hidden, weight} pair");
  auto micros = std::make_shared<std::vector<double>>();
  return PromiseWorker::Start(
      env,
      [call, params, micros, warmup, iters]() -> std::string {
        if (call->on_device) {
          return gpu_time_sampler(call->ordinal, call->kind, *params, call->rows, warmup, iters,
                                  micros.get());
        }
        GpuOutputs scratch;
        micros->clear();
        for (int i = 0; i < warmup + iters; ++i) {
          SampleParams p = (*params)[static_cast<size_t>(i) % params->size()];
          bind_host(&p, call->rows, call->want_logprobs, nullptr, &scratch);
          const auto start = std::chrono::steady_clock::now();
          std::string error = run_cpu(call->kind, p);
          const auto stop = std::chrono::steady_clock::now();
          if (!error.empty()) return error;
          if (i >= warmup) {
            micros->push_back(std::chrono::duration<double, std::micro>(stop - start).count());
          }
        }
        return "";
      },
      [micros](Napi::Env env) -> Napi::Value {
        auto out = Napi::Float64Array::New(env, micros->size());
        std::copy(micros->begin(), micros->end(), out.Data());
        return out;
      });
}

// readBandwidth(ordinal, bytes, iters): Promise<number> bytes per second (CUDA only).
Napi::Value ReadBandwidth(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 3 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber()) {
    throw_error(env, "readBandwidth(ordinal, bytes, iters): expected three numbers");
  }
  const int ordinal = info[0].As<Napi::Number>().Int32Value();
  const size_t bytes = static_cast<size_t>(info[1].As<Napi::Number>().DoubleValue());
  const int iters = std::max(1, info[2].As<Napi::Number>().Int32Value());
  auto result = std::make_shared<double>(0.0);
  return PromiseWorker::Start(
      env, [=]() { return gpu_read_bandwidth(ordinal, bytes, iters, result.get()); },
      [result](Napi::Env env) -> Napi::Value { return Napi::Number::New(env, *result); });
}

}  // namespace

void register_sample(Napi::Env env, Napi::Object exports) {
  exports.Set("sample", Napi::Function::New<Sample>(env, "sample"));
  exports.Set("mergePartials", Napi::Function::New<MergePartials>(env, "mergePartials"));
  exports.Set("timeSampler", Napi::Function::New<TimeSampler>(env, "timeSampler"));
  exports.Set("readBandwidth", Napi::Function::New<ReadBandwidth>(env, "readBandwidth"));
}

}  // namespace binding
}  // namespace flashsample
