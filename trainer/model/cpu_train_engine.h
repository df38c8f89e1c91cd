// The CPU TrainEngine: the host forward/backward of transformer_train.h, gradients all-reduced
// over the host collective, and trainer/optim's Adam, all on host ModelWeights. Bit-identical
// to calling those functions directly (the training golden and resume tests depend on it).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "trainer/model/train_engine.h"
#include "trainer/optim/adam.h"

namespace tnmt::train {

// Takes over `params` and `adam` (moments and step). options.device must be the CPU and the
// precision float32.
absl::StatusOr<std::unique_ptr<TrainEngine>> MakeCpuTrainEngine(const ModelConfig& c,
                                                                const TrainEngineOptions& options,
                                                                ModelWeights params, Adam adam);

}  // namespace tnmt::train
