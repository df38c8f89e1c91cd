// The training attention of kernels/cuda/attention.h (AttentionTrainForward, which saves the
// probabilities, and AttentionBackward), mirroring kernels/cpu/attention_backward.cc. One block
// per query row (forward; backward for dq) or per key row (backward for dk, dv), fixed-order
// block reductions and no atomics: results are bit-identical from run to run.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/counter_uniform.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_common.cuh"

namespace tnmt::kernels::cuda {

namespace {

using internal::BlockMax;
using internal::BlockSum;
using internal::Scratch;
using internal::WarpSum;

constexpr int kAttnThreads = 128;  // query-row kernels (4 warps)
constexpr int kMaxDHead = 4096;    // d_head floats of dynamic shared memory

// Row index of the query kernels: row = (b * heads + h) * q_len + i (the probs row);
// of the key kernel: (b * heads + h) * k_len + j.

// One block per query row: scores into the probs row (the working buffer), masked entries 0,
// softmax in place, then out = probs · v.
__global__ void __launch_bounds__(kAttnThreads)
    AttentionForwardKernel(float* out, int64_t ld_out, float* probs, const float* q, int64_t ld_q,
                           const float* k, const float* v, int64_t ld_kv, int q_len, int k_len,
                           int heads, int d_head, const int32_t* k_valid, bool causal,
                           float scale, float drop_p, float keep_scale, uint64_t seed,
                           uint64_t stream, float* dropped) {
  extern __shared__ float q_sh[];  // [d_head]
  __shared__ float shared_f[32];
  __shared__ double shared_d[32];
  const int64_t row = blockIdx.x;
  const int i = static_cast<int>(row % q_len);
  const int64_t bh = row / q_len;
  const int h = static_cast<int>(bh % heads);
  const int b = static_cast<int>(bh / heads);
  int valid = k_valid != nullptr ? k_valid[b] : k_len;
  valid = max(0, min(valid, k_len));
  const int limit = causal ? min(valid, i + 1) : valid;
  float* p = probs + row * k_len;
  float* o = out + (static_cast<int64_t>(b) * q_len + i) * ld_out + static_cast<int64_t>(h) * d_head;
  for (int j = limit + threadIdx.x; j < k_len; j += blockDim.x) p[j] = 0.0f;
  if (limit == 0) {  // no visible key: zero probabilities and output (block-uniform exit)
    for (int c = threadIdx.x; c < d_head; c += blockDim.x) o[c] = 0.0f;
    return;
  }
  const float* qr = q + (static_cast<int64_t>(b) * q_len + i) * ld_q + static_cast<int64_t>(h) * d_head;
  for (int c = threadIdx.x; c < d_head; c += blockDim.x) q_sh[c] = qr[c];
  __syncthreads();

  // Scores: one warp per key, lanes over the head's columns.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const float* kb = k + static_cast<int64_t>(b) * k_len * ld_kv + static_cast<int64_t>(h) * d_head;
  for (int j = warp; j < limit; j += warps) {  // warp-uniform loop: full-mask shuffles are safe
    const float* kr = kb + static_cast<int64_t>(j) * ld_kv;
    float s = 0.0f;
    for (int c = lane; c < d_head; c += 32) s += q_sh[c] * kr[c];
    s = WarpSum(s);
    if (lane == 0) p[j] = s * scale;
  }
  __syncthreads();

  float m = -INFINITY;
  for (int j = threadIdx.x; j < limit; j += blockDim.x) m = fmaxf(m, p[j]);
  m = BlockMax(m, shared_f);
  double sum = 0.0;
  for (int j = threadIdx.x; j < limit; j += blockDim.x) {
    const float e = expf(p[j] - m);
    p[j] = e;
    sum += e;
  }
  sum = BlockSum(sum, shared_d);
  const float inv = 1.0f / static_cast<float>(sum);
  for (int j = threadIdx.x; j < limit; j += blockDim.x) p[j] *= inv;
  // Attention dropout: what multiplies v is the dropped row (element row * k_len + j of probs).
  const float* pv = p;
  if (drop_p > 0.0f) {
    float* d = dropped + row * k_len;
    for (int j = threadIdx.x; j < limit; j += blockDim.x) {
      const uint64_t index = static_cast<uint64_t>(row) * k_len + j;
      d[j] = CounterUniform(seed, stream, index) >= drop_p ? __fmul_rn(p[j], keep_scale) : 0.0f;
    }
    pv = d;
  }
  __syncthreads();

  const float* vb = v + static_cast<int64_t>(b) * k_len * ld_kv + static_cast<int64_t>(h) * d_head;
  for (int c = threadIdx.x; c < d_head; c += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < limit; ++j) acc += pv[j] * vb[static_cast<int64_t>(j) * ld_kv + c];
    o[c] = acc;
  }
}

// One block per query row: ds row = p * (dout·v^T - rowsum(p * dout·v^T)) into the scratch
// (same layout as probs), then dq row = scale * ds · k. Keys with p == 0 are skipped (ds 0).
__global__ void __launch_bounds__(kAttnThreads)
    AttentionBackwardQueryKernel(float* dq, int64_t ld_dq, float* ds, const float* dout,
                                 int64_t ld_dout, const float* probs, const float* k,
                                 const float* v, int64_t ld_kv, int q_len, int k_len, int heads,
                                 int d_head, float scale, float drop_p, float keep_scale,
                                 uint64_t seed, uint64_t stream, float* dropped) {
  extern __shared__ float do_sh[];  // [d_head]
  __shared__ double shared_d[32];
  const int64_t row = blockIdx.x;
  const int i = static_cast<int>(row % q_len);
  const int64_t bh = row / q_len;
  const int h = static_cast<int>(bh % heads);
  const int b = static_cast<int>(bh / heads);
  const float* p = probs + row * k_len;
  float* dsr = ds + row * k_len;
  const int64_t qrow = static_cast<int64_t>(b) * q_len + i;
  const float* dor = dout + qrow * ld_dout + static_cast<int64_t>(h) * d_head;
  for (int c = threadIdx.x; c < d_head; c += blockDim.x) do_sh[c] = dor[c];
  __syncthreads();

  // dp_j = dout_i · v_j, one warp per key (p is read by all lanes: warp-uniform branch).
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const float* vb = v + static_cast<int64_t>(b) * k_len * ld_kv + static_cast<int64_t>(h) * d_head;
  for (int j = warp; j < k_len; j += warps) {
    if (p[j] == 0.0f) {
      if (lane == 0) dsr[j] = 0.0f;
      continue;
    }
    const float* vr = vb + static_cast<int64_t>(j) * ld_kv;
    float s = 0.0f;
    for (int c = lane; c < d_head; c += 32) s += do_sh[c] * vr[c];
    s = WarpSum(s);
    if (lane == 0) dsr[j] = s;
  }
  // Attention dropout: the gradient reaches p through the forward's mask and scale; the key
  // kernel gets the dropped row for dv.
  if (drop_p > 0.0f) {
    __syncthreads();
    float* d = dropped + row * k_len;
    for (int j = threadIdx.x; j < k_len; j += blockDim.x) {
      const bool keep = CounterUniform(seed, stream, static_cast<uint64_t>(row) * k_len + j) >= drop_p;
      dsr[j] = keep ? __fmul_rn(dsr[j], keep_scale) : 0.0f;
      d[j] = keep ? __fmul_rn(p[j], keep_scale) : 0.0f;
    }
  }
  __syncthreads();

  double dot = 0.0;
  for (int j = threadIdx.x; j < k_len; j += blockDim.x) dot += static_cast<double>(dsr[j] * p[j]);
  const float dotf = static_cast<float>(BlockSum(dot, shared_d));
  for (int j = threadIdx.x; j < k_len; j += blockDim.x) {
    const float pj = p[j];
    dsr[j] = pj == 0.0f ? 0.0f : pj * (dsr[j] - dotf);
  }
  __syncthreads();

  const float* kb = k + static_cast<int64_t>(b) * k_len * ld_kv + static_cast<int64_t>(h) * d_head;
  float* dqr = dq + qrow * ld_dq + static_cast<int64_t>(h) * d_head;
  for (int c = threadIdx.x; c < d_head; c += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < k_len; ++j) {
      const float dsj = dsr[j];
      if (dsj != 0.0f) acc += dsj * kb[static_cast<int64_t>(j) * ld_kv + c];
    }
    dqr[c] = scale * acc;
  }
}

