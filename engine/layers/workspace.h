// Workspace: reusable scratch buffers for forward passes, so the decode loop does not
// allocate on every step. One Workspace per thread; buffers only grow.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"

namespace tnmt {

class Workspace {
 public:
  enum Slot { kX, kY, kQkv, kAttn, kHidden, kCrossQ, kNumSlots };

  // Returns at least `count` floats for `slot`; contents are unspecified.
  absl::StatusOr<float*> Get(Slot slot, int64_t count);

 private:
  std::array<Tensor, kNumSlots> buffers_;
};

}  // namespace tnmt
