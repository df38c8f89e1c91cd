// The Transformer's training graph, written once over a device's training operations: the
// forward of one batch keeping what the backward needs (tapes), the label-smoothed loss, and
// the backward in reverse order. The CPU (transformer_train.cc over CpuTrainOps) and one GPU
// (cuda_train_model.cc over CudaTrainOps) both run it; only the operations and where memory
// lives differ, so the dropout streams, the residual wiring and the order in which gradients
// become final are the same on both.
//
// Each residual sub-layer F is wired as the config says:
//   post-norm: y = LN(x + drop(F(x)))      backward: dr = LN'(dy); dx = dr + F'(drop(dr))
//   pre-norm:  y = x + drop(F(LN(x)))      backward: dx = dy + LN'(F'(drop(dy)))
// Dropout (DropoutRates): residual dropout on each sub-layer's output and on the embeddings;
// attention dropout on the probabilities that multiply the values; activation dropout on the
// feed-forward's hidden layer after its activation. Masks depend on (seed, stream, element)
// only, so the backward regenerates the forward's mask instead of storing it; the stream ids
// below are part of that contract.
//
// An `Ops` type provides (pointers in the device's memory; calls may queue work in order):
//   using Buffer = ...;  // owns floats; movable; a default-constructed one is empty
//   using LinearParams = ...; using NormParams = ...;
//   using Weights = ...;  // fields encoder, decoder (EncoderLayerParams / DecoderLayerParams
//                         // over LinearParams, NormParams), encoder_final_ln, decoder_final_ln
//   const ModelConfig& config() const;  const Weights& weights() const;
//   float* Data(const Buffer&) const;
//   StatusOr<Buffer> Alloc(int64_t n);   // contents unspecified
//   StatusOr<Buffer> Zeros(int64_t n);
//   StatusOr<Buffer> Copy(const float* x, int64_t n);
//   Status Linear(float* y, const float* x, int64_t rows, const LinearParams&);  // y = x W^T + b
//   Status LinearBackward(float* dx, bool accumulate, const float* dy, const float* x,
//                         int64_t rows, const LinearParams&);  // dx (+)= dy W (dx may be null);
//                                                              // gW += dy^T x; gb += colsum(dy)
//   Status ZeroBiasGradient(const LinearParams&, int64_t begin, int64_t count);
//   Status LayerNorm(float* y, const float* x, int64_t rows, const NormParams&);
//   Status LayerNormBackward(float* dx, const float* dy, const float* x, int64_t rows,
//                            const NormParams&);  // dx may alias dy; gamma/beta grads +=
//   Status Add(float* y, const float* x, int64_t n);  // y += x
//   Status ActivationDropout(float* x, int64_t rows, int cols, float p, uint64_t seed,
//                            uint64_t stream);  // x = Dropout of the config's activation of x
//   Status DropoutActivationBackward(float* dx, const float* pre, int64_t n, float p,
//                                    uint64_t seed, uint64_t stream);  // dx = act'(pre) * drop(dx)
//   Status Dropout(float* x, int64_t n, float p, uint64_t seed, uint64_t stream);  // the
//       // counter-RNG mask of kernels/cpu/dropout.h (p == 0: nothing)
//   Status DropoutFrom(float* y, const float* x, int64_t n, float p, uint64_t seed,
//                      uint64_t stream);  // y = Dropout of x (p == 0: a copy)
//   Status DropoutAdd(float* y, const float* x, int64_t n, float p, uint64_t seed,
//                     uint64_t stream);  // y = Dropout of y, + x (each element as Dropout, Add)
//   Status AttentionForward(float* out, int64_t ld_out, float* probs, const float* q,
//                           int64_t ld_q, const float* k, const float* v, int64_t ld_kv,
//                           int q_len, int k_len, bool source_keys, bool causal,
//                           float dropout, uint64_t seed, uint64_t stream);
//   Status AttentionBackward(float* dq, int64_t ld_dq, float* dk, float* dv, int64_t ld_dkv,
//                            const float* dout, int64_t ld_dout, const float* probs,
//                            const float* q, int64_t ld_q, const float* k, const float* v,
//                            int64_t ld_kv, int q_len, int k_len,
//                            float dropout, uint64_t seed, uint64_t stream);
//       // kernels/cpu/attention.h contracts over the batch's groups (dropout: its
//       // AttentionDropout); source_keys: keys beyond a row's source length are masked
//   Status Embed(float* x, bool decoder);  // the batch's source or target-input tokens
//   Status EmbedBackward(const float* dx, bool decoder);
//   Status Logits(float* logits, const float* h, int64_t rows);  // output projection
//   Status Loss(float* logits, int64_t rows, float label_smoothing);  // in place: logits become
//       // d(summed loss)/d(logits); the ops keep the sums
//   Status LossWithRDrop(float* logits, int64_t rows, float label_smoothing, float alpha);
//       // Loss of a doubled batch (DoubleForRDrop) plus R-Drop's consistency term between its
//       // halves (kernels/cpu/loss.h RDropConsistency): in place, its gradient; the ops keep
//       // the sums, the term in the loss sum
//   Status Scale(float* x, int64_t n, float s);
//   Status LogitsBackward(float* dh, const float* dlogits, const float* h, int64_t rows);
//   Status Done(int stage);  // the backward has finished `stage` (BackwardStages)
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/status_macros.h"
#include "engine/model/config.h"

