// safetensors I/O: an 8-byte little-endian header length, a JSON header mapping each tensor
// name to {dtype, shape, data_offsets}, then the raw little-endian data.
// The reader converts F16/BF16 to float32 and validates every offset against the file size,
// so a truncated or corrupt file is an error naming the file and the tensor, never a crash.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"

namespace tnmt {

struct StoredTensor {
  Tensor value;        // float32 (or int32 for I32 entries)
  DType stored_dtype;  // what the file held
};

using TensorMap = std::map<std::string, StoredTensor>;

absl::StatusOr<TensorMap> ReadSafetensors(const std::string& path);

// Writes float32 tensors (as F32, or F16/BF16 when `stored` says so), atomically:
// to `path + ".tmp"`, fsync, then rename.
absl::Status WriteSafetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                              DType stored = DType::kFloat32);

}  // namespace tnmt
