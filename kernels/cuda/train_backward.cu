// GPU backward passes; see train_backward.h. Kernels are kept simple: one block per row (layer
// norm, attention query row, attention key row, embedding id), grid-stride loops for
// elementwise work, and two-kernel fixed-order reductions instead of atomics.
#include "kernels/cuda/train_backward.h"

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/counter_uniform.h"
#include "kernels/cuda/check.h"

namespace tnmt::kernels::cuda {

namespace {

constexpr int kThreads = 256;        // elementwise, row and column kernels
constexpr int kAttnThreads = 128;    // attention row kernels (4 warps)
constexpr int kRowChunk = 64;        // rows per partial sum of the column reductions
constexpr int kSumBlocks = 1024;     // partial sums of SumOfSquares (fixed: deterministic)
constexpr int kMaxDHead = 4096;      // attention: d_head floats of dynamic shared memory

// File-local (undefined at the end): returns a failed absl::Status.
#define TB_RETURN_IF_ERROR(expr)               \
  do {                                         \
    if (absl::Status s_ = (expr); !s_.ok()) {  \
      return s_;                               \
    }                                          \
  } while (false)

unsigned GridFor(int64_t count, int threads) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((count + threads - 1) / threads, 132 * 16)));
}

// ---------------------------------------------------------------------------------------------
// Block reductions (blockDim.x a multiple of 32, at most 1024). Every thread gets the total;
// the trailing __syncthreads makes `shared` reusable by the next call. Fixed order.

template <typename T>
__device__ __forceinline__ T WarpSum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ double BlockSum(double v, double* shared /* [32] */) {
  v = WarpSum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x >> 5) ? shared[lane] : 0.0;
    v = WarpSum(v);
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const double total = shared[0];
  __syncthreads();
  return total;
}

__device__ float BlockMax(float v, float* shared /* [32] */) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x >> 5) ? shared[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const float total = shared[0];
  __syncthreads();
  return total;
}

// ---------------------------------------------------------------------------------------------
// Column sums: partial[chunk, output, j] over rows [chunk * kRowChunk, +kRowChunk), then the
// chunks added in order.

// stats: [rows, 2] = {mean, rstd} of each row of x: [rows, d], computed as the CPU does.
__global__ void __launch_bounds__(kThreads)
    LayerNormStatsKernel(float* stats, const float* x, int d, float eps) {
  __shared__ double shared[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * d;
  double sum = 0.0;
  for (int j = threadIdx.x; j < d; j += blockDim.x) sum += xr[j];
  sum = BlockSum(sum, shared);
  const float mean = static_cast<float>(sum / d);
  double sq = 0.0;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    const float c = xr[j] - mean;
    sq += static_cast<double>(c * c);
  }
  sq = BlockSum(sq, shared);
  const float rstd = 1.0f / sqrtf(static_cast<float>(sq / d) + eps);
  if (threadIdx.x == 0) {
    stats[2 * r] = mean;
    stats[2 * r + 1] = rstd;
  }
}

// Layer norm (stats != null): partial[chunk, 0, j] = sum dy * xhat, partial[chunk, 1, j] = sum
// dy. Otherwise partial[chunk, 0, j] = sum dy. Grid: (chunks, ceil(d / blockDim.x)).
__global__ void __launch_bounds__(kThreads)
    ColumnPartialsKernel(double* partial, const float* dy, const float* x, const float* stats,
                         int64_t rows, int d) {
  const int j = blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= d) return;
  const int64_t chunk = blockIdx.x;
  const int64_t r0 = chunk * kRowChunk;
  const int64_t r1 = rows < r0 + kRowChunk ? rows : r0 + kRowChunk;
  double s_dy = 0.0, s_dyx = 0.0;
  for (int64_t r = r0; r < r1; ++r) {
    const float g = dy[r * d + j];
    s_dy += g;
    if (stats != nullptr) {
      const float xhat = (x[r * d + j] - stats[2 * r]) * stats[2 * r + 1];
      s_dyx += static_cast<double>(g * xhat);
    }
  }
  if (stats != nullptr) {
    partial[(chunk * 2) * d + j] = s_dyx;
    partial[(chunk * 2 + 1) * d + j] = s_dy;
  } else {
    partial[chunk * d + j] = s_dy;
  }
}

// out_o[j] += sum over chunks (in order) of partial[chunk, o, j], o < outputs (1 or 2).
__global__ void __launch_bounds__(kThreads)
    ColumnReduceKernel(float* out0, float* out1, const double* partial, int64_t chunks, int d,
                       int outputs) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  for (int o = 0; o < outputs; ++o) {
    float* out = o == 0 ? out0 : out1;
    double s = 0.0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[(c * outputs + o) * d + j];
    out[j] = static_cast<float>(static_cast<double>(out[j]) + s);
  }
}

