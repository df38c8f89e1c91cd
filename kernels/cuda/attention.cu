// Fused attention for the decode step; see attention.h.
//
// Block = (query row, head), 4 warps. The fast path gives each key DH/4 lanes (one float4 of
// q, k, v and the accumulator per lane), so a warp scores 32/(DH/4) keys per step and loads
// U steps' keys before using them (several independent 16-byte loads in flight per lane).
// Each lane group keeps a running max m, sum l and accumulator (online softmax); the block's
// groups are merged through shared memory at the end. The general path does the same with one
// key per warp and scalar loads.
#include "kernels/cuda/attention.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"

namespace tnmt::kernels::cuda {

namespace {

// A change of AttentionArgs (kernels/attention.h: a new field) must be reflected here.
static_assert(sizeof(AttentionArgs) == 64, "AttentionArgs changed: update the CUDA kernel");

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 4;

struct Params {
  float* out;
  int64_t ld_out;
  const float* q;
  int64_t ld_q;
  const float* k;
  const float* v;
  int64_t ld_kv;
  int64_t kv_group_stride;
  int q_len, k_len, d_head;
  float scale;
  const int32_t* kv_index;
  const int32_t* k_valid;
  int causal_offset;
  const int32_t* k_groups;
  int64_t k_groups_stride;
};

struct RowInfo {
  int64_t row;
  int g;
  int limit;
  const int32_t* groups;
};

// The keys query row `row` sees: its K/V group, how many keys are visible, its slot table.
__device__ __forceinline__ RowInfo GetRow(const Params& p, int64_t row) {
  RowInfo r;
  r.row = row;
  const int b = static_cast<int>(r.row / p.q_len);
  const int i = static_cast<int>(r.row % p.q_len);
  r.g = p.kv_index != nullptr ? p.kv_index[b] : b;
  int limit = p.k_valid != nullptr ? p.k_valid[r.g] : p.k_len;
  if (limit > p.k_len) limit = p.k_len;
  if (p.causal_offset >= 0 && i + p.causal_offset + 1 < limit) limit = i + p.causal_offset + 1;
  r.limit = limit;
  r.groups = p.k_groups != nullptr ? p.k_groups + r.g * p.k_groups_stride : nullptr;
  return r;
}

__device__ __forceinline__ int64_t KeyOffset(const Params& p, const RowInfo& r, int j) {
  const int64_t slot = r.groups != nullptr ? r.groups[j] : r.g;
  return slot * p.kv_group_stride + j * p.ld_kv;
}

// Merges the per-group (m, l, acc) of the block and writes dims [0, dh) of the output row.
template <int kGroups>
__device__ __forceinline__ void Combine(const Params& p, const RowInfo& r, int dh,
                                        const float* s_m, const float* s_l, const float* s_acc,
                                        int acc_stride) {
  float mx = -INFINITY;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) mx = fmaxf(mx, s_m[g]);
  float* out = p.out + r.row * p.ld_out + static_cast<int64_t>(blockIdx.y) * dh;
  for (int t = threadIdx.x; t < dh; t += kThreads) {
    float o = 0.0f;
    if (mx > -INFINITY) {
      float sum = 0.0f, acc = 0.0f;
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        if (s_m[g] > -INFINITY) {
          const float w = expf(s_m[g] - mx);
          sum += s_l[g] * w;
          acc += s_acc[g * acc_stride + t] * w;
        }
      }
      o = acc / sum;
    }
    out[t] = o;
  }
}

