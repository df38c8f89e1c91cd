// Tensor: a shaped view over host memory (device memory is kernels/cuda's DeviceBuffer, held
// by the CUDA engine and trainer). Compute is float32; float16 and bfloat16 exist as
// stored types (converted on load). Storage is reference-counted and 64-byte aligned, so views
// (Reshape, Slice) are cheap and never copy.
// Invariant: data() points at numel() contiguous elements of dtype() (row-major).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/dtype.h"

namespace tnmt {

using DType = kernels::DType;  // kernels/dtype.h: one element-type enum for engine and kernels
enum class Device { kCpu, kCuda };

int64_t DTypeSize(DType dtype);
std::string DTypeName(DType dtype);
std::string DeviceName(Device device);

// A floating-point type by the name DTypeName gives it: "float32", "float16" or "bfloat16".
// The error says what is accepted; callers prefix the flag or key.
absl::StatusOr<DType> ParseFloatDType(absl::string_view name);

// A device as users write it: "cpu", "cuda" (index -1: no number given) or "cuda:N" (N: one to
// four digits). The error says what is accepted; callers prefix the flag or key.
struct DeviceId {
  Device device = Device::kCpu;
  int index = -1;
};
absl::StatusOr<DeviceId> ParseDeviceId(absl::string_view name);

// 64-byte-aligned host memory, released with its last owner.
class Storage {
 public:
  static absl::StatusOr<std::shared_ptr<Storage>> Allocate(int64_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }

 private:
  Storage(void* data, int64_t bytes) : data_(data), bytes_(bytes) {}
  void* data_;
  int64_t bytes_;
};

class Tensor {
 public:
  Tensor() = default;
  // Allocates an uninitialized tensor; fails (no throw) when memory is exhausted.
  static absl::StatusOr<Tensor> Empty(std::vector<int64_t> shape, DType dtype = DType::kFloat32);
  static absl::StatusOr<Tensor> Zeros(std::vector<int64_t> shape, DType dtype = DType::kFloat32);
  // Copies `values` into a new float32 tensor of `shape` (sizes must agree).
  static absl::StatusOr<Tensor> FromVector(std::vector<int64_t> shape,
                                           absl::Span<const float> values);

  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + rank() : i]; }
  int64_t numel() const;
  DType dtype() const { return dtype_; }
  bool empty() const { return storage_ == nullptr; }
  std::string ShapeString() const;

  template <typename T>
  T* data() const {
    return reinterpret_cast<T*>(static_cast<char*>(storage_->data()) + offset_bytes_);
  }
  float* f32() const { return data<float>(); }

  // Same storage, new shape with the same number of elements.
  absl::StatusOr<Tensor> Reshape(std::vector<int64_t> shape) const;
  // Rows [begin, end) of the first dimension, sharing storage.
  Tensor Rows(int64_t begin, int64_t end) const;

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_bytes_ = 0;
  std::vector<int64_t> shape_;
  DType dtype_ = DType::kFloat32;
};

}  // namespace tnmt
