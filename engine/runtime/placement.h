// Where a loaded model computes: the CPU (float32, or int8 linears) or one CUDA device in
// float32, float16 or bfloat16 (weights and GEMM inputs; accumulation in float32). Parsed from
// the words users type: --device cpu | cuda | cuda:N, --dtype float32 | float16 | bfloat16
// (default: float32 on the CPU, float16 on CUDA), --compute-type float32 | int8 (CPU: int8
// quantizes every linear's weights per output channel at load and its inputs per row; see
// docs/model-format.md); a CPU-only build refuses cuda here.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"

namespace tnmt {

struct Placement {
  Device device = Device::kCpu;
  int index = 0;  // CUDA device ordinal
  DType dtype = DType::kFloat32;
  bool int8 = false;  // CPU: the linears compute in int8

  // Errors name the flag and the accepted values.
  static absl::StatusOr<Placement> Parse(const std::string& device, const std::string& dtype = "",
                                         const std::string& compute_type = "");
  // "cpu", "cpu int8", "cuda:0 float16".
  std::string ToString() const;
  // What the linears compute in: "float32", "int8", "float16", "bfloat16".
  std::string ComputeType() const;
};

// CUDA devices a Placement may name: 0 in a CPU-only build, or without a driver or a device.
int CudaDevicesAvailable();

}  // namespace tnmt
