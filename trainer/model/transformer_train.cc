// Training forward/backward on the CPU: TrainGraph (train_graph.h) over kernels/cpu.
#include "trainer/model/transformer_train.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/layers/sublayers.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/loss.h"
#include "trainer/model/train_graph.h"

namespace tnmt::train {

namespace {

namespace k = kernels::cpu;

std::atomic<bool> poison_buffers{false};

// A parameter group with its gradient (null when there is no backward).
struct CpuLinear {
  const Linear* w = nullptr;
  Linear* g = nullptr;
};
struct CpuNorm {
  const LayerNormWeights* w = nullptr;
  LayerNormWeights* g = nullptr;
};
struct CpuTrainWeights {
  std::vector<EncoderLayerParams<CpuLinear, CpuNorm>> encoder;
  std::vector<DecoderLayerParams<CpuLinear, CpuNorm>> decoder;
  CpuNorm encoder_final_ln, decoder_final_ln;
};

// The trees of parameters and (when g is not null) gradients, group by group.
CpuTrainWeights PairWithGradients(const ModelWeights& w, ModelWeights* g) {
  auto visitor = MakeParamVisitor(
      [](const LinearGroup&, CpuLinear& r, const Linear& lw, auto&... lg) {
        r.w = &lw;
        ((r.g = &lg), ...);
      },
      [](const char*, CpuNorm& r, const LayerNormWeights& nw, auto&... ng) {
        r.w = &nw;
        ((r.g = &ng), ...);
      });
  CpuTrainWeights t;
  t.encoder.resize(w.encoder.size());
  t.decoder.resize(w.decoder.size());
  for (size_t i = 0; i < w.encoder.size(); ++i) {
    if (g != nullptr) {
      VisitEncoderLayer(visitor, t.encoder[i], w.encoder[i], g->encoder[i]);
    } else {
      VisitEncoderLayer(visitor, t.encoder[i], w.encoder[i]);
    }
  }
  for (size_t i = 0; i < w.decoder.size(); ++i) {
    if (g != nullptr) {
      VisitDecoderLayer(visitor, t.decoder[i], w.decoder[i], g->decoder[i]);
    } else {
      VisitDecoderLayer(visitor, t.decoder[i], w.decoder[i]);
    }
  }
  t.encoder_final_ln = {&w.encoder_final_ln, g != nullptr ? &g->encoder_final_ln : nullptr};
  t.decoder_final_ln = {&w.decoder_final_ln, g != nullptr ? &g->decoder_final_ln : nullptr};
  return t;
}

// TrainGraph's operations over kernels/cpu for one batch; the loss sums stay here.
class CpuTrainOps {
 public:
  using Buffer = Tensor;  // [n] float32; new ones are not zeroed (every op writes before it reads)
  using LinearParams = CpuLinear;
  using NormParams = CpuNorm;
  using Weights = CpuTrainWeights;

  // bf16_logit_gradient: the losses may leave the logit gradient as bfloat16 (bfloat16 GEMMs on AMX;
  // the gradient is then not scaled: loss scale 1).
  CpuTrainOps(const ModelConfig& c, const ModelWeights& w, ModelWeights* g, const TrainBatch& b, bool bf16,
              bool bf16_logit_gradient)
      : c_(c), w_(w), g_(g), b_(b), tree_(PairWithGradients(w, g)), d_(c.d_model), bf16_(bf16),
        bf16_logit_gradient_(bf16 && bf16_logit_gradient && k::UseAmxBf16()),
        src_positions_(Positions(b.batch, b.src_len)), tgt_positions_(Positions(b.batch, b.tgt_len)) {}

  const ModelConfig& config() const { return c_; }
  const Weights& weights() const { return tree_; }
  const LossStats& stats() const { return stats_; }

