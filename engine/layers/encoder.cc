// Encoder forward on the CPU: the graph's EncodeRows (engine/graph/transformer.h) over
// CpuLayerOps, on the sentences' positions packed without padding; see encoder.h.
#include "engine/layers/encoder.h"

#include <cstring>
#include <vector>

#include "engine/core/status_macros.h"
#include "engine/graph/kv_index.h"
#include "engine/graph/transformer.h"
#include "engine/layers/cpu_layer_ops.h"

namespace tnmt {

absl::StatusOr<Tensor> EncodeRows(const ModelConfig& c, const ModelWeights& w, const int32_t* ids,
                                  const int32_t* lengths, int batch, int max_len, Workspace* ws) {
  if (batch < 1 || max_len < 1) return absl::InvalidArgumentError("encoding an empty batch");
  const int d = c.d_model;
  // The valid positions packed one sentence after another; row r attends to the keys of its
  // sentence, which start at row start[r] (the K/V group of r is that row: group g's keys are
  // rows g, g + 1, ..., g + valid[g] - 1).
  TNMT_ASSIGN_OR_RETURN(const int64_t rows, graph::KvIndex::SourcePositions(lengths, batch, max_len));
  std::vector<int32_t> packed_ids(rows), positions(rows), start(rows), valid(rows, 0);
  int64_t r = 0;
  for (int b = 0; b < batch; ++b) {
    const int32_t first = static_cast<int32_t>(r);
    valid[first] = lengths[b];
    for (int j = 0; j < lengths[b]; ++j, ++r) {
      packed_ids[r] = ids[static_cast<int64_t>(b) * max_len + j];
      positions[r] = j;
      start[r] = first;
    }
  }
  TNMT_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({rows, d}));
  graph::Activations a;
  a.x = out.f32();
  TNMT_ASSIGN_OR_RETURN(a.y, ws->Get(Workspace::kY, rows * d));
  TNMT_ASSIGN_OR_RETURN(a.qkv, ws->Get(Workspace::kQkv, rows * 3 * d));
  TNMT_ASSIGN_OR_RETURN(a.attn, ws->Get(Workspace::kAttn, rows * d));
  TNMT_ASSIGN_OR_RETURN(a.hidden, ws->Get(Workspace::kHidden, rows * c.d_ff));
  graph::AttentionArgs self = graph::ModelAttention(c);
  self.batch = static_cast<int>(rows);  // one query per group: its own row
  self.q_len = 1;
  self.k_len = max_len;
  self.kv_index = start.data();
  self.k_valid = valid.data();
  TNMT_RETURN_IF_ERROR(graph::EncodeRows(CpuLayerOps(c, w), a, packed_ids.data(), positions.data(), rows,
                                         self, /*kv_group_stride=*/3 * d, /*ld_kv=*/3 * d));
  return out;
}

absl::StatusOr<Tensor> Encode(const ModelConfig& c, const ModelWeights& w, const int32_t* ids,
                              const int32_t* lengths, int batch, int max_len, Workspace* ws) {
  TNMT_ASSIGN_OR_RETURN(Tensor rows, EncodeRows(c, w, ids, lengths, batch, max_len, ws));
  const int d = c.d_model;
  TNMT_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({batch, max_len, d}));
  const float* from = rows.f32();
  for (int b = 0; b < batch; ++b) {
    std::memcpy(out.f32() + static_cast<int64_t>(b) * max_len * d, from, sizeof(float) * lengths[b] * d);
    from += static_cast<int64_t>(lengths[b]) * d;
  }
  return out;
}

}  // namespace tnmt