namespace tnmt::train {

// The backward's stages, numbered in the order TrainGraph finishes them.
struct BackwardStages {
  int encoder_layers = 0, decoder_layers = 0;

  int output() const { return 0; }  // logits: the output projection
  int decoder_final_ln() const { return 1; }  // pre-norm only (empty otherwise)
  int decoder_layer(int i) const { return 2 + (decoder_layers - 1 - i); }
  int decoder_embed() const { return 2 + decoder_layers; }
  int encoder_final_ln() const { return 3 + decoder_layers; }
  int encoder_layer(int i) const { return 4 + decoder_layers + (encoder_layers - 1 - i); }
  int encoder_embed() const { return 4 + decoder_layers + encoder_layers; }
  int count() const { return encoder_embed() + 1; }
};

// Dropout probabilities; 0 turns a kind off.
struct DropoutRates {
  float residual = 0.0f;    // sub-layer outputs and embeddings+positions (the paper's P_drop)
  float attention = 0.0f;   // attention probabilities
  float activation = 0.0f;  // the feed-forward's hidden layer, after the activation
};

template <class Ops>
class TrainGraph {
 public:
  using Buffer = typename Ops::Buffer;
  using Lin = typename Ops::LinearParams;
  using Norm = typename Ops::NormParams;

  // ops: over the batch (batch rows, source and target lengths as given) and the weights.
  TrainGraph(Ops& ops, int batch, int src_len, int tgt_len, const DropoutRates& dropout, uint64_t seed)
      : ops_(ops), c_(ops.config()), d_(c_.d_model), batch_(batch), src_len_(src_len), tgt_len_(tgt_len),
        p_(dropout.residual), p_attn_(dropout.attention), p_act_(dropout.activation), seed_(seed),
        rs_(static_cast<int64_t>(batch) * src_len),
        rt_(static_cast<int64_t>(batch) * tgt_len) {
    stages_.encoder_layers = static_cast<int>(ops.weights().encoder.size());
    stages_.decoder_layers = static_cast<int>(ops.weights().decoder.size());
  }

  absl::Status Forward() {
    TNMT_RETURN_IF_ERROR(EncoderForward());
    return DecoderForward();
  }

