// launch_fused_sample: the LM-head GEMM + Gumbel-max sampler that never materializes [B, V].
//
// Options beyond temperature (filters, logprobs, masks, softcap, listed tokens) go to
// launch_fused_filtered (filters.cu; calls that need no statistics there take this file's kernel
// with the transforms in its epilogue, launch_transformed_gemm); a vocabulary shard's, and the rows
// pass's shard call, to launch_partial_sample (partial.cu).
// Otherwise three kernels:
//   1. clear_winners_kernel zeroes one 64-bit winner word per (row, sample) (a kernel rather than a
//      memset so that the GEMM can be launched programmatically after it), unless the stream's
//      words are already zero (StreamWords below);
//   2. the GEMM with the sampling epilogue (dispatch.cuh picks kernel and tile): each vocabulary
//      tile's logits are computed on chip, perturbed with the Philox Gumbel noise of noise.h, and
//      each (row, sample) winner is merged into its word with an order-preserving atomicMax (score
//      ties go to the smaller index, as candidate_better says);
//   3. finalize_kernel unpacks the words into tokens and row statuses (a vocabulary shard's
//      finalize_partial_kernel into its partial state: the epilogue offered global token ids), and
//      zeroes each word it read.
// Workspace: [B, numSamples] 64-bit words (Scratch: the caller's block or stream-ordered).
// Also here: the engine samplers' row-parameter kernels (scatter of staged rows, offset advance).
#include <cuda_runtime.h>

#include <array>
#include <climits>
#include <mutex>

#include "dispatch.cuh"
#include "internal_launchers.h"
#include "include/launchers.h"
#include "include/partial.h"

namespace flashsample {
namespace cuda {
namespace {

// 0 = no candidate. Lets the GEMM grid (launched programmatically after it) start at once: the
// GEMM waits for this grid's completion before its first winner write.
__global__ void clear_winners_kernel(unsigned long long* __restrict__ winners, int64_t n) {
  detail::griddep_launch_dependents();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) winners[i] = 0ull;
}

__global__ void finalize_kernel(unsigned long long* __restrict__ winners, int64_t batch,
                                int32_t num_samples, int32_t* __restrict__ tokens,
                                int32_t* __restrict__ row_status) {
  detail::griddep_wait();  // launched programmatically: the GEMM grid's winners are complete
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= batch * num_samples) return;
  const unsigned long long w = winners[i];
  winners[i] = 0ull;  // the next call on a stream with StreamWords needs no zeroing
  tokens[i] = detail::packed_token(w);
  if (row_status != nullptr && i % num_samples == 0)
    row_status[i / num_samples] = w == 0ull ? kRowNoCandidate : kRowOk;
}

// A shard's partial state from the winners (include/partial.h): no statistics, no candidates.
__global__ void finalize_partial_kernel(unsigned long long* __restrict__ winners, SampleParams p) {
  detail::griddep_wait();
  PartialHeader h;
  init_partial_header(&h, static_cast<int32_t>(p.batch), p.partial_max_batch, p.num_samples, 0, p.options_hash,
                      p.vocab_offset, p.vocab, p.vocab_total > 0 ? p.vocab_total : p.vocab, false);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i == 0) *static_cast<PartialHeader*>(p.partial) = h;
  if (i >= p.batch * p.num_samples) return;
  const int64_t b = i / p.num_samples, j = i % p.num_samples;
  const PartialRowView v = partial_row(p.partial, h, b);
  const unsigned long long w = winners[i];
  winners[i] = 0ull;
  const uint32_t key = w == 0ull ? kNoToken
                                 : static_cast<uint32_t>(detail::packed_token(w)) | (static_cast<uint32_t>(w >> 63) << 31);
  v.winners[j] = PartialWinner{detail::packed_score(w), key, 0.0f, 0u};
  if (j == 0) *v.row = PartialRow{-INFINITY, 0.0, 0, 0, 0, 1};
}

__global__ void scatter_rows_kernel(RowScatter s) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= s.count) return;
  for (int f = 0; f < kRowFields; ++f) {
    if (!(s.fields & (1u << f))) continue;
    const uint8_t* src = s.staging + s.staging_at[f] + i * s.elem_bytes[f];
    uint8_t* dst = s.dst[f] + (s.first + i) * s.elem_bytes[f];
    if (s.elem_bytes[f] == 8)
      *reinterpret_cast<uint64_t*>(dst) = *reinterpret_cast<const uint64_t*>(src);
    else
      *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(src);
  }
}

