// The one noise function of flashsample: Philox4x32-10 and the Gumbel transform.
//
// Compiled as host code (the CPU backend) and as device code (every CUDA kernel), so that every
// sampler and every tile configuration draws the same noise. The noise is keyed only on
// (seed, offset, row stream, sample, vocabulary index), never on thread or block ids.
//
// Definition (README, "The noise"):
//   key     = (seed & 0xffffffff, seed >> 32)
//   counter = (v >> 2, (stream << 16) | sample, offset & 0xffffffff, offset >> 32)
//   x       = Philox4x32-10(counter, key)[v & 3]
//   u       = min((x + 0.5) * 2^-32, 1 - 2^-24)           in float32, never 0 or 1
//   E       = -log1p(-u)                                   accurate: the winners come from tiny E
//   g       = -log(E)                                      standard Gumbel
#pragma once

#include <stdint.h>
#include <math.h>

#if defined(__CUDACC__)
#define FS_HD __host__ __device__ __forceinline__
#else
#define FS_HD inline
#endif

namespace flashsample {

// Counter layout limits: the row stream takes the upper 16 bits of counter word 1, the sample index
// the lower 16 bits.
constexpr int64_t kMaxBatch = 65535;       // stream = row < 2^16
constexpr int64_t kMaxSamples = 65536;     // sample index < 2^16

struct Philox4 {
  uint32_t x[4];
};

FS_HD uint32_t mulhilo32(uint32_t a, uint32_t b, uint32_t* hi) {
#if defined(__CUDA_ARCH__)
  *hi = __umulhi(a, b);
  return a * b;
#else
  const uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(product >> 32);
  return static_cast<uint32_t>(product);
#endif
}

// Philox4x32 with 10 rounds (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as
// 1, 2, 3", SC'11). Constants from Random123. K counters under one key, in place: the key schedule
// (18 adds) is computed once for the K blocks.
template <int K>
FS_HD void philox4x32_10_one_key(uint32_t (&c)[K][4], uint32_t k0, uint32_t k1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int k = 0; k < K; ++k) {
      uint32_t hi0, hi1;
      const uint32_t lo0 = mulhilo32(kMul0, c[k][0], &hi0);
      const uint32_t lo1 = mulhilo32(kMul1, c[k][2], &hi1);
      const uint32_t n0 = hi1 ^ c[k][1] ^ k0;
      const uint32_t n2 = hi0 ^ c[k][3] ^ k1;
      c[k][0] = n0;
      c[k][1] = lo1;
      c[k][2] = n2;
      c[k][3] = lo0;
    }
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
}

FS_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                            uint32_t k1) {
  uint32_t c[1][4] = {{c0, c1, c2, c3}};
  philox4x32_10_one_key<1>(c, k0, k1);
  Philox4 r;
  r.x[0] = c[0][0];
  r.x[1] = c[0][1];
  r.x[2] = c[0][2];
  r.x[3] = c[0][3];
  return r;
}

// The counter of the Philox block that serves vocabulary entries 4q .. 4q+3 of (row stream, sample).
FS_HD void noise_counter(uint64_t offset, uint32_t stream, uint32_t sample, uint32_t quad, uint32_t (&c)[4]) {
  c[0] = quad;
  c[1] = (stream << 16) | (sample & 0xffffu);
  c[2] = static_cast<uint32_t>(offset);
  c[3] = static_cast<uint32_t>(offset >> 32);
}

// The Philox block that serves vocabulary entries 4q .. 4q+3 of (row stream, sample).
FS_HD Philox4 noise_block(uint64_t seed, uint64_t offset, uint32_t stream, uint32_t sample,
                          uint32_t quad) {
  uint32_t c[4];
  noise_counter(offset, stream, sample, quad, c);
  return philox4x32_10(c[0], c[1], c[2], c[3], static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// (x + 0.5) * 2^-32 rounded to float, clamped below 1: never 0, never 1.
FS_HD float uniform_open01(uint32_t x) {
  return fminf(fmaf(static_cast<float>(x), 0x1p-32f, 0x1p-33f), 0x1.fffffep-1f);
}

// Standard Gumbel from one 32-bit draw. log1pf keeps E = -log(1 - u) accurate in relative terms
// when u is tiny... and, more importantly, when u -> 1 the result E is small and -log(E) large:
// these are the perturbations that win, so E must not be computed as log(1 - u) with a fast log
// (that loses all relative precision exactly there and biases the draw).
FS_HD float gumbel_from_bits(uint32_t x) {
  const float u = uniform_open01(x);
  const float exponential = -log1pf(-u);
  return -logf(exponential);
}

// Word q (< 4) of a block, by selects: an index into the array would put the block in local memory.
FS_HD uint32_t noise_word(const Philox4& r, uint32_t q) {
  return q == 0u ? r.x[0] : q == 1u ? r.x[1] : q == 2u ? r.x[2] : r.x[3];
}

// The Gumbel noise of one vocabulary index (scalar path; kernels use noise_block for 4 at once).
FS_HD float gumbel_noise(uint64_t seed, uint64_t offset, uint32_t stream, uint32_t sample,
                         uint64_t v) {
  const Philox4 block = noise_block(seed, offset, stream, sample, static_cast<uint32_t>(v >> 2));
  return gumbel_from_bits(noise_word(block, static_cast<uint32_t>(v & 3u)));
}

// A candidate of the argmax. Order: the +Inf tier first (logit = +Inf: those share the mass, the
// noise picks among them), then the larger score, then the smaller index. NaN logits are never
// candidates; a row with no candidate keeps kNoToken.
constexpr uint32_t kInfTierBit = 0x80000000u;
constexpr uint32_t kNoToken = 0x7fffffffu;

struct Candidate {
  float score;    // logit / T + g (or logit when greedy); g alone in the +Inf tier
  uint32_t key;   // index | kInfTierBit for +Inf logits; kNoToken when empty
};

FS_HD Candidate empty_candidate() {
  Candidate c;
  c.score = -INFINITY;
  c.key = kNoToken;
  return c;
}

FS_HD bool candidate_better(float score_a, uint32_t key_a, float score_b, uint32_t key_b) {
  const uint32_t tier_a = key_a >> 31, tier_b = key_b >> 31;
  if (tier_a != tier_b) return tier_a > tier_b;
  if (score_a != score_b) return score_a > score_b;
  return (key_a & 0x7fffffffu) < (key_b & 0x7fffffffu);
}

FS_HD bool candidate_better(const Candidate& a, const Candidate& b) {
  return candidate_better(a.score, a.key, b.score, b.key);
}

// The candidate that logit `logit` of index v makes, given the row's inverse temperature
// (greedy when temperature is 0) and its Gumbel noise g. NaN logits and -Inf logits make no
// candidate (their probability is 0).
FS_HD Candidate make_candidate(float logit, float inv_temperature, bool greedy, float g,
                               uint32_t v) {
  Candidate c;
  if (logit != logit || logit == -INFINITY) return empty_candidate();
  if (logit == INFINITY) {
    c.score = greedy ? 0.0f : g;
    c.key = v | kInfTierBit;
    return c;
  }
  c.score = greedy ? logit : fmaf(logit, inv_temperature, g);
  c.key = v;
  return c;
}

// Gemma 2's final-logit soft-capping: c * tanh(logit / c), applied before the temperature.
FS_HD float softcap_logit(float logit, float cap) {
  return cap > 0.0f ? cap * tanhf(logit / cap) : logit;
}

}  // namespace flashsample