  // Logits and the loss (the ops keep its sums); with `backward`, the gradients of
  // loss_scale * (summed loss), stage by stage. rdrop_alpha > 0 (training only): the batch is
  // doubled (DoubleForRDrop: its second half repeats the first under other dropout masks)
  // and R-Drop's consistency term between the halves joins the loss.
  absl::Status LossAndBackward(float label_smoothing, float rdrop_alpha, float loss_scale, bool backward) {
    const int64_t n_logits = rt_ * c_.vocab_size;
    TNMT_ASSIGN_OR_RETURN(Buffer logits, ops_.Alloc(n_logits));
    TNMT_RETURN_IF_ERROR(ops_.Logits(D(logits), D(dec_out_), rt_));
    if (rdrop_alpha > 0.0f) {
      TNMT_RETURN_IF_ERROR(ops_.LossWithRDrop(D(logits), rt_, label_smoothing, rdrop_alpha));
    } else {
      TNMT_RETURN_IF_ERROR(ops_.Loss(D(logits), rt_, label_smoothing));
    }
    if (!backward) return absl::OkStatus();
    if (loss_scale != 1.0f) TNMT_RETURN_IF_ERROR(ops_.Scale(D(logits), n_logits, loss_scale));
    TNMT_ASSIGN_OR_RETURN(Buffer dh, ops_.Alloc(rt_ * d_));
    TNMT_RETURN_IF_ERROR(ops_.LogitsBackward(D(dh), D(logits), D(dec_out_), rt_));
    logits = Buffer();
    TNMT_RETURN_IF_ERROR(ops_.Done(stages_.output()));
    TNMT_ASSIGN_OR_RETURN(Buffer d_enc, ops_.Zeros(rs_ * d_));
    TNMT_RETURN_IF_ERROR(DecoderBackward(std::move(dh), D(d_enc)));
    return EncoderBackward(std::move(d_enc));
  }

 private:
  // What one residual sub-layer keeps for its backward.
  struct SublayerTape {
    Buffer x_in;   // input of the sub-layer
    Buffer f_in;   // pre-norm: LN(x_in), the input of F
    Buffer resid;  // post-norm: x_in + drop(F), the input of LN
  };
  struct AttentionTape {
    Buffer q;      // self: fused [rows, 3d]; cross: [rows, d]
    Buffer kv;     // cross only: [src_rows, 2d]
    Buffer probs;  // [batch, heads, q_len, k_len]
    Buffer ctx;    // [rows, d]
  };
  struct FfnTape {
    Buffer pre;  // fc1 output before the activation: [rows, d_ff] (empty for ReLU)
    Buffer h;    // after the activation
  };
  struct LayerTape {
    SublayerTape self_sub, cross_sub, ffn_sub;
    AttentionTape self_attn, cross_attn;
    FfnTape ffn;
  };

  // Streams: a layer's sub-layers use LayerStream + 0, 1 (encoder) or + 0, 1, 2 (decoder) for
  // residual dropout, and the offsets below for attention and activation dropout.
  static constexpr uint64_t kEncoderStream = 1000, kDecoderStream = 2000;
  static constexpr uint64_t kSelfAttentionStream = 5, kCrossAttentionStream = 6, kActivationStream = 7;
  static uint64_t LayerStream(uint64_t base, size_t layer) { return base + 10 * (layer + 1); }

  float* D(const Buffer& b) const { return ops_.Data(b); }

