// CUDA training forward/backward; see cuda_train_model.h. The structure follows
// transformer_train.cc function for function, so the two can be read side by side:
//   post-norm: y = LN(x + drop(F(x)))      backward: dr = LN'(dy); dx = dr + F'(drop(dr))
//   pre-norm:  y = x + drop(F(LN(x)))      backward: dx = dy + LN'(F'(drop(dy)))
// Dropout masks come from kernels::cuda::Dropout (the CPU's counter RNG) with the CPU's stream
// ids, so masks are identical to the CPU's and the backward regenerates them.
//
// Buffers come from the Context's caching allocator and go back to it when their DeviceBuffer
// dies; all work is on the Context's one stream, so a block is only reused by work queued after
// everything that used it (no synchronization needed).
#include "trainer/model/cuda_train_model.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/decode_ops.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/train_backward.h"
#include "kernels/cuda/train_ops.h"

namespace tnmt::train {

namespace {

namespace k = kernels::cuda;
using k::DeviceBuffer;

float* F(const DeviceBuffer& b) { return b.as<float>(); }

// What one residual sub-layer keeps for its backward.
struct SublayerTape {
  DeviceBuffer x_in;   // input of the sub-layer
  DeviceBuffer f_in;   // pre-norm: LN(x_in), the input of F
  DeviceBuffer resid;  // post-norm: x_in + drop(F), the input of LN
};

struct AttentionTape {
  DeviceBuffer q;      // self: fused [rows, 3d]; cross: [rows, d]
  DeviceBuffer kv;     // cross only: [src_rows, 2d]
  DeviceBuffer probs;  // [batch, heads, q_len, k_len]
  DeviceBuffer ctx;    // [rows, d]
};

struct FfnTape {
  DeviceBuffer pre;  // fc1 output before the activation: [rows, d_ff]
  DeviceBuffer h;    // after the activation
};

struct LayerTape {
  SublayerTape self_sub, cross_sub, ffn_sub;
  AttentionTape self_attn, cross_attn;
  FfnTape ffn;
};

using SublayerFn = std::function<absl::Status(const float* in, float* out)>;
// Must write (=) d_in, the gradient of F's input.
using SublayerBackFn = std::function<absl::Status(const float* d_out, const float* in, float* d_in)>;

// Token ids and positions of one batch in device memory (one int32 upload).
struct DeviceBatch {
  DeviceBuffer storage;
  const int32_t* src = nullptr;          // [rs]
  const int32_t* src_positions = nullptr;  // [rs]
  const int32_t* src_lengths = nullptr;  // [batch]
  const int32_t* tgt_in = nullptr;       // [rt]
  const int32_t* tgt_positions = nullptr;  // [rt]
  const int32_t* tgt_out = nullptr;      // [rt]
};

class Graph {
 public:
  Graph(const ModelConfig& c, const FlatLayout& L, k::Context& ctx, TrainPrecision precision,
        const CudaModelArrays& a, const TrainBatch& b, float dropout, uint64_t seed)
      : c_(c), m_(L.model()), stages_(L.stages()), ctx_(ctx), a_(a), b_(b), d_(c.d_model), p_(dropout),
        seed_(seed), rs_(static_cast<int64_t>(b.batch) * b.src_len), rt_(static_cast<int64_t>(b.batch) * b.tgt_len),
        half_(precision != TrainPrecision::kFloat32),
        half_type_(precision == TrainPrecision::kFloat16 ? k::DType::kFloat16 : k::DType::kBFloat16) {}

  absl::Status Upload() {
    std::vector<int32_t> host;
    host.reserve(2 * rs_ + b_.batch + 3 * rt_);
    auto append = [&](const std::vector<int32_t>& v) { host.insert(host.end(), v.begin(), v.end()); };
    auto positions = [&](int64_t rows, int len) {
      for (int64_t r = 0; r < rows; ++r) host.push_back(static_cast<int32_t>(r % len));
    };
    append(b_.src);
    positions(rs_, b_.src_len);
    append(b_.src_lengths);
    append(b_.tgt_in);
    positions(rt_, b_.tgt_len);
    append(b_.tgt_out);
    TNMT_ASSIGN_OR_RETURN(ids_.storage, ctx_.allocator().Buffer(sizeof(int32_t) * host.size()));
    // Pageable source: the call returns once `host` has been staged, so it may die after.
    TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaMemcpyAsync(ids_.storage.get(), host.data(), sizeof(int32_t) * host.size(),
                                                         cudaMemcpyHostToDevice, ctx_.stream())));
    const int32_t* p = ids_.storage.as<int32_t>();
    ids_.src = p;
    ids_.src_positions = p + rs_;
    ids_.src_lengths = p + 2 * rs_;
    ids_.tgt_in = ids_.src_lengths + b_.batch;
    ids_.tgt_positions = ids_.tgt_in + rt_;
    ids_.tgt_out = ids_.tgt_positions + rt_;
    return absl::OkStatus();
  }

