// The listed tokens' marks and table (kernels/listed.cuh), built from a call's CSR lists on the
// device: one block per row, one launch, capturable (fixed grid, no host reads). On the one-pass
// path it is launched programmatically between the zeroing kernel and the GEMM, so that it runs
// beside the GEMM's main loop instead of before it (the epilogue waits for it).
#include <cuda_runtime.h>
#include <stdint.h>

#include "internal_launchers.h"
#include "kernels/listed.cuh"
#include "kernels/row_select.cuh"
#include "kernels/wgmma_common.cuh"
#include "launch.cuh"

namespace flashsample {
namespace cuda {
namespace {

using detail::ListedEntry;

// A row's lists are walked a thread an entry: 1024 threads, since every entry is a few dependent
// loads (its id, its word's mark, its table entry). The row's marks are built in shared memory
// where they fit (every mark and lookup then a shared access, not an L2 round trip) and copied out
// once. Against 256 threads over marks in global memory: llama3-8b, 4096 listed, B = 1 / 16 / 64
// +7 / +7 / +13 % -> +3 / +3 / +11 % over plain (bench CLI, builds alternated).
constexpr int kThreads = 1024;
// A thread's entries of a list taken kBatch at a time, their loads issued together: a 4096-entry
// row is one batch a thread instead of four chains of dependent loads.
constexpr int kBatch = 4;
constexpr int64_t kSharedMarkWords = 12288;  // 96 KB (every CC >= 8.0 opts in to 99 KB): V up to 393216

// Row b's first entry of a list of n entries (its offset clamped to [0, n]; 0 without the list).
__device__ __forceinline__ int64_t row_begin(const int32_t* offsets, int64_t n, int64_t b) {
  return offsets == nullptr ? 0 : offsets[b] < 0 ? 0 : offsets[b] > n ? n : offsets[b];
}

// The rows' tables are packed at the sum of the three lists' offsets: a row lists at most as many
// distinct tokens as its three lists hold entries.
__global__ void __launch_bounds__(kThreads) build_listed_kernel(SampleParams p, uint2* marks, ListedEntry* table) {
  extern __shared__ uint2 s_marks[];
  // Launched programmatically: the GEMM after it may start now; it reads the table only after
  // this grid completed, and this grid completes only after the kernel before it (see the end).
  detail::griddep_launch_dependents();
  const int64_t b = blockIdx.x, V = p.vocab, words = (V + 31) / 32;
  const int tid = threadIdx.x;
  uint2* const out = marks + b * words;
  uint2* const row = words <= kSharedMarkWords ? s_marks : out;
  for (int64_t w = tid; w < words; w += kThreads) row[w] = make_uint2(0u, 0u);
  __syncthreads();
  // Lists nothing checked (device tensors, an engine's tables; p.listed_invalid set) may hold
  // anything: offsets are clamped to each list's entries, and ids outside [0, V), non-finite biases
  // and negative counts are skipped; each of these, a repeated id within a list and offsets out of
  // order are reported. An id of -1 (an engine table's free slot) is skipped silently.
  const bool unchecked = p.listed_invalid != nullptr;
  bool invalid = false;
  auto range = [&](const int32_t* offsets, int64_t n, int64_t& lo, int64_t& hi) {
    lo = offsets[b] < 0 ? 0 : offsets[b] > n ? n : offsets[b];
    hi = offsets[b + 1] < lo ? lo : offsets[b + 1] > n ? n : offsets[b + 1];
    invalid |= offsets[b] != lo || offsets[b + 1] != hi;
  };
  const ListedIds ids = listed_ids(p);  // (a shard's global ids: valid in [0, vocab_total))
  // f(local id, x) for the list's entries i of row b whose id is in range and whose x = load(i)
  // is usable(x): kBatch entries a thread at a time, their ids and loads issued before any is used.
  auto each = [&](const int32_t* offsets, int64_t n, const int32_t* tokens, auto&& load, auto&& usable, auto&& f) {
    if (offsets == nullptr) return;
    int64_t lo, hi;
    range(offsets, n, lo, hi);
    for (int64_t i0 = lo + tid; i0 < hi; i0 += kBatch * kThreads) {
      int32_t t[kBatch];
      decltype(load(i0)) x[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int64_t i = i0 + static_cast<int64_t>(k) * kThreads;
        t[k] = i < hi ? tokens[i] : -1;
        x[k] = load(i < hi ? i : i0);
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int64_t i = i0 + static_cast<int64_t>(k) * kThreads;
        if (i >= hi) break;
        if (t[k] >= 0 && t[k] < ids.valid_end && usable(x[k])) {
          const int64_t local = t[k] - ids.shift;
          if (local >= 0 && local < V) f(static_cast<int32_t>(local), x[k]);
        } else {
          invalid |= t[k] != -1;
        }
      }
    }
  };
  auto nothing = [](int64_t) { return 0; };
  auto any = [](int) { return true; };
  auto bias_value = [&](int64_t i) { return p.bias_values[i]; };
  auto finite = [](float v) { return isfinite(v); };
  auto penalty = [&](int64_t i) {  // (its count, whether it is in the prompt)
    return make_int2(p.penalty_counts[i], p.penalty_in_prompt != nullptr ? p.penalty_in_prompt[i] : p.penalty_in_prompt_i32[i]);
  };
  auto counted = [](int2 c) { return c.x >= 0; };
  // an engine sampler's min-tokens bans end when the row's count reaches 0
  const int32_t* banned = p.banned_while == nullptr || p.banned_while[b] > 0 ? p.banned_offsets : nullptr;
  if (!unchecked) {
    auto mark = [&](int32_t t, int) { atomicOr(&row[t >> 5].x, 1u << (t & 31)); };
    each(p.bias_offsets, p.bias_entries, p.bias_tokens, nothing, any, mark);
    each(banned, p.banned_entries, p.banned_tokens, nothing, any, mark);
    each(p.penalty_offsets, p.penalty_entries, p.penalty_tokens, nothing, any, mark);
  } else {
    // one list at a time into .y (free until the prefix below), so that a repeat within a list shows
    auto mark_list = [&](const int32_t* offsets, int64_t n, const int32_t* tokens, auto&& load, auto&& usable,
                         bool distinct) {
      each(offsets, n, tokens, load, usable, [&](int32_t t, auto) {
        const uint32_t bit = 1u << (t & 31);
        invalid |= distinct && (atomicOr(&row[t >> 5].y, bit) & bit) != 0u;
        if (!distinct) atomicOr(&row[t >> 5].y, bit);
      });
      __syncthreads();
      for (int64_t w = tid; w < words; w += kThreads) {
        row[w].x |= row[w].y;
        row[w].y = 0u;
      }
      __syncthreads();
    };
    mark_list(p.bias_offsets, p.bias_entries, p.bias_tokens, bias_value, finite, true);
    mark_list(banned, p.banned_entries, p.banned_tokens, nothing, any, false);
    mark_list(p.penalty_offsets, p.penalty_entries, p.penalty_tokens, penalty, counted, true);
  }
  const bool any_invalid = __syncthreads_or(invalid);  // also the barrier after the marks
  if (tid == 0 && unchecked) p.listed_invalid[b] = any_invalid ? 1 : 0;

  // Exclusive prefix of the words' listed counts: each thread a contiguous span of words.
  const int64_t span = (words + kThreads - 1) / kThreads;
  const int64_t lo = tid * span < words ? tid * span : words;
  const int64_t hi = lo + span < words ? lo + span : words;
  uint32_t mine = 0;
  for (int64_t w = lo; w < hi; ++w) mine += __popc(row[w].x);
  uint32_t total = 0;
  const uint32_t before = detail::block_exclusive_scan(mine, total);
  // where the row's entries start: the sum of its lists' (clamped) starts, an upper bound of the
  // earlier rows' distinct tokens
  const uint32_t base = static_cast<uint32_t>(row_begin(p.bias_offsets, p.bias_entries, b) +
                                              row_begin(p.banned_offsets, p.banned_entries, b) +
                                              row_begin(p.penalty_offsets, p.penalty_entries, b));
  uint32_t at = base + before;
  for (int64_t w = lo; w < hi; ++w) {
    row[w].y = at;
    at += __popc(row[w].x);
  }
  for (uint32_t i = tid; i < total; i += kThreads) table[base + i] = ListedEntry{0.0f, 1.0f, 0.0f, 0u};
  __syncthreads();
  if (row != out)
    for (int64_t w = tid; w < words; w += kThreads) out[w] = row[w];

  auto entry = [&](int32_t t) -> ListedEntry& {
    return table[detail::listed_index(row[t >> 5], t & 31)];
  };
  each(p.bias_offsets, p.bias_entries, p.bias_tokens, bias_value, finite, [&](int32_t t, float v) {
    ListedEntry& e = entry(t);
    e.bias = v;
    atomicOr(&e.flags, static_cast<uint32_t>(detail::kListedBias));
  });
  each(banned, p.banned_entries, p.banned_tokens, nothing, any, [&](int32_t t, int) {
    atomicOr(&entry(t).flags, static_cast<uint32_t>(detail::kListedBanned));
  });
  const float r = p.repetition_penalty ? p.repetition_penalty[b] : 1.0f;
  const float f = p.frequency_penalty ? p.frequency_penalty[b] : 0.0f;
  const float pres = p.presence_penalty ? p.presence_penalty[b] : 0.0f;
  each(p.penalty_offsets, p.penalty_entries, p.penalty_tokens, penalty, counted, [&](int32_t t, int2 c) {
    ListedEntry& e = entry(t);
    const int32_t count = c.x;
    const bool in_prompt = c.y != 0;
    uint32_t flags = 0u;
    if (r != 1.0f && (count > 0 || in_prompt)) {
      e.repetition = r;
      flags |= detail::kListedRepetition;
    }
    if (count > 0) {
      e.subtract = fmaf(f, static_cast<float>(count), pres);
      flags |= detail::kListedSubtract;
    }
    if (flags) atomicOr(&e.flags, flags);
  });
  detail::griddep_wait();  // launched programmatically: complete only after the previous kernel
}

// The table's two regions (byte offsets): the marks, then the entries.
struct ListedLayout {
  size_t marks, entries, bytes;
};

ListedLayout listed_layout(const SampleParams& p) {
  RegionLayout layout;
  ListedLayout l;
  l.marks = layout.take(static_cast<size_t>(p.batch) * static_cast<size_t>((p.vocab + 31) / 32) * sizeof(uint2));
  l.entries = layout.take(static_cast<size_t>(p.listed_entries) * sizeof(ListedEntry));
  l.bytes = layout.bytes;
  return l;
}

}  // namespace

size_t listed_table_bytes(const SampleParams& p) { return has_penalties(p) ? listed_layout(p).bytes : 0; }

cudaError_t take_listed_table(const SampleParams& p, Scratch& scratch, SampleParams* q, void** region) {
  *q = p;
  *region = nullptr;
  if (!has_penalties(p)) return cudaSuccess;
  if (p.listed_entries < 0) return cudaErrorInvalidValue;
  const ListedLayout l = listed_layout(p);
  uint8_t* base = nullptr;
  const cudaError_t err = scratch.take(l.bytes, &base);
  if (err != cudaSuccess) return err;
  *region = base;
  q->listed_marks = reinterpret_cast<const uint32_t*>(base + l.marks);
  q->listed_table = reinterpret_cast<const float*>(base + l.entries);
  return cudaSuccess;
}

cudaError_t launch_build_listed(const SampleParams& q, bool programmatic, cudaStream_t stream) {
  if (q.listed_marks == nullptr) return cudaSuccess;
  const int64_t words = (q.vocab + 31) / 32;
  const int smem = words <= kSharedMarkWords ? static_cast<int>(words * sizeof(uint2)) : 0;
  // the kernel's dynamic shared memory limit is one attribute for every call: set to the largest
  constexpr int kMaxSmem = static_cast<int>(kSharedMarkWords * sizeof(uint2));
  int per_sm = 0;
  const cudaError_t err = detail::prepare_kernel(build_listed_kernel, kThreads, kMaxSmem, &per_sm);
  if (err != cudaSuccess) return err;
  return detail::launch_kernel(build_listed_kernel, dim3(static_cast<unsigned>(q.batch)), dim3(kThreads),
                               static_cast<size_t>(smem), stream, programmatic, q,
                               reinterpret_cast<uint2*>(const_cast<uint32_t*>(q.listed_marks)),
                               reinterpret_cast<ListedEntry*>(const_cast<float*>(q.listed_table)));
}

cudaError_t build_listed_table(const SampleParams& p, Scratch& scratch, SampleParams* q, void** region,
                               cudaStream_t stream) {
  const cudaError_t err = take_listed_table(p, scratch, q, region);
  return err != cudaSuccess ? err : launch_build_listed(*q, false, stream);
}

}  // namespace cuda
}  // namespace flashsample
