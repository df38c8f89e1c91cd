// Tensor and aligned host Storage; see tensor.h.
#include "engine/core/tensor.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace tnmt {

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
  }
  return 4;
}

std::string DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt32:
      return "int32";
  }
  return "unknown";
}

std::string DeviceName(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

absl::StatusOr<DType> ParseFloatDType(absl::string_view name) {
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    if (name == DTypeName(t)) return t;
  }
  return absl::InvalidArgumentError("expected float32, float16 or bfloat16");
}

absl::StatusOr<DeviceId> ParseDeviceId(absl::string_view name) {
  DeviceId id;
  if (name == "cpu") return id;
  id.device = Device::kCuda;
  if (name == "cuda") return id;
  absl::string_view digits = name;
  if (absl::ConsumePrefix(&digits, "cuda:") && !digits.empty() && digits.size() <= 4 &&
      digits.find_first_not_of("0123456789") == absl::string_view::npos &&
      absl::SimpleAtoi(digits, &id.index)) {
    return id;
  }
  return absl::InvalidArgumentError("expected cpu, cuda or cuda:N");
}

absl::StatusOr<std::shared_ptr<Storage>> Storage::Allocate(int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("negative allocation size");
  constexpr int64_t kAlign = 64;
  const int64_t rounded = ((bytes + kAlign - 1) / kAlign) * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("out of host memory allocating ", bytes,
                                                     " bytes"));
  }
  return std::shared_ptr<Storage>(new Storage(p, bytes));
}

Storage::~Storage() { std::free(data_); }

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

std::string Tensor::ShapeString() const { return absl::StrCat("[", absl::StrJoin(shape_, ", "), "]"); }

absl::StatusOr<Tensor> Tensor::Empty(std::vector<int64_t> shape, DType dtype) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("negative tensor dimension");
    n *= d;
  }
  auto storage = Storage::Allocate(n * DTypeSize(dtype));
  if (!storage.ok()) return storage.status();
  Tensor t;
  t.storage_ = *std::move(storage);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

absl::StatusOr<Tensor> Tensor::Zeros(std::vector<int64_t> shape, DType dtype) {
  auto t = Empty(std::move(shape), dtype);
  if (t.ok()) std::memset(t->data<char>(), 0, t->numel() * DTypeSize(dtype));
  return t;
}

absl::StatusOr<Tensor> Tensor::FromVector(std::vector<int64_t> shape,
                                          absl::Span<const float> values) {
  auto t = Empty(std::move(shape));
  if (!t.ok()) return t.status();
  if (t->numel() != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(absl::StrCat("FromVector: shape ", t->ShapeString(),
                                                   " does not hold ", values.size(), " values"));
  }
  std::memcpy(t->f32(), values.data(), values.size() * sizeof(float));
  return t;
}

absl::StatusOr<Tensor> Tensor::Reshape(std::vector<int64_t> shape) const {
  Tensor t = *this;
  t.shape_ = std::move(shape);
  if (t.numel() != numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reshape ", ShapeString(), " to ", t.ShapeString()));
  }
  return t;
}

Tensor Tensor::Rows(int64_t begin, int64_t end) const {
  Tensor t = *this;
  const int64_t row = rank() == 0 ? 1 : numel() / shape_[0];
  t.offset_bytes_ += begin * row * DTypeSize(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

}  // namespace tnmt
