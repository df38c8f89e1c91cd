// Linear layer and embedding lookup; see sublayers.h.
#include "engine/layers/sublayers.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/embedding.h"
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

void Embed(float* x, const int32_t* ids, const int32_t* positions, int64_t count,
           const ModelConfig& c, const Tensor& table, const Tensor& pos) {
  const float scale = c.scale_embedding ? std::sqrt(static_cast<float>(c.d_model)) : 1.0f;
  k::EmbedTokens(x, ids, positions, count, table.f32(), pos.f32(), c.d_model, scale);
}

}  // namespace tnmt
