// Transformer building blocks on the GPU; see device_layers.h. Each kernel call is one timed
// call of its category when the Context's timeline is on (kernels/cuda/gpu_timeline.h).
#include "engine/cuda/device_layers.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "kernels/cuda/step_ops.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemm.h"

namespace tnmt::cuda_engine {

namespace kc = kernels::cuda;
using Cat = kernels::TimeCategory;

namespace {

constexpr int64_t kAlign = 256;

int64_t AlignUp(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

absl::Status ActivationBuffer::Ensure(kc::DeviceAllocator& allocator, const ModelConfig& c,
                                      kc::DType dtype, int64_t rows, bool decoder) {
  if (rows <= rows_ && (!decoder || a_.logits != nullptr)) return absl::OkStatus();
  const int64_t d = c.d_model, ff = c.d_ff, V = c.vocab_size;
  const int64_t cap = rows > rows_ ? std::max<int64_t>(rows, 2 * rows_) : rows_;
  // Byte offsets of each region in one allocation.
  int64_t at = 0;
  auto region = [&](int64_t bytes) {
    const int64_t begin = at;
    at += AlignUp(bytes);
    return begin;
  };
  const int64_t x = region(cap * d * 4), y = region(cap * d * 4), qkv = region(cap * 3 * d * 4),
                attn = region(cap * d * 4), hidden = region(cap * ff * 4);
  const int64_t cq = decoder ? region(cap * d * 4) : -1;
  const int64_t logits = decoder ? region(cap * V * 4) : -1;
  const int64_t half =
      dtype != kc::DType::kFloat32 ? region(cap * std::max(d, ff) * kc::DTypeBytes(dtype)) : -1;
  buffer_.Reset();  // stream order makes the old block safe to reuse at once
  a_ = Activations{};
  rows_ = 0;
  absl::StatusOr<kc::DeviceBuffer> b = allocator.Buffer(static_cast<size_t>(at));
  if (!b.ok()) {
    return absl::Status(b.status().code(),
                        absl::StrCat("activations for ", cap, " rows need ", at,
                                     " bytes: ", b.status().message()));
  }
  buffer_ = *std::move(b);
  char* base = buffer_.as<char>();
  a_.x = reinterpret_cast<float*>(base + x);
  a_.y = reinterpret_cast<float*>(base + y);
  a_.qkv = reinterpret_cast<float*>(base + qkv);
  a_.attn = reinterpret_cast<float*>(base + attn);
  a_.hidden = reinterpret_cast<float*>(base + hidden);
  if (cq >= 0) a_.cq = reinterpret_cast<float*>(base + cq);
  if (logits >= 0) a_.logits = reinterpret_cast<float*>(base + logits);
  if (half >= 0) a_.half = base + half;
  rows_ = cap;
  return absl::OkStatus();
}

absl::Status CudaLayerOps::Linear(float* y, const float* x, int64_t rows, const LinearParams& l,
                                  bool activate) const {
  if (rows == 0) return absl::OkStatus();
  if (rows > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("linear layer over ", rows, " rows"));
  }
  const kc::DType t = w_.dtype();
  const void* a = x;
  if (t != kc::DType::kFloat32) {
    TNMT_RETURN_IF_ERROR(
        kc::Timed(ctx_, Cat::kConvert, [&] { return kc::Convert(ctx_, half_, t, x, kc::DType::kFloat32, rows * l.in); }));
    a = half_;
  }
  const bool relu = activate && c_.activation == kernels::Activation::kRelu;
  const bool gelu = activate && !relu;
  kc::GemmOptions o;
  o.ab_type = t;
  o.c_type = kc::DType::kFloat32;
  if (l.bias != nullptr) {
    o.epilogue = relu ? kc::Epilogue::kBiasRelu : kc::Epilogue::kBias;
    o.bias = l.bias;
  }
  TNMT_RETURN_IF_ERROR(kc::Timed(ctx_, Cat::kGemm, [&] {
    return kc::Gemm(ctx_, false, true, static_cast<int>(rows), l.out, l.in, 1.0f, a, l.in, l.weight, l.in, 0.0f, y,
                    l.out, o);
  }));
  // GELU as the CPU's tanh formula (cuBLASLt's GELU epilogue approximates differently).
  if (gelu || (relu && l.bias == nullptr)) {
    TNMT_RETURN_IF_ERROR(kc::Timed(ctx_, Cat::kDropoutResidual,
                                   [&] { return kc::BiasActivation(ctx_, y, nullptr, rows, l.out, c_.activation); }));
  }
  return absl::OkStatus();
}

absl::Status CudaLayerOps::LayerNorm(float* y, const float* x, const float* residual,
                                     int64_t rows, const NormParams& ln) const {
  return kc::Timed(ctx_, Cat::kLayerNormForward, [&] {
    return kc::LayerNorm(ctx_, y, x, residual, ln.gamma, ln.beta, rows, c_.d_model, c_.layer_norm_epsilon);
  });
}

absl::Status CudaLayerOps::Add(float* x, const float* f, int64_t n) const {
  return kc::Timed(ctx_, Cat::kDropoutResidual, [&] { return kc::Add(ctx_, x, x, f, n); });
}

absl::Status CudaLayerOps::Embed(float* x, const int32_t* ids, const int32_t* positions,
                                 int64_t rows, bool decoder) const {
  const int d = c_.d_model;
  const float scale = c_.scale_embedding ? std::sqrt(static_cast<float>(d)) : 1.0f;
  return kc::Timed(ctx_, Cat::kEmbeddingForward, [&] {
    return kc::EmbedTokens(ctx_, x, ids, positions, rows, decoder ? w_.decoder_embed : w_.encoder_embed, w_.dtype(),
                           decoder ? w_.decoder_positions : w_.encoder_positions, d, scale);
  });
}

absl::Status CudaLayerOps::Attention(float* out, int64_t ld_out, const float* q, int64_t ld_q,
                                     const float* k, const float* v, int64_t ld_kv,
                                     int64_t kv_group_stride,
                                     const kernels::AttentionArgs& args) const {
  return kc::Timed(ctx_, Cat::kAttentionForward, [&] {
    return kc::MultiHeadAttention(ctx_, out, ld_out, q, ld_q, k, v, ld_kv, kv_group_stride, args);
  });
}

absl::Status CudaLayerOps::ScatterRows(float* dst, int64_t dst_stride, const int32_t* dst_rows,
                                       const float* src, int64_t src_stride,
                                       const int32_t* src_rows, int64_t count, int width) const {
  return kc::Timed(ctx_, Cat::kCopy, [&] {
    return kc::ScatterRows(ctx_, dst, dst_stride, dst_rows, src, src_stride, src_rows, count, width);
  });
}

absl::Status CudaLayerOps::Logits(float* logits, const float* x, int64_t rows) const {
  DeviceLinear projection;
  projection.weight = w_.output_projection;
  projection.bias = w_.final_logits_bias;  // null unless the model has one
  projection.out = c_.vocab_size;
  projection.in = c_.d_model;
  return Linear(logits, x, rows, projection, /*activate=*/false);
}

}  // namespace tnmt::cuda_engine