template <int DH>
__global__ void __launch_bounds__(kThreads) AttentionFast(Params p) {
  constexpr int L = DH / 4;  // lanes per key
  constexpr int G = 32 / L;  // keys per warp step
  constexpr int kGroups = kWarps * G;
  constexpr int kStep = kGroups * kUnroll;
  __shared__ float s_m[kGroups], s_l[kGroups];
  __shared__ __align__(16) float s_acc[kGroups * DH];
  const RowInfo r = GetRow(p, blockIdx.x);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = lane % L, group = warp * G + lane / L;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * DH + part * 4;
  float4 q = *reinterpret_cast<const float4*>(p.q + r.row * p.ld_q + col);
  q.x *= p.scale;
  q.y *= p.scale;
  q.z *= p.scale;
  q.w *= p.scale;
  float m = -INFINITY, l = 0.0f;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  // Block-uniform trip count: every lane reaches the shuffles.
  for (int base = 0; base < r.limit; base += kStep) {
    float4 kk[kUnroll], vv[kUnroll];
    float s[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kGroups + group;
      if (j < r.limit) {
        const int64_t off = KeyOffset(p, r, j) + col;
        kk[u] = __ldg(reinterpret_cast<const float4*>(p.k + off));
        vv[u] = __ldg(reinterpret_cast<const float4*>(p.v + off));
      } else {
        kk[u] = vv[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
    float mx = m;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float d = q.x * kk[u].x + q.y * kk[u].y + q.z * kk[u].z + q.w * kk[u].w;
#pragma unroll
      for (int o = L / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
      s[u] = base + u * kGroups + group < r.limit ? d : -INFINITY;
      mx = fmaxf(mx, s[u]);
    }
    if (mx > -INFINITY) {
      const float c = expf(m - mx);
      l *= c;
      acc.x *= c;
      acc.y *= c;
      acc.z *= c;
      acc.w *= c;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float e = expf(s[u] - mx);
        l += e;
        acc.x += e * vv[u].x;
        acc.y += e * vv[u].y;
        acc.z += e * vv[u].z;
        acc.w += e * vv[u].w;
      }
      m = mx;
    }
  }
  if (part == 0) {
    s_m[group] = m;
    s_l[group] = l;
  }
  reinterpret_cast<float4*>(s_acc)[group * L + part] = acc;
  __syncthreads();
  Combine<kGroups>(p, r, DH, s_m, s_l, s_acc, DH);
}

// Any d_head <= 32 * T: lane c of a warp holds dims c, c + 32, ...; one key per warp step.
template <int T>
__global__ void __launch_bounds__(kThreads) AttentionGeneral(Params p) {
  constexpr int kStep = kWarps * kUnroll;
  __shared__ float s_m[kWarps], s_l[kWarps];
  __shared__ float s_acc[kWarps * T * 32];
  const RowInfo r = GetRow(p, blockIdx.x);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int dh = p.d_head;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * dh;
  float q[T], acc[T];
#pragma unroll
  for (int t = 0; t < T; ++t) {
    const int c = lane + 32 * t;
    q[t] = c < dh ? p.q[r.row * p.ld_q + col + c] * p.scale : 0.0f;
    acc[t] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int base = 0; base < r.limit; base += kStep) {
    float kk[kUnroll][T], vv[kUnroll][T], s[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kWarps + warp;
      const int64_t off = j < r.limit ? KeyOffset(p, r, j) + col : 0;
#pragma unroll
      for (int t = 0; t < T; ++t) {
        const int c = lane + 32 * t;
        const bool ok = j < r.limit && c < dh;
        kk[u][t] = ok ? __ldg(p.k + off + c) : 0.0f;
        vv[u][t] = ok ? __ldg(p.v + off + c) : 0.0f;
      }
    }
    float mx = m;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float d = 0.0f;
#pragma unroll
      for (int t = 0; t < T; ++t) d += q[t] * kk[u][t];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
      s[u] = base + u * kWarps + warp < r.limit ? d : -INFINITY;
      mx = fmaxf(mx, s[u]);
    }
    if (mx > -INFINITY) {
      const float c = expf(m - mx);
      l *= c;
#pragma unroll
      for (int t = 0; t < T; ++t) acc[t] *= c;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float e = expf(s[u] - mx);
        l += e;
#pragma unroll
        for (int t = 0; t < T; ++t) acc[t] += e * vv[u][t];
      }
      m = mx;
    }
  }
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int t = 0; t < T; ++t) s_acc[warp * T * 32 + lane + 32 * t] = acc[t];
  __syncthreads();
  Combine<kWarps>(p, r, dh, s_m, s_l, s_acc, T * 32);
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

constexpr int kMaxArgmaxHeads = 256;

// Head h's scaled score of key j for query row qr, in double without contraction (the CPU's
// sum of products, in its order).
__device__ double ArgmaxScore(const Params& p, const RowInfo& r, const float* qr, int h, int j) {
  const float* kh = p.k + KeyOffset(p, r, j) + static_cast<int64_t>(h) * p.d_head;
  double s = 0.0;
  for (int c = 0; c < p.d_head; ++c) {
    s = __dadd_rn(s, __dmul_rn(static_cast<double>(qr[h * p.d_head + c]), static_cast<double>(kh[c])));
  }
  return __dmul_rn(s, static_cast<double>(p.scale));
}

// One thread per query row: each head's max and softmax normalizer, then each key's mean
// probability over the heads (recomputing the scores instead of storing them).
__global__ void AttentionArgmaxKernel(Params p, int num_heads, int64_t rows, int32_t* out) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const RowInfo r = GetRow(p, row);
  const int limit = r.limit;
  if (limit <= 0) {
    out[row] = -1;
    return;
  }
  const float* qr = p.q + row * p.ld_q;
  double mx[kMaxArgmaxHeads], sum[kMaxArgmaxHeads];
  for (int h = 0; h < num_heads; ++h) {
    double m = -INFINITY;
    for (int j = 0; j < limit; ++j) m = fmax(m, ArgmaxScore(p, r, qr, h, j));
    double s = 0.0;
    for (int j = 0; j < limit; ++j) s = __dadd_rn(s, exp(__dadd_rn(ArgmaxScore(p, r, qr, h, j), -m)));
    mx[h] = m;
    sum[h] = s;
  }
  int best = 0;
  double best_mean = -1.0;
  for (int j = 0; j < limit; ++j) {
    double mean = 0.0;
    for (int h = 0; h < num_heads; ++h) {
      mean = __dadd_rn(mean, __ddiv_rn(exp(__dadd_rn(ArgmaxScore(p, r, qr, h, j), -mx[h])), sum[h]));
    }
    if (mean > best_mean) {
      best_mean = mean;
      best = j;
    }
  }
  out[row] = best;
}

}  // namespace