// One block per key row: dv_j += sum_i pv_ij dout_i, dk_j += scale * sum_i ds_ij q_i, queries
// in order; queries with p_ij == 0 are skipped. pv: the dropped probabilities (null: probs).
__global__ void AttentionBackwardKeyKernel(float* dk, float* dv, int64_t ld_dkv,
                                          const float* dout, int64_t ld_dout, const float* probs,
                                          const float* ds, const float* q, int64_t ld_q,
                                          int q_len, int k_len, int heads, int d_head,
                                          float scale, const float* dropped) {
  const int64_t key_row = blockIdx.x;
  const int j = static_cast<int>(key_row % k_len);
  const int64_t bh = key_row / k_len;
  const int h = static_cast<int>(bh % heads);
  const int b = static_cast<int>(bh / heads);
  const float* pcol = probs + bh * q_len * k_len + j;  // p_ij at pcol[i * k_len]
  const float* dscol = ds + bh * q_len * k_len + j;
  const float* pvcol = dropped != nullptr ? dropped + bh * q_len * k_len + j : pcol;
  const int64_t qrow0 = static_cast<int64_t>(b) * q_len;
  const int64_t col0 = static_cast<int64_t>(h) * d_head;
  const int64_t krow = static_cast<int64_t>(b) * k_len + j;
  for (int c = threadIdx.x; c < d_head; c += blockDim.x) {
    float av = 0.0f, ak = 0.0f;
    for (int i = 0; i < q_len; ++i) {
      const float pij = pcol[static_cast<int64_t>(i) * k_len];
      if (pij == 0.0f) continue;
      const int64_t qrow = qrow0 + i;
      av += pvcol[static_cast<int64_t>(i) * k_len] * dout[qrow * ld_dout + col0 + c];
      ak += dscol[static_cast<int64_t>(i) * k_len] * q[qrow * ld_q + col0 + c];
    }
    dv[krow * ld_dkv + col0 + c] += av;
    dk[krow * ld_dkv + col0 + c] += scale * ak;
  }
}


