// Scaled dot-product multi-head attention on the CPU for already-projected Q, K and V: the
// inference kernels (attention.cc) with the arguments and layouts of kernels/attention.h, and
// the training attention with its gradient (attention_backward.cc).
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace tnmt::kernels::cpu {

using ::tnmt::kernels::AttentionArgs;
using ::tnmt::kernels::AttentionDropout;

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

// Training attention for one projected Q/K/V set; saves probabilities for the backward.
// q: rows b*q_len+i (stride ld_q); k, v: rows b*k_len+j (stride ld_kv), per group b.
// probs: [batch, heads, q_len, k_len]; out: [batch*q_len, ld_out].
// k_valid: [batch] valid keys (null: all); causal: key j visible to query i iff j <= i.
// The (group, head) pairs are split over the compute threads (parallel.h), each computed by one
// thread with tnmt's own small GEMM loops, so results do not depend on the thread count.
void AttentionTrainForward(float* out, int64_t ld_out, float* probs, const float* q, int64_t ld_q,
                           const float* k, const float* v, int64_t ld_kv, int batch, int q_len,
                           int k_len, int heads, int d_head, const int32_t* k_valid, bool causal,
                           const AttentionDropout& drop = {});

// Gradients of AttentionTrainForward (with the same `drop`): dq written, dk and dv accumulated
// (+=), all with the same layouts as q, k, v. Split over the threads as the forward.
void AttentionBackward(float* dq, int64_t ld_dq, float* dk, float* dv, int64_t ld_dkv,
                       const float* dout, int64_t ld_dout, const float* probs, const float* q,
                       int64_t ld_q, const float* k, const float* v, int64_t ld_kv, int batch,
                       int q_len, int k_len, int heads, int d_head, const AttentionDropout& drop = {});

}  // namespace tnmt::kernels::cpu