absl::Status MultiHeadAttention(Context& ctx, float* out, int64_t ld_out, const float* q,
                                int64_t ld_q, const float* k, const float* v, int64_t ld_kv,
                                int64_t kv_group_stride, const AttentionArgs& a) {
  cudaStream_t stream = ctx.stream();
  if (a.batch < 0 || a.q_len < 0 || a.k_len < 0 || a.num_heads < 0 || a.d_head < 0) {
    return absl::InvalidArgumentError("cuda::MultiHeadAttention: negative size");
  }
  const int64_t rows = static_cast<int64_t>(a.batch) * a.q_len;
  if (rows == 0 || a.num_heads == 0 || a.d_head == 0) return absl::OkStatus();
  if (a.d_head > 256) {
    return absl::UnimplementedError(
        absl::StrCat("cuda::MultiHeadAttention: d_head ", a.d_head, " > 256"));
  }
  if (rows > 0x7fffffff || a.num_heads > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda::MultiHeadAttention: grid too large (", rows, " rows, ", a.num_heads, " heads)"));
  }
  Params p{out,         ld_out,     q,         ld_q,      k,          v,
           ld_kv,       kv_group_stride,       a.q_len,   a.k_len,    a.d_head,
           a.scale,     a.kv_index, a.k_valid, a.causal_offset,       a.k_groups,
           a.k_groups_stride};
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(a.num_heads));
  const bool vec = Aligned16(q) && Aligned16(k) && Aligned16(v) && ld_q % 4 == 0 &&
                   ld_kv % 4 == 0 && kv_group_stride % 4 == 0;
  if (vec && a.d_head == 32) {
    AttentionFast<32><<<grid, kThreads, 0, stream>>>(p);
  } else if (vec && a.d_head == 64) {
    AttentionFast<64><<<grid, kThreads, 0, stream>>>(p);
  } else if (vec && a.d_head == 128) {
    AttentionFast<128><<<grid, kThreads, 0, stream>>>(p);
  } else {
    switch ((a.d_head + 31) / 32) {
      case 1: AttentionGeneral<1><<<grid, kThreads, 0, stream>>>(p); break;
      case 2: AttentionGeneral<2><<<grid, kThreads, 0, stream>>>(p); break;
      case 3: AttentionGeneral<3><<<grid, kThreads, 0, stream>>>(p); break;
      case 4: AttentionGeneral<4><<<grid, kThreads, 0, stream>>>(p); break;
      case 5: AttentionGeneral<5><<<grid, kThreads, 0, stream>>>(p); break;
      case 6: AttentionGeneral<6><<<grid, kThreads, 0, stream>>>(p); break;
      case 7: AttentionGeneral<7><<<grid, kThreads, 0, stream>>>(p); break;
      default: AttentionGeneral<8><<<grid, kThreads, 0, stream>>>(p); break;
    }
  }
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status AttentionArgmax(Context& ctx, int32_t* out, const float* q, int64_t ld_q, const float* k,
                             int64_t ld_kv, int64_t kv_group_stride, const AttentionArgs& a) {
  if (a.batch < 0 || a.q_len < 0 || a.k_len < 0 || a.num_heads < 0 || a.d_head < 0) {
    return absl::InvalidArgumentError("cuda::AttentionArgmax: negative size");
  }
  const int64_t rows = static_cast<int64_t>(a.batch) * a.q_len;
  if (rows == 0) return absl::OkStatus();
  if (a.num_heads > kMaxArgmaxHeads) {
    return absl::UnimplementedError(
        absl::StrCat("cuda::AttentionArgmax: ", a.num_heads, " heads > ", kMaxArgmaxHeads));
  }
  Params p{nullptr,     0,          q,         ld_q,      k,          nullptr,
           ld_kv,       kv_group_stride,       a.q_len,   a.k_len,    a.d_head,
           a.scale,     a.kv_index, a.k_valid, a.causal_offset,       a.k_groups,
           a.k_groups_stride};
  constexpr int kRowsPerBlock = 64;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks > 0x7fffffff) return absl::InvalidArgumentError("cuda::AttentionArgmax: too many rows");
  AttentionArgmaxKernel<<<static_cast<unsigned>(blocks), kRowsPerBlock, 0, ctx.stream()>>>(p, a.num_heads, rows, out);
  return TNMT_CUDA_LAUNCH_CHECK();
}

}  // namespace tnmt::kernels::cuda
