// Scaled dot-product multi-head attention on the CPU for already-projected Q, K and V, with the
// arguments and layouts of kernels/attention.h.
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace tnmt::kernels::cpu {

using ::tnmt::kernels::AttentionArgs;

// out: [batch * q_len, ld_out]; q: [batch * q_len, ld_q]; k, v: K/V groups kv_group_stride
// elements apart, keys ld_kv apart (the layouts of kernels/attention.h).
// Query groups are split over the compute threads (kernels/cpu/parallel.h); results do not
// depend on the split. Each thread keeps its own score buffer.
void MultiHeadAttention(float* out, int64_t ld_out, const float* q, int64_t ld_q, const float* k,
                        const float* v, int64_t ld_kv, int64_t kv_group_stride,
                        const AttentionArgs& args);

// Alignment: for each query row (batch * q_len rows, addressed as in MultiHeadAttention), the
// key position j with the highest attention probability averaged over the heads; ties: the
// lowest j. A row with no visible key gets -1. Computed in double from the same scaled dot
// products and softmax as the attention (exp exact, not the kernels' approximation), so it
// does not depend on the kernel path; one row at a time, rows split over the compute threads.
void AttentionArgmax(int32_t* out, const float* q, int64_t ld_q, const float* k, int64_t ld_kv,
                     int64_t kv_group_stride, const AttentionArgs& args);

}  // namespace tnmt::kernels::cpu