absl::Status CheckDropout(const char* fn, const AttentionDropout& drop) {
  if (!(drop.p >= 0.0f && drop.p < 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda::", fn, ": attention dropout ", drop.p, " outside [0, 1)"));
  }
  return absl::OkStatus();
}

float KeepScale(const AttentionDropout& drop) { return drop.p > 0.0f ? 1.0f / (1.0f - drop.p) : 1.0f; }

absl::Status CheckAttention(const char* fn, int batch, int q_len, int k_len, int heads, int d_head,
                            std::initializer_list<int64_t> strides) {
  if (batch < 0 || q_len < 0 || k_len < 0 || heads < 0 || d_head < 1 || d_head > kMaxDHead) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda::", fn, ": batch ", batch, ", q_len ", q_len, ", k_len ", k_len,
                     ", heads ", heads, ", d_head ", d_head, " (d_head must be in [1, ",
                     kMaxDHead, "])"));
  }
  for (int64_t ld : strides) {
    if (ld < static_cast<int64_t>(heads) * d_head) {
      return absl::InvalidArgumentError(absl::StrCat("cuda::", fn, ": row stride ", ld,
                                                     " < heads * d_head = ", heads * d_head));
    }
  }
  const int64_t q_rows = static_cast<int64_t>(batch) * heads * q_len;
  const int64_t k_rows = static_cast<int64_t>(batch) * heads * k_len;
  if (q_rows > INT_MAX || k_rows > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::", fn, ": batch * heads * length above ",
                                                   INT_MAX));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AttentionTrainForward(Context& ctx, float* out, int64_t ld_out, float* probs,
                                   const float* q, int64_t ld_q, const float* k, const float* v,
                                   int64_t ld_kv, int batch, int q_len, int k_len, int heads,
                                   int d_head, const int32_t* k_valid, bool causal,
                                   const AttentionDropout& drop) {
  TNMT_KERNEL_RETURN_IF_ERROR(CheckAttention("AttentionTrainForward", batch, q_len, k_len, heads,
                                             d_head, {ld_out, ld_q, ld_kv}));
  TNMT_KERNEL_RETURN_IF_ERROR(CheckDropout("AttentionTrainForward", drop));
  const int64_t rows = static_cast<int64_t>(batch) * heads * q_len;
  if (rows == 0) return absl::OkStatus();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_head));
  // The dropped probabilities' buffer, empty without dropout.
  absl::StatusOr<DeviceBuffer> dropped =
      drop.p > 0.0f ? Scratch(ctx, sizeof(float) * static_cast<size_t>(rows) * static_cast<size_t>(k_len))
                    : absl::StatusOr<DeviceBuffer>(DeviceBuffer());
  if (!dropped.ok()) return dropped.status();
  AttentionForwardKernel<<<static_cast<unsigned>(rows), kAttnThreads, sizeof(float) * d_head,
                           ctx.stream()>>>(out, ld_out, probs, q, ld_q, k, v, ld_kv, q_len, k_len,
                                           heads, d_head, k_valid, causal, scale, drop.p,
                                           KeepScale(drop), drop.seed, drop.stream,
                                           drop.p > 0.0f ? dropped->as<float>() : nullptr);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status AttentionBackward(Context& ctx, float* dq, int64_t ld_dq, float* dk, float* dv,
                               int64_t ld_dkv, const float* dout, int64_t ld_dout,
                               const float* probs, const float* q, int64_t ld_q, const float* k,
                               const float* v, int64_t ld_kv, int batch, int q_len, int k_len,
                               int heads, int d_head, const AttentionDropout& drop) {
  TNMT_KERNEL_RETURN_IF_ERROR(CheckAttention("AttentionBackward", batch, q_len, k_len, heads,
                                             d_head, {ld_dq, ld_dkv, ld_dout, ld_q, ld_kv}));
  TNMT_KERNEL_RETURN_IF_ERROR(CheckDropout("AttentionBackward", drop));
  const int64_t q_rows = static_cast<int64_t>(batch) * heads * q_len;
  const int64_t k_rows = static_cast<int64_t>(batch) * heads * k_len;
  if (q_rows == 0) return absl::OkStatus();  // no query: dq empty, dk and dv unchanged
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_head));
  absl::StatusOr<DeviceBuffer> ds =
      Scratch(ctx, sizeof(float) * static_cast<size_t>(q_rows) * static_cast<size_t>(k_len));
  if (!ds.ok()) return ds.status();
  // The dropped probabilities' buffer, empty without dropout.
  absl::StatusOr<DeviceBuffer> dropped =
      drop.p > 0.0f ? Scratch(ctx, sizeof(float) * static_cast<size_t>(q_rows) * static_cast<size_t>(k_len))
                    : absl::StatusOr<DeviceBuffer>(DeviceBuffer());
  if (!dropped.ok()) return dropped.status();
  float* dropped_ptr = drop.p > 0.0f ? dropped->as<float>() : nullptr;
  AttentionBackwardQueryKernel<<<static_cast<unsigned>(q_rows), kAttnThreads,
                                 sizeof(float) * d_head, ctx.stream()>>>(
      dq, ld_dq, ds->as<float>(), dout, ld_dout, probs, k, v, ld_kv, q_len, k_len, heads, d_head,
      scale, drop.p, KeepScale(drop), drop.seed, drop.stream, dropped_ptr);
  TNMT_KERNEL_RETURN_IF_ERROR(TNMT_CUDA_LAUNCH_CHECK());
  if (k_rows == 0) return absl::OkStatus();
  const int threads = std::min(256, (d_head + 31) / 32 * 32);
  AttentionBackwardKeyKernel<<<static_cast<unsigned>(k_rows), threads, 0, ctx.stream()>>>(
      dk, dv, ld_dkv, dout, ld_dout, probs, ds->as<float>(), q, ld_q, q_len, k_len, heads, d_head,
      scale, dropped_ptr);
  return TNMT_CUDA_LAUNCH_CHECK();
}

}  // namespace tnmt::kernels::cuda