  // ---- residual wiring ------------------------------------------------------------------
  // Runs f(in, out) on the sub-layer input and wires the residual; *x (rows x d) is replaced
  // by the sub-layer's output, and the old buffer moves into the tape as its input.
  template <class F>
  absl::Status SublayerForward(Buffer* x, int64_t rows, SublayerTape* t, const Norm& ln, uint64_t stream,
                               F&& f) {
    const int64_t n = rows * d_;
    const float* in = D(*x);
    if (c_.normalize_before) {
      TNMT_ASSIGN_OR_RETURN(t->f_in, ops_.Alloc(n));
      TNMT_RETURN_IF_ERROR(ops_.LayerNorm(D(t->f_in), D(*x), rows, ln));
      in = D(t->f_in);
    }
    TNMT_ASSIGN_OR_RETURN(Buffer out, ops_.Alloc(n));
    TNMT_RETURN_IF_ERROR(f(in, D(out)));
    TNMT_RETURN_IF_ERROR(ops_.DropoutAdd(D(out), D(*x), n, p_, seed_, stream));  // out = drop(F(.)) + x
    t->x_in = std::move(*x);
    if (c_.normalize_before) {
      *x = std::move(out);
    } else {
      t->resid = std::move(out);
      TNMT_ASSIGN_OR_RETURN(*x, ops_.Alloc(n));
      TNMT_RETURN_IF_ERROR(ops_.LayerNorm(D(*x), D(t->resid), rows, ln));
    }
    return absl::OkStatus();
  }

  // dx: the gradient w.r.t. the sub-layer's output, replaced (in place) by the gradient w.r.t.
  // its input. f_back(d_out, in, d_in) must write (=) d_in, the gradient of F's input.
  template <class F>
  absl::Status SublayerBackward(float* dx, int64_t rows, const SublayerTape& t, const Norm& ln, uint64_t stream,
                                F&& f_back) {
    const int64_t n = rows * d_;
    if (!c_.normalize_before) TNMT_RETURN_IF_ERROR(ops_.LayerNormBackward(dx, dx, D(t.resid), rows, ln));
    // d_f = drop(dx) (a copy unless dropout is off).
    const float* d_f = dx;
    Buffer d_f_copy;
    if (p_ > 0.0f) {
      TNMT_ASSIGN_OR_RETURN(d_f_copy, ops_.Alloc(n));
      TNMT_RETURN_IF_ERROR(ops_.DropoutFrom(D(d_f_copy), dx, n, p_, seed_, stream));
      d_f = D(d_f_copy);
    }
    TNMT_ASSIGN_OR_RETURN(Buffer d_in, ops_.Alloc(n));
    if (c_.normalize_before) {
      TNMT_RETURN_IF_ERROR(f_back(d_f, D(t.f_in), D(d_in)));
      d_f_copy = Buffer();
      TNMT_RETURN_IF_ERROR(ops_.LayerNormBackward(D(d_in), D(d_in), D(t.x_in), rows, ln));
    } else {
      TNMT_RETURN_IF_ERROR(f_back(d_f, D(t.x_in), D(d_in)));
    }
    return ops_.Add(dx, D(d_in), n);
  }

  // ---- feed-forward ---------------------------------------------------------------------
  // t->h holds the hidden layer as fc2 sees it: after the activation and activation dropout.
  absl::Status FfnForward(const float* in, float* out, int64_t rows, const Lin& fc1, const Lin& fc2, uint64_t stream,
                          FfnTape* t) {
    const int64_t nh = rows * c_.d_ff;
    if (c_.activation == kernels::Activation::kRelu) {
      // ReLU's derivative needs only where its output is positive, which h still shows after
      // activation dropout (a dropped element's gradient is zero either way): no copy of the
      // pre-activation is kept (FfnBackward passes h instead).
      TNMT_ASSIGN_OR_RETURN(t->h, ops_.Alloc(nh));
      TNMT_RETURN_IF_ERROR(ops_.Linear(D(t->h), in, rows, fc1));
    } else {
      TNMT_ASSIGN_OR_RETURN(t->pre, ops_.Alloc(nh));
      TNMT_RETURN_IF_ERROR(ops_.Linear(D(t->pre), in, rows, fc1));
      TNMT_ASSIGN_OR_RETURN(t->h, ops_.Copy(D(t->pre), nh));
    }
    TNMT_RETURN_IF_ERROR(ops_.ActivationDropout(D(t->h), rows, c_.d_ff, p_act_, seed_, stream + kActivationStream));
    return ops_.Linear(out, D(t->h), rows, fc2);
  }
  absl::Status FfnBackward(const float* d_out, const float* in, float* d_in, int64_t rows, const Lin& fc1,
                           const Lin& fc2, uint64_t stream, const FfnTape& t) {
    const int64_t nh = rows * c_.d_ff;
    TNMT_ASSIGN_OR_RETURN(Buffer dh, ops_.Alloc(nh));
    TNMT_RETURN_IF_ERROR(ops_.LinearBackward(D(dh), false, d_out, D(t.h), rows, fc2));
    const bool relu = c_.activation == kernels::Activation::kRelu;
    TNMT_RETURN_IF_ERROR(ops_.DropoutActivationBackward(D(dh), D(relu ? t.h : t.pre), nh, p_act_, seed_,
                                                        stream + kActivationStream));
    return ops_.LinearBackward(d_in, false, D(dh), in, rows, fc1);
  }

