// CUDA training forward/backward; see cuda_train_model.h: TrainGraph (train_graph.h) over
// kernels/cuda, so the wiring, the dropout streams (the CPU's counter RNG, identical masks)
// and the order of the backward stages are the CPU trainer's.
//
// Timing (kernels/cuda/gpu_timeline.h, when the Context's timeline is on): each kernel call
// below is one timed call of its category; a pass starts a new step of the timeline, so the
// device time between passes (the optimizer, norms and loss totals the engine queues, and any
// idle time) is the table's "between steps" gap.
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
#include "kernels/cuda/attention.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/loss.h"
#include "trainer/model/train_graph.h"

namespace tnmt::train {

namespace {

namespace k = kernels::cuda;
using k::DeviceBuffer;
using Cat = kernels::TimeCategory;

// Token ids and positions of one batch in device memory (one int32 upload).
struct DeviceBatch {
  DeviceBuffer storage;
  const int32_t* src = nullptr;            // [rs]
  const int32_t* src_positions = nullptr;  // [rs]
  const int32_t* src_lengths = nullptr;    // [batch]
  const int32_t* tgt_in = nullptr;         // [rt]
  const int32_t* tgt_positions = nullptr;  // [rt]
  const int32_t* tgt_out = nullptr;        // [rt]
};

// TrainGraph's operations over kernels/cuda for one batch; parameters, half copies and
// gradients are flat device arrays addressed by FlatLayout offsets.
class CudaTrainOps {
 public:
  using Buffer = DeviceBuffer;
  using LinearParams = FlatLinear;
  using NormParams = FlatLayerNorm;
  using Weights = FlatModel;

  CudaTrainOps(const ModelConfig& c, const FlatLayout& L, k::Context& ctx, TrainPrecision precision,
               const CudaModelArrays& a, const TrainBatch& b, double* sums, const StageDone& done)
      : c_(c), m_(L.model()), ctx_(ctx), a_(a), b_(b), d_(c.d_model),
        rs_(static_cast<int64_t>(b.batch) * b.src_len), rt_(static_cast<int64_t>(b.batch) * b.tgt_len),
        half_(precision != TrainPrecision::kFloat32),
        half_type_(precision == TrainPrecision::kFloat16 ? k::DType::kFloat16 : k::DType::kBFloat16),
        sums_(sums), done_(done) {}

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
    TNMT_RETURN_IF_ERROR(Time(Cat::kCopy, [&] {
      return TNMT_CUDA_CHECK(cudaMemcpyAsync(ids_.storage.get(), host.data(), sizeof(int32_t) * host.size(),
                                             cudaMemcpyHostToDevice, ctx_.stream()));
    }));
    const int32_t* p = ids_.storage.as<int32_t>();
    ids_.src = p;
    ids_.src_positions = p + rs_;
    ids_.src_lengths = p + 2 * rs_;
    ids_.tgt_in = ids_.src_lengths + b_.batch;
    ids_.tgt_positions = ids_.tgt_in + rt_;
    ids_.tgt_out = ids_.tgt_positions + rt_;
    return absl::OkStatus();
  }

  const ModelConfig& config() const { return c_; }
  const Weights& weights() const { return m_; }

  // ---- buffers ----------------------------------------------------------------------------
  float* Data(const Buffer& b) const { return b.as<float>(); }
  absl::StatusOr<Buffer> Alloc(int64_t n) { return ctx_.allocator().Buffer(sizeof(float) * n); }
  absl::StatusOr<Buffer> Zeros(int64_t n) {
    TNMT_ASSIGN_OR_RETURN(Buffer b, Alloc(n));
    TNMT_RETURN_IF_ERROR(
        Time(Cat::kCopy, [&] { return TNMT_CUDA_CHECK(cudaMemsetAsync(b.get(), 0, sizeof(float) * n, ctx_.stream())); }));
    return b;
  }
  absl::StatusOr<Buffer> Copy(const float* src, int64_t n) {
    TNMT_ASSIGN_OR_RETURN(Buffer b, Alloc(n));
    TNMT_RETURN_IF_ERROR(Time(Cat::kCopy, [&] {
      return TNMT_CUDA_CHECK(cudaMemcpyAsync(b.get(), src, sizeof(float) * n, cudaMemcpyDeviceToDevice, ctx_.stream()));
    }));
    return b;
  }

