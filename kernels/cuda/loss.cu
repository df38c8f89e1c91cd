// The training losses on the GPU; see loss.h. One block per row (or pair of rows) with an
// online max/sum of exponentials merged block-wide; the rows' sums are added by a second
// one-block kernel in a fixed order.
#include "kernels/cuda/loss.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"

namespace tnmt::kernels::cuda {

namespace {

constexpr int kRowThreads = 512;

// ---------------------------------------------------------------------------------------------
// Label-smoothed cross-entropy

// One element into a thread's running (max m, sum s of exp(x - m)).
__device__ __forceinline__ void OnlineMaxSum(float x, float* m, float* s) {
  if (x > *m) {
    *s = (*m == -INFINITY ? 0.0f : *s * expf(*m - x)) + 1.0f;
    *m = x;
  } else {
    *s += expf(x - *m);
  }
}

// Block-wide online-softmax merge of (max, sum of exp(x - max)) and a plain sum.
__device__ void BlockMaxSum(float* m, float* s, float* sx, float* shared /* 3 * 32 */) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  auto merge = [](float& m1, float& s1, float m2, float s2) {
    if (m2 == -INFINITY) return;
    if (m1 == -INFINITY) {
      m1 = m2;
      s1 = s2;
      return;
    }
    const float mx = fmaxf(m1, m2);
    s1 = s1 * expf(m1 - mx) + s2 * expf(m2 - mx);
    m1 = mx;
  };
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_down_sync(0xffffffffu, *m, o);
    const float s2 = __shfl_down_sync(0xffffffffu, *s, o);
    *sx += __shfl_down_sync(0xffffffffu, *sx, o);
    merge(*m, *s, m2, s2);
  }
  if (lane == 0) {
    shared[warp] = *m;
    shared[32 + warp] = *s;
    shared[64 + warp] = *sx;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    *m = lane < warps ? shared[lane] : -INFINITY;
    *s = lane < warps ? shared[32 + lane] : 0.0f;
    *sx = lane < warps ? shared[64 + lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_down_sync(0xffffffffu, *m, o);
      const float s2 = __shfl_down_sync(0xffffffffu, *s, o);
      *sx += __shfl_down_sync(0xffffffffu, *sx, o);
      merge(*m, *s, m2, s2);
    }
    if (lane == 0) {
      shared[0] = *m;
      shared[32] = *s;
      shared[64] = *sx;
    }
  }
  __syncthreads();
  *m = shared[0];
  *s = shared[32];
  *sx = shared[64];
}

__global__ void __launch_bounds__(kRowThreads)
    CrossEntropyRows(float* logits, const int32_t* targets, int vocab, double on, double off,
                     int32_t pad, double* row_out) {
  __shared__ float shared[96];
  const int64_t r = blockIdx.x;
  float* row = logits + r * vocab;
  const int32_t t = targets[r];
  if (t == pad) {
    for (int j = threadIdx.x; j < vocab; j += blockDim.x) row[j] = 0.0f;
    if (threadIdx.x == 0) row_out[2 * r] = row_out[2 * r + 1] = 0.0;
    return;
  }
  float m = -INFINITY, s = 0.0f, sx = 0.0f;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float x = row[j];
    sx += x;
    OnlineMaxSum(x, &m, &s);
  }
  BlockMaxSum(&m, &s, &sx, shared);
  const float lse = m + logf(s);
  const float x_t = row[t], x_pad = row[pad];
  if (threadIdx.x == 0) {
    const double sum_logp = static_cast<double>(sx) - x_pad - static_cast<double>(vocab - 1) * lse;
    const double logp_t = static_cast<double>(x_t) - lse;
    row_out[2 * r] = -(on - off) * logp_t - off * sum_logp;
    row_out[2 * r + 1] = -logp_t;
  }
  __syncthreads();  // x_t, x_pad read by every thread before the row is overwritten
  const float offf = static_cast<float>(off);
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) row[j] = expf(row[j] - lse) - offf;
  __syncthreads();
  if (threadIdx.x == 0) {
    row[pad] += offf;
    row[t] -= static_cast<float>(on - off);
  }
}

// sums = {sum of loss, sum of nll, count of non-pad targets}; fixed reduction order.
__global__ void __launch_bounds__(1024)
    CrossEntropySums(const double* row_out, const int32_t* targets, int64_t rows, int32_t pad,
                     double* sums) {
  __shared__ double sh[3][1024];
  double loss = 0.0, nll = 0.0, count = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    loss += row_out[2 * r];
    nll += row_out[2 * r + 1];
    count += targets[r] != pad ? 1.0 : 0.0;
  }
  sh[0][threadIdx.x] = loss;
  sh[1][threadIdx.x] = nll;
  sh[2][threadIdx.x] = count;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) {
      for (int c = 0; c < 3; ++c) sh[c][threadIdx.x] += sh[c][threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    for (int c = 0; c < 3; ++c) sums[c] = sh[c][0];
  }
}

// ---------------------------------------------------------------------------------------------
// R-Drop's consistency term

// Block-wide sum of two floats.
__device__ void BlockSum2(float* a, float* b, float* shared /* 2 * 32 */) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    *a += __shfl_down_sync(0xffffffffu, *a, o);
    *b += __shfl_down_sync(0xffffffffu, *b, o);
  }
  __syncthreads();  // shared may still be read from an earlier reduction
  if (lane == 0) {
    shared[warp] = *a;
    shared[32 + warp] = *b;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    *a = lane < warps ? shared[lane] : 0.0f;
    *b = lane < warps ? shared[32 + lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
      *a += __shfl_down_sync(0xffffffffu, *a, o);
      *b += __shfl_down_sync(0xffffffffu, *b, o);
    }
    if (lane == 0) {
      shared[0] = *a;
      shared[32] = *b;
    }
  }
  __syncthreads();
  *a = shared[0];
  *b = shared[32];
}

