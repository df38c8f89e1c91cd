// GPU backward passes and gradient utilities of the trainer, mirroring kernels/cpu's gradients
// (and the training attention forward it needs): same semantics, layouts and masking
// conventions as the CPU functions of the same names, float32, device pointers, outputs
// first, queued on ctx.stream(); scratch comes from ctx.allocator() and is handed back in
// stream order before the function returns.
//
// Determinism: every result is bit-identical from run to run on the same device and shapes.
// No floating-point atomics: reductions over rows, queries or tokens are split into fixed
// chunks whose partial sums are added in a fixed order by a second kernel. The chunking
// depends on the shapes only, never on the device's SM count.
//
// Parameter gradients (dgamma, dbeta, db, dk, dv, dtable, dpos) are accumulated (+=);
// activation gradients (dx, dq) are written (=), as on the CPU.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/cuda/context.h"

namespace tnmt::kernels::cuda {

// dx: [rows, d] = d LayerNorm(x) / dx · dy (mean and variance recomputed from x: [rows, d]);
// dgamma, dbeta: [d] += their gradients. dx may alias dy. Scratch: 2 * rows floats plus
// 2 * d doubles per 64 rows.
absl::Status LayerNormBackward(Context& ctx, float* dx, float* dgamma, float* dbeta,
                               const float* dy, const float* x, const float* gamma, int64_t rows,
                               int d, float eps);

// dx = dy * act'(pre): [count], act kRelu or kGelu (tanh approximation), with the CPU's
// derivative; other activations are an InvalidArgument error. dx may alias dy.
absl::Status ActivationBackward(Context& ctx, float* dx, const float* dy, const float* pre,
                                int64_t count, Activation act);

// db: [n] += column sums of dy: [rows, n]. Scratch: n doubles per 64 rows.
absl::Status AccumulateColumnSum(Context& ctx, float* db, const float* dy, int64_t rows, int n);

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

// dtable[ids[i]] += scale * dx[i]; dpos[positions[i]] += dx[i] (dpos may be null; then
// positions is not read). dx: [count, d]; ids, positions: device [count], valid rows.
// Deterministic without atomics and without a host round trip: the token indices are
// stable-sorted by id on the device (CUB radix sort), then one block per distinct id adds its
// rows in token order — the CPU's order, so each row of dtable sees the same sequence of
// additions. The same for positions. Scratch: about 4 * count int32 plus CUB's temporary.
absl::Status EmbeddingBackward(Context& ctx, float* dtable, float* dpos, const float* dx,
                               const int32_t* ids, const int32_t* positions, int64_t count, int d,
                               float scale);

// out: device double[1] = sum of x[i]^2 over x: [count], accumulated in double in a fixed
// order (deterministic). NaN or inf in x gives a non-finite result (the trainer's overflow
// check for loss scaling). count == 0 writes 0.
absl::Status SumOfSquares(Context& ctx, double* out, const float* x, int64_t count);

// x: [count] *= s.
absl::Status ScaleInPlace(Context& ctx, float* x, int64_t count, float s);

}  // namespace tnmt::kernels::cuda
