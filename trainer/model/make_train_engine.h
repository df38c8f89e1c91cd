// The TrainEngine for a device: the CPU engine or the CUDA engine (an error naming the build
// flag in builds without CUDA).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "trainer/model/train_engine.h"
#include "trainer/optim/adam.h"

namespace tnmt::train {

// Takes over `params` and `adam` (moments and step); see TrainEngineOptions.
absl::StatusOr<std::unique_ptr<TrainEngine>> MakeTrainEngine(const ModelConfig& c,
                                                             const TrainEngineOptions& options,
                                                             ModelWeights params, Adam adam);

}  // namespace tnmt::train
