// The attention contract both devices implement (kernels/cpu/attention.h and
// kernels/cuda/attention.h, for inference and the training attention): the arguments and the
// layouts of Q, K, V and the output.
//
// Inference attention (MultiHeadAttention, AttentionArgmax), on already-projected Q, K and V:
//   heads are contiguous column slices: head h uses columns [h*d_head, (h+1)*d_head);
//   out: [batch * q_len, ld_out] (the first num_heads*d_head columns written);
//   q:   [batch * q_len, ld_q];
//   k, v: key j of K/V group g starts at element g' * kv_group_stride + j * ld_kv, with
//         g' = k_groups[g * k_groups_stride + j] when k_groups is set and g' = g otherwise
//         (both strides in elements, so kv_group_stride >= k_len * ld_kv for non-overlapping
//         groups). A query row with no visible key gets zeros.
// Every pointer in AttentionArgs lives in the memory of the device that runs the kernel.
#pragma once

#include <cstdint>

namespace tnmt::kernels {

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

// Training attention dropout (AttentionTrainForward / AttentionBackward): the probabilities
// that multiply v are dropped as Dropout would drop the whole probs tensor
// [batch, heads, q_len, k_len] (element (b, h, i, j) at its index there, the counter hash of
// kernels/counter_uniform.h), while probs keeps the undropped values the backward needs.
// p == 0: none.
struct AttentionDropout {
  float p = 0.0f;
  uint64_t seed = 0;
  uint64_t stream = 0;
};

}  // namespace tnmt::kernels
