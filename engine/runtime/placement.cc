// Placement parsing; see placement.h.
#include "engine/runtime/placement.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tnmt {

absl::StatusOr<Placement> Placement::Parse(const std::string& device, const std::string& dtype) {
  Placement p;
  if (device == "cpu") {
    p.device = Device::kCpu;
  } else if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    p.device = Device::kCuda;
    if (device.size() > 4 &&
        (!absl::SimpleAtoi(device.substr(5), &p.index) || p.index < 0 || p.index > 1023)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--device ", device, ": expected cuda:N with N a device number"));
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--device ", device, ": expected cpu, cuda or cuda:N"));
  }
  if (dtype.empty()) {
    p.dtype = p.device == Device::kCpu ? DType::kFloat32 : DType::kFloat16;
  } else if (dtype == "float32") {
    p.dtype = DType::kFloat32;
  } else if (dtype == "float16") {
    p.dtype = DType::kFloat16;
  } else if (dtype == "bfloat16") {
    p.dtype = DType::kBFloat16;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype ", dtype, ": expected float32, float16 or bfloat16"));
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
