// CUDA build: counts devices through the CUDA runtime; see cuda_devices.h.
#include "trainer/launch/cuda_devices.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"

namespace tnmt::train {

bool BuiltWithCuda() { return true; }

absl::StatusOr<int> VisibleCudaDevices() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice) return 0;
  if (e != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat("cannot count CUDA devices: ", cudaGetErrorString(e)));
  }
  return n;
}

}  // namespace tnmt::train
