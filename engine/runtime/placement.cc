// Placement parsing; see placement.h.
#include "engine/runtime/placement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_backend.h"

namespace tnmt {

absl::StatusOr<Placement> Placement::Parse(const std::string& device, const std::string& dtype,
                                           const std::string& compute_type) {
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
  if (compute_type == "int8") {
    if (p.device != Device::kCpu) {
      return absl::InvalidArgumentError(
          "--compute-type int8: int8 runs on the CPU only (on cuda choose the precision with --dtype)");
    }
    p.int8 = true;
  } else if (!compute_type.empty() && compute_type != "float32") {
    return absl::InvalidArgumentError(
        absl::StrCat("--compute-type ", compute_type, ": expected float32 or int8"));
  }
  return p;
}

std::string Placement::ToString() const {
  if (device == Device::kCpu) return int8 ? "cpu int8" : "cpu";
  return absl::StrCat("cuda:", index, " ", DTypeName(dtype));
}

std::string Placement::ComputeType() const {
  if (device == Device::kCpu) return int8 ? "int8" : "float32";
  return DTypeName(dtype);
}

int CudaDevicesAvailable() { return CudaDeviceCount(); }

}  // namespace tnmt
