// Training forward/backward; see transformer_train.h.
//
// Each residual sub-layer F is wired as the config says:
//   post-norm: y = LN(x + drop(F(x)))      backward: dr = LN'(dy); dx = dr + F'(drop(dr))
//   pre-norm:  y = x + drop(F(LN(x)))      backward: dx = dy + LN'(F'(drop(dy)))
// Dropout masks come from kernels::cpu::Dropout with a stream id per site, so the backward
// regenerates the forward's mask instead of storing it.
#include "trainer/model/transformer_train.h"

#include <cmath>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/layers/sublayers.h"
#include "kernels/cpu/backward.h"
#include "kernels/cpu/gemm.h"

namespace tnmt::train {

namespace {

namespace k = kernels::cpu;
using Vec = std::vector<float>;

// dx (+)= dy W; gW += dy^T x; gb += colsum(dy). dx may be null.
void LinearBackward(float* dx, bool accumulate, const float* dy, const float* x, int64_t rows,
                    const Linear& l, Linear* g) {
  const int out = static_cast<int>(l.weight.dim(0)), in = static_cast<int>(l.weight.dim(1));
  if (dx != nullptr) {
    k::GemmNN(static_cast<int>(rows), in, out, 1.0f, dy, out, l.weight.f32(), in,
              accumulate ? 1.0f : 0.0f, dx, in);
  }
  k::GemmTN(out, in, static_cast<int>(rows), 1.0f, dy, out, x, in, 1.0f, g->weight.f32(), in);
  if (!l.bias.empty()) k::AccumulateColumnSum(g->bias.f32(), dy, rows, out);
}

// What one residual sub-layer keeps for its backward.
struct SublayerTape {
  Vec x_in;   // input of the sub-layer
  Vec f_in;   // pre-norm: LN(x_in), the input of F
  Vec resid;  // post-norm: x_in + drop(F), the input of LN
};

struct AttentionTape {
  Vec q;      // self: fused [rows, 3d]; cross: [rows, d]
  Vec kv;     // cross only: [src_rows, 2d]
  Vec probs;  // [batch, heads, q_len, k_len]
  Vec ctx;    // [rows, d]
};

struct FfnTape {
  Vec pre;  // fc1 output before the activation
  Vec h;    // after the activation
};

struct LayerTape {
  SublayerTape self_sub, cross_sub, ffn_sub;
  AttentionTape self_attn, cross_attn;
  FfnTape ffn;
};

class Graph {
 public:
  Graph(const ModelConfig& c, const ModelWeights& w, const TrainBatch& b, float dropout, uint64_t seed)
      : c_(c), w_(w), b_(b), d_(c.d_model), p_(dropout), seed_(seed),
        rs_(static_cast<int64_t>(b.batch) * b.src_len), rt_(static_cast<int64_t>(b.batch) * b.tgt_len) {}

  // Forward of the whole model; returns the decoder output [rt, d].
  void Forward() {
    EncoderForward();
    DecoderForward();
  }
  const Vec& decoder_out() const { return dec_out_; }

  // Backward from d(loss)/d(decoder_out).
  void Backward(Vec d_dec_out, ModelWeights* g) {
    Vec d_enc(rs_ * d_, 0.0f);
    DecoderBackward(std::move(d_dec_out), &d_enc, g);
    EncoderBackward(std::move(d_enc), g);
  }

 private:
  // ---- residual wiring ------------------------------------------------------------------
  // Runs F on the sub-layer input and wires the residual; x is updated in place.
  void SublayerForward(Vec* x, SublayerTape* t, const LayerNormWeights& ln, uint64_t stream,
                       const std::function<void(const float* in, float* out)>& f) {
    const int64_t n = static_cast<int64_t>(x->size());
    const int64_t rows = n / d_;
    t->x_in = *x;
    const float* in = x->data();
    if (c_.normalize_before) {
      t->f_in.resize(n);
      k::LayerNorm(t->f_in.data(), x->data(), nullptr, ln.gamma.f32(), ln.beta.f32(), rows, d_, c_.layer_norm_epsilon);
      in = t->f_in.data();
    }
    Vec out(n);
    f(in, out.data());
    k::Dropout(out.data(), n, p_, seed_, stream);
    if (c_.normalize_before) {
      k::Add(x->data(), x->data(), out.data(), n);
    } else {
      t->resid.resize(n);
      k::Add(t->resid.data(), x->data(), out.data(), n);
      k::LayerNorm(x->data(), t->resid.data(), nullptr, ln.gamma.f32(), ln.beta.f32(), rows, d_, c_.layer_norm_epsilon);
    }
  }

