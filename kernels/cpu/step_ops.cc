// Decoder-step row movement; see step_ops.h.
#include "kernels/cpu/step_ops.h"

#include <cstring>

#include "kernels/cpu/parallel.h"

namespace tnmt::kernels::cpu {

void ReorderSlotTables(int32_t* dst, const int32_t* src, int64_t stride, const int32_t* map,
                       const int32_t* positions, const int32_t* slots, int rows) {
  for (int r = 0; r < rows; ++r) {
    int32_t* row = dst + r * stride;
    if (map[r] >= 0) std::memcpy(row, src + map[r] * stride, sizeof(int32_t) * positions[r]);
    row[positions[r]] = slots[r];
  }
}

void ScatterRows(float* dst, int64_t dst_stride, const int32_t* dst_rows, const float* src,
                 int64_t src_stride, const int32_t* src_rows, int64_t count, int width) {
  // Split over the compute threads (the rows written are distinct): a step's new K/V rows
  // often land on pages the pool has not touched yet, and the page faults and copies would
  // otherwise run on one thread while the others wait.
  ParallelForLarge(count, width, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t from = src_rows != nullptr ? src_rows[i] : i;
      std::memcpy(dst + dst_rows[i] * dst_stride, src + from * src_stride, sizeof(float) * width);
    }
  });
}

}  // namespace tnmt::kernels::cpu
