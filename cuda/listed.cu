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

constexpr int kThreads = 256;

__device__ __forceinline__ int64_t row_begin(const int32_t* offsets, int64_t b) {
  return offsets == nullptr ? 0 : offsets[b];
}

// The rows' tables are packed at the sum of the three lists' offsets: a row lists at most as many
// distinct tokens as its three lists hold entries.
__global__ void __launch_bounds__(kThreads) build_listed_kernel(SampleParams p, uint2* marks, ListedEntry* table) {
  // Launched programmatically: the GEMM after it may start now; it reads the table only after
  // this grid completed, and this grid completes only after the kernel before it (see the end).
  detail::griddep_launch_dependents();
  const int64_t b = blockIdx.x, V = p.vocab, words = (V + 31) / 32;
  const int tid = threadIdx.x;
  uint2* row = marks + b * words;
  for (int64_t w = tid; w < words; w += kThreads) row[w] = make_uint2(0u, 0u);
  __syncthreads();
  // Token ids the binding did not check (device-side lists) outside [0, V) are skipped; ids other
  // than -1 (an engine table's free slot) are reported (p.listed_invalid).
  bool invalid = false;
  auto each = [&](const int32_t* offsets, const int32_t* tokens, auto&& f) {
    if (offsets == nullptr) return;
    for (int64_t i = offsets[b] + tid; i < offsets[b + 1]; i += kThreads) {
      const int32_t t = tokens[i];
      if (t >= 0 && t < V) f(i, t);
      else invalid |= t != -1;
    }
  };
  auto mark = [&](int64_t, int32_t t) { atomicOr(&row[t >> 5].x, 1u << (t & 31)); };
  // an engine sampler's min-tokens bans end when the row's count reaches 0
  const int32_t* banned = p.banned_while == nullptr || p.banned_while[b] > 0 ? p.banned_offsets : nullptr;
  each(p.bias_offsets, p.bias_tokens, mark);
  each(banned, p.banned_tokens, mark);
  each(p.penalty_offsets, p.penalty_tokens, mark);
  const bool any_invalid = __syncthreads_or(invalid);  // also the barrier after the marks
  if (tid == 0 && p.listed_invalid != nullptr) p.listed_invalid[b] = any_invalid ? 1 : 0;

  // Exclusive prefix of the words' listed counts: each thread a contiguous span of words.
  const int64_t span = (words + kThreads - 1) / kThreads;
  const int64_t lo = tid * span < words ? tid * span : words;
  const int64_t hi = lo + span < words ? lo + span : words;
  uint32_t mine = 0;
  for (int64_t w = lo; w < hi; ++w) mine += __popc(row[w].x);
  uint32_t total = 0;
  const uint32_t before = detail::block_exclusive_scan(mine, total);
  const uint32_t base = static_cast<uint32_t>(row_begin(p.bias_offsets, b) + row_begin(p.banned_offsets, b) +
                                              row_begin(p.penalty_offsets, b));
  uint32_t at = base + before;
  for (int64_t w = lo; w < hi; ++w) {
    row[w].y = at;
    at += __popc(row[w].x);
  }
  for (uint32_t i = tid; i < total; i += kThreads) table[base + i] = ListedEntry{0.0f, 1.0f, 0.0f, 0u};
  __syncthreads();

  auto entry = [&](int32_t t) -> ListedEntry& {
    const uint2 m = row[t >> 5];
    return table[m.y + __popc(m.x & ((1u << (t & 31)) - 1u))];
  };
  each(p.bias_offsets, p.bias_tokens, [&](int64_t i, int32_t t) {
    ListedEntry& e = entry(t);
    e.bias = p.bias_values[i];
    atomicOr(&e.flags, static_cast<uint32_t>(detail::kListedBias));
  });
  each(banned, p.banned_tokens, [&](int64_t, int32_t t) {
    atomicOr(&entry(t).flags, static_cast<uint32_t>(detail::kListedBanned));
  });
  const float r = p.repetition_penalty ? p.repetition_penalty[b] : 1.0f;
  const float f = p.frequency_penalty ? p.frequency_penalty[b] : 0.0f;
  const float pres = p.presence_penalty ? p.presence_penalty[b] : 0.0f;
  each(p.penalty_offsets, p.penalty_tokens, [&](int64_t i, int32_t t) {
    ListedEntry& e = entry(t);
    const int32_t count = p.penalty_counts[i];
    uint32_t flags = 0u;
    if (r != 1.0f && (count > 0 || p.penalty_in_prompt[i] != 0)) {
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
  return detail::launch_kernel(build_listed_kernel, dim3(static_cast<unsigned>(q.batch)), dim3(kThreads), 0, stream,
                               programmatic, q, reinterpret_cast<uint2*>(const_cast<uint32_t*>(q.listed_marks)),
                               reinterpret_cast<ListedEntry*>(const_cast<float*>(q.listed_table)));
}

cudaError_t build_listed_table(const SampleParams& p, Scratch& scratch, SampleParams* q, void** region,
                               cudaStream_t stream) {
  const cudaError_t err = take_listed_table(p, scratch, q, region);
  return err != cudaSuccess ? err : launch_build_listed(*q, false, stream);
}

}  // namespace cuda
}  // namespace flashsample