  // dx: gradient w.r.t. the sub-layer output, replaced by the gradient w.r.t. its input.
  // f_back(d_out, in, d_in) must write (=) d(F input).
  void SublayerBackward(Vec* dx, const SublayerTape& t, const LayerNormWeights& ln, LayerNormWeights* gln,
                        uint64_t stream,
                        const std::function<void(const float* d_out, const float* in, float* d_in)>& f_back) {
    const int64_t n = static_cast<int64_t>(dx->size());
    const int64_t rows = n / d_;
    Vec d_f(n), d_in(n);
    if (c_.normalize_before) {
      d_f = *dx;
      k::Dropout(d_f.data(), n, p_, seed_, stream);
      f_back(d_f.data(), t.f_in.data(), d_in.data());
      Vec d_ln(n);
      k::LayerNormBackward(d_ln.data(), gln->gamma.f32(), gln->beta.f32(), d_in.data(), t.x_in.data(),
                           ln.gamma.f32(), rows, d_, c_.layer_norm_epsilon);
      k::Add(dx->data(), dx->data(), d_ln.data(), n);
    } else {
      k::LayerNormBackward(dx->data(), gln->gamma.f32(), gln->beta.f32(), dx->data(), t.resid.data(),
                           ln.gamma.f32(), rows, d_, c_.layer_norm_epsilon);
      d_f = *dx;
      k::Dropout(d_f.data(), n, p_, seed_, stream);
      f_back(d_f.data(), t.x_in.data(), d_in.data());
      k::Add(dx->data(), dx->data(), d_in.data(), n);
    }
  }

  // ---- feed-forward ---------------------------------------------------------------------
  void FfnForward(const float* in, float* out, int64_t rows, const Linear& fc1, const Linear& fc2, FfnTape* t) {
    const int64_t nh = rows * c_.d_ff;
    t->pre.resize(nh);
    ApplyLinear(t->pre.data(), in, rows, fc1);
    t->h = t->pre;
    k::BiasActivation(t->h.data(), nullptr, rows, c_.d_ff, c_.activation);
    ApplyLinear(out, t->h.data(), rows, fc2);
  }
  void FfnBackward(const float* d_out, const float* in, float* d_in, int64_t rows, const Linear& fc1,
                   const Linear& fc2, const FfnTape& t, Linear* g1, Linear* g2) {
    Vec dh(rows * c_.d_ff);
    LinearBackward(dh.data(), false, d_out, t.h.data(), rows, fc2, g2);
    k::ActivationBackward(dh.data(), dh.data(), t.pre.data(), static_cast<int64_t>(dh.size()), c_.activation);
    LinearBackward(d_in, false, dh.data(), in, rows, fc1, g1);
  }