  // ---- linear layers ----------------------------------------------------------------------
  // y: [rows, out] = x: [rows, in] · W^T + b.
  absl::Status Linear(float* y, const float* x, int64_t rows, const FlatLinear& l) {
    k::GemmOptions o = Options();
    if (l.bias >= 0) {
      o.epilogue = k::Epilogue::kBias;
      o.bias = P(l.bias);
    }
    TNMT_ASSIGN_OR_RETURN(Operand xin, In(x, rows * l.in));
    return Time(Cat::kGemm, [&] {
      return k::Gemm(ctx_, false, true, static_cast<int>(rows), l.out, l.in, 1.0f, xin.ptr, l.in, W(l.weight), l.in,
                     0.0f, y, l.out, o);
    });
  }
  // dx (+)= dy W; gW += dy^T x; gb += colsum(dy). dx may be null.
  absl::Status LinearBackward(float* dx, bool accumulate, const float* dy, const float* x, int64_t rows,
                              const FlatLinear& l) {
    const int r = static_cast<int>(rows);
    TNMT_ASSIGN_OR_RETURN(Operand dyin, In(dy, rows * l.out));
    if (dx != nullptr) {
      TNMT_RETURN_IF_ERROR(Time(Cat::kGemm, [&] {
        return k::Gemm(ctx_, false, false, r, l.in, l.out, 1.0f, dyin.ptr, l.out, W(l.weight), l.in,
                       accumulate ? 1.0f : 0.0f, dx, l.in, Options());
      }));
    }
    TNMT_ASSIGN_OR_RETURN(Operand xin, In(x, rows * l.in));
    TNMT_RETURN_IF_ERROR(Time(Cat::kGemm, [&] {
      return k::Gemm(ctx_, true, false, l.out, l.in, r, 1.0f, dyin.ptr, l.out, xin.ptr, l.in, 1.0f, G(l.weight), l.in,
                     Options());
    }));
    if (l.bias >= 0) {
      TNMT_RETURN_IF_ERROR(
          Time(Cat::kBiasGrad, [&] { return k::AccumulateColumnSum(ctx_, G(l.bias), dy, rows, l.out); }));
    }
    return absl::OkStatus();
  }
  absl::Status ZeroBiasGradient(const FlatLinear& l, int64_t begin, int64_t count) {
    return Time(Cat::kBiasGrad, [&] {
      return TNMT_CUDA_CHECK(cudaMemsetAsync(G(l.bias) + begin, 0, sizeof(float) * count, ctx_.stream()));
    });
  }

  // ---- element-wise ---------------------------------------------------------------------
  absl::Status LayerNorm(float* y, const float* x, int64_t rows, const FlatLayerNorm& ln) {
    return Time(Cat::kLayerNormForward, [&] {
      return k::LayerNorm(ctx_, y, x, nullptr, P(ln.gamma), P(ln.beta), rows, d_, c_.layer_norm_epsilon);
    });
  }
  absl::Status LayerNormBackward(float* dx, const float* dy, const float* x, int64_t rows, const FlatLayerNorm& ln) {
    return Time(Cat::kLayerNormBackward, [&] {
      return k::LayerNormBackward(ctx_, dx, G(ln.gamma), G(ln.beta), dy, x, P(ln.gamma), rows, d_,
                                  c_.layer_norm_epsilon);
    });
  }
  absl::Status Add(float* y, const float* x, int64_t n) {
    return Time(Cat::kDropoutResidual, [&] { return k::Add(ctx_, y, y, x, n); });
  }
  absl::Status ActivationDropout(float* x, int64_t rows, int cols, float p, uint64_t seed, uint64_t stream) {
    return Time(Cat::kDropoutResidual, [&] {
      TNMT_RETURN_IF_ERROR(k::BiasActivation(ctx_, x, nullptr, rows, cols, c_.activation));
      return k::Dropout(ctx_, x, rows * cols, p, seed, stream);
    });
  }
  absl::Status DropoutActivationBackward(float* dx, const float* pre, int64_t n, float p, uint64_t seed,
                                         uint64_t stream) {
    return Time(Cat::kDropoutResidual, [&] {
      TNMT_RETURN_IF_ERROR(k::Dropout(ctx_, dx, n, p, seed, stream));
      return k::ActivationBackward(ctx_, dx, dx, pre, n, c_.activation);
    });
  }
  absl::Status Dropout(float* x, int64_t n, float p, uint64_t seed, uint64_t stream) {
    return Time(Cat::kDropoutResidual, [&] { return k::Dropout(ctx_, x, n, p, seed, stream); });
  }
  absl::Status DropoutFrom(float* y, const float* x, int64_t n, float p, uint64_t seed, uint64_t stream) {
    return Time(Cat::kDropoutResidual, [&] {
      if (y != x) {
        TNMT_RETURN_IF_ERROR(
            TNMT_CUDA_CHECK(cudaMemcpyAsync(y, x, sizeof(float) * n, cudaMemcpyDeviceToDevice, ctx_.stream())));
      }
      return k::Dropout(ctx_, y, n, p, seed, stream);
    });
  }
  absl::Status DropoutAdd(float* y, const float* x, int64_t n, float p, uint64_t seed, uint64_t stream) {
    return Time(Cat::kDropoutResidual, [&] {
      TNMT_RETURN_IF_ERROR(k::Dropout(ctx_, y, n, p, seed, stream));
      return k::Add(ctx_, y, y, x, n);
    });
  }