  absl::Status Forward() {
    TNMT_RETURN_IF_ERROR(EncoderForward());
    return DecoderForward();
  }

  // Logits, the loss sums into `sums`, and (with `backward`) the whole backward.
  absl::Status LossAndBackward(float eps, float loss_scale, bool backward, double* sums, const StageDone& done) {
    const int V = c_.vocab_size;
    const int rows = static_cast<int>(rt_);
    TNMT_ASSIGN_OR_RETURN(DeviceBuffer logits, Alloc(rt_ * V));
    {
      // logits: [rt, V] = h · W_out^T
      TNMT_ASSIGN_OR_RETURN(Operand h, In(F(dec_out_), rt_ * d_));
      TNMT_RETURN_IF_ERROR(k::Gemm(ctx_, false, true, rows, V, d_, 1.0f, h.ptr, d_, W(m_.output_projection), d_, 0.0f,
                                   F(logits), V, Options()));
    }
    TNMT_RETURN_IF_ERROR(k::LabelSmoothedCrossEntropy(ctx_, F(logits), ids_.tgt_out, rt_, V, eps, c_.pad_id, sums));
    if (!backward) return absl::OkStatus();
    done_ = done;
    if (loss_scale != 1.0f) TNMT_RETURN_IF_ERROR(k::ScaleInPlace(ctx_, F(logits), rt_ * V, loss_scale));
    TNMT_ASSIGN_OR_RETURN(DeviceBuffer dh, Alloc(rt_ * d_));
    {
      TNMT_ASSIGN_OR_RETURN(Operand dl, In(F(logits), rt_ * V));
      TNMT_ASSIGN_OR_RETURN(Operand h, In(F(dec_out_), rt_ * d_));
      // dh: [rt, d] = dlogits · W_out;  dW_out: [V, d] += dlogits^T · h
      TNMT_RETURN_IF_ERROR(k::Gemm(ctx_, false, false, rows, d_, V, 1.0f, dl.ptr, V, W(m_.output_projection), d_, 0.0f,
                                   F(dh), d_, Options()));
      TNMT_RETURN_IF_ERROR(k::Gemm(ctx_, true, false, V, d_, rows, 1.0f, dl.ptr, V, h.ptr, d_, 1.0f,
                                   G(m_.output_projection), d_, Options()));
    }
    logits.Reset();
    TNMT_RETURN_IF_ERROR(Done(stages_.output()));
    TNMT_ASSIGN_OR_RETURN(DeviceBuffer d_enc, Alloc(rs_ * d_));
    TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaMemsetAsync(d_enc.get(), 0, sizeof(float) * rs_ * d_, ctx_.stream())));
    TNMT_RETURN_IF_ERROR(DecoderBackward(std::move(dh), F(d_enc)));
    return EncoderBackward(std::move(d_enc));
  }

 private:
  // ---- buffers, parameters, GEMM operands -------------------------------------------------
  absl::StatusOr<DeviceBuffer> Alloc(int64_t floats) { return ctx_.allocator().Buffer(sizeof(float) * floats); }

  absl::StatusOr<DeviceBuffer> Copy(const float* src, int64_t n) {
    TNMT_ASSIGN_OR_RETURN(DeviceBuffer b, Alloc(n));
    TNMT_RETURN_IF_ERROR(
        TNMT_CUDA_CHECK(cudaMemcpyAsync(b.get(), src, sizeof(float) * n, cudaMemcpyDeviceToDevice, ctx_.stream())));
    return b;
  }

  const float* P(int64_t offset) const { return a_.params + offset; }
  float* G(int64_t offset) const { return a_.grads + offset; }
  // A weight as a GEMM operand: the half copy in mixed precision, else the float32 master.
  const void* W(int64_t offset) const {
    return half_ ? static_cast<const void*>(static_cast<const char*>(a_.half) + 2 * offset)
                 : static_cast<const void*>(a_.params + offset);
  }
  k::GemmOptions Options() const {
    k::GemmOptions o;
    o.ab_type = half_ ? half_type_ : k::DType::kFloat32;
    o.c_type = k::DType::kFloat32;
    return o;
  }

  // An activation as a GEMM operand: itself in float32, a half-precision copy otherwise (the
  // copy lives as long as the Operand; its block is reused only by later work on the stream).
  struct Operand {
    const void* ptr = nullptr;
    DeviceBuffer copy;
  };
  absl::StatusOr<Operand> In(const float* x, int64_t n) {
    Operand o;
    if (!half_) {
      o.ptr = x;
      return o;
    }
    TNMT_ASSIGN_OR_RETURN(o.copy, ctx_.allocator().Buffer(2 * n));
    TNMT_RETURN_IF_ERROR(k::Convert(o.copy.get(), half_type_, x, k::DType::kFloat32, n, ctx_.stream()));
    o.ptr = o.copy.get();
    return o;
  }

  absl::Status Done(int stage) { return done_ ? done_(stage) : absl::OkStatus(); }

  // y: [rows, out] = x: [rows, in] · W^T + b.
  absl::Status LinearForward(float* y, const float* x, int64_t rows, const FlatLinear& l) {
    k::GemmOptions o = Options();
    if (l.bias >= 0) {
      o.epilogue = k::Epilogue::kBias;
      o.bias = P(l.bias);
    }
    TNMT_ASSIGN_OR_RETURN(Operand xin, In(x, rows * l.in));
    return k::Gemm(ctx_, false, true, static_cast<int>(rows), l.out, l.in, 1.0f, xin.ptr, l.in, W(l.weight), l.in, 0.0f,
                   y, l.out, o);
  }

  // dx (+)= dy W; gW += dy^T x; gb += colsum(dy). dx may be null.
  absl::Status LinearBackward(float* dx, bool accumulate, const float* dy, const float* x, int64_t rows,
                              const FlatLinear& l) {
    const int r = static_cast<int>(rows);
    TNMT_ASSIGN_OR_RETURN(Operand dyin, In(dy, rows * l.out));
    if (dx != nullptr) {
      TNMT_RETURN_IF_ERROR(k::Gemm(ctx_, false, false, r, l.in, l.out, 1.0f, dyin.ptr, l.out, W(l.weight), l.in,
                                   accumulate ? 1.0f : 0.0f, dx, l.in, Options()));
    }
    TNMT_ASSIGN_OR_RETURN(Operand xin, In(x, rows * l.in));
    TNMT_RETURN_IF_ERROR(k::Gemm(ctx_, true, false, l.out, l.in, r, 1.0f, dyin.ptr, l.out, xin.ptr, l.in, 1.0f,
                                 G(l.weight), l.in, Options()));
    if (l.bias >= 0) TNMT_RETURN_IF_ERROR(k::AccumulateColumnSum(ctx_, G(l.bias), dy, rows, l.out));
    return absl::OkStatus();
  }

  absl::Status LayerNorm(float* out, const float* x, const FlatLayerNorm& ln, int64_t rows) {
    return k::LayerNorm(out, x, nullptr, P(ln.gamma), P(ln.beta), rows, d_, c_.layer_norm_epsilon, ctx_.stream());
  }
  // dx (may alias dy) = LN'(x) · dy; the layer norm's parameter gradients accumulate.
  absl::Status LayerNormBackward(float* dx, const float* dy, const float* x, const FlatLayerNorm& ln, int64_t rows) {
    return k::LayerNormBackward(ctx_, dx, G(ln.gamma), G(ln.beta), dy, x, P(ln.gamma), rows, d_,
                                c_.layer_norm_epsilon);
  }
  absl::Status Dropout(float* x, int64_t n, uint64_t stream) { return k::Dropout(ctx_, x, n, p_, seed_, stream); }

  // ---- residual wiring ------------------------------------------------------------------
  // Runs F on the sub-layer input and wires the residual; *x (rows x d) is replaced by the
  // sub-layer's output, and the old buffer moves into the tape as its input.
  absl::Status SublayerForward(DeviceBuffer* x, int64_t rows, SublayerTape* t, const FlatLayerNorm& ln,
                               uint64_t stream, const SublayerFn& f) {
    const int64_t n = rows * d_;
    const float* in = F(*x);
    if (c_.normalize_before) {
      TNMT_ASSIGN_OR_RETURN(t->f_in, Alloc(n));
      TNMT_RETURN_IF_ERROR(LayerNorm(F(t->f_in), F(*x), ln, rows));
      in = F(t->f_in);
    }
    TNMT_ASSIGN_OR_RETURN(DeviceBuffer out, Alloc(n));
    TNMT_RETURN_IF_ERROR(f(in, F(out)));
    TNMT_RETURN_IF_ERROR(Dropout(F(out), n, stream));
    TNMT_RETURN_IF_ERROR(k::AddInPlace(ctx_, F(out), F(*x), n));  // out = x + drop(F(.)), the CPU's sum
    t->x_in = std::move(*x);
    if (c_.normalize_before) {
      *x = std::move(out);
    } else {
      t->resid = std::move(out);
      TNMT_ASSIGN_OR_RETURN(*x, Alloc(n));
      TNMT_RETURN_IF_ERROR(LayerNorm(F(*x), F(t->resid), ln, rows));
    }
    return absl::OkStatus();
  }

  // dx: the gradient w.r.t. the sub-layer's output, replaced (in place) by the gradient w.r.t.
  // its input.
  absl::Status SublayerBackward(float* dx, int64_t rows, const SublayerTape& t, const FlatLayerNorm& ln,
                                uint64_t stream, const SublayerBackFn& f_back) {
    const int64_t n = rows * d_;
    if (!c_.normalize_before) TNMT_RETURN_IF_ERROR(LayerNormBackward(dx, dx, F(t.resid), ln, rows));
    // d_f = drop(dx) (a copy unless dropout is off).
    const float* d_f = dx;
    DeviceBuffer d_f_copy;
    if (p_ > 0.0f) {
      TNMT_ASSIGN_OR_RETURN(d_f_copy, Copy(dx, n));
      TNMT_RETURN_IF_ERROR(Dropout(F(d_f_copy), n, stream));
      d_f = F(d_f_copy);
    }
    TNMT_ASSIGN_OR_RETURN(DeviceBuffer d_in, Alloc(n));
    if (c_.normalize_before) {
      TNMT_RETURN_IF_ERROR(f_back(d_f, F(t.f_in), F(d_in)));
      d_f_copy.Reset();
      TNMT_RETURN_IF_ERROR(LayerNormBackward(F(d_in), F(d_in), F(t.x_in), ln, rows));
    } else {
      TNMT_RETURN_IF_ERROR(f_back(d_f, F(t.x_in), F(d_in)));
    }
    return k::AddInPlace(ctx_, dx, F(d_in), n);
  }

  // ---- feed-forward ---------------------------------------------------------------------
  absl::Status FfnForward(const float* in, float* out, int64_t rows, const FlatLinear& fc1, const FlatLinear& fc2,
                          FfnTape* t) {
    const int64_t nh = rows * c_.d_ff;
    TNMT_ASSIGN_OR_RETURN(t->pre, Alloc(nh));
    TNMT_RETURN_IF_ERROR(LinearForward(F(t->pre), in, rows, fc1));
    TNMT_ASSIGN_OR_RETURN(t->h, Copy(F(t->pre), nh));
    TNMT_RETURN_IF_ERROR(k::BiasActivation(F(t->h), nullptr, rows, c_.d_ff,
                                           c_.activation == kernels::cpu::Activation::kGelu, ctx_.stream()));
    return LinearForward(out, F(t->h), rows, fc2);
  }
  absl::Status FfnBackward(const float* d_out, const float* in, float* d_in, int64_t rows, const FlatLinear& fc1,
                           const FlatLinear& fc2, const FfnTape& t) {
    const int64_t nh = rows * c_.d_ff;
    TNMT_ASSIGN_OR_RETURN(DeviceBuffer dh, Alloc(nh));
    TNMT_RETURN_IF_ERROR(LinearBackward(F(dh), false, d_out, F(t.h), rows, fc2));
    TNMT_RETURN_IF_ERROR(k::ActivationBackward(ctx_, F(dh), F(dh), F(t.pre), nh,
                                               c_.activation == kernels::cpu::Activation::kGelu));
    return LinearBackward(d_in, false, F(dh), in, rows, fc1);
  }

  // ---- attention ------------------------------------------------------------------------
  absl::Status SelfAttentionForward(const float* in, float* out, int len, bool causal, const int32_t* valid,
                                    const FlatLinear& qkv, const FlatLinear& o, AttentionTape* t) {
    const int64_t rows = static_cast<int64_t>(b_.batch) * len;
    TNMT_ASSIGN_OR_RETURN(t->q, Alloc(rows * 3 * d_));
    TNMT_RETURN_IF_ERROR(LinearForward(F(t->q), in, rows, qkv));
    TNMT_ASSIGN_OR_RETURN(t->probs, Alloc(static_cast<int64_t>(b_.batch) * c_.num_heads * len * len));
    TNMT_ASSIGN_OR_RETURN(t->ctx, Alloc(rows * d_));
    const float* q = F(t->q);
    TNMT_RETURN_IF_ERROR(k::AttentionTrainForward(ctx_, F(t->ctx), d_, F(t->probs), q, 3 * d_, q + d_, q + 2 * d_,
                                                  3 * d_, b_.batch, len, len, c_.num_heads, c_.d_head(), valid,
                                                  causal));
    return LinearForward(out, F(t->ctx), rows, o);
  }
  absl::Status SelfAttentionBackward(const float* d_out, const float* in, float* d_in, int len, const FlatLinear& qkv,
                                     const FlatLinear& o, const AttentionTape& t) {
    const int64_t rows = static_cast<int64_t>(b_.batch) * len;
    TNMT_ASSIGN_OR_RETURN(DeviceBuffer dctx, Alloc(rows * d_));
    TNMT_RETURN_IF_ERROR(LinearBackward(F(dctx), false, d_out, F(t.ctx), rows, o));
    TNMT_ASSIGN_OR_RETURN(DeviceBuffer dq, Alloc(rows * 3 * d_));
    TNMT_RETURN_IF_ERROR(
        TNMT_CUDA_CHECK(cudaMemsetAsync(dq.get(), 0, sizeof(float) * rows * 3 * d_, ctx_.stream())));  // dk, dv +=
    const float* q = F(t.q);
    float* dqp = F(dq);
    TNMT_RETURN_IF_ERROR(k::AttentionBackward(ctx_, dqp, 3 * d_, dqp + d_, dqp + 2 * d_, 3 * d_, F(dctx), d_,
                                              F(t.probs), q, 3 * d_, q + d_, q + 2 * d_, 3 * d_, b_.batch, len, len,
                                              c_.num_heads, c_.d_head()));
    TNMT_RETURN_IF_ERROR(LinearBackward(d_in, false, dqp, in, rows, qkv));
    return ZeroKeyBiasGradient(G(qkv.bias) + d_);
  }
  absl::Status CrossAttentionForward(const float* in, float* out, const FlatDecoderLayer& l, AttentionTape* t) {
    TNMT_ASSIGN_OR_RETURN(t->q, Alloc(rt_ * d_));
    TNMT_RETURN_IF_ERROR(LinearForward(F(t->q), in, rt_, l.cross_q));
    TNMT_ASSIGN_OR_RETURN(t->kv, Alloc(rs_ * 2 * d_));
    TNMT_RETURN_IF_ERROR(LinearForward(F(t->kv), F(enc_out_), rs_, l.cross_kv));
    TNMT_ASSIGN_OR_RETURN(t->probs, Alloc(static_cast<int64_t>(b_.batch) * c_.num_heads * b_.tgt_len * b_.src_len));
    TNMT_ASSIGN_OR_RETURN(t->ctx, Alloc(rt_ * d_));
    TNMT_RETURN_IF_ERROR(k::AttentionTrainForward(ctx_, F(t->ctx), d_, F(t->probs), F(t->q), d_, F(t->kv),
                                                  F(t->kv) + d_, 2 * d_, b_.batch, b_.tgt_len, b_.src_len,
                                                  c_.num_heads, c_.d_head(), ids_.src_lengths, false));
    return LinearForward(out, F(t->ctx), rt_, l.cross_out);
  }
  absl::Status CrossAttentionBackward(const float* d_out, const float* in, float* d_in, const FlatDecoderLayer& l,
                                      const AttentionTape& t, float* d_enc) {
    TNMT_ASSIGN_OR_RETURN(DeviceBuffer dctx, Alloc(rt_ * d_));
    TNMT_ASSIGN_OR_RETURN(DeviceBuffer dq, Alloc(rt_ * d_));
    TNMT_ASSIGN_OR_RETURN(DeviceBuffer dkv, Alloc(rs_ * 2 * d_));
    TNMT_RETURN_IF_ERROR(
        TNMT_CUDA_CHECK(cudaMemsetAsync(dkv.get(), 0, sizeof(float) * rs_ * 2 * d_, ctx_.stream())));  // dk, dv +=
    TNMT_RETURN_IF_ERROR(LinearBackward(F(dctx), false, d_out, F(t.ctx), rt_, l.cross_out));
    TNMT_RETURN_IF_ERROR(k::AttentionBackward(ctx_, F(dq), d_, F(dkv), F(dkv) + d_, 2 * d_, F(dctx), d_, F(t.probs),
                                              F(t.q), d_, F(t.kv), F(t.kv) + d_, 2 * d_, b_.batch, b_.tgt_len,
                                              b_.src_len, c_.num_heads, c_.d_head()));
    TNMT_RETURN_IF_ERROR(LinearBackward(d_in, false, F(dq), in, rt_, l.cross_q));
    TNMT_RETURN_IF_ERROR(LinearBackward(d_enc, true, F(dkv), F(enc_out_), rs_, l.cross_kv));
    return ZeroKeyBiasGradient(G(l.cross_kv.bias));
  }

  // The key projection's bias gradient is exactly zero (softmax cancels a shift shared by all
  // keys); set it to that instead of rounding noise, as the CPU does.
  absl::Status ZeroKeyBiasGradient(float* key_bias_grad) {
    return TNMT_CUDA_CHECK(cudaMemsetAsync(key_bias_grad, 0, sizeof(float) * d_, ctx_.stream()));
  }

  // ---- stacks ---------------------------------------------------------------------------
  static constexpr uint64_t kEncoderStream = 1000, kDecoderStream = 2000;  // as transformer_train.cc

  float EmbedScale() const { return c_.scale_embedding ? std::sqrt(static_cast<float>(d_)) : 1.0f; }
  bool Learned() const { return c_.position_encoding == PositionEncoding::kLearned; }

  absl::Status Embed(DeviceBuffer* x, const int32_t* ids, const int32_t* positions, int64_t rows, int64_t table,
                     int64_t learned_pos, const float* sinusoid, uint64_t stream) {
    TNMT_ASSIGN_OR_RETURN(*x, Alloc(rows * d_));
    const float* pos = Learned() ? P(learned_pos) : sinusoid;
    TNMT_RETURN_IF_ERROR(k::EmbedTokens(F(*x), ids, positions, rows, P(table), k::DType::kFloat32, pos, d_,
                                        EmbedScale(), ctx_.stream()));
    return Dropout(F(*x), rows * d_, stream);
  }
  absl::Status EmbedBackward(float* dx, const int32_t* ids, const int32_t* positions, int64_t rows, int64_t table,
                             int64_t learned_pos, uint64_t stream) {
    TNMT_RETURN_IF_ERROR(Dropout(dx, rows * d_, stream));
    return k::EmbeddingBackward(ctx_, G(table), Learned() ? G(learned_pos) : nullptr, dx, ids, positions, rows, d_,
                                EmbedScale());
  }

  absl::Status EncoderForward() {
    DeviceBuffer x;
    TNMT_RETURN_IF_ERROR(Embed(&x, ids_.src, ids_.src_positions, rs_, m_.encoder_embed, m_.encoder_positions,
                               a_.encoder_sinusoid, kEncoderStream));
    enc_tapes_.resize(m_.encoder.size());
    for (size_t i = 0; i < m_.encoder.size(); ++i) {
      const FlatEncoderLayer& l = m_.encoder[i];
      LayerTape& t = enc_tapes_[i];
      const uint64_t s = kEncoderStream + 10 * (i + 1);
      TNMT_RETURN_IF_ERROR(SublayerForward(&x, rs_, &t.self_sub, l.self_ln, s, [&](const float* in, float* out) {
        return SelfAttentionForward(in, out, b_.src_len, false, ids_.src_lengths, l.self_qkv, l.self_out,
                                    &t.self_attn);
      }));
      TNMT_RETURN_IF_ERROR(SublayerForward(&x, rs_, &t.ffn_sub, l.final_ln, s + 1, [&](const float* in, float* out) {
        return FfnForward(in, out, rs_, l.fc1, l.fc2, &t.ffn);
      }));
    }
    if (c_.normalize_before) {
      enc_final_in_ = std::move(x);
      TNMT_ASSIGN_OR_RETURN(x, Alloc(rs_ * d_));
      TNMT_RETURN_IF_ERROR(LayerNorm(F(x), F(enc_final_in_), m_.encoder_final_ln, rs_));
    }
    enc_out_ = std::move(x);
    return absl::OkStatus();
  }

  absl::Status EncoderBackward(DeviceBuffer dx) {
    if (c_.normalize_before) {
      TNMT_RETURN_IF_ERROR(LayerNormBackward(F(dx), F(dx), F(enc_final_in_), m_.encoder_final_ln, rs_));
    }
    TNMT_RETURN_IF_ERROR(Done(stages_.encoder_final_ln()));
    for (int i = static_cast<int>(m_.encoder.size()) - 1; i >= 0; --i) {
      const FlatEncoderLayer& l = m_.encoder[i];
      LayerTape& t = enc_tapes_[i];
      const uint64_t s = kEncoderStream + 10 * (i + 1);
      TNMT_RETURN_IF_ERROR(SublayerBackward(F(dx), rs_, t.ffn_sub, l.final_ln, s + 1,
                                            [&](const float* d_out, const float* in, float* d_in) {
                                              return FfnBackward(d_out, in, d_in, rs_, l.fc1, l.fc2, t.ffn);
                                            }));
      TNMT_RETURN_IF_ERROR(SublayerBackward(F(dx), rs_, t.self_sub, l.self_ln, s,
                                            [&](const float* d_out, const float* in, float* d_in) {
                                              return SelfAttentionBackward(d_out, in, d_in, b_.src_len, l.self_qkv,
                                                                           l.self_out, t.self_attn);
                                            }));
      t = LayerTape();  // this layer's activations are no longer needed
      TNMT_RETURN_IF_ERROR(Done(stages_.encoder_layer(i)));
    }
    TNMT_RETURN_IF_ERROR(
        EmbedBackward(F(dx), ids_.src, ids_.src_positions, rs_, m_.encoder_embed, m_.encoder_positions, kEncoderStream));
    return Done(stages_.encoder_embed());
  }

  absl::Status DecoderForward() {
    DeviceBuffer x;
    TNMT_RETURN_IF_ERROR(Embed(&x, ids_.tgt_in, ids_.tgt_positions, rt_, m_.decoder_embed, m_.decoder_positions,
                               a_.decoder_sinusoid, kDecoderStream));
    dec_tapes_.resize(m_.decoder.size());
    for (size_t i = 0; i < m_.decoder.size(); ++i) {
      const FlatDecoderLayer& l = m_.decoder[i];
      LayerTape& t = dec_tapes_[i];
      const uint64_t s = kDecoderStream + 10 * (i + 1);
      TNMT_RETURN_IF_ERROR(SublayerForward(&x, rt_, &t.self_sub, l.self_ln, s, [&](const float* in, float* out) {
        return SelfAttentionForward(in, out, b_.tgt_len, true, nullptr, l.self_qkv, l.self_out, &t.self_attn);
      }));
      TNMT_RETURN_IF_ERROR(SublayerForward(&x, rt_, &t.cross_sub, l.cross_ln, s + 1, [&](const float* in, float* out) {
        return CrossAttentionForward(in, out, l, &t.cross_attn);
      }));
      TNMT_RETURN_IF_ERROR(SublayerForward(&x, rt_, &t.ffn_sub, l.final_ln, s + 2, [&](const float* in, float* out) {
        return FfnForward(in, out, rt_, l.fc1, l.fc2, &t.ffn);
      }));
    }
    if (c_.normalize_before) {
      dec_final_in_ = std::move(x);
      TNMT_ASSIGN_OR_RETURN(x, Alloc(rt_ * d_));
      TNMT_RETURN_IF_ERROR(LayerNorm(F(x), F(dec_final_in_), m_.decoder_final_ln, rt_));
    }
    dec_out_ = std::move(x);
    return absl::OkStatus();
  }

  absl::Status DecoderBackward(DeviceBuffer dx, float* d_enc) {
    if (c_.normalize_before) {
      TNMT_RETURN_IF_ERROR(LayerNormBackward(F(dx), F(dx), F(dec_final_in_), m_.decoder_final_ln, rt_));
    }
    TNMT_RETURN_IF_ERROR(Done(stages_.decoder_final_ln()));
    for (int i = static_cast<int>(m_.decoder.size()) - 1; i >= 0; --i) {
      const FlatDecoderLayer& l = m_.decoder[i];
      LayerTape& t = dec_tapes_[i];
      const uint64_t s = kDecoderStream + 10 * (i + 1);
      TNMT_RETURN_IF_ERROR(SublayerBackward(F(dx), rt_, t.ffn_sub, l.final_ln, s + 2,
                                            [&](const float* d_out, const float* in, float* d_in) {
                                              return FfnBackward(d_out, in, d_in, rt_, l.fc1, l.fc2, t.ffn);
                                            }));
      TNMT_RETURN_IF_ERROR(SublayerBackward(F(dx), rt_, t.cross_sub, l.cross_ln, s + 1,
                                            [&](const float* d_out, const float* in, float* d_in) {
                                              return CrossAttentionBackward(d_out, in, d_in, l, t.cross_attn, d_enc);
                                            }));
      TNMT_RETURN_IF_ERROR(SublayerBackward(F(dx), rt_, t.self_sub, l.self_ln, s,
                                            [&](const float* d_out, const float* in, float* d_in) {
                                              return SelfAttentionBackward(d_out, in, d_in, b_.tgt_len, l.self_qkv,
                                                                           l.self_out, t.self_attn);
                                            }));
      t = LayerTape();
      TNMT_RETURN_IF_ERROR(Done(stages_.decoder_layer(i)));
    }
    TNMT_RETURN_IF_ERROR(EmbedBackward(F(dx), ids_.tgt_in, ids_.tgt_positions, rt_, m_.decoder_embed,
                                       m_.decoder_positions, kDecoderStream));
    return Done(stages_.decoder_embed());
  }

  const ModelConfig& c_;
  const FlatModel& m_;
  const BackwardStages& stages_;
  k::Context& ctx_;
  const CudaModelArrays& a_;
  const TrainBatch& b_;
  const int d_;
  const float p_;
  const uint64_t seed_;
  const int64_t rs_, rt_;
  const bool half_;
  const k::DType half_type_;
  StageDone done_;
  DeviceBatch ids_;
  std::vector<LayerTape> enc_tapes_, dec_tapes_;
  DeviceBuffer enc_final_in_, dec_final_in_, enc_out_, dec_out_;
};

}  // namespace

