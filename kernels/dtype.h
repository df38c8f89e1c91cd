// Element types of tensors and kernel operands, one enum for every part of tnmt: the engine's
// Tensor (engine/core/tensor.h), the CUDA kernels' operands and the device weights.
#pragma once

namespace tnmt::kernels {

enum class DType { kFloat32, kFloat16, kBFloat16, kInt32 };

// Bytes per element.
constexpr int DTypeBytes(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16 ? 2 : 4; }

}  // namespace tnmt::kernels
