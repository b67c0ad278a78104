// merge_partials on the CPU: include/merge.h's row merge over the rows, on the pool; and the
// rows pass (SampleParams::row_values) for the rows a merge leaves undecided.
#include <math.h>

#include <algorithm>
#include <vector>

#include "../cuda/include/merge.h"
#include "cpu_internal.h"
#include "cpu_sampler.h"

namespace flashsample {
namespace cpu {

std::string merge_partials(const SampleParams& p, const PartialSet& set, int32_t* status, int num_threads) {
  if (p.tokens == nullptr || p.temperature == nullptr || p.seed == nullptr || p.offset == nullptr) {
    return "merge_partials: outputs or per-row inputs are null";
  }
  if (set.count < 1 || set.count > kMaxShards) return "merge_partials: 1 .. 64 partials";
  // logprobsMode 'raw': the draw merged without the processed log-probabilities, then the raw ones
  // from the shards' raw sections (merge_write_raw)
  const bool raw = reports_raw_logprobs(p);
  status[0] = check_partials(p, set, p.options_hash, has_filters(p), &status[1], raw ? p.top_logprobs : -1);
  if (status[0] != kPartialOk) return std::string();
  status[2] = largest_shard(set);
  SampleParams q = p;
  if (raw) {
    q.logprobs = nullptr;
    q.top_logprobs = 0;
  }
  try {
    const int64_t stride = merge_scratch_keys(p, set);
    std::vector<uint64_t> merged(static_cast<size_t>(p.batch * stride));
    std::vector<double> weight(static_cast<size_t>(p.batch * stride));
    std::vector<double> chunk_mass(static_cast<size_t>(p.batch * merge_chunks(stride)));
    const MergeScratch scratch{merged.data(), weight.data(), chunk_mass.data(), stride};
    detail::parallel_for(p.batch, detail::resolve_threads(num_threads),
                         [&](int64_t b) {
                           merge_partial_row(q, set, b, scratch);
                           if (raw) merge_write_raw(p, set, b);
                         });
  } catch (const std::exception& e) {
    return std::string("merge_partials: ") + e.what();
  }
  return std::string();
}

std::string shard_row_values(const SampleParams& p, int num_threads) {
  if (p.partial == nullptr || p.row_values == nullptr || p.value_rows == nullptr || p.value_row_count < 1 ||
      p.value_row_count > p.batch || p.value_pitch < p.vocab)
    return "shard_row_values: rows or their segment are missing or out of range";
  try {
    const int64_t V = p.vocab;
    const int threads = detail::resolve_threads(num_threads);
    const bool raw = reports_raw_logprobs(p);
    // every row's candidate values, as the reference computes them, then the asked rows copied
    const std::vector<float> logits = detail::materialize_logits(p, threads);
    auto* header = static_cast<RowValuesHeader*>(p.row_values);
    *header = RowValuesHeader{raw ? kRowValuesRawMagic : kRowValuesMagic, static_cast<int32_t>(p.value_row_count),
                              p.vocab_offset, V, p.value_pitch};
    float* out = reinterpret_cast<float*>(header + 1);
    for (int64_t i = 0; i < p.value_row_count; ++i) {
      const float* src = logits.data() + static_cast<int64_t>(p.value_rows[i]) * V;
      float* dst = out + i * p.value_pitch;
      for (int64_t v = 0; v < V; ++v) dst[v] = src[v] > -INFINITY ? src[v] : NAN;  // as the GPU's: NaN
    }
    if (raw) {  // logprobsMode 'raw': the rows' raw logits after their values
      const std::vector<float> raw_logits = detail::materialize_logits(detail::raw_logits_params(p), threads);
      for (int64_t i = 0; i < p.value_row_count; ++i)
        std::copy(raw_logits.begin() + static_cast<int64_t>(p.value_rows[i]) * V,
                  raw_logits.begin() + (static_cast<int64_t>(p.value_rows[i]) + 1) * V,
                  out + (p.value_row_count + i) * p.value_pitch);
    }
  } catch (const std::exception& e) {
    return std::string("shard_row_values: ") + e.what();
  }
  return std::string();
}

std::string decide_row_values(const SampleParams& p, int num_threads) {
  if (p.tokens == nullptr || p.temperature == nullptr || p.seed == nullptr || p.offset == nullptr ||
      p.row_values == nullptr || p.value_rows == nullptr || p.value_row_count < 1 || p.value_row_count > p.batch ||
      p.value_segments < 1 || p.value_segments > kMaxShards || p.value_pitch < 1)
    return "decide_row_values: outputs, per-row inputs or segments are missing";
  const bool raw = reports_raw_logprobs(p);
  if (!row_values_segments_ok(p.row_values, p.value_row_count, p.value_pitch, p.value_segments, p.vocab, raw)) {
    for (int64_t i = 0; i < p.value_row_count; ++i)
      if (p.row_status != nullptr) p.row_status[p.value_rows[i]] = kRowUndecided;
    return std::string();
  }
  try {
    const int64_t V = p.vocab;
    detail::parallel_for(p.value_row_count, detail::resolve_threads(num_threads), [&](int64_t i) {
      const int64_t b = p.value_rows[i];
      std::vector<float> row(static_cast<size_t>(V)), raw_row(raw ? static_cast<size_t>(V) : 0u);
      for (int32_t r = 0; r < p.value_segments; ++r) {
        const RowValuesHeader* h = row_values_segment(p.row_values, p.value_row_count, p.value_pitch, r, raw);
        const float* src = reinterpret_cast<const float*>(h + 1) + i * p.value_pitch;
        std::copy(src, src + h->vocab_size, row.begin() + h->vocab_offset);
        if (raw) {
          const float* raw_src = src + p.value_row_count * p.value_pitch;
          std::copy(raw_src, raw_src + h->vocab_size, raw_row.begin() + h->vocab_offset);
        }
      }
      detail::RowPlan plan;
      detail::reference_row_plan(p, b, row.data(), plan);
      detail::prepare_draw(plan, ReferenceMethod::kGumbel);
      detail::draw_samples(p, b, plan, ReferenceMethod::kGumbel, 0, p.num_samples, nullptr);
      if (raw) detail::write_raw_row(p, b, raw_row.data());  // (over the processed ones just written)
    });
  } catch (const std::exception& e) {
    return std::string("decide_row_values: ") + e.what();
  }
  return std::string();
}

}  // namespace cpu
}  // namespace flashsample
