// Shared sub-layer wiring; see sublayers.h.
#include "engine/layers/sublayers.h"

#include <cmath>
#include <cstring>

#include "engine/core/status_macros.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"

namespace tnmt {

namespace k = kernels::cpu;

void ApplyLinear(float* y, const float* x, int64_t rows, const Linear& l) {
  const int out = static_cast<int>(l.weight.dim(0));
  const int in = static_cast<int>(l.weight.dim(1));
  if (k::PreferPacked(static_cast<int>(rows), l.packed)) {  // weights packed at load: bias fused
    k::GemmPacked(static_cast<int>(rows), x, in, l.packed, l.bias.empty() ? nullptr : l.bias.f32(),
                  /*accumulate=*/false, y, out);
    return;
  }
  if (l.bias.empty()) {
    k::GemmNT(static_cast<int>(rows), out, in, 1.0f, x, in, l.weight.f32(), in, 0.0f, y, out);
    return;
  }
  // Start from the bias and accumulate (beta = 1): one pass over y instead of a zeroing pass
  // inside the GEMM plus a bias pass after it.
  for (int64_t r = 0; r < rows; ++r) std::memcpy(y + r * out, l.bias.f32(), sizeof(float) * out);
  k::GemmNT(static_cast<int>(rows), out, in, 1.0f, x, in, l.weight.f32(), in, 1.0f, y, out);
}

void FinishSublayer(float* x, const float* f, int64_t rows, const ModelConfig& c,
                    const LayerNormWeights& ln) {
  if (c.normalize_before) {
    k::Add(x, x, f, rows * c.d_model);
  } else {
    k::LayerNorm(x, x, f, ln.gamma.f32(), ln.beta.f32(), rows, c.d_model, c.layer_norm_epsilon);
  }
}

const float* SublayerInput(const float* x, float* scratch, int64_t rows, const ModelConfig& c,
                           const LayerNormWeights& ln) {
  if (!c.normalize_before) return x;
  k::LayerNorm(scratch, x, nullptr, ln.gamma.f32(), ln.beta.f32(), rows, c.d_model,
               c.layer_norm_epsilon);
  return scratch;
}

absl::Status FeedForward(float* x, int64_t rows, const ModelConfig& c, const Linear& fc1,
                         const Linear& fc2, const LayerNormWeights& ln, Workspace* ws) {
  TNMT_ASSIGN_OR_RETURN(float* y, ws->Get(Workspace::kY, rows * c.d_model));
  TNMT_ASSIGN_OR_RETURN(float* h, ws->Get(Workspace::kHidden, rows * c.d_ff));
  const float* in = SublayerInput(x, y, rows, c, ln);
  if (k::PreferPacked(static_cast<int>(rows), fc1.packed)) {
    k::GemmPacked(static_cast<int>(rows), in, c.d_model, fc1.packed,
                  fc1.bias.empty() ? nullptr : fc1.bias.f32(), /*accumulate=*/false, h, c.d_ff);
    k::BiasActivation(h, nullptr, rows, c.d_ff, c.activation);
  } else {
    k::GemmNT(static_cast<int>(rows), c.d_ff, c.d_model, 1.0f, in, c.d_model, fc1.weight.f32(),
              c.d_model, 0.0f, h, c.d_ff);
    k::BiasActivation(h, fc1.bias.f32(), rows, c.d_ff, c.activation);
  }
  ApplyLinear(y, h, rows, fc2);
  FinishSublayer(x, y, rows, c, ln);
  return absl::OkStatus();
}

void Embed(float* x, const int32_t* ids, const int32_t* positions, int64_t count,
           const ModelConfig& c, const Tensor& table, const Tensor& pos) {
  const float scale = c.scale_embedding ? std::sqrt(static_cast<float>(c.d_model)) : 1.0f;
  k::EmbedTokens(x, ids, positions, count, table.f32(), pos.f32(), c.d_model, scale);
}

}  // namespace tnmt