  // ---- attention ------------------------------------------------------------------------
  absl::Status AttentionForward(float* out, int64_t ld_out, float* probs, const float* q, int64_t ld_q,
                                const float* kk, const float* v, int64_t ld_kv, int q_len, int k_len,
                                bool source_keys, bool causal, float dropout, uint64_t seed, uint64_t stream) {
    return Time(Cat::kAttentionForward, [&] {
      return k::AttentionTrainForward(ctx_, out, ld_out, probs, q, ld_q, kk, v, ld_kv, b_.batch, q_len, k_len,
                                      c_.num_heads, c_.d_head(), source_keys ? ids_.src_lengths : nullptr, causal,
                                      k::AttentionDropout{dropout, seed, stream});
    });
  }
  absl::Status AttentionBackward(float* dq, int64_t ld_dq, float* dk, float* dv, int64_t ld_dkv, const float* dout,
                                 int64_t ld_dout, const float* probs, const float* q, int64_t ld_q, const float* kk,
                                 const float* v, int64_t ld_kv, int q_len, int k_len, float dropout, uint64_t seed,
                                 uint64_t stream) {
    return Time(Cat::kAttentionBackward, [&] {
      return k::AttentionBackward(ctx_, dq, ld_dq, dk, dv, ld_dkv, dout, ld_dout, probs, q, ld_q, kk, v, ld_kv,
                                  b_.batch, q_len, k_len, c_.num_heads, c_.d_head(),
                                  k::AttentionDropout{dropout, seed, stream});
    });
  }

