// The Transformer's building blocks on the GPU, with the CPU's exact wiring
// (engine/layers/sublayers.h, encoder.h): linear layers, post-norm LayerNorm(x + f(x)) or
// pre-norm x + f(LayerNorm(x)), the feed-forward sub-layer, and the encoder over a padded
// batch. Activations are float32; each GEMM converts its input to the weights' dtype first
// (a float32 model converts nothing) and accumulates and writes float32. Everything is queued
// on the Context's stream; nothing here synchronizes.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/cuda/device_weights.h"
#include "engine/model/config.h"
#include "kernels/cuda/context.h"

namespace tnmt::cuda_engine {

// Scratch for `rows` activation rows of one forward pass, float32 unless noted.
struct Activations {
  float* x = nullptr;       // [rows, d] the residual stream
  float* y = nullptr;       // [rows, d] a sub-layer's output, or its normalized input
  float* qkv = nullptr;     // [rows, 3d] (the encoder's cross K/V [rows, 2d] too)
  float* attn = nullptr;    // [rows, d]
  float* cq = nullptr;      // [rows, d] cross-attention queries (decoder only)
  float* hidden = nullptr;  // [rows, d_ff]
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

class DeviceLayers {
 public:
  DeviceLayers(kernels::cuda::Context& ctx, const DeviceWeights& w)
      : ctx_(ctx), w_(w), c_(w.config()) {}

  // y: [rows, l.out] = x: [rows, l.in] · W^T + b, then ReLU or GELU (as the config's
  // activation) if `activate`. half: scratch of rows * l.in elements of the weights' dtype.
  absl::Status Linear(float* y, const float* x, int64_t rows, const DeviceLinear& l, void* half,
                      bool activate = false) const;
  // x: [rows, d] = LayerNorm(x + f) (post-norm) or x + f (pre-norm).
  absl::Status FinishSublayer(float* x, const float* f, int64_t rows,
                              const DeviceLayerNorm& ln) const;
  // A sub-layer's input: x itself (post-norm) or LayerNorm(x) written to scratch (pre-norm).
  absl::StatusOr<const float*> SublayerInput(const float* x, float* scratch, int64_t rows,
                                             const DeviceLayerNorm& ln) const;
  // x = wire(x, fc2(act(fc1(in(x))))), with a.y, a.hidden and a.half as scratch.
  absl::Status FeedForward(float* x, int64_t rows, const DeviceLinear& fc1,
                           const DeviceLinear& fc2, const DeviceLayerNorm& ln,
                           const Activations& a) const;
  // x: [rows, d] = LayerNorm(x) in place (the pre-norm stacks' final layer norm).
  absl::Status FinalLayerNorm(float* x, int64_t rows, const DeviceLayerNorm& ln) const;

  // The encoder over a padded batch: ids, positions: device [batch * src_max] (row-major,
  // positions[b * src_max + j] = j); lengths: device [batch], 1 <= lengths[b] <= src_max.
  // Output in a.x: [batch * src_max, d]; padded rows hold unspecified values and never
  // influence valid ones (padding is masked as keys).
  absl::Status Encode(const Activations& a, const int32_t* ids, const int32_t* positions,
                      const int32_t* lengths, int batch, int src_max) const;

  kernels::cuda::Context& ctx() const { return ctx_; }
  const DeviceWeights& weights() const { return w_; }

 private:
  kernels::cuda::Context& ctx_;
  const DeviceWeights& w_;
  const ModelConfig& c_;
};

}  // namespace tnmt::cuda_engine
