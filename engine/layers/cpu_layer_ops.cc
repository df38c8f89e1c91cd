// CPU layer operations; see cpu_layer_ops.h.
#include "engine/layers/cpu_layer_ops.h"

#include "engine/layers/sublayers.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/step_ops.h"

namespace tnmt {

namespace k = kernels::cpu;

absl::Status CpuLayerOps::Linear(float* y, const float* x, int64_t rows, const LinearParams& l,
                                 bool activate) const {
  if (!activate) {
    ApplyLinear(y, x, rows, l);
    return absl::OkStatus();
  }
  // The activation pass adds the bias too, unless the packed GEMM fused it (and a ReLU with it:
  // then there is no pass).
  const int out = static_cast<int>(l.weight.dim(0));
  const int in = static_cast<int>(l.weight.dim(1));
  const float* bias = l.bias.empty() ? nullptr : l.bias.f32();
  if (k::PreferPacked(static_cast<int>(rows), l.packed)) {
    const bool relu = c_.activation == kernels::Activation::kRelu;
    k::GemmPacked(static_cast<int>(rows), x, in, l.packed, bias, /*accumulate=*/false, y, out, relu);
    if (relu) return absl::OkStatus();
    bias = nullptr;
  } else {
    k::GemmNT(static_cast<int>(rows), out, in, 1.0f, x, in, l.weight.f32(), in, 0.0f, y, out);
  }
  k::ParallelForLarge(rows, out, [&](int64_t begin, int64_t end) {
    k::BiasActivation(y + begin * out, bias, end - begin, out, c_.activation);
  });
  return absl::OkStatus();
}

absl::Status CpuLayerOps::LayerNorm(float* y, const float* x, const float* residual, int64_t rows,
                                    const NormParams& ln) const {
  k::LayerNorm(y, x, residual, ln.gamma.f32(), ln.beta.f32(), rows, c_.d_model,
               c_.layer_norm_epsilon);
  return absl::OkStatus();
}

absl::Status CpuLayerOps::Add(float* x, const float* f, int64_t n) const {
  k::Add(x, x, f, n);
  return absl::OkStatus();
}

absl::Status CpuLayerOps::Embed(float* x, const int32_t* ids, const int32_t* positions,
                                int64_t rows, bool decoder) const {
  ::tnmt::Embed(x, ids, positions, rows, c_, decoder ? w_.decoder_embed : w_.encoder_embed,
                decoder ? w_.decoder_positions : w_.encoder_positions);
  return absl::OkStatus();
}

absl::Status CpuLayerOps::Attention(float* out, int64_t ld_out, const float* q, int64_t ld_q,
                                    const float* k, const float* v, int64_t ld_kv,
                                    int64_t kv_group_stride,
                                    const kernels::cpu::AttentionArgs& args) const {
  k::MultiHeadAttention(out, ld_out, q, ld_q, k, v, ld_kv, kv_group_stride, args);
  return absl::OkStatus();
}

absl::Status CpuLayerOps::ScatterRows(float* dst, int64_t dst_stride, const int32_t* dst_rows,
                                      const float* src, int64_t src_stride,
                                      const int32_t* src_rows, int64_t count, int width) const {
  k::ScatterRows(dst, dst_stride, dst_rows, src, src_stride, src_rows, count, width);
  return absl::OkStatus();
}

absl::Status CpuLayerOps::Logits(float* logits, const float* x, int64_t rows) const {
  const int d = c_.d_model;
  const float* bias = c_.final_logits_bias ? w_.final_logits_bias.f32() : nullptr;
  if (k::PreferPacked(static_cast<int>(rows), w_.output_projection_packed)) {
    k::GemmPacked(static_cast<int>(rows), x, d, w_.output_projection_packed, bias,
                  /*accumulate=*/false, logits, c_.vocab_size);
  } else {
    k::GemmNT(static_cast<int>(rows), c_.vocab_size, d, 1.0f, x, d, w_.output_projection.f32(), d,
              0.0f, logits, c_.vocab_size);
    if (bias != nullptr) k::AddBias(logits, bias, rows, c_.vocab_size);
  }
  return absl::OkStatus();
}

}  // namespace tnmt
