// CPU build: no CUDA; see cuda_devices.h.
#include "trainer/launch/cuda_devices.h"

namespace tnmt::train {

bool BuiltWithCuda() { return false; }

absl::StatusOr<int> VisibleCudaDevices() { return absl::FailedPreconditionError(kNoCudaSupport); }

}  // namespace tnmt::train
