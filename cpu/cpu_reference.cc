// The reference CPU sampler: materializes the logits [batch, vocab] with the fused path's tile
// routine (so the logits are bit-identical), then applies SEMANTICS.md per row in float64 and draws
// by inverse cdf or by the Gumbel argmax.
#include <algorithm>
#include <string>

#include "cpu_internal.h"
#include "cpu_sampler.h"

namespace flashsample {
namespace cpu {

using namespace detail;

std::string sample_reference(const SampleParams& p, ReferenceMethod method, int num_threads) {
  const std::string invalid = validate(p);
  if (!invalid.empty()) return invalid;
  if (method != ReferenceMethod::kInverseCdf && method != ReferenceMethod::kGumbel) {
    return "method must be inverse-cdf or gumbel";
  }
  try {
    const int threads = resolve_threads(num_threads);
    const int64_t vocab = p.vocab;
    const std::vector<float> logits = materialize_logits(p, threads);

    std::vector<RowPlan> plans(static_cast<size_t>(p.batch));
    parallel_for(p.batch, threads, [&](int64_t b) {
      reference_row_plan(p, b, logits.data() + b * vocab, plans[b]);
      prepare_draw(plans[b], method);
    });
    if (p.fallback_rows != nullptr) *p.fallback_rows = 0;
    draw_all(p, plans, method, {}, threads);
    write_raw_logprobs(p, threads);
    return std::string();
  } catch (const std::bad_alloc&) {
    return "sample_reference: out of host memory";
  } catch (const std::exception& e) {
    return std::string("sample_reference: ") + e.what();
  }
}

}  // namespace cpu
}  // namespace flashsample
