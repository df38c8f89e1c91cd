// Where a loaded model computes: the CPU (float32) or one CUDA device in float32, float16 or
// bfloat16 (weights and GEMM inputs; accumulation in float32). Parsed from the words users
// type: --device cpu | cuda | cuda:N, --dtype float32 | float16 | bfloat16 (default: float32 on
// the CPU, float16 on CUDA); a CPU-only build refuses cuda here.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"

namespace tnmt {

struct Placement {
  Device device = Device::kCpu;
  int index = 0;  // CUDA device ordinal
  DType dtype = DType::kFloat32;

  // Errors name the flag and the accepted values.
  static absl::StatusOr<Placement> Parse(const std::string& device, const std::string& dtype = "");
  // "cpu", "cuda:0 float16".
  std::string ToString() const;
};

}  // namespace tnmt
