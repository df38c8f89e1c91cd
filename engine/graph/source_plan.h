// The encoder's rows for a batch of sources, packed without padding: the valid positions of
// sentence 0, then sentence 1, ...; no padding row is computed on any device. Each packed row
// is one query group of the encoder's self-attention whose K/V group is its sentence's first
// row: group g's keys are rows g, g + 1, ..., g + valid[g] - 1 of the [rows, 3d] QKV buffer
// (kv_group_stride = ld_kv = 3d, the kernels' attention contract). Host-side bookkeeping only;
// a device uploads the arrays and runs graph::EncodeRows with SourceSelfAttention's arguments.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/graph/transformer.h"
#include "engine/model/config.h"

namespace tnmt::graph {

struct SourcePlan {
  int64_t rows = 0;                // valid positions: lengths[0] + ... + lengths[batch - 1]
  int max_len = 0;                 // the longest sentence's length bound (keys per group)
  std::vector<int32_t> ids;        // [rows] token ids
  std::vector<int32_t> positions;  // [rows] position of the row inside its sentence
  std::vector<int32_t> group;      // [rows] the first row of the row's sentence (its K/V group)
  std::vector<int32_t> valid;      // [rows] keys of K/V group g (a sentence's length at its
                                   // first row, 0 elsewhere)
};

// ids: [batch, max_len], sentence b valid for lengths[b] tokens (1 <= lengths[b] <= max_len);
// errors name a bad length (KvIndex::SourcePositions' checks) or more rows than an int32 holds.
absl::StatusOr<SourcePlan> PlanSource(const int32_t* ids, const int32_t* lengths, int batch,
                                      int max_len);

// The encoder self-attention over `plan`'s rows with the model's heads; group and valid are
// the plan's arrays in the memory of the device that runs the attention.
AttentionArgs SourceSelfAttention(const ModelConfig& c, const SourcePlan& plan,
                                  const int32_t* group, const int32_t* valid);

// The encoder over a plan into a.x: [plan.rows, d]; ids, positions, group, valid: the plan's
// arrays in the device's memory.
template <class Ops>
absl::Status EncodePlanned(const Ops& ops, const Activations& a, const SourcePlan& plan,
                           const int32_t* ids, const int32_t* positions, const int32_t* group,
                           const int32_t* valid) {
  const int64_t ld = 3 * static_cast<int64_t>(ops.config().d_model);
  return EncodeRows(ops, a, ids, positions, plan.rows,
                    SourceSelfAttention(ops.config(), plan, group, valid),
                    /*kv_group_stride=*/ld, /*ld_kv=*/ld);
}

}  // namespace tnmt::graph