  // ---- attention ------------------------------------------------------------------------
  void SelfAttentionForward(const float* in, float* out, int len, bool causal, const int32_t* valid,
                            const Linear& qkv, const Linear& o, AttentionTape* t) {
    const int64_t rows = static_cast<int64_t>(b_.batch) * len;
    t->q.resize(rows * 3 * d_);
    ApplyLinear(t->q.data(), in, rows, qkv);
    t->probs.resize(static_cast<int64_t>(b_.batch) * c_.num_heads * len * len);
    t->ctx.resize(rows * d_);
    const float* q = t->q.data();
    k::AttentionTrainForward(t->ctx.data(), d_, t->probs.data(), q, 3 * d_, q + d_, q + 2 * d_, 3 * d_,
                             b_.batch, len, len, c_.num_heads, c_.d_head(), valid, causal);
    ApplyLinear(out, t->ctx.data(), rows, o);
  }
  void SelfAttentionBackward(const float* d_out, const float* in, float* d_in, int len, const Linear& qkv,
                             const Linear& o, const AttentionTape& t, Linear* gqkv, Linear* go) {
    const int64_t rows = static_cast<int64_t>(b_.batch) * len;
    Vec dctx(rows * d_), dq(rows * 3 * d_, 0.0f), scratch(static_cast<int64_t>(len) * len);
    LinearBackward(dctx.data(), false, d_out, t.ctx.data(), rows, o, go);
    const float* q = t.q.data();
    k::AttentionBackward(dq.data(), 3 * d_, dq.data() + d_, dq.data() + 2 * d_, 3 * d_, dctx.data(), d_,
                         t.probs.data(), q, 3 * d_, q + d_, q + 2 * d_, 3 * d_, b_.batch, len, len,
                         c_.num_heads, c_.d_head(), scratch.data());
    LinearBackward(d_in, false, dq.data(), in, rows, qkv, gqkv);
    ZeroKeyBiasGradient(gqkv->bias.f32() + d_);
  }
  void CrossAttentionForward(const float* in, float* out, const DecoderLayerWeights& l, AttentionTape* t) {
    t->q.resize(rt_ * d_);
    ApplyLinear(t->q.data(), in, rt_, l.cross_q);
    t->kv.resize(rs_ * 2 * d_);
    ApplyLinear(t->kv.data(), enc_out_.data(), rs_, l.cross_kv);
    t->probs.resize(static_cast<int64_t>(b_.batch) * c_.num_heads * b_.tgt_len * b_.src_len);
    t->ctx.resize(rt_ * d_);
    k::AttentionTrainForward(t->ctx.data(), d_, t->probs.data(), t->q.data(), d_, t->kv.data(),
                             t->kv.data() + d_, 2 * d_, b_.batch, b_.tgt_len, b_.src_len, c_.num_heads,
                             c_.d_head(), b_.src_lengths.data(), false);
    ApplyLinear(out, t->ctx.data(), rt_, l.cross_out);
  }
  void CrossAttentionBackward(const float* d_out, const float* in, float* d_in, const DecoderLayerWeights& l,
                              const AttentionTape& t, DecoderLayerWeights* g, Vec* d_enc) {
    Vec dctx(rt_ * d_), dq(rt_ * d_), dkv(rs_ * 2 * d_, 0.0f);
    Vec scratch(static_cast<int64_t>(b_.tgt_len) * b_.src_len);
    LinearBackward(dctx.data(), false, d_out, t.ctx.data(), rt_, l.cross_out, &g->cross_out);
    k::AttentionBackward(dq.data(), d_, dkv.data(), dkv.data() + d_, 2 * d_, dctx.data(), d_, t.probs.data(),
                         t.q.data(), d_, t.kv.data(), t.kv.data() + d_, 2 * d_, b_.batch, b_.tgt_len,
                         b_.src_len, c_.num_heads, c_.d_head(), scratch.data());
    LinearBackward(d_in, false, dq.data(), in, rt_, l.cross_q, &g->cross_q);
    LinearBackward(d_enc->data(), true, dkv.data(), enc_out_.data(), rs_, l.cross_kv, &g->cross_kv);
    ZeroKeyBiasGradient(g->cross_kv.bias.f32());
  }

  // The key projection's bias adds the same q·b to every score of a query, which softmax
  // cancels: its gradient is exactly zero, and what float arithmetic leaves there is rounding
  // noise that Adam would amplify to full-size steps. So it is set to the exact value, 0.
  void ZeroKeyBiasGradient(float* key_bias_grad) const { std::memset(key_bias_grad, 0, sizeof(float) * d_); }

  // ---- stacks ---------------------------------------------------------------------------
  static constexpr uint64_t kEncoderStream = 1000, kDecoderStream = 2000;

  void Embed(Vec* x, const std::vector<int32_t>& ids, int len, const Tensor& table, const Tensor& pos,
             uint64_t stream) {
    const int64_t rows = static_cast<int64_t>(b_.batch) * len;
    std::vector<int32_t> positions(rows);
    for (int64_t r = 0; r < rows; ++r) positions[r] = static_cast<int32_t>(r % len);
    x->resize(rows * d_);
    tnmt::Embed(x->data(), ids.data(), positions.data(), rows, c_, table, pos);
    k::Dropout(x->data(), rows * d_, p_, seed_, stream);
  }
  void EmbedBackward(Vec* dx, const std::vector<int32_t>& ids, int len, Tensor* g_table, Tensor* g_pos,
                     uint64_t stream) {
    const int64_t rows = static_cast<int64_t>(b_.batch) * len;
    k::Dropout(dx->data(), rows * d_, p_, seed_, stream);
    std::vector<int32_t> positions(rows);
    for (int64_t r = 0; r < rows; ++r) positions[r] = static_cast<int32_t>(r % len);
    const float scale = c_.scale_embedding ? std::sqrt(static_cast<float>(d_)) : 1.0f;
    const bool learned = c_.position_encoding == PositionEncoding::kLearned;
    k::EmbeddingBackward(g_table->f32(), learned ? g_pos->f32() : nullptr, dx->data(), ids.data(),
                         positions.data(), rows, d_, scale);
  }

