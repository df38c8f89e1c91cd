// Workspace buffers; see workspace.h.
#include "engine/layers/workspace.h"

namespace tnmt {

absl::StatusOr<float*> Workspace::Get(Slot slot, int64_t count) {
  Tensor& b = buffers_[slot];
  if (b.empty() || b.numel() < count) {
    const int64_t grown = std::max<int64_t>(count, b.empty() ? 0 : b.numel() * 3 / 2);
    auto t = Tensor::Empty({grown});
    if (!t.ok()) return t.status();
    b = *std::move(t);
  }
  return b.f32();
}

}  // namespace tnmt
