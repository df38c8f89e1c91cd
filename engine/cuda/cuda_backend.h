// The CUDA engine's entry point: a model's weights placed on one GPU in a chosen precision,
// as a DecodeBackend (engine/decode/step_model.h) whose StepModels run the encoder, the
// KV-cached decoder step, the log-softmax normalizer and the top-k on the device; only the
// k candidates per row come back to the host for the beam search.
//
// Two implementations, chosen at build time (engine/cuda/BUILD): the real one with
// --config=cuda, and a stub in CPU builds whose MakeCudaBackend says the build lacks CUDA.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "engine/decode/flat_beam_step.h"
#include "engine/decode/step_model.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace tnmt {

struct CudaPlacement {
  int device = 0;                    // CUDA device ordinal
  DType dtype = DType::kFloat16;     // weight and GEMM precision: float32, float16 or bfloat16
  // Replay each decode step as a CUDA graph (engine/cuda/cuda_step_model.h). On by default:
  // on an H200, Transformer-base beam 4 in float16 decoded 1.7-1.8x as many tokens per second
  // at batch 1, 1.3-1.5x at batch 32 and the same at batch 256 with graphs as with eager
  // launches (two runs, docs/gpu.md).
  bool cuda_graphs = true;
};

// Copies `w` to the device in p.dtype (GEMMs accumulate in float32). The host weights are not
// referenced afterwards. Errors name the device and the problem (no device, out of memory).
absl::StatusOr<std::unique_ptr<DecodeBackend>> MakeCudaBackend(const ModelConfig& c,
                                                               const ModelWeights& w,
                                                               const CudaPlacement& p);

// The GPU beam step (engine/cuda/cuda_beam_stepper.h) for `model` when it is a StepModel of
// this engine; null otherwise (always in builds without CUDA).
std::unique_ptr<FlatBeamStepper> NewCudaBeamStepper(const StepModel& model);

// Whether this binary was built with CUDA support.
bool CudaBuild();

// CUDA devices usable by this process (0 without a driver, a device or CUDA support).
int CudaDeviceCount();

}  // namespace tnmt