  // ---- embeddings, logits, loss -----------------------------------------------------------
  absl::Status Embed(float* x, bool decoder) {
    const int64_t table = decoder ? m_.decoder_embed : m_.encoder_embed;
    const float* pos = Learned() ? P(decoder ? m_.decoder_positions : m_.encoder_positions)
                                 : (decoder ? a_.decoder_sinusoid : a_.encoder_sinusoid);
    return Time(Cat::kEmbeddingForward, [&] {
      return k::EmbedTokens(ctx_, x, decoder ? ids_.tgt_in : ids_.src,
                            decoder ? ids_.tgt_positions : ids_.src_positions, decoder ? rt_ : rs_, P(table),
                            k::DType::kFloat32, pos, d_, EmbedScale());
    });
  }
  absl::Status EmbedBackward(const float* dx, bool decoder) {
    const int64_t table = decoder ? m_.decoder_embed : m_.encoder_embed;
    const int64_t pos = decoder ? m_.decoder_positions : m_.encoder_positions;
    return Time(Cat::kEmbeddingBackward, [&] {
      return k::EmbeddingBackward(ctx_, G(table), Learned() ? G(pos) : nullptr, dx, decoder ? ids_.tgt_in : ids_.src,
                                  decoder ? ids_.tgt_positions : ids_.src_positions, decoder ? rt_ : rs_, d_,
                                  EmbedScale());
    });
  }
  // logits: [rows, V] = h · W_out^T
  absl::Status Logits(float* logits, const float* h, int64_t rows) {
    const int V = c_.vocab_size;
    TNMT_ASSIGN_OR_RETURN(Operand hin, In(h, rows * d_));
    return Time(Cat::kGemm, [&] {
      return k::Gemm(ctx_, false, true, static_cast<int>(rows), V, d_, 1.0f, hin.ptr, d_, W(m_.output_projection),
                     d_, 0.0f, logits, V, Options());
    });
  }
  absl::Status Loss(float* logits, int64_t rows, float label_smoothing) {
    return Time(Cat::kLoss, [&] {
      return k::LabelSmoothedCrossEntropy(ctx_, logits, ids_.tgt_out, rows, c_.vocab_size, label_smoothing,
                                          c_.pad_id, sums_);
    });
  }
  // The loss and R-Drop's consistency term of a doubled batch (rows = 2 x pairs). Both read the
  // raw logits and the loss turns them into its gradient in place, so the term is computed on a
  // copy ([rows, vocab]) and added.
  absl::Status LossWithRDrop(float* logits, int64_t rows, float label_smoothing, float alpha) {
    TNMT_RETURN_IF_ERROR(CheckDoubledForRDrop(b_));
    const int64_t n = rows * c_.vocab_size;
    TNMT_ASSIGN_OR_RETURN(Buffer copy, Copy(logits, n));
    TNMT_RETURN_IF_ERROR(Loss(logits, rows, label_smoothing));
    return Time(Cat::kLoss, [&] {
      TNMT_RETURN_IF_ERROR(
          k::RDropConsistency(ctx_, Data(copy), ids_.tgt_out, rows / 2, c_.vocab_size, alpha, c_.pad_id, sums_));
      return Add(logits, Data(copy), n);
    });
  }
  absl::Status Scale(float* x, int64_t n, float s) {
    return Time(Cat::kLoss, [&] { return k::ScaleInPlace(ctx_, x, n, s); });
  }
  // dh: [rows, d] = dlogits · W_out;  dW_out: [V, d] += dlogits^T · h
  absl::Status LogitsBackward(float* dh, const float* dlogits, const float* h, int64_t rows) {
    const int V = c_.vocab_size, r = static_cast<int>(rows);
    TNMT_ASSIGN_OR_RETURN(Operand dl, In(dlogits, rows * V));
    TNMT_ASSIGN_OR_RETURN(Operand hin, In(h, rows * d_));
    TNMT_RETURN_IF_ERROR(Time(Cat::kGemm, [&] {
      return k::Gemm(ctx_, false, false, r, d_, V, 1.0f, dl.ptr, V, W(m_.output_projection), d_, 0.0f, dh, d_,
                     Options());
    }));
    return Time(Cat::kGemm, [&] {
      return k::Gemm(ctx_, true, false, V, d_, r, 1.0f, dl.ptr, V, hin.ptr, d_, 1.0f, G(m_.output_projection), d_,
                     Options());
    });
  }
  absl::Status Done(int stage) { return done_ ? done_(stage) : absl::OkStatus(); }

 private:
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
    TNMT_RETURN_IF_ERROR(
        Time(Cat::kConvert, [&] { return k::Convert(ctx_, o.copy.get(), half_type_, x, k::DType::kFloat32, n); }));
    o.ptr = o.copy.get();
    return o;
  }

  // Queues f's work as one timed call of category c.
  template <typename F>
  absl::Status Time(Cat c, F&& f) {
    return k::Timed(ctx_, c, std::forward<F>(f));
  }

  float EmbedScale() const { return c_.scale_embedding ? std::sqrt(static_cast<float>(d_)) : 1.0f; }
  bool Learned() const { return c_.position_encoding == PositionEncoding::kLearned; }

  const ModelConfig& c_;
  const FlatModel& m_;
  k::Context& ctx_;
  const CudaModelArrays& a_;
  const TrainBatch& b_;
  const int d_;
  const int64_t rs_, rt_;
  const bool half_;
  const k::DType half_type_;
  double* sums_;
  const StageDone& done_;
  DeviceBatch ids_;
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
  ctx_->timeline().StepBoundary();
  CudaTrainOps ops(c_, layout_, *ctx_, precision_, arrays, batch, sums, done);
  TNMT_RETURN_IF_ERROR(ops.Upload());
  TrainGraph<CudaTrainOps> graph(ops, batch.batch, batch.src_len, batch.tgt_len, options.rates(),
                                 options.dropout_seed);
  TNMT_RETURN_IF_ERROR(graph.Forward());
  return graph.LossAndBackward(options.label_smoothing, options.rdrop_alpha, loss_scale, backward);
}

}  // namespace tnmt::train
