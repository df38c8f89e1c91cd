// Decoder-step row movement; see step_ops.h.
#include "kernels/cpu/step_ops.h"

#include <cstring>

namespace tnmt::kernels::cpu {

void ScatterRows(float* dst, int64_t dst_stride, const int32_t* dst_rows, const float* src,
                 int64_t src_stride, const int32_t* src_rows, int64_t count, int width) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t from = src_rows != nullptr ? src_rows[i] : i;
    std::memcpy(dst + dst_rows[i] * dst_stride, src + from * src_stride, sizeof(float) * width);
  }
}

}  // namespace tnmt::kernels::cpu
