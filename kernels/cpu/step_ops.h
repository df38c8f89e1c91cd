// Row movement of the decoder step on the CPU, with kernels/cuda/step_ops.h's contracts: row
// scatters into the KV slot pools (the encoder's K/V into cross-attention slots, each step's
// new K/V into self-attention slots).
#pragma once

#include <cstdint>

namespace tnmt::kernels::cpu {

// dst row dst_rows[i] = src row (src_rows ? src_rows[i] : i), `width` floats each, for
// i < count. Rows are dst_stride / src_stride floats apart; dst rows written must be
// distinct and must not overlap src.
void ScatterRows(float* dst, int64_t dst_stride, const int32_t* dst_rows, const float* src,
                 int64_t src_stride, const int32_t* src_rows, int64_t count, int width);

}  // namespace tnmt::kernels::cpu