// Log-sum-exp of a row of `vocab` floats (online max and sum per thread, merged block-wide).
__device__ float RowLogSumExp(const float* row, int vocab, float* shared /* 96 */) {
  float m = -INFINITY, s = 0.0f, unused = 0.0f;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float x = row[j];
    OnlineMaxSum(x, &m, &s);
  }
  BlockMaxSum(&m, &s, &unused, shared);
  __syncthreads();  // every thread has read the result before shared is reused
  return m + logf(s);
}

// One block per pair: rows r and r + pairs become their gradients; pair_out[r] = the pair's term.
__global__ void __launch_bounds__(kRowThreads)
    ConsistencyPairs(float* logits, const int32_t* targets, int64_t pairs, int vocab, float h,
                     int32_t pad, double* pair_out) {
  __shared__ float shared[96];
  const int64_t r = blockIdx.x;
  float* a = logits + r * vocab;
  float* b = logits + (r + pairs) * vocab;
  if (targets[r] == pad) {
    for (int j = threadIdx.x; j < vocab; j += blockDim.x) a[j] = b[j] = 0.0f;
    if (threadIdx.x == 0) pair_out[r] = 0.0;
    return;
  }
  const float la = RowLogSumExp(a, vocab, shared), lb = RowLogSumExp(b, vocab, shared);
  // Each thread touches only its own elements from here on, so a and b may become log p, log q.
  float kpq = 0.0f, kqp = 0.0f;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float lp = a[j] - la, lq = b[j] - lb, d = lp - lq;
    kpq += expf(lp) * d;
    kqp -= expf(lq) * d;
    a[j] = lp;
    b[j] = lq;
  }
  BlockSum2(&kpq, &kqp, shared);
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float p = expf(a[j]), q = expf(b[j]), d = a[j] - b[j];
    a[j] = h * (p * (d - kpq) + p - q);
    b[j] = h * (q * (-d - kqp) + q - p);
  }
  if (threadIdx.x == 0) pair_out[r] = static_cast<double>(h) * (static_cast<double>(kpq) + kqp);
}

// *loss_sum += the pairs' terms, in a fixed order.
__global__ void __launch_bounds__(1024) AddPairSums(const double* pair_out, int64_t pairs, double* loss_sum) {
  __shared__ double sh[1024];
  double t = 0.0;
  for (int64_t r = threadIdx.x; r < pairs; r += blockDim.x) t += pair_out[r];
  sh[threadIdx.x] = t;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss_sum += sh[0];
}

}  // namespace

absl::Status LabelSmoothedCrossEntropy(Context& ctx, float* logits, const int32_t* targets,
                                       int64_t rows, int vocab, float eps, int32_t pad,
                                       double* sums) {
  if (rows < 0 || vocab < 1 || pad < 0 || pad >= vocab) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::LabelSmoothedCrossEntropy: rows ", rows,
                                                   ", vocab ", vocab, ", pad ", pad));
  }
  if (rows > 0x7fffffff) {
    return absl::InvalidArgumentError("cuda::LabelSmoothedCrossEntropy: too many rows");
  }
  absl::StatusOr<DeviceBuffer> scratch =
      ctx.allocator().Buffer(sizeof(double) * 2 * std::max<int64_t>(rows, 1));
  if (!scratch.ok()) return scratch.status();
  const double off = vocab > 1 ? static_cast<double>(eps) / (vocab - 1) : 0.0;
  const double on = 1.0 - eps + off;
  if (rows > 0) {
    CrossEntropyRows<<<static_cast<unsigned>(rows), kRowThreads, 0, ctx.stream()>>>(
        logits, targets, vocab, on, off, pad, scratch->as<double>());
    if (absl::Status s = TNMT_CUDA_LAUNCH_CHECK(); !s.ok()) return s;
  }
  CrossEntropySums<<<1, 1024, 0, ctx.stream()>>>(scratch->as<double>(), targets, rows, pad, sums);
  // The scratch goes back to the allocator now; later work on this stream may reuse it, which
  // stream order makes safe.
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status RDropConsistency(Context& ctx, float* logits, const int32_t* targets, int64_t pairs,
                              int vocab, float alpha, int32_t pad, double* loss_sum) {
  if (pairs < 0 || vocab < 1 || pad < 0 || pad >= vocab) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::RDropConsistency: pairs ", pairs, ", vocab ", vocab,
                                                   ", pad ", pad));
  }
  if (pairs > 0x7fffffff) return absl::InvalidArgumentError("cuda::RDropConsistency: too many pairs");
  if (pairs == 0) return absl::OkStatus();
  absl::StatusOr<DeviceBuffer> scratch = ctx.allocator().Buffer(sizeof(double) * pairs);
  if (!scratch.ok()) return scratch.status();
  ConsistencyPairs<<<static_cast<unsigned>(pairs), kRowThreads, 0, ctx.stream()>>>(
      logits, targets, pairs, vocab, 0.5f * alpha, pad, scratch->as<double>());
  if (absl::Status s = TNMT_CUDA_LAUNCH_CHECK(); !s.ok()) return s;
  AddPairSums<<<1, 1024, 0, ctx.stream()>>>(scratch->as<double>(), pairs, loss_sum);
  return TNMT_CUDA_LAUNCH_CHECK();
}

}  // namespace tnmt::kernels::cuda
