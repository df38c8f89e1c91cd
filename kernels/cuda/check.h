// CUDA error checking: every runtime call and launch becomes an absl::Status naming the file
// and line. Host-side header, usable from .cc and .cu files.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "absl/status/status.h"

namespace tnmt::kernels::cuda {

inline absl::Status CudaStatus(cudaError_t e, const char* file, int line) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(std::string(file) + ":" + std::to_string(line) + ": CUDA error " +
                             cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

}  // namespace tnmt::kernels::cuda

#define TNMT_CUDA_CHECK(expr) ::tnmt::kernels::cuda::CudaStatus((expr), __FILE__, __LINE__)
// After a <<<>>> launch: reports launch-configuration errors.
#define TNMT_CUDA_LAUNCH_CHECK() ::tnmt::kernels::cuda::CudaStatus(cudaGetLastError(), __FILE__, __LINE__)
