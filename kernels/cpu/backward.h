// CPU kernels for training: backward passes beside the forward helpers they need, the
// label-smoothed loss, dropout from a counter-based RNG (masks are recomputed, never stored:
// the same (seed, stream, index) always gives the same bit, which makes resume and
// multi-process runs exact), and the Adam update. Raw pointers, outputs first.
// Parameter gradients are always accumulated (+=); activation gradients are written (=)
// unless the name says Accumulate.
#pragma once

#include <cstdint>

#include "kernels/adam.h"
#include "kernels/attention.h"
#include "kernels/counter_uniform.h"
#include "kernels/cpu/elementwise.h"

namespace tnmt::kernels::cpu {

// The contracts shared with the CUDA kernels.
using ::tnmt::kernels::AdamOptions;       // kernels/adam.h
using ::tnmt::kernels::AttentionDropout;  // kernels/attention.h
using ::tnmt::kernels::CounterUniform;    // kernels/counter_uniform.h

// dx: [rows, d] = d LayerNorm(x) / dx · dy, recomputing mean and 1/std from x exactly as the
// forward LayerNorm (elementwise.h) computed them.
// dgamma, dbeta: [d] += their gradients. dx may alias dy.
void LayerNormBackward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                       const float* gamma, int64_t rows, int d, float eps);

// dx = dy * act'(pre) where pre is the activation's input: [count]. dx may alias dy.
void ActivationBackward(float* dx, const float* dy, const float* pre, int64_t count, Activation act);

// db: [n] += column sums of dy: [rows, n].
void AccumulateColumnSum(float* db, const float* dy, int64_t rows, int n);

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

// dtable[ids[i]] += scale * dx[i]; dpos[positions[i]] += dx[i] (dpos may be null).
void EmbeddingBackward(float* dtable, float* dpos, const float* dx, const int32_t* ids,
                       const int32_t* positions, int64_t count, int d, float scale);

// Label-smoothed cross-entropy over logits: [rows, vocab], in place: logits become
// d(loss)/d(logits) for the summed loss. Target distribution: 1 - eps + eps/(V-1) on the
// target, eps/(V-1) on every other token except pad, 0 on pad. Rows whose target is pad are
// ignored (gradient 0). Returns the summed smoothed loss; *nll_sum gets the summed negative
// log-likelihood of the targets and *count the number of non-pad targets.
double LabelSmoothedCrossEntropy(float* logits, const int32_t* targets, int64_t rows, int vocab,
                                 float eps, int32_t pad, double* nll_sum, int64_t* count);

// LabelSmoothedCrossEntropy with the gradient stored as bfloat16 in place of the logits: row r's
// vocab values at reinterpret_cast<uint16_t*>(logits) + r * 2 * vocab (the first half of the
// row's bytes; the second half is left holding scratch values), each the float32 value
// LabelSmoothedCrossEntropy gives rounded to bfloat16 as the bfloat16 GEMMs round their operands
// (GemmBf16A reads it: the bfloat16 trainer's logit gradient, half the bytes to write and
// read). Same loss and sums.
double LabelSmoothedCrossEntropyBf16(float* logits, const int32_t* targets, int64_t rows, int vocab,
                                     float eps, int32_t pad, double* nll_sum, int64_t* count);

// R-Drop's consistency term (Liang et al., 2021) between the two halves of a doubled batch:
// logits: [2 * pairs, vocab], row r and row r + pairs are the same target token run through
// two dropout masks, with softmax distributions p and q. In place, the logits become the
// gradient of h * (KL(p || q) + KL(q || p)), h = alpha / 2, for every pair whose target is not
// pad (targets: [2 * pairs]; pad pairs get a zero gradient); returns that term summed over
// the pairs. With p = softmax(x), q = softmax(y) and d = log p - log q:
//   dx = h * (p * (d - KL(p || q)) + p - q),   dy = h * (q * (-d - KL(q || p)) + q - p).
double RDropConsistency(float* logits, const int32_t* targets, int64_t pairs, int vocab,
                        float alpha, int32_t pad);

// LabelSmoothedCrossEntropy of a doubled batch (logits: [2 * pairs, vocab], row r and row
// pairs + r the same target token under two dropout masks; targets: [2 * pairs]) plus
// RDropConsistency between its halves: in place, the logits become the gradient of both; returns
// the summed loss with the term, *nll_sum and *count as LabelSmoothedCrossEntropy's. Both read
// the raw logits, so blocks of block_pairs pairs (0: as many as 8 MiB holds) go in turn: the
// block's rows of both halves are copied, the copy becomes the term's gradient, the rows the
// loss's, and the copy is added. Every element is the one the two kernels give over the whole
// batch (a copy of it, then Add); only the sums are taken block by block.
double LabelSmoothedCrossEntropyWithRDrop(float* logits, const int32_t* targets, int64_t pairs, int vocab,
                                          float eps, float alpha, int32_t pad, double* nll_sum, int64_t* count,
                                          int64_t block_pairs = 0);

// LabelSmoothedCrossEntropyWithRDrop with the gradient stored as bfloat16 in place, laid out and
// rounded as LabelSmoothedCrossEntropyBf16 stores it (each value the float32 call's, rounded).
double LabelSmoothedCrossEntropyWithRDropBf16(float* logits, const int32_t* targets, int64_t pairs, int vocab,
                                              float eps, float alpha, int32_t pad, double* nll_sum, int64_t* count,
                                              int64_t block_pairs = 0);

// In place: x[i] = keep ? x[i] / (1 - p) : 0, keep iff CounterUniform(seed, stream, i) >= p
// (kernels/counter_uniform.h, the same bits as on the GPU).
// Used identically for the forward and (on the gradient) the backward. p == 0: no-op.
void Dropout(float* x, int64_t count, float p, uint64_t seed, uint64_t stream);

// y = Dropout of x (the same mask for the same seed and stream), x left as it is; y may be x.
// p == 0: a copy.
void DropoutFrom(float* y, const float* x, int64_t count, float p, uint64_t seed, uint64_t stream);

// y = Dropout of y, plus x: a residual connection after a dropped sub-layer output, in one pass
// (each element the value Dropout and then y += x give). p == 0: y += x.
void DropoutAdd(float* y, const float* x, int64_t count, float p, uint64_t seed, uint64_t stream);

// x ([rows, cols]) = Dropout of act(x), in place: each element what BiasActivation (no bias) and
// then Dropout give, a block of rows at a time over the compute threads (one pass from memory).
void ActivationDropout(float* x, int64_t rows, int cols, Activation act, float p, uint64_t seed, uint64_t stream);

// dx = the gradient through Dropout and then act, in place: each element what Dropout(dx) and
// then ActivationBackward(dx, dx, pre) give, a block at a time (one pass from memory).
void DropoutActivationBackward(float* dx, const float* pre, int64_t count, Activation act, float p, uint64_t seed,
                               uint64_t stream);

// Dropout of a block of a larger tensor: x[i] is that tensor's element first_index + i, so the
// mask is the one Dropout(tensor, ...) applies there. Runs on the calling thread.
void DropoutBlock(float* x, int64_t count, uint64_t first_index, float p, uint64_t seed,
                  uint64_t stream);

// Adam with bias correction: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps). grad_scale multiplies g first.
void AdamUpdate(float* w, float* m, float* v, const float* g, int64_t count, float grad_scale,
                const AdamOptions& o);

}  // namespace tnmt::kernels::cpu
