// The tokens a row lists (SEMANTICS §2, steps 2a-2d: logit bias, bans, repetition, frequency and
// presence penalties) as every CUDA kernel that turns a raw logit into a candidate value reads them,
// and that turn itself (candidate_value).
//
// build_listed_table (listed.cu) folds a call's three CSR lists into two arrays:
// - marks [batch, ceil(V / 32)] uint2: x = the word's bits (bit v % 32 set: token v is listed),
//   y = the table index of the word's first listed token;
// - table: one ListedEntry per listed (row, token), in token order within the row.
// A kernel then pays one 8-byte load per 32 tokens where nothing is listed (like the allowed mask)
// and one more dependent load for a listed token: no search, no [batch, V] table.
#pragma once

#include <stdint.h>

#include "../include/noise.h"
#include "../include/params.h"

namespace flashsample {
namespace cuda {
namespace detail {

enum ListedFlag : uint32_t {
  kListedBias = 1u,        // 2a: + bias
  kListedBanned = 2u,      // 2b: probability 0
  kListedRepetition = 4u,  // 2c: / r if positive, * r otherwise
  kListedSubtract = 8u,    // 2d: - fmaf(f, count, p), folded once per call
};

struct alignas(16) ListedEntry {
  float bias;
  float repetition;
  float subtract;
  uint32_t flags;  // ListedFlag bits
};

// Steps 2a-2d on one logit, each in float32 in SEMANTICS' order (the CPU backend's apply_listed).
__device__ __forceinline__ float apply_listed_entry(const ListedEntry& e, float x) {
  if (e.flags & kListedBias) x += e.bias;
  if (e.flags & kListedBanned) return -INFINITY;
  if (e.flags & kListedRepetition) x = x > 0.0f ? x / e.repetition : x * e.repetition;
  if (e.flags & kListedSubtract) x -= e.subtract;
  return x;
}

// The table index of the listed token at bit `bit` (< 32) of its word, whose mark is m: the word's
// first index (m.y) plus its listed tokens below that bit.
__device__ __forceinline__ uint32_t listed_index(uint2 m, int bit) {
  return m.y + __popc(m.x & ((1u << bit) - 1u));
}

// The table entry of listed token v, given its word's mark m (bit v % 32 set).
__device__ __forceinline__ const ListedEntry& listed_entry(const ListedEntry* table, uint2 m, int64_t v) {
  return table[listed_index(m, static_cast<int>(v & 31))];
}

// The listed tokens' steps on the quad of tokens vq .. vq + 3 (vq a multiple of 4, m its word's mark).
__device__ __forceinline__ float4 listed_steps_quad(const ListedEntry* table, uint2 m, int64_t vq, float4 x) {
  float l[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int o = 0; o < 4; ++o)
    if ((m.x >> ((vq & 31) + o)) & 1u) l[o] = apply_listed_entry(listed_entry(table, m, vq + o), l[o]);
  return make_float4(l[0], l[1], l[2], l[3]);
}
static __device__ __noinline__ float4 apply_listed_quad(const ListedEntry* table, uint2 m, int64_t vq, float4 x) {
  return listed_steps_quad(table, m, vq, x);
}

// The transformed epilogue's table pointer where it leaves the listed tokens to a later kernel
// (filters.cu's listed_winners_kernel applies the entries): where their values go, bit 0 set (a float
// array's address never has it), so that the epilogue makes one call either way.
__host__ __device__ inline const ListedEntry* deferred_listed_table(float* listed_values) {
  return reinterpret_cast<const ListedEntry*>(reinterpret_cast<uintptr_t>(listed_values) | 1u);
}

// The transformed epilogue's listed tokens of the quad: their steps, or, with a
// deferred_listed_table, their values stored at their table index and NaN here. Deferred, a listed
// token costs the epilogue a store instead of a dependent load of its entry (llama3-8b, 4096 listed
// tokens a row at B = 64, measured on the filtered epilogue: 287 -> 250 us, plain's 239).
static __device__ __noinline__ float4 epilogue_listed_quad(const ListedEntry* table, uint2 m, int64_t vq, float4 x) {
  const uintptr_t t = reinterpret_cast<uintptr_t>(table);
  if ((t & 1u) == 0u) return listed_steps_quad(table, m, vq, x);
  float* values = reinterpret_cast<float*>(t & ~uintptr_t{1});
  float l[4] = {x.x, x.y, x.z, x.w};
  const int s = static_cast<int>(vq & 31);
  uint32_t at = listed_index(m, s);
#pragma unroll
  for (int o = 0; o < 4; ++o)
    if ((m.x >> (s + o)) & 1u) {
      values[at++] = l[o];
      l[o] = NAN;
    }
  return make_float4(l[0], l[1], l[2], l[3]);
}

// softcap, the listed tokens' steps, then the mask and the non-finite rules (SEMANTICS §2): the
// value a raw logit (bias included) contributes, NaN = not a candidate (masked, NaN or -Inf).
__device__ __forceinline__ float candidate_value(const SampleParams& p, int64_t b, int64_t v, float raw) {
  const int64_t words = (p.vocab + 31) / 32;
  float l = softcap_logit(raw, p.softcap);
  if (p.listed_marks != nullptr) {
    const uint2 m = reinterpret_cast<const uint2*>(p.listed_marks)[b * words + (v >> 5)];
    if ((m.x >> (v & 31)) & 1u)
      l = apply_listed_entry(listed_entry(reinterpret_cast<const ListedEntry*>(p.listed_table), m, v), l);
  }
  const bool allowed = p.allowed == nullptr || ((p.allowed[b * words + (v >> 5)] >> (v & 31)) & 1u) != 0;
  if (!allowed || l != l || l == -INFINITY) return NAN;
  return l;
}

// candidate_value of the quad vq .. vq + 3 (vq a multiple of 4; l holds their raw values, NaN past
// the vocabulary), with one load of the word's listed marks and allowed bits for the four.
__device__ __forceinline__ void candidate_quad(const SampleParams& p, int64_t b, int64_t vq, float (&l)[4]) {
  const int64_t words = (p.vocab + 31) / 32;
  const int64_t word = b * words + (vq >> 5);
#pragma unroll
  for (int o = 0; o < 4; ++o) l[o] = softcap_logit(l[o], p.softcap);
  if (p.listed_marks != nullptr) {
    const uint2 m = reinterpret_cast<const uint2*>(p.listed_marks)[word];
    if ((m.x >> (vq & 31)) & 0xfu) {
      const float4 y = apply_listed_quad(reinterpret_cast<const ListedEntry*>(p.listed_table), m, vq,
                                         make_float4(l[0], l[1], l[2], l[3]));
      l[0] = y.x, l[1] = y.y, l[2] = y.z, l[3] = y.w;
    }
  }
  const uint32_t allowed = p.allowed == nullptr ? ~0u : p.allowed[word] >> (vq & 31);
#pragma unroll
  for (int o = 0; o < 4; ++o)
    if (((allowed >> o) & 1u) == 0u || l[o] != l[o] || l[o] == -INFINITY) l[o] = NAN;
}

}  // namespace detail
}  // namespace cuda
}  // namespace flashsample