__global__ void advance_offsets_kernel(uint64_t* __restrict__ offset, int64_t batch) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < batch) offset[i] += 1;
}

// One block per row (launch_record_tokens).
constexpr int kRecordThreads = 128;

// Counts `token` in row b's penalty table: the slot holding it, else the first free one (the
// smallest index either way, so that a table the engine wrote with gaps fills in order).
__device__ __forceinline__ void record_in_table(const RecordTargets& t, int64_t b, int32_t token, int32_t* row_status) {
  const int64_t row = b * t.capacity;
  __shared__ int s_found, s_free;
  if (threadIdx.x == 0) s_found = s_free = INT_MAX;
  __syncthreads();
  for (int i = threadIdx.x; i < t.capacity; i += kRecordThreads) {
    const int32_t id = t.tokens[row + i];
    if (id == token) atomicMin(&s_found, i);
    if (id < 0) atomicMin(&s_free, i);
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (s_found != INT_MAX) {
    t.counts[row + s_found] += 1;
  } else if (s_free != INT_MAX) {
    t.tokens[row + s_free] = token;
    t.counts[row + s_free] = 1;
    t.in_prompt[row + s_free] = 0;
  } else {
    if (row_status != nullptr) row_status[b] = kRowTableFull;
    atomicAdd(t.unrecorded, 1);
  }
}

__global__ void __launch_bounds__(kRecordThreads)
    record_tokens_kernel(RecordTargets t, const int32_t* __restrict__ drawn, int32_t* row_status) {
  const int64_t b = blockIdx.x;
  const int32_t token = t.record ? drawn[b] : -1;
  if (threadIdx.x == 0 && token >= 0 && t.min_tokens != nullptr && t.min_tokens[b] > 0) t.min_tokens[b] -= 1;
  if (token >= 0 && t.capacity > 0) record_in_table(t, b, token, row_status);
  if (threadIdx.x == 0 && row_status != nullptr && t.list_invalid != nullptr && t.list_invalid[b] != 0)
    row_status[b] = kRowListInvalid;
}

// Winner words kept zeroed between the plain calls on a stream: the finalize kernels zero each word
// they read, so the next call needs no zeroing kernel (H200, B = 1: gpt2's head 25.6 -> 24.4 us,
// qwen3-0.6b 76.7 -> 75.6, llama3-8b 241.5 -> 240.3).
// Keyed by (device, stream id): ids are never reused, so a foreign stream destroyed and a new one
// at its handle do not share words. Streams under capture zero their own (a graph must not bake in
// words that stream calls also use); past kMaxWordStreams streams, so do the others.
struct StreamWords {
  int device = -1;
  unsigned long long id = 0;
  unsigned long long* words = nullptr;
  int64_t count = 0;
  bool dirty = false;  // a call took them and has not enqueued its finalize: zero them first
};
constexpr size_t kMaxWordStreams = 64;
std::mutex g_words_mutex;
std::array<StreamWords, kMaxWordStreams> g_words;

cudaError_t stream_identity(cudaStream_t stream, int* device, unsigned long long* id) {
  cudaError_t err = cudaGetDevice(device);
  return err == cudaSuccess ? cudaStreamGetId(stream, id) : err;
}

// *out: `stream`'s zeroed words for n, marked taken (give_stream_words when the finalize is
// enqueued); nullptr when the caller must zero its own.
cudaError_t take_stream_words(cudaStream_t stream, int64_t n, StreamWords** out) {
  *out = nullptr;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(stream, &capture);
  if (err != cudaSuccess || capture != cudaStreamCaptureStatusNone) return err;
  int device = 0;
  unsigned long long id = 0;
  if ((err = stream_identity(stream, &device, &id)) != cudaSuccess) return err;
  std::lock_guard<std::mutex> lock(g_words_mutex);
  StreamWords* s = nullptr;
  StreamWords* unused = nullptr;
  for (StreamWords& e : g_words) {
    if (e.device == device && e.id == id) {
      s = &e;
      break;
    }
    if (unused == nullptr && e.device < 0) unused = &e;
  }
  if (s == nullptr && unused != nullptr) {
    s = unused;
    *s = StreamWords{};
    s->device = device;
    s->id = id;
  }
  if (s == nullptr) return cudaSuccess;
  if (n > s->count) {  // stream-ordered, as every use of them
    const int64_t grown = n > 2 * s->count ? n : 2 * s->count;
    const int64_t count = grown > 512 ? grown : 512;
    if (s->words != nullptr && (err = cudaFreeAsync(s->words, stream)) != cudaSuccess) return err;
    s->words = nullptr;
    s->count = 0;
    if ((err = cudaMallocAsync(reinterpret_cast<void**>(&s->words), count * sizeof(unsigned long long), stream)) !=
        cudaSuccess)
      return err;
    s->count = count;
    s->dirty = true;
  }
  if (s->dirty && (err = cudaMemsetAsync(s->words, 0, s->count * sizeof(unsigned long long), stream)) != cudaSuccess)
    return err;
  s->dirty = true;
  *out = s;
  return cudaSuccess;
}

// The call that took s enqueued its finalize (clean) or failed before (the next call zeroes them).
void give_stream_words(StreamWords* s, bool clean) {
  if (s == nullptr) return;
  std::lock_guard<std::mutex> lock(g_words_mutex);
  s->dirty = !clean;
}

}  // namespace

