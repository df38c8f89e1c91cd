// Decoder forward and KV cache; see decoder.h.
#include "engine/layers/decoder.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/layers/sublayers.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"

namespace tnmt {

namespace k = kernels::cpu;

absl::StatusOr<DecoderState> DecoderState::Create(const ModelConfig& c, const ModelWeights& w,
                                                  const Tensor& encoder_out,
                                                  const int32_t* src_lengths, int max_rows,
                                                  int max_steps) {
  if (max_steps > MaxPositions(c)) {
    return absl::InvalidArgumentError(absl::StrCat("decoding ", max_steps,
                                                   " positions exceeds the model's limit of ",
                                                   MaxPositions(c)));
  }
  DecoderState s;
  const int d = c.d_model;
  const int batch = static_cast<int>(encoder_out.dim(0));
  s.d_model_ = d;
  s.max_rows_ = max_rows;
  s.max_steps_ = max_steps;
  s.src_max_ = static_cast<int>(encoder_out.dim(1));
  s.src_lengths_.assign(src_lengths, src_lengths + batch);
  const int64_t src_rows = static_cast<int64_t>(batch) * s.src_max_;
  for (const DecoderLayerWeights& l : w.decoder) {
    TNMT_ASSIGN_OR_RETURN(Tensor kv, Tensor::Empty({batch, s.src_max_, 2 * d}));
    ApplyLinear(kv.f32(), encoder_out.f32(), src_rows, l.cross_kv);
    s.cross_kv_.push_back(std::move(kv));
    TNMT_ASSIGN_OR_RETURN(Tensor cache, Tensor::Empty({max_rows, max_steps, 2 * d}));
    s.self_kv_.push_back(std::move(cache));
  }
  s.slots_.assign(static_cast<size_t>(max_rows) * max_steps, 0);
  s.spare_slots_ = s.slots_;
  return s;
}

absl::Status DecoderState::Start(std::vector<int32_t> kv_index) {
  if (static_cast<int>(kv_index.size()) > max_rows_) {
    return absl::InvalidArgumentError("DecoderState::Start: more rows than capacity");
  }
  kv_index_ = std::move(kv_index);
  rows_ = static_cast<int>(kv_index_.size());
  steps_ = 0;
  return absl::OkStatus();
}

absl::Status DecoderState::Reorder(const std::vector<int32_t>& parents) {
  const int n = static_cast<int>(parents.size());
  if (n > max_rows_) return absl::InvalidArgumentError("DecoderState::Reorder: too many rows");
  for (int32_t p : parents) {
    if (p < 0 || p >= rows_) return absl::InvalidArgumentError("DecoderState::Reorder: bad parent");
  }
  for (int i = 0; i < n; ++i) {
    std::copy(slots_.begin() + static_cast<int64_t>(parents[i]) * max_steps_,
              slots_.begin() + static_cast<int64_t>(parents[i]) * max_steps_ + steps_,
              spare_slots_.begin() + static_cast<int64_t>(i) * max_steps_);
  }
  std::swap(slots_, spare_slots_);
  std::vector<int32_t> kv(n);
  for (int i = 0; i < n; ++i) kv[i] = kv_index_[parents[i]];
  kv_index_ = std::move(kv);
  rows_ = n;
  return absl::OkStatus();
}

absl::Status DecoderForward(const ModelConfig& c, const ModelWeights& w, DecoderState* s,
                            const int32_t* ids, int t_new, float* logits, Workspace* ws) {
  const int d = c.d_model;
  const int start = s->steps_;
  if (start + t_new > s->max_steps_) {
    return absl::OutOfRangeError(absl::StrCat("decoder cache holds ", s->max_steps_,
                                              " positions; step ", start + t_new, " requested"));
  }
  const int n = s->rows_;
  const int64_t rows = static_cast<int64_t>(n) * t_new;
  TNMT_ASSIGN_OR_RETURN(float* x, ws->Get(Workspace::kX, rows * d));
  TNMT_ASSIGN_OR_RETURN(float* y, ws->Get(Workspace::kY, rows * d));
  TNMT_ASSIGN_OR_RETURN(float* qkv, ws->Get(Workspace::kQkv, rows * 3 * d));
  TNMT_ASSIGN_OR_RETURN(float* attn, ws->Get(Workspace::kAttn, rows * d));
  TNMT_ASSIGN_OR_RETURN(float* cq, ws->Get(Workspace::kCrossQ, rows * d));
  std::vector<int32_t> positions(rows);
  for (int64_t r = 0; r < rows; ++r) positions[r] = start + static_cast<int32_t>(r % t_new);
  Embed(x, ids, positions.data(), rows, c, w.decoder_embed, w.decoder_positions);

  const int64_t cache_stride = static_cast<int64_t>(s->max_steps_) * 2 * d;
  k::AttentionArgs self_args;
  self_args.batch = n;
  self_args.q_len = t_new;
  self_args.k_len = start + t_new;
  self_args.num_heads = c.num_heads;
  self_args.d_head = c.d_head();
  self_args.scale = 1.0f / std::sqrt(static_cast<float>(c.d_head()));
  self_args.causal_offset = start;
  self_args.k_groups = s->slots_.data();
  self_args.k_groups_stride = s->max_steps_;
  k::AttentionArgs cross_args = self_args;
  cross_args.k_len = s->src_max_;
  cross_args.causal_offset = -1;
  cross_args.k_groups = nullptr;
  for (int r = 0; r < n; ++r) {
    for (int p = start; p < start + t_new; ++p) s->slots_[static_cast<int64_t>(r) * s->max_steps_ + p] = r;
  }
  cross_args.kv_index = s->kv_index_.data();
  cross_args.k_valid = s->src_lengths_.data();

  for (size_t li = 0; li < w.decoder.size(); ++li) {
    const DecoderLayerWeights& l = w.decoder[li];
    float* cache = s->self_kv_[li].f32();
    // Self-attention over the cache (this call's positions written first).
    const float* in = SublayerInput(x, y, rows, c, l.self_ln);
    ApplyLinear(qkv, in, rows, l.self_qkv);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = r / t_new, pos = start + r % t_new;
      std::memcpy(cache + row * cache_stride + pos * 2 * d, qkv + r * 3 * d + d,
                  sizeof(float) * 2 * d);
    }
    k::MultiHeadAttention(attn, d, qkv, 3 * d, cache, cache + d, 2 * d, cache_stride, self_args);
    ApplyLinear(y, attn, rows, l.self_out);
    FinishSublayer(x, y, rows, c, l.self_ln);
    // Cross-attention over the source.
    in = SublayerInput(x, y, rows, c, l.cross_ln);
    ApplyLinear(cq, in, rows, l.cross_q);
    const float* kv = s->cross_kv_[li].f32();
    k::MultiHeadAttention(attn, d, cq, d, kv, kv + d, 2 * d,
                          static_cast<int64_t>(s->src_max_) * 2 * d, cross_args);
    ApplyLinear(y, attn, rows, l.cross_out);
    FinishSublayer(x, y, rows, c, l.cross_ln);
    TNMT_RETURN_IF_ERROR(FeedForward(x, rows, c, l.fc1, l.fc2, l.final_ln, ws));
  }
  if (c.normalize_before) {
    k::LayerNorm(x, x, nullptr, w.decoder_final_ln.gamma.f32(), w.decoder_final_ln.beta.f32(),
                 rows, d, c.layer_norm_epsilon);
  }
  s->steps_ += t_new;
  if (logits != nullptr) {
    k::GemmNT(static_cast<int>(rows), c.vocab_size, d, 1.0f, x, d, w.output_projection.f32(), d,
              0.0f, logits, c.vocab_size);
  }
  return absl::OkStatus();
}

}  // namespace tnmt