  // ---- attention ------------------------------------------------------------------------
  absl::Status SelfAttentionForward(const float* in, float* out, int len, bool decoder, const Lin& qkv,
                                    const Lin& o, uint64_t stream, AttentionTape* t) {
    const int64_t rows = static_cast<int64_t>(batch_) * len;
    TNMT_ASSIGN_OR_RETURN(t->q, ops_.Alloc(rows * 3 * d_));
    TNMT_RETURN_IF_ERROR(ops_.Linear(D(t->q), in, rows, qkv));
    TNMT_ASSIGN_OR_RETURN(t->probs, ops_.Alloc(static_cast<int64_t>(batch_) * c_.num_heads * len * len));
    TNMT_ASSIGN_OR_RETURN(t->ctx, ops_.Alloc(rows * d_));
    const float* q = D(t->q);
    // The encoder masks padded source keys; the decoder is causal (its padding comes last).
    TNMT_RETURN_IF_ERROR(ops_.AttentionForward(D(t->ctx), d_, D(t->probs), q, 3 * d_, q + d_, q + 2 * d_, 3 * d_,
                                               len, len, /*source_keys=*/!decoder, /*causal=*/decoder, p_attn_,
                                               seed_, stream + kSelfAttentionStream));
    return ops_.Linear(out, D(t->ctx), rows, o);
  }
  absl::Status SelfAttentionBackward(const float* d_out, const float* in, float* d_in, int len, const Lin& qkv,
                                     const Lin& o, uint64_t stream, const AttentionTape& t) {
    const int64_t rows = static_cast<int64_t>(batch_) * len;
    TNMT_ASSIGN_OR_RETURN(Buffer dctx, ops_.Alloc(rows * d_));
    TNMT_RETURN_IF_ERROR(ops_.LinearBackward(D(dctx), false, d_out, D(t.ctx), rows, o));
    TNMT_ASSIGN_OR_RETURN(Buffer dq, ops_.Zeros(rows * 3 * d_));  // dk, dv accumulate
    const float* q = D(t.q);
    float* dqp = D(dq);
    TNMT_RETURN_IF_ERROR(ops_.AttentionBackward(dqp, 3 * d_, dqp + d_, dqp + 2 * d_, 3 * d_, D(dctx), d_,
                                                D(t.probs), q, 3 * d_, q + d_, q + 2 * d_, 3 * d_, len, len, p_attn_,
                                                seed_, stream + kSelfAttentionStream));
    TNMT_RETURN_IF_ERROR(ops_.LinearBackward(d_in, false, dqp, in, rows, qkv));
    return ZeroKeyBiasGradient(qkv, d_);
  }
  template <class Layer>
  absl::Status CrossAttentionForward(const float* in, float* out, const Layer& l, uint64_t stream, AttentionTape* t) {
    TNMT_ASSIGN_OR_RETURN(t->q, ops_.Alloc(rt_ * d_));
    TNMT_RETURN_IF_ERROR(ops_.Linear(D(t->q), in, rt_, l.cross_q));
    TNMT_ASSIGN_OR_RETURN(t->kv, ops_.Alloc(rs_ * 2 * d_));
    TNMT_RETURN_IF_ERROR(ops_.Linear(D(t->kv), D(enc_out_), rs_, l.cross_kv));
    TNMT_ASSIGN_OR_RETURN(t->probs, ops_.Alloc(static_cast<int64_t>(batch_) * c_.num_heads * tgt_len_ * src_len_));
    TNMT_ASSIGN_OR_RETURN(t->ctx, ops_.Alloc(rt_ * d_));
    TNMT_RETURN_IF_ERROR(ops_.AttentionForward(D(t->ctx), d_, D(t->probs), D(t->q), d_, D(t->kv), D(t->kv) + d_,
                                               2 * d_, tgt_len_, src_len_, /*source_keys=*/true,
                                               /*causal=*/false, p_attn_, seed_, stream + kCrossAttentionStream));
    return ops_.Linear(out, D(t->ctx), rt_, l.cross_out);
  }
  template <class Layer>
  absl::Status CrossAttentionBackward(const float* d_out, const float* in, float* d_in, const Layer& l,
                                      uint64_t stream, const AttentionTape& t, float* d_enc) {
    TNMT_ASSIGN_OR_RETURN(Buffer dctx, ops_.Alloc(rt_ * d_));
    TNMT_ASSIGN_OR_RETURN(Buffer dq, ops_.Alloc(rt_ * d_));
    TNMT_ASSIGN_OR_RETURN(Buffer dkv, ops_.Zeros(rs_ * 2 * d_));  // dk, dv accumulate
    TNMT_RETURN_IF_ERROR(ops_.LinearBackward(D(dctx), false, d_out, D(t.ctx), rt_, l.cross_out));
    TNMT_RETURN_IF_ERROR(ops_.AttentionBackward(D(dq), d_, D(dkv), D(dkv) + d_, 2 * d_, D(dctx), d_, D(t.probs),
                                                D(t.q), d_, D(t.kv), D(t.kv) + d_, 2 * d_, tgt_len_, src_len_, p_attn_,
                                                seed_, stream + kCrossAttentionStream));
    TNMT_RETURN_IF_ERROR(ops_.LinearBackward(d_in, false, D(dq), in, rt_, l.cross_q));
    TNMT_RETURN_IF_ERROR(ops_.LinearBackward(d_enc, true, D(dkv), D(enc_out_), rs_, l.cross_kv));
    return ZeroKeyBiasGradient(l.cross_kv, 0);
  }

