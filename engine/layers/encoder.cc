// Encoder forward on the CPU: the graph's Encode (engine/graph/transformer.h) over
// CpuLayerOps; see encoder.h.
#include "engine/layers/encoder.h"

#include <vector>

#include "engine/core/status_macros.h"
#include "engine/graph/transformer.h"
#include "engine/layers/cpu_layer_ops.h"

namespace tnmt {

absl::StatusOr<Tensor> Encode(const ModelConfig& c, const ModelWeights& w, const int32_t* ids,
                              const int32_t* lengths, int batch, int max_len, Workspace* ws) {
  const int d = c.d_model;
  const int64_t rows = static_cast<int64_t>(batch) * max_len;
  TNMT_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({batch, max_len, d}));
  graph::Activations a;
  a.x = out.f32();
  TNMT_ASSIGN_OR_RETURN(a.y, ws->Get(Workspace::kY, rows * d));
  TNMT_ASSIGN_OR_RETURN(a.qkv, ws->Get(Workspace::kQkv, rows * 3 * d));
  TNMT_ASSIGN_OR_RETURN(a.attn, ws->Get(Workspace::kAttn, rows * d));
  TNMT_ASSIGN_OR_RETURN(a.hidden, ws->Get(Workspace::kHidden, rows * c.d_ff));
  std::vector<int32_t> positions(rows);
  for (int64_t r = 0; r < rows; ++r) positions[r] = static_cast<int32_t>(r % max_len);
  TNMT_RETURN_IF_ERROR(
      graph::Encode(CpuLayerOps(c, w), a, ids, positions.data(), lengths, batch, max_len));
  return out;
}

}  // namespace tnmt
