// Encoder forward on the CPU: the graph's encoder (engine/graph/transformer.h) over
// CpuLayerOps, on the sentences' positions packed without padding (engine/graph/source_plan.h);
// see encoder.h.
#include "engine/layers/encoder.h"

#include <cstring>

#include "engine/core/status_macros.h"
#include "engine/graph/source_plan.h"
#include "engine/layers/cpu_layer_ops.h"

namespace tnmt {

absl::StatusOr<Tensor> EncodeRows(const ModelConfig& c, const ModelWeights& w, const int32_t* ids,
                                  const int32_t* lengths, int batch, int max_len, Workspace* ws) {
  if (batch < 1 || max_len < 1) return absl::InvalidArgumentError("encoding an empty batch");
  const int d = c.d_model;
  TNMT_ASSIGN_OR_RETURN(const graph::SourcePlan plan, graph::PlanSource(ids, lengths, batch, max_len));
  const int64_t rows = plan.rows;
  TNMT_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({rows, d}));
  graph::Activations a;
  a.x = out.f32();
  TNMT_ASSIGN_OR_RETURN(a.y, ws->Get(Workspace::kY, rows * d));
  TNMT_ASSIGN_OR_RETURN(a.qkv, ws->Get(Workspace::kQkv, rows * 3 * d));
  TNMT_ASSIGN_OR_RETURN(a.attn, ws->Get(Workspace::kAttn, rows * d));
  TNMT_ASSIGN_OR_RETURN(a.hidden, ws->Get(Workspace::kHidden, rows * c.d_ff));
  TNMT_RETURN_IF_ERROR(graph::EncodePlanned(CpuLayerOps(c, w), a, plan, plan.ids.data(), plan.positions.data(),
                                            plan.group.data(), plan.valid.data()));
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