  // The key projection's bias adds the same q·b to every score of a query, which softmax
  // cancels: its gradient is exactly zero, and what float arithmetic leaves there is rounding
  // noise that Adam would amplify to full-size steps. So it is set to the exact value, 0.
  // `begin`: where the key bias starts in the (fused) projection's bias.
  absl::Status ZeroKeyBiasGradient(const Lin& l, int64_t begin) { return ops_.ZeroBiasGradient(l, begin, d_); }

  // ---- stacks ---------------------------------------------------------------------------
  absl::Status Embed(Buffer* x, int64_t rows, bool decoder, uint64_t stream) {
    TNMT_ASSIGN_OR_RETURN(*x, ops_.Alloc(rows * d_));
    TNMT_RETURN_IF_ERROR(ops_.Embed(D(*x), decoder));
    return ops_.Dropout(D(*x), rows * d_, p_, seed_, stream);
  }
  absl::Status EmbedBackward(float* dx, int64_t rows, bool decoder, uint64_t stream) {
    TNMT_RETURN_IF_ERROR(ops_.Dropout(dx, rows * d_, p_, seed_, stream));
    return ops_.EmbedBackward(dx, decoder);
  }

  // The final layer norm of a pre-norm stack: *x becomes LN(x), the old buffer its tape.
  absl::Status FinalNorm(Buffer* x, Buffer* tape, int64_t rows, const Norm& ln) {
    if (!c_.normalize_before) return absl::OkStatus();
    *tape = std::move(*x);
    TNMT_ASSIGN_OR_RETURN(*x, ops_.Alloc(rows * d_));
    return ops_.LayerNorm(D(*x), D(*tape), rows, ln);
  }
  absl::Status FinalNormBackward(float* dx, const Buffer& tape, int64_t rows, const Norm& ln) {
    if (!c_.normalize_before) return absl::OkStatus();
    return ops_.LayerNormBackward(dx, dx, D(tape), rows, ln);
  }

