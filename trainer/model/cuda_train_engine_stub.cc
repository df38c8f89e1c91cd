// MakeCudaTrainEngine in builds without CUDA (no --config=cuda): a clear error instead of a
// link failure, so `tnmt train --device cuda` explains itself. See cuda_train_engine.h.
#include "trainer/model/cuda_train_engine.h"

namespace tnmt::train {

absl::StatusOr<std::unique_ptr<TrainEngine>> MakeCudaTrainEngine(const ModelConfig&, const TrainEngineOptions&,
                                                                 ModelWeights, Adam) {
  return absl::UnimplementedError("this build has no CUDA support; build with --config=cuda");
}

}  // namespace tnmt::train
