// The CPU backend's exps over a tile, vectorized like the products (cpu_logits.cc) with one exp
// built from IEEE additions and multiplications only (no FMA: -ffp-contract=off), so each value
// takes the same operations on every ISA and gets the same bits on every path:
// - the row mass, Σ exp(z − max_z) over a tile's finite logits (the normalizer of logprobs, the
//   total that top-p and min-p weigh against): 8 lane sums, lane k adding the values i ≡ k
//   (mod 8) in index order (the last group padded with excluded values), then a pairwise tree.
//   Fused and reference share it, so they agree bit for bit;
// - the fused scan's prune weights (cpu_internal.h, prune_weight), whose margin dwarfs an ulp;
// - the softcap's tanh, in float64 from the same exp.
// (libm's exp, one call a value for each, was ~15 % of a logprobs call at B = 64 on the default CPU
// shape and ~9 % of a plain one; tanhf ~14 % of a softcap call.)
#include <math.h>
#include <string.h>

#include <algorithm>
#include <cmath>

#include "cpu_internal.h"

namespace flashsample {
namespace cpu {
namespace detail {
namespace {

constexpr int kLanes = 8;
constexpr int kGroups = 4;  // groups of kLanes values a step: independent exps in flight

#ifdef FLASHSAMPLE_CPU_X86_KERNELS
#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
using Vec = double __attribute__((vector_size(64)));
#include "cpu_exp_kernels.inc"
}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2")
namespace avx2 {
using Vec = double __attribute__((vector_size(32)));
#include "cpu_exp_kernels.inc"
}  // namespace avx2
#pragma GCC pop_options
#endif

namespace baseline {  // SSE2, NEON
using Vec = double __attribute__((vector_size(16)));
#include "cpu_exp_kernels.inc"
}  // namespace baseline

// One ISA's kernels, chosen once, at load (cpu_isa()).
struct ExpKernels {
  MassPartial (*tile_mass)(const float*, int64_t, double);
  void (*prune_weights)(const float*, int64_t, float, double, double*);
  void (*softcap_values)(float*, int64_t, float);
};

ExpKernels select_kernels() {
  switch (cpu_isa()) {
#ifdef FLASHSAMPLE_CPU_X86_KERNELS
    case CpuIsa::kAvx512: return {avx512::tile_mass, avx512::prune_weights, avx512::softcap_values};
    case CpuIsa::kAvx2: return {avx2::tile_mass, avx2::prune_weights, avx2::softcap_values};
#endif
    default: return {baseline::tile_mass, baseline::prune_weights, baseline::softcap_values};
  }
}

const ExpKernels kernels = select_kernels();

}  // namespace

MassPartial tile_mass(const float* logits, int64_t n, double temperature) {
  return kernels.tile_mass(logits, n, temperature);
}

void prune_weights(const float* logits, int64_t n, float inv_temperature, double c_ref, double* out) {
  kernels.prune_weights(logits, n, inv_temperature, c_ref, out);
}

void softcap_values(float* x, int64_t n, float cap) { kernels.softcap_values(x, n, cap); }

MassPartial combine_mass(const MassPartial* partials, int64_t count) {
  MassPartial row;
  for (int64_t t = 0; t < count; ++t) row.max_z = std::max(row.max_z, partials[t].max_z);
  for (int64_t t = 0; t < count; ++t) {
    if (partials[t].sum > 0.0) row.sum += partials[t].sum * exp(partials[t].max_z - row.max_z);
  }
  return row;
}

}  // namespace detail
}  // namespace cpu
}  // namespace flashsample
