// The CUDA TrainEngine (trainer/model/cuda_train_model.h does the forward/backward): float32
// master parameters, gradients and Adam moments in device memory; float16/bfloat16 copies of
// the weights for the GEMMs in mixed precision; NCCL over the GPUs of the data-parallel group,
// gradient buckets all-reduced while the backward runs. Adam's hyper-parameters are the
// paper's (kernels::AdamOptions defaults), as trainer/optim's Adam::Create uses.
//
// This header needs no CUDA: in a build without --config=cuda the factory is a stub that says
// so (cuda_train_engine_stub.cc), so the train loop links either way.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "trainer/model/train_engine.h"
#include "trainer/optim/adam.h"

namespace tnmt::train {

// Moves `params` and `adam`'s moments and step to the GPU options.device names (index -1: the
// collective's rank modulo the number of visible GPUs). With more than one rank, sets up NCCL
// over options.collective (every rank must call this together). Without CUDA support in the
// build: Unimplemented, "this build has no CUDA support; build with --config=cuda".
absl::StatusOr<std::unique_ptr<TrainEngine>> MakeCudaTrainEngine(const ModelConfig& c,
                                                                 const TrainEngineOptions& options,
                                                                 ModelWeights params, Adam adam);

}  // namespace tnmt::train