cudaError_t launch_record_tokens(const RecordTargets& t, const int32_t* drawn, int64_t batch, int32_t* row_status,
                                 cudaStream_t stream) {
  const bool table = t.capacity > 0;
  if ((table && (t.tokens == nullptr || t.counts == nullptr || t.in_prompt == nullptr || t.unrecorded == nullptr)) ||
      t.capacity < 0 || (t.record && drawn == nullptr) || batch < 1)
    return cudaErrorInvalidValue;
  record_tokens_kernel<<<static_cast<unsigned>(batch), kRecordThreads, 0, stream>>>(t, drawn, row_status);
  return cudaGetLastError();
}

cudaError_t launch_scatter_rows(const RowScatter& s, cudaStream_t stream) {
  if (s.count < 1 || s.first < 0 || s.staging == nullptr) return cudaErrorInvalidValue;
  for (int f = 0; f < kRowFields; ++f) {
    if ((s.fields & (1u << f)) && (s.dst[f] == nullptr || (s.elem_bytes[f] != 4 && s.elem_bytes[f] != 8)))
      return cudaErrorInvalidValue;
  }
  scatter_rows_kernel<<<static_cast<unsigned>((s.count + 255) / 256), 256, 0, stream>>>(s);
  return cudaGetLastError();
}

cudaError_t launch_advance_offsets(uint64_t* offset, int64_t batch, cudaStream_t stream) {
  if (offset == nullptr || batch < 1) return cudaErrorInvalidValue;
  advance_offsets_kernel<<<static_cast<unsigned>((batch + 255) / 256), 256, 0, stream>>>(offset, batch);
  return cudaGetLastError();
}

cudaError_t fused_workspace_bytes(const SampleParams& p, size_t* bytes) {
  if (bytes == nullptr || p.batch < 1 || p.num_samples < 1) return cudaErrorInvalidValue;
  if (has_filters(p)) return filtered_workspace_bytes(p, bytes);
  RegionLayout layout;
  layout.take(static_cast<size_t>(p.batch) * static_cast<size_t>(p.num_samples) * sizeof(unsigned long long));
  *bytes = layout.bytes;
  return cudaSuccess;
}

// Several samples a row: a filtered row's are drawn by the decision from its kept prefix, and a row
// that keeps every token takes the extra pass (its samples need the whole row). Without filters but
// with topLogprobs, the extra pass's cuts for more than 128 rows cost more than the chunked path
// (llama3-8b, toplogprobs5+samples4 at B = 256: +553 against +487 %).
bool filtered_gemm_supported(const SampleParams& p) {
  if (p.num_samples > 1 && !has_truncation(p) && p.top_logprobs > 0 && p.batch > 128) return false;
  return filtered_gemm_possible(p);
}

bool filtered_gemm_possible(const SampleParams& p) { return detail::filtered_gemm_usable(p); }

namespace {

// launch_filtered_gemm and launch_transformed_gemm: the split kernel of epilogue kEpi on p's operands.
template <detail::Epi kEpi>
cudaError_t launch_split_gemm(const SampleParams& p, unsigned long long* winners, const detail::FilterArgs& f,
                              bool programmatic, cudaStream_t stream) {
  cudaError_t err = detail::check_params(p);
  if (err != cudaSuccess) return err;
  detail::GemmArgs a = detail::gemm_args(p);
  // the filtered epilogue draws sample 0 (winners[b]); the decision draws the others
  if constexpr (kEpi == detail::Epi::kSampleFiltered) a.num_samples = 1;
  a.winners = winners;
  a.programmatic_launch = programmatic;
  return detail::launch_filter_args_gemm<kEpi>(p, a, f, stream);
}

}  // namespace