  float* Data(const Buffer& b) const { return b.empty() ? nullptr : b.f32(); }
  absl::StatusOr<Buffer> Alloc(int64_t n) {
    TNMT_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({n}));
    if (poison_buffers.load(std::memory_order_relaxed)) {
      std::fill(t.f32(), t.f32() + n, std::numeric_limits<float>::quiet_NaN());
    }
    return t;
  }
  absl::StatusOr<Buffer> Zeros(int64_t n) { return Tensor::Zeros({n}); }
  absl::StatusOr<Buffer> Copy(const float* x, int64_t n) {
    TNMT_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({n}));
    k::Copy(t.f32(), x, n);
    return t;
  }

  absl::Status Linear(float* y, const float* x, int64_t rows, const CpuLinear& l) {
    if (!bf16_) {
      ApplyLinear(y, x, rows, *l.w);
      return absl::OkStatus();
    }
    const ::tnmt::Linear& w = *l.w;
    const int out = static_cast<int>(w.weight.dim(0)), in = static_cast<int>(w.weight.dim(1));
    k::GemmBf16(false, true, static_cast<int>(rows), out, in, x, in, w.weight.f32(), in,
                w.bias.empty() ? nullptr : w.bias.f32(), false, y, out);
    return absl::OkStatus();
  }
  absl::Status LinearBackward(float* dx, bool accumulate, const float* dy, const float* x, int64_t rows,
                              const CpuLinear& l) {
    const ::tnmt::Linear& w = *l.w;
    const int out = static_cast<int>(w.weight.dim(0)), in = static_cast<int>(w.weight.dim(1));
    if (dx != nullptr) {
      Gemm(false, false, static_cast<int>(rows), in, out, dy, out, w.weight.f32(), in, accumulate, dx, in);
    }
    Gemm(true, false, out, in, static_cast<int>(rows), dy, out, x, in, true, l.g->weight.f32(), in);
    if (!w.bias.empty()) k::AccumulateColumnSum(l.g->bias.f32(), dy, rows, out);
    return absl::OkStatus();
  }
  absl::Status ZeroBiasGradient(const CpuLinear& l, int64_t begin, int64_t count) {
    std::memset(l.g->bias.f32() + begin, 0, sizeof(float) * count);
    return absl::OkStatus();
  }

  absl::Status LayerNorm(float* y, const float* x, int64_t rows, const CpuNorm& ln) {
    k::LayerNorm(y, x, nullptr, ln.w->gamma.f32(), ln.w->beta.f32(), rows, d_, c_.layer_norm_epsilon);
    return absl::OkStatus();
  }
  absl::Status LayerNormBackward(float* dx, const float* dy, const float* x, int64_t rows, const CpuNorm& ln) {
    k::LayerNormBackward(dx, ln.g->gamma.f32(), ln.g->beta.f32(), dy, x, ln.w->gamma.f32(), rows, d_,
                         c_.layer_norm_epsilon);
    return absl::OkStatus();
  }
  absl::Status Add(float* y, const float* x, int64_t n) {
    k::Add(y, y, x, n);
    return absl::OkStatus();
  }
  absl::Status ActivationDropout(float* x, int64_t rows, int cols, float p, uint64_t seed, uint64_t stream) {
    k::ActivationDropout(x, rows, cols, c_.activation, p, seed, stream);
    return absl::OkStatus();
  }
  absl::Status DropoutActivationBackward(float* dx, const float* pre, int64_t n, float p, uint64_t seed,
                                         uint64_t stream) {
    k::DropoutActivationBackward(dx, pre, n, c_.activation, p, seed, stream);
    return absl::OkStatus();
  }
  absl::Status Dropout(float* x, int64_t n, float p, uint64_t seed, uint64_t stream) {
    k::Dropout(x, n, p, seed, stream);
    return absl::OkStatus();
  }
  absl::Status DropoutFrom(float* y, const float* x, int64_t n, float p, uint64_t seed, uint64_t stream) {
    k::DropoutFrom(y, x, n, p, seed, stream);
    return absl::OkStatus();
  }
  absl::Status DropoutAdd(float* y, const float* x, int64_t n, float p, uint64_t seed, uint64_t stream) {
    k::DropoutAdd(y, x, n, p, seed, stream);
    return absl::OkStatus();
  }