  void EncoderForward() {
    Vec x;
    Embed(&x, b_.src, b_.src_len, w_.encoder_embed, w_.encoder_positions, kEncoderStream);
    enc_tapes_.resize(w_.encoder.size());
    for (size_t i = 0; i < w_.encoder.size(); ++i) {
      const EncoderLayerWeights& l = w_.encoder[i];
      LayerTape& t = enc_tapes_[i];
      const uint64_t s = kEncoderStream + 10 * (i + 1);
      SublayerForward(&x, &t.self_sub, l.self_ln, s, [&](const float* in, float* out) {
        SelfAttentionForward(in, out, b_.src_len, false, b_.src_lengths.data(), l.self_qkv, l.self_out, &t.self_attn);
      });
      SublayerForward(&x, &t.ffn_sub, l.final_ln, s + 1, [&](const float* in, float* out) {
        FfnForward(in, out, rs_, l.fc1, l.fc2, &t.ffn);
      });
    }
    if (c_.normalize_before) {
      enc_final_in_ = x;
      k::LayerNorm(x.data(), x.data(), nullptr, w_.encoder_final_ln.gamma.f32(), w_.encoder_final_ln.beta.f32(),
                   rs_, d_, c_.layer_norm_epsilon);
    }
    enc_out_ = std::move(x);
  }

  void EncoderBackward(Vec dx, ModelWeights* g) {
    if (c_.normalize_before) {
      k::LayerNormBackward(dx.data(), g->encoder_final_ln.gamma.f32(), g->encoder_final_ln.beta.f32(), dx.data(),
                           enc_final_in_.data(), w_.encoder_final_ln.gamma.f32(), rs_, d_, c_.layer_norm_epsilon);
    }
    for (int i = static_cast<int>(w_.encoder.size()) - 1; i >= 0; --i) {
      const EncoderLayerWeights& l = w_.encoder[i];
      EncoderLayerWeights& gl = g->encoder[i];
      const LayerTape& t = enc_tapes_[i];
      const uint64_t s = kEncoderStream + 10 * (i + 1);
      SublayerBackward(&dx, t.ffn_sub, l.final_ln, &gl.final_ln, s + 1,
                       [&](const float* d_out, const float* in, float* d_in) {
                         FfnBackward(d_out, in, d_in, rs_, l.fc1, l.fc2, t.ffn, &gl.fc1, &gl.fc2);
                       });
      SublayerBackward(&dx, t.self_sub, l.self_ln, &gl.self_ln, s,
                       [&](const float* d_out, const float* in, float* d_in) {
                         SelfAttentionBackward(d_out, in, d_in, b_.src_len, l.self_qkv, l.self_out, t.self_attn,
                                               &gl.self_qkv, &gl.self_out);
                       });
    }
    EmbedBackward(&dx, b_.src, b_.src_len, &g->encoder_embed, &g->encoder_positions, kEncoderStream);
  }

  void DecoderForward() {
    Vec x;
    Embed(&x, b_.tgt_in, b_.tgt_len, w_.decoder_embed, w_.decoder_positions, kDecoderStream);
    dec_tapes_.resize(w_.decoder.size());
    for (size_t i = 0; i < w_.decoder.size(); ++i) {
      const DecoderLayerWeights& l = w_.decoder[i];
      LayerTape& t = dec_tapes_[i];
      const uint64_t s = kDecoderStream + 10 * (i + 1);
      SublayerForward(&x, &t.self_sub, l.self_ln, s, [&](const float* in, float* out) {
        SelfAttentionForward(in, out, b_.tgt_len, true, nullptr, l.self_qkv, l.self_out, &t.self_attn);
      });
      SublayerForward(&x, &t.cross_sub, l.cross_ln, s + 1, [&](const float* in, float* out) {
        CrossAttentionForward(in, out, l, &t.cross_attn);
      });
      SublayerForward(&x, &t.ffn_sub, l.final_ln, s + 2, [&](const float* in, float* out) {
        FfnForward(in, out, rt_, l.fc1, l.fc2, &t.ffn);
      });
    }
    if (c_.normalize_before) {
      dec_final_in_ = x;
      k::LayerNorm(x.data(), x.data(), nullptr, w_.decoder_final_ln.gamma.f32(), w_.decoder_final_ln.beta.f32(),
                   rt_, d_, c_.layer_norm_epsilon);
    }
    dec_out_ = std::move(x);
  }

