// Fused multi-head attention on the GPU with the exact semantics of
// kernels/cpu/attention.h (MultiHeadAttention): the layouts and AttentionArgs of
// kernels/attention.h (slot tables per K/V group k_groups, kv_index, k_valid, causal_offset), float32. Meant for
// the decode step reading the KV cache (q_len small); any q_len works.
//
// One thread block per (query row, head); the keys are split over the block's lanes and
// combined with an online softmax (flash-decoding style), so scores never touch device
// memory. Fast path for d_head in {32, 64, 128} with 16-byte aligned rows; a general path for
// any d_head <= 256.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/attention.h"
#include "kernels/cuda/context.h"

namespace tnmt::kernels::cuda {

// Every pointer in it (kv_index, k_valid, k_groups) must point to device memory here.
using ::tnmt::kernels::AttentionArgs;

// out: [batch * q_len, ld_out]; q: [batch * q_len, ld_q]; key j of K/V group g at
// k + g' * kv_group_stride + j * ld_kv with g' = k_groups[g * stride + j] (or g). All device
// pointers. A row with no visible key gets zeros (as on the CPU).
absl::Status MultiHeadAttention(Context& ctx, float* out, int64_t ld_out, const float* q,
                                int64_t ld_q, const float* k, const float* v, int64_t ld_kv,
                                int64_t kv_group_stride, const AttentionArgs& args);

// Alignment, as kernels/cpu AttentionArgmax: for each query row, the visible key with the
// highest attention probability averaged over the heads (ties: the lowest; no visible key:
// -1), in double from the same scaled dot products and softmax, summed in the CPU's order
// without contraction, so it agrees with the CPU except where exp's last bit separates two
// keys. One thread per row: for alignments, not for speed. num_heads <= 256.
absl::Status AttentionArgmax(Context& ctx, int32_t* out, const float* q, int64_t ld_q, const float* k,
                             int64_t ld_kv, int64_t kv_group_stride, const AttentionArgs& args);

}  // namespace tnmt::kernels::cuda
