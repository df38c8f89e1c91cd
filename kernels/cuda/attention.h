// Multi-head attention on the GPU with the exact semantics of kernels/cpu/attention.h: the
// inference kernels (attention.cu) and the training attention with its gradient
// (attention_backward.cu).
//
// MultiHeadAttention: the layouts and AttentionArgs of kernels/attention.h (slot tables per K/V
// group k_groups, kv_index, k_valid, causal_offset), float32. Meant for the decode step reading
// the KV cache (q_len small); any q_len works. One thread block per (query row, head); the keys
// are split over the block's lanes and combined with an online softmax (flash-decoding style),
// so scores never touch device memory. Fast path for d_head in {32, 64, 128} with 16-byte
// aligned rows; a general path for any d_head <= 256.
//
// Training attention: scratch comes from ctx.allocator() and is handed back in stream order
// before the function returns; no floating-point atomics (bit-identical from run to run);
// dk and dv are accumulated (+=), dq written (=), as on the CPU.
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

// Training attention; saves the probabilities for AttentionBackward. Scale 1/sqrt(d_head).
// q: rows b*q_len+i (stride ld_q), head h at columns [h*d_head, (h+1)*d_head);
// k, v: rows b*k_len+j (stride ld_kv), same columns; out: [batch*q_len, ld_out], same columns.
// probs: [batch, heads, q_len, k_len]. k_valid: device [batch] valid keys per group (null: all;
// clamped to [0, k_len]); causal: key j visible to query i iff j <= i. A query with no visible
// key gets all-zero probabilities and a zero output row (the CPU's convention).
// Any k_len (the probability row itself is the working buffer); d_head in [1, 4096].
// drop: attention dropout as on the CPU (the same elements dropped: the counter RNG over the
// probs index); probs keeps the undropped values. Scratch with drop.p > 0: the probs' size.
using ::tnmt::kernels::AttentionDropout;  // kernels/attention.h
absl::Status AttentionTrainForward(Context& ctx, float* out, int64_t ld_out, float* probs,
                                   const float* q, int64_t ld_q, const float* k, const float* v,
                                   int64_t ld_kv, int batch, int q_len, int k_len, int heads,
                                   int d_head, const int32_t* k_valid, bool causal,
                                   const AttentionDropout& drop = {});

// Gradients of AttentionTrainForward from its saved probs: dq written, dk and dv accumulated
// (+=), with the layouts of q, k, v (dq stride ld_dq; dk, dv stride ld_dkv). Keys whose
// probability is exactly 0 (masked) contribute nothing, even if their k/v rows hold NaN.
// Scratch: batch * heads * q_len * k_len floats (the softmax gradient), twice that with
// drop.p > 0 (the dropped probabilities). drop: the forward's.
absl::Status AttentionBackward(Context& ctx, float* dq, int64_t ld_dq, float* dk, float* dv,
                               int64_t ld_dkv, const float* dout, int64_t ld_dout,
                               const float* probs, const float* q, int64_t ld_q, const float* k,
                               const float* v, int64_t ld_kv, int batch, int q_len, int k_len,
                               int heads, int d_head, const AttentionDropout& drop = {});

}  // namespace tnmt::kernels::cuda
