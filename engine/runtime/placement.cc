// Placement parsing; see placement.h.
#include "engine/runtime/placement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_backend.h"

namespace tnmt {

absl::StatusOr<Placement> Placement::Parse(const std::string& device, const std::string& dtype) {
  Placement p;
  absl::StatusOr<DeviceId> id = ParseDeviceId(device);
  if (!id.ok()) return absl::InvalidArgumentError(absl::StrCat("--device ", device, ": ", id.status().message()));
  p.device = id->device;
  p.index = std::max(0, id->index);  // "cuda": device 0
  if (p.device == Device::kCuda && !CudaBuild()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device ", device, ": this build has no CUDA support (rebuild with bazel build --config=cuda)"));
  }
  if (dtype.empty()) {
    p.dtype = p.device == Device::kCpu ? DType::kFloat32 : DType::kFloat16;
  } else {
    absl::StatusOr<DType> t = ParseFloatDType(dtype);
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("--dtype ", dtype, ": ", t.status().message()));
    p.dtype = *t;
  }
  if (p.device == Device::kCpu && p.dtype != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dtype ", dtype, ": the CPU engine computes in float32 (half precision needs --device cuda)"));
  }
  return p;
}

std::string Placement::ToString() const {
  if (device == Device::kCpu) return "cpu";
  return absl::StrCat("cuda:", index, " ", DTypeName(dtype));
}

}  // namespace tnmt
