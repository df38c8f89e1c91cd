// The GPU side of the Transformer graph (engine/graph/transformer.h): its layer operations
// and the device memory behind a forward pass's activations. Activations are float32; each
// GEMM converts its input to the weights' dtype first (a float32 model converts nothing) and
// accumulates and writes float32. Everything is queued on the Context's stream; nothing here
// synchronizes.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/cuda/device_weights.h"
#include "engine/graph/transformer.h"
#include "engine/model/config.h"
#include "kernels/cuda/context.h"

namespace tnmt::cuda_engine {

// Scratch for `rows` activation rows of one forward pass (graph::Activations), plus the
// decoder's logits and the GEMM inputs in the weights' dtype.
struct Activations : graph::Activations {
  float* logits = nullptr;  // [rows, vocab] (decoder only)
  void* half = nullptr;     // [rows, max(d, d_ff)] GEMM inputs in the weights' dtype (not float32)
};

// Owns the device memory behind an Activations; grows on demand (contents are not kept).
class ActivationBuffer {
 public:
  // Room for at least `rows` rows; `decoder` adds cq and logits.
  absl::Status Ensure(kernels::cuda::DeviceAllocator& allocator, const ModelConfig& c,
                      kernels::cuda::DType dtype, int64_t rows, bool decoder);
  const Activations& get() const { return a_; }
  int64_t rows() const { return rows_; }

 private:
  kernels::cuda::DeviceBuffer buffer_;
  Activations a_;
  int64_t rows_ = 0;
};

// The GPU's layer operations for the Transformer graph (engine/graph/transformer.h): device
// memory, DeviceWeights, everything queued on the Context's stream. A cheap view: made per
// forward pass with that pass's GEMM-input scratch.
class CudaLayerOps {
 public:
  using Weights = DeviceWeights;
  using LinearParams = DeviceLinear;
  using NormParams = DeviceLayerNorm;

  // half: scratch of rows * max(d, d_ff) elements of the weights' dtype for the largest
  // `rows` this view is used with (Activations::half); unused for float32 weights.
  CudaLayerOps(kernels::cuda::Context& ctx, const DeviceWeights& w, void* half)
      : ctx_(ctx), w_(w), c_(w.config()), half_(half) {}

  const ModelConfig& config() const { return c_; }
  const DeviceWeights& weights() const { return w_; }

  // y: [rows, l.out] = x: [rows, l.in] · W^T + b, then ReLU or GELU (as the config's
  // activation) if `activate`.
  absl::Status Linear(float* y, const float* x, int64_t rows, const LinearParams& l,
                      bool activate) const;
  absl::Status LayerNorm(float* y, const float* x, const float* residual, int64_t rows,
                         const NormParams& ln) const;
  absl::Status Add(float* x, const float* f, int64_t n) const;
  absl::Status Embed(float* x, const int32_t* ids, const int32_t* positions, int64_t rows,
                     bool decoder) const;
  absl::Status Attention(float* out, int64_t ld_out, const float* q, int64_t ld_q, const float* k,
                         const float* v, int64_t ld_kv, int64_t kv_group_stride,
                         const kernels::AttentionArgs& args) const;
  absl::Status ScatterRows(float* dst, int64_t dst_stride, const int32_t* dst_rows,
                           const float* src, int64_t src_stride, const int32_t* src_rows,
                           int64_t count, int width) const;
  // The output projection (and the final logits bias, when the model has one).
  absl::Status Logits(float* logits, const float* x, int64_t rows) const;

 private:
  kernels::cuda::Context& ctx_;
  const DeviceWeights& w_;
  const ModelConfig& c_;
  void* half_;
};

static_assert(graph::CheckLayerOps<CudaLayerOps>());

}  // namespace tnmt::cuda_engine
