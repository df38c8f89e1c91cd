// Encoder forward; see encoder.h. Each layer: self-attention sub-layer, then feed-forward.
#include "engine/layers/encoder.h"

#include <cmath>
#include <vector>

#include "engine/core/status_macros.h"
#include "engine/layers/sublayers.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"

namespace tnmt {

namespace k = kernels::cpu;

absl::StatusOr<Tensor> Encode(const ModelConfig& c, const ModelWeights& w, const int32_t* ids,
                              const int32_t* lengths, int batch, int max_len, Workspace* ws) {
  const int d = c.d_model;
  const int64_t rows = static_cast<int64_t>(batch) * max_len;
  TNMT_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({batch, max_len, d}));
  float* x = out.f32();
  std::vector<int32_t> positions(rows);
  for (int64_t r = 0; r < rows; ++r) positions[r] = static_cast<int32_t>(r % max_len);
  Embed(x, ids, positions.data(), rows, c, w.encoder_embed, w.encoder_positions);

  TNMT_ASSIGN_OR_RETURN(float* y, ws->Get(Workspace::kY, rows * d));
  TNMT_ASSIGN_OR_RETURN(float* qkv, ws->Get(Workspace::kQkv, rows * 3 * d));
  TNMT_ASSIGN_OR_RETURN(float* attn, ws->Get(Workspace::kAttn, rows * d));
  k::AttentionArgs args;
  args.batch = batch;
  args.q_len = max_len;
  args.k_len = max_len;
  args.num_heads = c.num_heads;
  args.d_head = c.d_head();
  args.scale = 1.0f / std::sqrt(static_cast<float>(c.d_head()));
  args.k_valid = lengths;
  for (const EncoderLayerWeights& l : w.encoder) {
    const float* in = SublayerInput(x, y, rows, c, l.self_ln);
    ApplyLinear(qkv, in, rows, l.self_qkv);
    k::MultiHeadAttention(attn, d, qkv, 3 * d, qkv + d, qkv + 2 * d, 3 * d,
                          static_cast<int64_t>(max_len) * 3 * d, args);
    ApplyLinear(y, attn, rows, l.self_out);
    FinishSublayer(x, y, rows, c, l.self_ln);
    TNMT_RETURN_IF_ERROR(FeedForward(x, rows, c, l.fc1, l.fc2, l.final_ln, ws));
  }
  if (c.normalize_before) {
    k::LayerNorm(x, x, nullptr, w.encoder_final_ln.gamma.f32(), w.encoder_final_ln.beta.f32(),
                 rows, d, c.layer_norm_epsilon);
  }
  return out;
}

}  // namespace tnmt
