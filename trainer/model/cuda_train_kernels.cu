// Device helpers of the CUDA train engine; see cuda_train_kernels.h.
#include "trainer/model/cuda_train_kernels.h"

#include <string>

namespace tnmt::train::cuda {

namespace {

__global__ void AddDoublesKernel(double* acc, const double* x, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) acc[i] += x[i];
}

__global__ void StoreDoubleKernel(double* dst, double value) { *dst = value; }

absl::Status LaunchStatus(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(std::string(what) + ": CUDA error " + cudaGetErrorName(e) + ": " +
                             cudaGetErrorString(e));
}

}  // namespace

absl::Status AddDoubles(double* acc, const double* x, int count, cudaStream_t stream) {
  if (count <= 0) return absl::OkStatus();
  constexpr int kThreads = 128;
  AddDoublesKernel<<<(count + kThreads - 1) / kThreads, kThreads, 0, stream>>>(acc, x, count);
  return LaunchStatus("AddDoubles");
}

absl::Status StoreDouble(double* dst, double value, cudaStream_t stream) {
  StoreDoubleKernel<<<1, 1, 0, stream>>>(dst, value);
  return LaunchStatus("StoreDouble");
}

}  // namespace tnmt::train::cuda
