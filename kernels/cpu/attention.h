// Scaled dot-product multi-head attention on the CPU for already-projected Q, K and V.
// Heads are contiguous column slices: head h uses columns [h*d_head, (h+1)*d_head).
#pragma once

#include <cstdint>

namespace tnmt::kernels::cpu {

struct AttentionArgs {
  int batch = 0;       // query groups (sentences, or sentence-beams)
  int q_len = 0;       // queries per group
  int k_len = 0;       // keys per K/V group (upper bound; see k_valid / causal)
  int num_heads = 0;
  int d_head = 0;
  float scale = 1.0f;  // usually 1/sqrt(d_head)
  // Query group b reads K/V group kv_index[b] (null: group b). Lets beams share one source.
  const int32_t* kv_index = nullptr;
  // Keys j >= k_valid[g] of K/V group g are masked (padding); null: all k_len valid.
  const int32_t* k_valid = nullptr;
  // >= 0: query i may see keys j <= i + causal_offset (causal mask); < 0: no causal mask.
  int causal_offset = -1;
  // If set: key/value j of K/V group g (g = kv_index[b], or b) is stored at the group
  // k_groups[g * k_groups_stride + j] instead of g (a KV cache whose beams share their
  // ancestors' entries; with ld_kv = 0 each stored group is one key/value slot).
  const int32_t* k_groups = nullptr;
  int64_t k_groups_stride = 0;
};

// out: [batch * q_len, ld_out] (first num_heads*d_head columns written)
// q:   [batch * q_len, ld_q]
// k, v: group g, key j starts at element g * kv_group_stride + j * ld_kv (both strides in
//       elements, so kv_group_stride >= k_len * ld_kv for non-overlapping groups).
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
