// The training forward and backward of the whole encoder-decoder on one GPU: the training
// graph the CPU runs (train_graph.h: same wiring, same dropout streams and masks, same
// label-smoothed loss) over kernels/cuda, with parameters kept as flat device arrays
// (flat_layout.h).
//
// Precision: float32 throughout, except that with float16/bfloat16 every GEMM takes
// half-precision inputs (the weights' half copies, activations converted just before the GEMM)
// and accumulates and writes float32; layer norms, softmax, attention, dropout and the loss
// stay float32, and parameter gradients accumulate in float32.
//
// Everything is queued on the Context's stream; nothing here waits for the device.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "engine/model/config.h"
#include "kernels/cuda/context.h"
#include "trainer/model/flat_layout.h"
#include "trainer/model/transformer_train.h"
#include "trainer/train_config.h"

namespace tnmt::train {

// Device arrays of one model, owned by the caller. All [layout.size()] unless noted.
struct CudaModelArrays {
  const float* params = nullptr;  // float32 master parameters
  const void* half = nullptr;     // float16/bfloat16 copies of params (mixed precision only)
  float* grads = nullptr;         // gradients, accumulated (+=)
  // Sinusoidal position tables [ModelWeights::kSinusoidRows, d] (learned positions: unused).
  const float* encoder_sinusoid = nullptr;
  const float* decoder_sinusoid = nullptr;
};

// Called after the backward has finished stage `stage` (BackwardStages numbering): the
// gradients of every tensor of that stage and the ones before it are final for this batch.
using StageDone = std::function<absl::Status(int stage)>;

class CudaTrainModel {
 public:
  CudaTrainModel(const ModelConfig& c, const FlatLayout& layout, kernels::cuda::Context* ctx,
                 TrainPrecision precision);

  // Forward of `batch` (validated by the caller) with options' dropout; sums: device double[3]
  // = {summed label-smoothed loss, summed NLL, non-pad target tokens}. With `backward`, then
  // the gradients of loss_scale * (summed loss) are added to arrays.grads, calling `done`
  // (if set) after each stage.
  absl::Status Run(const TrainBatch& batch, const TrainStepOptions& options, const CudaModelArrays& arrays,
                   float loss_scale, bool backward, double* sums, const StageDone& done);

 private:
  const ModelConfig c_;
  const FlatLayout& layout_;
  kernels::cuda::Context* ctx_;
  const TrainPrecision precision_;
};

}  // namespace tnmt::train