  absl::Status EncoderForward() {
    const auto& layers = ops_.weights().encoder;
    Buffer x;
    TNMT_RETURN_IF_ERROR(Embed(&x, rs_, /*decoder=*/false, kEncoderStream));
    enc_tapes_.resize(layers.size());
    for (size_t i = 0; i < layers.size(); ++i) {
      const auto& l = layers[i];
      LayerTape& t = enc_tapes_[i];
      const uint64_t s = LayerStream(kEncoderStream, i);
      TNMT_RETURN_IF_ERROR(SublayerForward(&x, rs_, &t.self_sub, l.self_ln, s, [&](const float* in, float* out) {
        return SelfAttentionForward(in, out, src_len_, /*decoder=*/false, l.self_qkv, l.self_out, s, &t.self_attn);
      }));
      TNMT_RETURN_IF_ERROR(SublayerForward(&x, rs_, &t.ffn_sub, l.final_ln, s + 1, [&](const float* in, float* out) {
        return FfnForward(in, out, rs_, l.fc1, l.fc2, s, &t.ffn);
      }));
    }
    TNMT_RETURN_IF_ERROR(FinalNorm(&x, &enc_final_in_, rs_, ops_.weights().encoder_final_ln));
    enc_out_ = std::move(x);
    return absl::OkStatus();
  }

  absl::Status EncoderBackward(Buffer dx) {
    const auto& layers = ops_.weights().encoder;
    TNMT_RETURN_IF_ERROR(FinalNormBackward(D(dx), enc_final_in_, rs_, ops_.weights().encoder_final_ln));
    TNMT_RETURN_IF_ERROR(ops_.Done(stages_.encoder_final_ln()));
    for (int i = static_cast<int>(layers.size()) - 1; i >= 0; --i) {
      const auto& l = layers[i];
      LayerTape& t = enc_tapes_[i];
      const uint64_t s = LayerStream(kEncoderStream, i);
      TNMT_RETURN_IF_ERROR(SublayerBackward(D(dx), rs_, t.ffn_sub, l.final_ln, s + 1,
                                            [&](const float* d_out, const float* in, float* d_in) {
                                              return FfnBackward(d_out, in, d_in, rs_, l.fc1, l.fc2, s, t.ffn);
                                            }));
      TNMT_RETURN_IF_ERROR(SublayerBackward(D(dx), rs_, t.self_sub, l.self_ln, s,
                                            [&](const float* d_out, const float* in, float* d_in) {
                                              return SelfAttentionBackward(d_out, in, d_in, src_len_, l.self_qkv,
                                                                           l.self_out, s, t.self_attn);
                                            }));
      t = LayerTape();  // this layer's activations are no longer needed
      TNMT_RETURN_IF_ERROR(ops_.Done(stages_.encoder_layer(i)));
    }
    TNMT_RETURN_IF_ERROR(EmbedBackward(D(dx), rs_, /*decoder=*/false, kEncoderStream));
    return ops_.Done(stages_.encoder_embed());
  }

