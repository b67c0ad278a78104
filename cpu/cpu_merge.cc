// merge_partials on the CPU: include/merge.h's row merge over the rows, on the pool.
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
  status[0] = check_partials(p, set, p.options_hash, has_filters(p), &status[1]);
  if (status[0] != kPartialOk) return std::string();
  status[2] = largest_shard(set);
  try {
    const int64_t stride = merge_scratch_keys(p, set);
    std::vector<uint64_t> merged(static_cast<size_t>(p.batch * stride));
    std::vector<double> chunk_mass(static_cast<size_t>(p.batch * merge_chunks(stride)));
    const MergeScratch scratch{merged.data(), chunk_mass.data(), stride};
    detail::parallel_for(p.batch, detail::resolve_threads(num_threads),
                         [&](int64_t b) { merge_partial_row(p, set, b, scratch); });
  } catch (const std::exception& e) {
    return std::string("merge_partials: ") + e.what();
  }
  return std::string();
}

}  // namespace cpu
}  // namespace flashsample