  absl::Status AttentionForward(float* out, int64_t ld_out, float* probs, const float* q, int64_t ld_q,
                                const float* kk, const float* v, int64_t ld_kv, int q_len, int k_len,
                                bool source_keys, bool causal, float dropout, uint64_t seed, uint64_t stream) {
    k::AttentionTrainForward(out, ld_out, probs, q, ld_q, kk, v, ld_kv, b_.batch, q_len, k_len, c_.num_heads,
                             c_.d_head(), source_keys ? b_.src_lengths.data() : nullptr, causal,
                             k::AttentionDropout{dropout, seed, stream});
    return absl::OkStatus();
  }
  absl::Status AttentionBackward(float* dq, int64_t ld_dq, float* dk, float* dv, int64_t ld_dkv, const float* dout,
                                 int64_t ld_dout, const float* probs, const float* q, int64_t ld_q, const float* kk,
                                 const float* v, int64_t ld_kv, int q_len, int k_len, float dropout, uint64_t seed,
                                 uint64_t stream) {
    k::AttentionBackward(dq, ld_dq, dk, dv, ld_dkv, dout, ld_dout, probs, q, ld_q, kk, v, ld_kv, b_.batch, q_len,
                         k_len, c_.num_heads, c_.d_head(), k::AttentionDropout{dropout, seed, stream});
    return absl::OkStatus();
  }

  absl::Status Embed(float* x, bool decoder) {
    const int64_t rows = Rows(decoder);
    tnmt::Embed(x, Ids(decoder), PositionsOf(decoder), rows, c_, decoder ? w_.decoder_embed : w_.encoder_embed,
                decoder ? w_.decoder_positions : w_.encoder_positions);
    return absl::OkStatus();
  }
  absl::Status EmbedBackward(const float* dx, bool decoder) {
    const float scale = c_.scale_embedding ? std::sqrt(static_cast<float>(d_)) : 1.0f;
    const bool learned = c_.position_encoding == PositionEncoding::kLearned;
    Tensor& table = decoder ? g_->decoder_embed : g_->encoder_embed;
    Tensor& pos = decoder ? g_->decoder_positions : g_->encoder_positions;
    k::EmbeddingBackward(table.f32(), learned ? pos.f32() : nullptr, dx, Ids(decoder), PositionsOf(decoder),
                         Rows(decoder), d_, scale);
    return absl::OkStatus();
  }

  absl::Status Logits(float* logits, const float* h, int64_t rows) {
    const int V = c_.vocab_size;
    Gemm(false, true, static_cast<int>(rows), V, d_, h, d_, w_.output_projection.f32(), d_, false, logits, V);
    return absl::OkStatus();
  }
  absl::Status Loss(float* logits, int64_t rows, float label_smoothing) {
    // bfloat16 GEMMs on AMX: the gradient is stored as bfloat16 in place (the same values the
    // GEMMs would round it to), which LogitsBackward's GEMMs read directly: half the bytes of the
    // largest tensor of a step to write and read twice.
    const auto loss = bf16_logit_gradient_ ? k::LabelSmoothedCrossEntropyBf16 : k::LabelSmoothedCrossEntropy;
    stats_.loss_sum = loss(logits, b_.tgt_out.data(), rows, c_.vocab_size, label_smoothing, c_.pad_id,
                           &stats_.nll_sum, &stats_.tokens);
    return absl::OkStatus();
  }
  absl::Status LossWithRDrop(float* logits, int64_t rows, float label_smoothing, float alpha) {
    TNMT_RETURN_IF_ERROR(CheckDoubledForRDrop(b_));
    const auto loss =
        bf16_logit_gradient_ ? k::LabelSmoothedCrossEntropyWithRDropBf16 : k::LabelSmoothedCrossEntropyWithRDrop;
    stats_.loss_sum = loss(logits, b_.tgt_out.data(), rows / 2, c_.vocab_size, label_smoothing, alpha, c_.pad_id,
                           &stats_.nll_sum, &stats_.tokens, 0);
    return absl::OkStatus();
  }
  absl::Status Scale(float* x, int64_t n, float s) {
    if (bf16_logit_gradient_) return absl::InternalError("a bfloat16 logit gradient is not scaled (loss scale 1 only)");
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
    return absl::OkStatus();
  }
  absl::Status LogitsBackward(float* dh, const float* dlogits, const float* h, int64_t rows) {
    const int V = c_.vocab_size, r = static_cast<int>(rows);
    if (bf16_logit_gradient_) {
      const uint16_t* g = reinterpret_cast<const uint16_t*>(dlogits);  // row stride 2V (Loss)
      k::GemmBf16A(false, false, r, d_, V, g, 2 * V, w_.output_projection.f32(), d_, nullptr, false, dh, d_);
      k::GemmBf16A(true, false, V, d_, r, g, 2 * V, h, d_, nullptr, true, g_->output_projection.f32(), d_);
      return absl::OkStatus();
    }
    Gemm(false, false, r, d_, V, dlogits, V, w_.output_projection.f32(), d_, false, dh, d_);
    Gemm(true, false, V, d_, r, dlogits, V, h, d_, true, g_->output_projection.f32(), d_);
    return absl::OkStatus();
  }
  absl::Status Done(int) { return absl::OkStatus(); }