CudaTrainModel::CudaTrainModel(const ModelConfig& c, const FlatLayout& layout, kernels::cuda::Context* ctx,
                               TrainPrecision precision)
    : c_(c), layout_(layout), ctx_(ctx), precision_(precision) {}

absl::Status CudaTrainModel::Run(const TrainBatch& batch, const TrainStepOptions& options,
                                 const CudaModelArrays& arrays, float loss_scale, bool backward, double* sums,
                                 const StageDone& done) {
  if (precision_ != TrainPrecision::kFloat32 && arrays.half == nullptr) {
    return absl::InvalidArgumentError("CudaTrainModel: mixed precision without half weight copies");
  }
  if (c_.position_encoding != PositionEncoding::kLearned &&
      (arrays.encoder_sinusoid == nullptr || arrays.decoder_sinusoid == nullptr)) {
    return absl::InvalidArgumentError("CudaTrainModel: sinusoidal positions without their tables");
  }
  Graph g(c_, layout_, *ctx_, precision_, arrays, batch, options.dropout, options.dropout_seed);
  TNMT_RETURN_IF_ERROR(g.Upload());
  TNMT_RETURN_IF_ERROR(g.Forward());
  return g.LossAndBackward(options.label_smoothing, loss_scale, backward, sums, done);
}

}  // namespace tnmt::train
