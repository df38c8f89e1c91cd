// A model's weights resident on one GPU: uploaded once from the host ModelWeights (float32),
// then read-only and shared by every CudaStepModel of the model (any thread).
//
// Precision: the GEMM operands (every Linear weight, the embedding tables, the output
// projection) are stored in `dtype` (float32, float16 or bfloat16); biases, layer-norm
// parameters and position tables stay float32. Tensors that share storage on the host (tied
// embeddings, the one sinusoid table of encoder and decoder) are uploaded once and shared.
// Everything lives in one device allocation (each tensor 256-byte aligned), which is
// `bytes()` long and freed with the DeviceWeights.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/param_tree.h"
#include "engine/model/weights.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/gemm.h"

namespace tnmt::cuda_engine {

struct DeviceLinear {
  const void* weight = nullptr;  // [out, in] in DeviceWeights::dtype()
  const float* bias = nullptr;   // [out]; null when the layer has none
  int out = 0;
  int in = 0;
};

struct DeviceLayerNorm {
  const float* gamma = nullptr;  // [d_model]; null when the model has no such layer norm
  const float* beta = nullptr;   // [d_model]
};

using DeviceEncoderLayer = EncoderLayerParams<DeviceLinear, DeviceLayerNorm>;
using DeviceDecoderLayer = DecoderLayerParams<DeviceLinear, DeviceLayerNorm>;

// The model tree (param_tree.h) over device pointers: vocabulary tables in dtype(), position
// tables [position_rows, d] and the logits bias (null unless config.final_logits_bias) in
// float32; tied tables share their source's pointer; final layer norms null unless pre-norm.
class DeviceWeights : public ModelParams<const void*, const float*, DeviceLinear, DeviceLayerNorm> {
 public:
  // Uploads `w` (host float32, shapes as `c` implies) to `device` in `dtype`. Synchronizes
  // before returning; `w` is not referenced afterwards. Out of device memory is
  // ResourceExhausted naming the bytes.
  static absl::StatusOr<std::shared_ptr<const DeviceWeights>> Upload(const ModelConfig& c,
                                                                     const ModelWeights& w,
                                                                     int device,
                                                                     kernels::cuda::DType dtype);
  ~DeviceWeights();
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  const ModelConfig& config() const { return config_; }
  int device() const { return device_; }
  kernels::cuda::DType dtype() const { return dtype_; }
  int64_t bytes() const { return bytes_; }

  int position_rows = 0;  // MaxPositions(config)

 private:
  DeviceWeights() = default;
  ModelConfig config_;
  int device_ = 0;
  kernels::cuda::DType dtype_ = kernels::cuda::DType::kFloat32;
  int64_t bytes_ = 0;
  // Declared before the buffer it allocated, so it outlives it.
  std::unique_ptr<kernels::cuda::Context> ctx_;
  kernels::cuda::DeviceBuffer arena_;
};

}  // namespace tnmt::cuda_engine