 private:
  // c = op(a) · op(b) (+ c when accumulate) in this batch's precision: bfloat16 operands
  // (GemmBf16) or float32 (OpenBLAS). (trans_a, trans_b) is one of GemmNT's (false, true),
  // GemmNN's (false, false) and GemmTN's (true, false); see kernels/cpu/gemm.h.
  void Gemm(bool trans_a, bool trans_b, int m, int n, int kk, const float* a, int lda, const float* b, int ldb,
            bool accumulate, float* c, int ldc) const {
    if (bf16_) {
      k::GemmBf16(trans_a, trans_b, m, n, kk, a, lda, b, ldb, nullptr, accumulate, c, ldc);
      return;
    }
    const float beta = accumulate ? 1.0f : 0.0f;
    if (trans_a) {
      k::GemmTN(m, n, kk, 1.0f, a, lda, b, ldb, beta, c, ldc);
    } else if (trans_b) {
      k::GemmNT(m, n, kk, 1.0f, a, lda, b, ldb, beta, c, ldc);
    } else {
      k::GemmNN(m, n, kk, 1.0f, a, lda, b, ldb, beta, c, ldc);
    }
  }

  static std::vector<int32_t> Positions(int batch, int len) {
    std::vector<int32_t> p(static_cast<size_t>(batch) * len);
    for (size_t r = 0; r < p.size(); ++r) p[r] = static_cast<int32_t>(r % len);
    return p;
  }
  int64_t Rows(bool decoder) const { return static_cast<int64_t>(b_.batch) * (decoder ? b_.tgt_len : b_.src_len); }
  const int32_t* Ids(bool decoder) const { return decoder ? b_.tgt_in.data() : b_.src.data(); }
  const int32_t* PositionsOf(bool decoder) const {
    return decoder ? tgt_positions_.data() : src_positions_.data();
  }

  const ModelConfig& c_;
  const ModelWeights& w_;
  ModelWeights* g_;
  const TrainBatch& b_;
  const CpuTrainWeights tree_;
  const int d_;
  const bool bf16_;  // TrainStepOptions::bfloat16_gemms
  const bool bf16_logit_gradient_;  // the losses leave the logit gradient as bfloat16 (row stride 2V)
  const std::vector<int32_t> src_positions_, tgt_positions_;
  LossStats stats_;
};