cudaError_t launch_filtered_gemm(const SampleParams& p, unsigned long long* winners,
                                 const detail::FilterArgs& f, bool programmatic, cudaStream_t stream) {
  return launch_split_gemm<detail::Epi::kSampleFiltered>(p, winners, f, programmatic, stream);
}

cudaError_t launch_transformed_gemm(const SampleParams& p, unsigned long long* winners,
                                    const detail::FilterArgs& f, bool programmatic, cudaStream_t stream) {
  return launch_split_gemm<detail::Epi::kSampleTransformed>(p, winners, f, programmatic, stream);
}

cudaError_t launch_fused_sample(const SampleParams& p, cudaStream_t stream) {
  // Filters, logprobs and masks: launch_fused_filtered (filters.cu: the GEMM's one pass on compute
  // capability 9.0, the chunked candidate pass elsewhere; a shard's: partial.cu).
  // The rows pass's shard call (p.row_values) also takes partial.cu's materialized path.
  if (has_filters(p) || p.row_values != nullptr)
    return p.partial != nullptr ? launch_partial_sample(p, stream) : launch_fused_filtered(p, stream);
  cudaError_t err = detail::check_params(p);
  if (err == cudaSuccess && p.partial != nullptr && !partial_params_ok(p)) err = cudaErrorInvalidValue;
  if (err != cudaSuccess) return err;

  const int64_t n = p.batch * p.num_samples;
  Scratch scratch(p, stream);
  unsigned long long* winners = nullptr;
  StreamWords* kept = nullptr;  // the stream's zeroed words (no caller's workspace)
  if (p.workspace == nullptr && (err = take_stream_words(stream, n, &kept)) != cudaSuccess) return err;
  if (kept != nullptr) winners = kept->words;
  else if ((err = scratch.take(n * sizeof(unsigned long long), &winners)) != cudaSuccess) return err;
  // Three kernels; on compute capability 9.0 the second and third are launched programmatically
  // (each may start while the one before it still runs and waits for it with griddepcontrol.wait),
  // which hides the zeroing and the finalize kernel's launch gap under the GEMM: ~3-5 us a call
  // on the H200. The GEMM takes the programmatic launch only where its kernel waits (the
  // warp-specialized kernels; launch_persistent ignores it for the others), and only after the
  // zeroing kernel: its producer loads H before it waits, so after the caller's own kernel it is
  // launched in stream order.
  const bool programmatic = detail::programmatic_launch_supported();
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  if (kept == nullptr) clear_winners_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(winners, n);
  err = cudaGetLastError();
  if (err == cudaSuccess) {
    detail::GemmArgs a = detail::gemm_args(p);
    a.winners = winners;
    a.programmatic_launch = programmatic && kept == nullptr;
    err = detail::launch_gemm<detail::Epi::kSampleOne>(p, a, stream);
  }
  if (err == cudaSuccess && p.partial != nullptr) {
    err = detail::launch_kernel(finalize_partial_kernel, dim3(static_cast<unsigned>(blocks)), dim3(threads), 0, stream,
                                programmatic, winners, p);
  } else if (err == cudaSuccess) {
    err = detail::launch_kernel(finalize_kernel, dim3(static_cast<unsigned>(blocks)), dim3(threads), 0, stream,
                                programmatic, winners, p.batch, p.num_samples, p.tokens, p.row_status);
  }
  give_stream_words(kept, err == cudaSuccess);
  const cudaError_t free_err = kept != nullptr ? cudaSuccess : scratch.give_back(winners);
  return err != cudaSuccess ? err : free_err;
}

cudaError_t release_stream_words(cudaStream_t stream) {
  int device = 0;
  unsigned long long id = 0;
  cudaError_t err = stream_identity(stream, &device, &id);
  if (err != cudaSuccess) return err;
  std::lock_guard<std::mutex> lock(g_words_mutex);
  for (StreamWords& e : g_words) {
    if (e.device != device || e.id != id) continue;
    if (e.words != nullptr) err = cudaFreeAsync(e.words, stream);
    e = StreamWords{};
  }
  return err;
}

}  // namespace cuda
}  // namespace flashsample
