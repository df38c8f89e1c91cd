// Small kernels of the CUDA decoder step: the decoder's slot-table reorder, row scatters into
// the KV slot pools, row gathers by parent index and the per-row log-sum-exp with the eos logit.
// Device pointers, outputs first, queued on the Context's stream; each returns a Status naming the
// failing launch. Shapes in the comments; all offsets int64.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"

namespace tnmt::kernels::cuda {

// The decoder's slot tables after a reorder plus this step's new slot, in one pass:
// for each row r < rows: dst[r, 0:positions[r]) = src[map[r], 0:positions[r]) when map[r] >= 0
// (nothing is copied for a new row, map[r] < 0, which has positions[r] == 0), then
// dst[r, positions[r]] = slots[r]. dst, src: [*, stride] int32, distinct buffers;
// 0 <= positions[r] < stride; map[r] names a row of src.
absl::Status ReorderSlotTables(Context& ctx, int32_t* dst, const int32_t* src, int64_t stride,
                               const int32_t* map, const int32_t* positions, const int32_t* slots,
                               int rows);

// dst row dst_rows[i] = src row (src_rows ? src_rows[i] : i), `width` floats each, for
// i < count. Rows are dst_stride / src_stride floats apart; dst rows written must be
// distinct and must not overlap src.
absl::Status ScatterRows(Context& ctx, float* dst, int64_t dst_stride, const int32_t* dst_rows,
                         const float* src, int64_t src_stride, const int32_t* src_rows,
                         int64_t count, int width);

// lse: [rows] = log(sum_j exp(x[r, j])) (max-shifted, as kernels/cpu LogSumExp);
// picked: [rows] = x[r, pick]. x: [rows, n], 0 <= pick < n.
absl::Status LogSumExpAndPick(Context& ctx, float* lse, float* picked, const float* x, int64_t rows,
                              int n, int32_t pick);

// dst row i = src row index[i] for i < rows: `row_bytes` bytes per row, rows `dst_stride` /
// `src_stride` bytes apart; dst and src must not overlap. Reorders KV-cache rows, or the
// decoder's per-row slot tables (int32 rows), after beams were chosen (index = parents).
absl::Status GatherRows(Context& ctx, void* dst, int64_t dst_stride, const void* src,
                        int64_t src_stride, const int32_t* index, int64_t rows, int64_t row_bytes);

}  // namespace tnmt::kernels::cuda
