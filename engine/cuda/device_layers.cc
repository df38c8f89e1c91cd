// Transformer building blocks on the GPU; see device_layers.h.
#include "engine/cuda/device_layers.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "kernels/cuda/step_ops.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/decode_ops.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/train_backward.h"  // AddInPlace

namespace tnmt::cuda_engine {

namespace kc = kernels::cuda;

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

absl::Status DeviceLayers::Linear(float* y, const float* x, int64_t rows, const DeviceLinear& l,
                                  void* half, bool activate) const {
  if (rows == 0) return absl::OkStatus();
  if (rows > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("linear layer over ", rows, " rows"));
  }
  const kc::DType t = w_.dtype();
  const void* a = x;
  if (t != kc::DType::kFloat32) {
    TNMT_RETURN_IF_ERROR(kc::Convert(half, t, x, kc::DType::kFloat32, rows * l.in, ctx_.stream()));
    a = half;
  }
  const bool relu = activate && c_.activation == kernels::cpu::Activation::kRelu;
  const bool gelu = activate && !relu;
  kc::GemmOptions o;
  o.ab_type = t;
  o.c_type = kc::DType::kFloat32;
  if (l.bias != nullptr) {
    o.epilogue = relu ? kc::Epilogue::kBiasRelu : kc::Epilogue::kBias;
    o.bias = l.bias;
  }
  TNMT_RETURN_IF_ERROR(kc::Gemm(ctx_, false, true, static_cast<int>(rows), l.out, l.in, 1.0f, a,
                                l.in, l.weight, l.in, 0.0f, y, l.out, o));
  // GELU as the CPU's tanh formula (cuBLASLt's GELU epilogue approximates differently).
  if (gelu || (relu && l.bias == nullptr)) {
    TNMT_RETURN_IF_ERROR(kc::BiasActivation(y, nullptr, rows, l.out, gelu, ctx_.stream()));
  }
  return absl::OkStatus();
}

absl::Status DeviceLayers::FinishSublayer(float* x, const float* f, int64_t rows,
                                          const DeviceLayerNorm& ln) const {
  if (c_.normalize_before) return kc::AddInPlace(ctx_, x, f, rows * c_.d_model);
  return kc::LayerNorm(x, x, f, ln.gamma, ln.beta, rows, c_.d_model, c_.layer_norm_epsilon,
                       ctx_.stream());
}

absl::StatusOr<const float*> DeviceLayers::SublayerInput(const float* x, float* scratch,
                                                         int64_t rows,
                                                         const DeviceLayerNorm& ln) const {
  if (!c_.normalize_before) return x;
  TNMT_RETURN_IF_ERROR(kc::LayerNorm(scratch, x, nullptr, ln.gamma, ln.beta, rows, c_.d_model,
                                     c_.layer_norm_epsilon, ctx_.stream()));
  return static_cast<const float*>(scratch);
}

absl::Status DeviceLayers::FeedForward(float* x, int64_t rows, const DeviceLinear& fc1,
                                       const DeviceLinear& fc2, const DeviceLayerNorm& ln,
                                       const Activations& a) const {
  TNMT_ASSIGN_OR_RETURN(const float* in, SublayerInput(x, a.y, rows, ln));
  TNMT_RETURN_IF_ERROR(Linear(a.hidden, in, rows, fc1, a.half, /*activate=*/true));
  TNMT_RETURN_IF_ERROR(Linear(a.y, a.hidden, rows, fc2, a.half));
  return FinishSublayer(x, a.y, rows, ln);
}

absl::Status DeviceLayers::FinalLayerNorm(float* x, int64_t rows, const DeviceLayerNorm& ln) const {
  return kc::LayerNorm(x, x, nullptr, ln.gamma, ln.beta, rows, c_.d_model, c_.layer_norm_epsilon,
                       ctx_.stream());
}

absl::Status DeviceLayers::Encode(const Activations& a, const int32_t* ids,
                                  const int32_t* positions, const int32_t* lengths, int batch,
                                  int src_max) const {
  const int d = c_.d_model;
  const int64_t rows = static_cast<int64_t>(batch) * src_max;
  const float scale = c_.scale_embedding ? std::sqrt(static_cast<float>(d)) : 1.0f;
  TNMT_RETURN_IF_ERROR(kc::EmbedTokens(a.x, ids, positions, rows, w_.encoder_embed, w_.dtype(),
                                       w_.encoder_positions, d, scale, ctx_.stream()));
  kc::AttentionArgs args;
  args.batch = batch;
  args.q_len = src_max;
  args.k_len = src_max;
  args.num_heads = c_.num_heads;
  args.d_head = c_.d_head();
  args.scale = 1.0f / std::sqrt(static_cast<float>(c_.d_head()));
  args.k_valid = lengths;
  for (const DeviceEncoderLayer& l : w_.encoder) {
    TNMT_ASSIGN_OR_RETURN(const float* in, SublayerInput(a.x, a.y, rows, l.self_ln));
    TNMT_RETURN_IF_ERROR(Linear(a.qkv, in, rows, l.self_qkv, a.half));
    TNMT_RETURN_IF_ERROR(kc::MultiHeadAttention(a.attn, d, a.qkv, 3 * d, a.qkv + d, a.qkv + 2 * d,
                                                3 * d, static_cast<int64_t>(src_max) * 3 * d, args,
                                                ctx_.stream()));
    TNMT_RETURN_IF_ERROR(Linear(a.y, a.attn, rows, l.self_out, a.half));
    TNMT_RETURN_IF_ERROR(FinishSublayer(a.x, a.y, rows, l.self_ln));
    TNMT_RETURN_IF_ERROR(FeedForward(a.x, rows, l.fc1, l.fc2, l.final_ln, a));
  }
  if (c_.normalize_before) TNMT_RETURN_IF_ERROR(FinalLayerNorm(a.x, rows, w_.encoder_final_ln));
  return absl::OkStatus();
}

}  // namespace tnmt::cuda_engine