// dx: [rows, d] from dy, x, gamma and the row stats. dx may alias dy: each thread reads dy[j]
// before writing dx[j] for its own j only.
__global__ void __launch_bounds__(kThreads)
    LayerNormDxKernel(float* dx, const float* dy, const float* x, const float* gamma,
                      const float* stats, int d) {
  __shared__ double shared[32];
  const int64_t r = blockIdx.x;
  const float mean = stats[2 * r], rstd = stats[2 * r + 1];
  const float* xr = x + r * d;
  const float* dyr = dy + r * d;
  float* dxr = dx + r * d;
  double sg = 0.0, sgx = 0.0;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    const float xhat = (xr[j] - mean) * rstd;
    const float g = dyr[j] * gamma[j];
    sg += g;
    sgx += static_cast<double>(g * xhat);
  }
  sg = BlockSum(sg, shared);
  sgx = BlockSum(sgx, shared);
  const float mean_g = static_cast<float>(sg / d), mean_gx = static_cast<float>(sgx / d);
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    const float xhat = (xr[j] - mean) * rstd;
    dxr[j] = rstd * (dyr[j] * gamma[j] - mean_g - xhat * mean_gx);
  }
}

// ---------------------------------------------------------------------------------------------
// Elementwise

__global__ void ActivationBackwardKernel(float* dx, const float* dy, const float* pre,
                                         int64_t count, bool gelu) {
  constexpr float kC = 0.7978845608028654f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = pre[i];
    const float g = dy[i];
    if (gelu) {
      const float u = kC * (x + 0.044715f * x * x * x);
      const float t = tanhf(u);
      const float du = kC * (1.0f + 3.0f * 0.044715f * x * x);
      dx[i] = g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    } else {
      dx[i] = x > 0.0f ? g : 0.0f;
    }
  }
}

__global__ void ScaleInPlaceKernel(float* x, int64_t count, float s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] *= s;
  }
}

// partial[blockIdx.x] = sum of x^2 over this block's grid-stride elements, in double.
__global__ void __launch_bounds__(kThreads)
    SumOfSquaresPartialKernel(double* partial, const float* x, int64_t count) {
  __shared__ double shared[32];
  double s = 0.0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double v = x[i];
    s += v * v;
  }
  s = BlockSum(s, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// out[0] = sum of partial[0, n), fixed order. One block.
__global__ void __launch_bounds__(kThreads)
    SumPartialsKernel(double* out, const double* partial, int n) {
  __shared__ double shared[32];
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
  s = BlockSum(s, shared);
  if (threadIdx.x == 0) out[0] = s;
}

// ---------------------------------------------------------------------------------------------
// Attention. Row index of the query kernels: row = (b * heads + h) * q_len + i (the probs row);
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

// ---------------------------------------------------------------------------------------------
// Embedding

__global__ void IotaKernel(int32_t* x, int count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = static_cast<int32_t>(i);
  }
}

// keys: [count] sorted (stable), order: [count] the token index of each sorted entry. The block
// at the first entry of each key adds, in token order, scale * dx[token] to table[key].
__global__ void __launch_bounds__(kAttnThreads)
    SegmentAddKernel(float* table, const int32_t* keys, const int32_t* order, const float* dx,
                     int count, int d, float scale) {
  const int first = blockIdx.x;
  const int32_t key = keys[first];
  if (first > 0 && keys[first - 1] == key) return;
  float* row = table + static_cast<int64_t>(key) * d;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = row[c];
    for (int e = first; e < count && keys[e] == key; ++e) {
      // As the CPU's `row += scale * g`, each operation rounded on its own.
      acc = __fadd_rn(acc, __fmul_rn(scale, dx[static_cast<int64_t>(order[e]) * d + c]));
    }
    row[c] = acc;
  }
}

// ---------------------------------------------------------------------------------------------
// Host side

absl::Status CheckCount(const char* fn, int64_t count) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("cuda::", fn, ": count ", count, " < 0"));
  return absl::OkStatus();
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

absl::StatusOr<DeviceBuffer> Scratch(Context& ctx, size_t bytes) {
  return ctx.allocator().Buffer(std::max<size_t>(bytes, 1));
}