  absl::Status DecoderForward() {
    const auto& layers = ops_.weights().decoder;
    Buffer x;
    TNMT_RETURN_IF_ERROR(Embed(&x, rt_, /*decoder=*/true, kDecoderStream));
    dec_tapes_.resize(layers.size());
    for (size_t i = 0; i < layers.size(); ++i) {
      const auto& l = layers[i];
      LayerTape& t = dec_tapes_[i];
      const uint64_t s = LayerStream(kDecoderStream, i);
      TNMT_RETURN_IF_ERROR(SublayerForward(&x, rt_, &t.self_sub, l.self_ln, s, [&](const float* in, float* out) {
        return SelfAttentionForward(in, out, tgt_len_, /*decoder=*/true, l.self_qkv, l.self_out, s, &t.self_attn);
      }));
      TNMT_RETURN_IF_ERROR(SublayerForward(&x, rt_, &t.cross_sub, l.cross_ln, s + 1, [&](const float* in, float* out) {
        return CrossAttentionForward(in, out, l, s, &t.cross_attn);
      }));
      TNMT_RETURN_IF_ERROR(SublayerForward(&x, rt_, &t.ffn_sub, l.final_ln, s + 2, [&](const float* in, float* out) {
        return FfnForward(in, out, rt_, l.fc1, l.fc2, s, &t.ffn);
      }));
    }
    TNMT_RETURN_IF_ERROR(FinalNorm(&x, &dec_final_in_, rt_, ops_.weights().decoder_final_ln));
    dec_out_ = std::move(x);
    return absl::OkStatus();
  }

  absl::Status DecoderBackward(Buffer dx, float* d_enc) {
    const auto& layers = ops_.weights().decoder;
    TNMT_RETURN_IF_ERROR(FinalNormBackward(D(dx), dec_final_in_, rt_, ops_.weights().decoder_final_ln));
    TNMT_RETURN_IF_ERROR(ops_.Done(stages_.decoder_final_ln()));
    for (int i = static_cast<int>(layers.size()) - 1; i >= 0; --i) {
      const auto& l = layers[i];
      LayerTape& t = dec_tapes_[i];
      const uint64_t s = LayerStream(kDecoderStream, i);
      TNMT_RETURN_IF_ERROR(SublayerBackward(D(dx), rt_, t.ffn_sub, l.final_ln, s + 2,
                                            [&](const float* d_out, const float* in, float* d_in) {
                                              return FfnBackward(d_out, in, d_in, rt_, l.fc1, l.fc2, s, t.ffn);
                                            }));
      TNMT_RETURN_IF_ERROR(SublayerBackward(D(dx), rt_, t.cross_sub, l.cross_ln, s + 1,
                                            [&](const float* d_out, const float* in, float* d_in) {
                                              return CrossAttentionBackward(d_out, in, d_in, l, s, t.cross_attn, d_enc);
                                            }));
      TNMT_RETURN_IF_ERROR(SublayerBackward(D(dx), rt_, t.self_sub, l.self_ln, s,
                                            [&](const float* d_out, const float* in, float* d_in) {
                                              return SelfAttentionBackward(d_out, in, d_in, tgt_len_, l.self_qkv,
                                                                           l.self_out, s, t.self_attn);
                                            }));
      t = LayerTape();
      TNMT_RETURN_IF_ERROR(ops_.Done(stages_.decoder_layer(i)));
    }
    TNMT_RETURN_IF_ERROR(EmbedBackward(D(dx), rt_, /*decoder=*/true, kDecoderStream));
    return ops_.Done(stages_.decoder_embed());
  }

  Ops& ops_;
  const ModelConfig& c_;
  const int d_;
  const int batch_, src_len_, tgt_len_;
  const float p_, p_attn_, p_act_;
  const uint64_t seed_;
  const int64_t rs_, rt_;
  BackwardStages stages_;
  std::vector<LayerTape> enc_tapes_, dec_tapes_;
  Buffer enc_final_in_, dec_final_in_, enc_out_, dec_out_;
};

}  // namespace tnmt::train
