// Row movement of the decoder step on the CPU, with kernels/cuda/step_ops.h's contracts: the
// slot-table gather after a beam reorder, and row scatters into the KV slot pools (the
// encoder's K/V into cross-attention slots, each step's new K/V into self-attention slots).
#pragma once

#include <cstdint>

namespace tnmt::kernels::cpu {

// The decoder's slot tables after a reorder plus this step's new slot, in one pass:
// for each row r < rows: dst[r, 0:positions[r]) = src[map[r], 0:positions[r]) when map[r] >= 0
// (nothing is copied for a new row, map[r] < 0, which has positions[r] == 0), then
// dst[r, positions[r]] = slots[r]. dst, src: [*, stride] int32, distinct buffers;
// 0 <= positions[r] < stride; map[r] names a row of src.
void ReorderSlotTables(int32_t* dst, const int32_t* src, int64_t stride, const int32_t* map,
                       const int32_t* positions, const int32_t* slots, int rows);

// dst row dst_rows[i] = src row (src_rows ? src_rows[i] : i), `width` floats each, for
// i < count. Rows are dst_stride / src_stride floats apart; dst rows written must be
// distinct and must not overlap src.
void ScatterRows(float* dst, int64_t dst_stride, const int32_t* dst_rows, const float* src,
                 int64_t src_stride, const int32_t* src_rows, int64_t count, int width);

}  // namespace tnmt::kernels::cpu