absl::StatusOr<LossStats> Run(const ModelConfig& c, const ModelWeights& w, const TrainBatch& b,
                              const DropoutRates& dropout, float eps, float rdrop_alpha, uint64_t seed,
                              float loss_scale, bool bf16, ModelWeights* g) {
  TNMT_RETURN_IF_ERROR(ValidateBatch(c, b));
  CpuTrainOps ops(c, w, g, b, bf16, /*bf16_logit_gradient=*/loss_scale == 1.0f);
  TrainGraph<CpuTrainOps> graph(ops, b.batch, b.src_len, b.tgt_len, dropout, seed);
  TNMT_RETURN_IF_ERROR(graph.Forward());
  TNMT_RETURN_IF_ERROR(graph.LossAndBackward(eps, rdrop_alpha, loss_scale, /*backward=*/g != nullptr));
  return ops.stats();
}

}  // namespace

absl::Status ValidateBatch(const ModelConfig& c, const TrainBatch& b) {
  if (b.batch <= 0 || b.src_len <= 0 || b.tgt_len <= 0) return absl::InvalidArgumentError("empty batch");
  const size_t ns = static_cast<size_t>(b.batch) * b.src_len, nt = static_cast<size_t>(b.batch) * b.tgt_len;
  if (b.src.size() != ns || b.tgt_in.size() != nt || b.tgt_out.size() != nt ||
      b.src_lengths.size() != static_cast<size_t>(b.batch)) {
    return absl::InvalidArgumentError("batch arrays do not match batch x length");
  }
  if (b.src_len > MaxPositions(c) || b.tgt_len > MaxPositions(c)) {
    return absl::InvalidArgumentError(absl::StrCat("batch length exceeds the model's ", MaxPositions(c), " positions"));
  }
  for (int32_t len : b.src_lengths) {
    if (len < 1 || len > b.src_len) return absl::InvalidArgumentError("source length out of range");
  }
  for (const auto* ids : {&b.src, &b.tgt_in, &b.tgt_out}) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= c.vocab_size) return absl::InvalidArgumentError(absl::StrCat("token id ", id, " outside the vocabulary"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LossStats> ForwardBackward(const ModelConfig& c, const ModelWeights& params, const TrainBatch& batch,
                                          const TrainStepOptions& o, float loss_scale, ModelWeights* grads) {
  return Run(c, params, batch, o.rates(), o.label_smoothing, o.rdrop_alpha, o.dropout_seed, loss_scale,
             o.bfloat16_gemms, grads);
}

TrainBatch DoubleForRDrop(const TrainBatch& b) {
  TrainBatch d = b;
  d.batch = 2 * b.batch;
  for (auto [to, from] : {std::pair{&d.src, &b.src}, std::pair{&d.src_lengths, &b.src_lengths},
                          std::pair{&d.tgt_in, &b.tgt_in}, std::pair{&d.tgt_out, &b.tgt_out}}) {
    to->insert(to->end(), from->begin(), from->end());
  }
  return d;
}

absl::Status CheckDoubledForRDrop(const TrainBatch& b) {
  const auto halves_equal = [](const std::vector<int32_t>& v) {
    const size_t h = v.size() / 2;
    return v.size() % 2 == 0 && std::equal(v.begin(), v.begin() + h, v.begin() + h);
  };
  if (b.batch % 2 != 0 || !halves_equal(b.src) || !halves_equal(b.src_lengths) || !halves_equal(b.tgt_in) ||
      !halves_equal(b.tgt_out)) {
    return absl::InvalidArgumentError("R-Drop needs a doubled batch (DoubleForRDrop): its two halves differ");
  }
  return absl::OkStatus();
}

void PoisonNewBuffersForTesting(bool on) { poison_buffers.store(on, std::memory_order_relaxed); }

absl::StatusOr<LossStats> EvaluateLoss(const ModelConfig& c, const ModelWeights& params, const TrainBatch& batch,
                                       float label_smoothing) {
  return Run(c, params, batch, DropoutRates{}, label_smoothing, /*rdrop_alpha=*/0.0f, 0, 1.0f, /*bf16=*/false, nullptr);
}

}  // namespace tnmt::train