  void DecoderBackward(Vec dx, Vec* d_enc, ModelWeights* g) {
    if (c_.normalize_before) {
      k::LayerNormBackward(dx.data(), g->decoder_final_ln.gamma.f32(), g->decoder_final_ln.beta.f32(), dx.data(),
                           dec_final_in_.data(), w_.decoder_final_ln.gamma.f32(), rt_, d_, c_.layer_norm_epsilon);
    }
    for (int i = static_cast<int>(w_.decoder.size()) - 1; i >= 0; --i) {
      const DecoderLayerWeights& l = w_.decoder[i];
      DecoderLayerWeights& gl = g->decoder[i];
      const LayerTape& t = dec_tapes_[i];
      const uint64_t s = kDecoderStream + 10 * (i + 1);
      SublayerBackward(&dx, t.ffn_sub, l.final_ln, &gl.final_ln, s + 2,
                       [&](const float* d_out, const float* in, float* d_in) {
                         FfnBackward(d_out, in, d_in, rt_, l.fc1, l.fc2, t.ffn, &gl.fc1, &gl.fc2);
                       });
      SublayerBackward(&dx, t.cross_sub, l.cross_ln, &gl.cross_ln, s + 1,
                       [&](const float* d_out, const float* in, float* d_in) {
                         CrossAttentionBackward(d_out, in, d_in, l, t.cross_attn, &gl, d_enc);
                       });
      SublayerBackward(&dx, t.self_sub, l.self_ln, &gl.self_ln, s,
                       [&](const float* d_out, const float* in, float* d_in) {
                         SelfAttentionBackward(d_out, in, d_in, b_.tgt_len, l.self_qkv, l.self_out, t.self_attn,
                                               &gl.self_qkv, &gl.self_out);
                       });
    }
    EmbedBackward(&dx, b_.tgt_in, b_.tgt_len, &g->decoder_embed, &g->decoder_positions, kDecoderStream);
  }

  const ModelConfig& c_;
  const ModelWeights& w_;
  const TrainBatch& b_;
  const int d_;
  const float p_;
  const uint64_t seed_;
  const int64_t rs_, rt_;
  std::vector<LayerTape> enc_tapes_, dec_tapes_;
  Vec enc_final_in_, dec_final_in_, enc_out_, dec_out_;
};

absl::StatusOr<LossStats> Run(const ModelConfig& c, const ModelWeights& w, const TrainBatch& b,
                              float dropout, float eps, uint64_t seed, float loss_scale, ModelWeights* g) {
  TNMT_RETURN_IF_ERROR(ValidateBatch(c, b));
  Graph graph(c, w, b, dropout, seed);
  graph.Forward();
  const int64_t rows = static_cast<int64_t>(b.batch) * b.tgt_len;
  const int V = c.vocab_size, d = c.d_model;
  Vec logits(rows * V);
  const Vec& h = graph.decoder_out();
  k::GemmNT(static_cast<int>(rows), V, d, 1.0f, h.data(), d, w.output_projection.f32(), d, 0.0f, logits.data(), V);
  LossStats stats;
  stats.loss_sum = k::LabelSmoothedCrossEntropy(logits.data(), b.tgt_out.data(), rows, V, eps, c.pad_id,
                                                &stats.nll_sum, &stats.tokens);
  if (g == nullptr) return stats;
  for (float& x : logits) x *= loss_scale;
  Vec dh(rows * d);
  k::GemmNN(static_cast<int>(rows), d, V, 1.0f, logits.data(), V, w.output_projection.f32(), d, 0.0f, dh.data(), d);
  k::GemmTN(V, d, static_cast<int>(rows), 1.0f, logits.data(), V, h.data(), d, 1.0f, g->output_projection.f32(), d);
  graph.Backward(std::move(dh), g);
  return stats;
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
  return Run(c, params, batch, o.dropout, o.label_smoothing, o.dropout_seed, loss_scale, grads);
}

absl::StatusOr<LossStats> EvaluateLoss(const ModelConfig& c, const ModelWeights& params, const TrainBatch& batch,
                                       float label_smoothing) {
  return Run(c, params, batch, 0.0f, label_smoothing, 0, 1.0f, nullptr);
}

}  // namespace tnmt::train
