// PlanSource: the packed encoder rows of a batch of sources (source_plan.h).
#include "engine/graph/source_plan.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/graph/kv_index.h"

namespace tnmt::graph {

absl::StatusOr<SourcePlan> PlanSource(const int32_t* ids, const int32_t* lengths, int batch,
                                      int max_len) {
  SourcePlan p;
  TNMT_ASSIGN_OR_RETURN(p.rows, KvIndex::SourcePositions(lengths, batch, max_len));
  if (p.rows > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("encoding ", p.rows, " source positions at once (at most ", INT32_MAX, ")"));
  }
  p.max_len = max_len;
  p.ids.resize(p.rows);
  p.positions.resize(p.rows);
  p.group.resize(p.rows);
  p.valid.assign(p.rows, 0);
  int64_t r = 0;
  for (int b = 0; b < batch; ++b) {
    const int32_t first = static_cast<int32_t>(r);
    p.valid[first] = lengths[b];
    for (int j = 0; j < lengths[b]; ++j, ++r) {
      p.ids[r] = ids[static_cast<int64_t>(b) * max_len + j];
      p.positions[r] = j;
      p.group[r] = first;
    }
  }
  return p;
}

AttentionArgs SourceSelfAttention(const ModelConfig& c, const SourcePlan& plan,
                                  const int32_t* group, const int32_t* valid) {
  AttentionArgs a = ModelAttention(c);
  a.batch = static_cast<int>(plan.rows);  // one query per group: its own row
  a.q_len = 1;
  a.k_len = plan.max_len;
  a.kv_index = group;
  a.k_valid = valid;
  return a;
}

}  // namespace tnmt::graph
