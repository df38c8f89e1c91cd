// How many GPUs this process can see, for `--devices cuda`. Two implementations, chosen by the
// build: cuda_devices_cuda.cc (--config=cuda, asks the CUDA runtime) and cuda_devices_none.cc
// (the CPU build: every call says the build has no CUDA support).
#pragma once

#include "absl/status/statusor.h"

namespace tnmt::train {

// True in a --config=cuda build.
bool BuiltWithCuda();

// cudaGetDeviceCount; an error when the driver or runtime cannot answer (or no CUDA support).
absl::StatusOr<int> VisibleCudaDevices();

// The message every CUDA request gets in a CPU build.
inline constexpr char kNoCudaSupport[] = "this build has no CUDA support; build with --config=cuda";

}  // namespace tnmt::train