// Queues ColumnPartialsKernel and ColumnReduceKernel: out0 (and out1 for layer norm) += the
// column sums. stats null: plain column sums of dy.
absl::Status ColumnSums(Context& ctx, float* out0, float* out1, const float* dy, const float* x,
                        const float* stats, int64_t rows, int d) {
  const int outputs = stats != nullptr ? 2 : 1;
  const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  if (chunks > INT_MAX) return absl::InvalidArgumentError("cuda: too many rows");
  absl::StatusOr<DeviceBuffer> partial =
      Scratch(ctx, sizeof(double) * static_cast<size_t>(chunks) * outputs * d);
  if (!partial.ok()) return partial.status();
  const unsigned col_blocks = static_cast<unsigned>((d + kThreads - 1) / kThreads);
  const dim3 grid(static_cast<unsigned>(chunks), col_blocks);
  ColumnPartialsKernel<<<grid, kThreads, 0, ctx.stream()>>>(partial->as<double>(), dy, x, stats,
                                                            rows, d);
  TB_RETURN_IF_ERROR(TNMT_CUDA_LAUNCH_CHECK());
  ColumnReduceKernel<<<col_blocks, kThreads, 0, ctx.stream()>>>(out0, out1, partial->as<double>(),
                                                                chunks, d, outputs);
  return TNMT_CUDA_LAUNCH_CHECK();
}

// Stable sort of token indices by key, then the per-key sums into table.
absl::Status SortedRowAdd(Context& ctx, float* table, const int32_t* keys, const float* dx,
                          int count, int d, float scale, int32_t* iota, int32_t* sorted_keys,
                          int32_t* order) {
  size_t temp_bytes = 0;
  TB_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, keys, sorted_keys, iota, order, count, 0, 32, ctx.stream())));
  absl::StatusOr<DeviceBuffer> temp = Scratch(ctx, temp_bytes);
  if (!temp.ok()) return temp.status();
  TB_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      temp->get(), temp_bytes, keys, sorted_keys, iota, order, count, 0, 32, ctx.stream())));
  SegmentAddKernel<<<static_cast<unsigned>(count), kAttnThreads, 0, ctx.stream()>>>(
      table, sorted_keys, order, dx, count, d, scale);
  return TNMT_CUDA_LAUNCH_CHECK();
}

}  // namespace

