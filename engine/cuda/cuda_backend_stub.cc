// MakeCudaBackend in CPU-only builds: a clear refusal (see cuda_backend.h).
#include "engine/cuda/cuda_backend.h"

namespace tnmt {

absl::StatusOr<std::unique_ptr<DecodeBackend>> MakeCudaBackend(const ModelConfig&,
                                                               const ModelWeights&,
                                                               const CudaPlacement& p) {
  return absl::FailedPreconditionError(
      "this build has no CUDA support (rebuild with bazel build --config=cuda); use --device cpu");
}

std::unique_ptr<FlatBeamStepper> NewCudaBeamStepper(const StepModel&) { return nullptr; }

bool CudaBuild() { return false; }

int CudaDeviceCount() { return 0; }

}  // namespace tnmt