absl::Status LayerNormBackward(Context& ctx, float* dx, float* dgamma, float* dbeta,
                               const float* dy, const float* x, const float* gamma, int64_t rows,
                               int d, float eps) {
  TB_RETURN_IF_ERROR(CheckCount("LayerNormBackward", rows));
  if (d < 1) return absl::InvalidArgumentError(absl::StrCat("cuda::LayerNormBackward: d ", d));
  if (rows > INT_MAX) return absl::InvalidArgumentError("cuda::LayerNormBackward: too many rows");
  if (rows == 0) return absl::OkStatus();
  absl::StatusOr<DeviceBuffer> stats = Scratch(ctx, sizeof(float) * 2 * static_cast<size_t>(rows));
  if (!stats.ok()) return stats.status();
  const unsigned blocks = static_cast<unsigned>(rows);
  LayerNormStatsKernel<<<blocks, kThreads, 0, ctx.stream()>>>(stats->as<float>(), x, d, eps);
  TB_RETURN_IF_ERROR(TNMT_CUDA_LAUNCH_CHECK());
  // Reads dy before LayerNormDxKernel may overwrite it (dx aliasing dy): stream order.
  TB_RETURN_IF_ERROR(ColumnSums(ctx, dgamma, dbeta, dy, x, stats->as<float>(), rows, d));
  LayerNormDxKernel<<<blocks, kThreads, 0, ctx.stream()>>>(dx, dy, x, gamma, stats->as<float>(), d);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status ActivationBackward(Context& ctx, float* dx, const float* dy, const float* pre,
                                int64_t count, Activation act) {
  if (!HasCudaKernel(act)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ActivationBackward: no CUDA kernel for ", ActivationName(act)));
  }
  const bool gelu = act == Activation::kGelu;
  TB_RETURN_IF_ERROR(CheckCount("ActivationBackward", count));
  if (count == 0) return absl::OkStatus();
  ActivationBackwardKernel<<<GridFor(count, kThreads), kThreads, 0, ctx.stream()>>>(dx, dy, pre,
                                                                                     count, gelu);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status AccumulateColumnSum(Context& ctx, float* db, const float* dy, int64_t rows, int n) {
  TB_RETURN_IF_ERROR(CheckCount("AccumulateColumnSum", rows));
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("cuda::AccumulateColumnSum: n ", n));
  if (rows == 0 || n == 0) return absl::OkStatus();
  return ColumnSums(ctx, db, nullptr, dy, nullptr, nullptr, rows, n);
}

absl::Status AttentionTrainForward(Context& ctx, float* out, int64_t ld_out, float* probs,
                                   const float* q, int64_t ld_q, const float* k, const float* v,
                                   int64_t ld_kv, int batch, int q_len, int k_len, int heads,
                                   int d_head, const int32_t* k_valid, bool causal,
                                   const AttentionDropout& drop) {
  TB_RETURN_IF_ERROR(CheckAttention("AttentionTrainForward", batch, q_len, k_len, heads, d_head,
                                      {ld_out, ld_q, ld_kv}));
  TB_RETURN_IF_ERROR(CheckDropout("AttentionTrainForward", drop));
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
  TB_RETURN_IF_ERROR(CheckAttention("AttentionBackward", batch, q_len, k_len, heads, d_head,
                                      {ld_dq, ld_dkv, ld_dout, ld_q, ld_kv}));
  TB_RETURN_IF_ERROR(CheckDropout("AttentionBackward", drop));
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
  TB_RETURN_IF_ERROR(TNMT_CUDA_LAUNCH_CHECK());
  if (k_rows == 0) return absl::OkStatus();
  const int threads = std::min(256, (d_head + 31) / 32 * 32);
  AttentionBackwardKeyKernel<<<static_cast<unsigned>(k_rows), threads, 0, ctx.stream()>>>(
      dk, dv, ld_dkv, dout, ld_dout, probs, ds->as<float>(), q, ld_q, q_len, k_len, heads, d_head,
      scale, dropped_ptr);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status EmbeddingBackward(Context& ctx, float* dtable, float* dpos, const float* dx,
                               const int32_t* ids, const int32_t* positions, int64_t count, int d,
                               float scale) {
  TB_RETURN_IF_ERROR(CheckCount("EmbeddingBackward", count));
  if (d < 0) return absl::InvalidArgumentError(absl::StrCat("cuda::EmbeddingBackward: d ", d));
  if (count > INT_MAX) return absl::InvalidArgumentError("cuda::EmbeddingBackward: count too large");
  if (dpos != nullptr && positions == nullptr) {
    return absl::InvalidArgumentError("cuda::EmbeddingBackward: dpos given without positions");
  }
  if (count == 0 || d == 0) return absl::OkStatus();
  const int n = static_cast<int>(count);
  absl::StatusOr<DeviceBuffer> ints = Scratch(ctx, sizeof(int32_t) * 3 * static_cast<size_t>(n));
  if (!ints.ok()) return ints.status();
  int32_t* iota = ints->as<int32_t>();
  int32_t* sorted_keys = iota + n;
  int32_t* order = iota + 2 * static_cast<int64_t>(n);
  IotaKernel<<<GridFor(n, kThreads), kThreads, 0, ctx.stream()>>>(iota, n);
  TB_RETURN_IF_ERROR(TNMT_CUDA_LAUNCH_CHECK());
  TB_RETURN_IF_ERROR(SortedRowAdd(ctx, dtable, ids, dx, n, d, scale, iota, sorted_keys, order));
  if (dpos == nullptr) return absl::OkStatus();
  // Reuses sorted_keys and order: stream order puts this sort after the kernel reading them.
  return SortedRowAdd(ctx, dpos, positions, dx, n, d, 1.0f, iota, sorted_keys, order);
}

absl::Status SumOfSquares(Context& ctx, double* out, const float* x, int64_t count) {
  TB_RETURN_IF_ERROR(CheckCount("SumOfSquares", count));
  // The block count depends on count only, so the summation order is fixed per size.
  const int blocks =
      static_cast<int>(std::min<int64_t>((count + kThreads - 1) / kThreads, kSumBlocks));
  absl::StatusOr<DeviceBuffer> partial = Scratch(ctx, sizeof(double) * blocks);
  if (!partial.ok()) return partial.status();
  if (blocks > 0) {
    SumOfSquaresPartialKernel<<<blocks, kThreads, 0, ctx.stream()>>>(partial->as<double>(), x,
                                                                     count);
    TB_RETURN_IF_ERROR(TNMT_CUDA_LAUNCH_CHECK());
  }
  SumPartialsKernel<<<1, kThreads, 0, ctx.stream()>>>(out, partial->as<double>(), blocks);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status ScaleInPlace(Context& ctx, float* x, int64_t count, float s) {
  TB_RETURN_IF_ERROR(CheckCount("ScaleInPlace", count));
  if (count == 0) return absl::OkStatus();
  ScaleInPlaceKernel<<<GridFor(count, kThreads), kThreads, 0, ctx.stream()>>>(x, count, s);
  return TNMT_CUDA_LAUNCH_CHECK();
}

}  // namespace tnmt::kernels::cuda

#undef TB_RETURN_IF_ERROR
