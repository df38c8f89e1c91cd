// Top-k kernel; see topk.h.
#include "kernels/cuda/topk.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"

namespace tnmt::kernels::cuda {

namespace {

constexpr int kTopKThreads = 512;
constexpr int kTopKWarps = kTopKThreads / 32;

// Monotone map float -> uint32 (larger float, larger key); -0 == +0; NaN lowest.
__device__ __forceinline__ uint32_t OrderedKey(float x) {
  if (x != x) return 0u;
  if (x == 0.0f) x = 0.0f;
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

__global__ void __launch_bounds__(kTopKThreads)
    TopKKernel(float* values, int32_t* ids, const float* x, int n, int k, int32_t exclude) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t s_prefix, s_remaining, s_gt;
  __shared__ uint32_t warp_counts[kTopKWarps];
  __shared__ float s_val[kMaxTopK];
  __shared__ int32_t s_id[kMaxTopK];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * n;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  // Radix select: the key T of the k-th best element, and how many elements equal to T
  // (`remaining`) belong to the top k.
  uint32_t prefix = 0, mask = 0, remaining = static_cast<uint32_t>(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kTopKThreads) hist[i] = 0;
    __syncthreads();
    // Warp-uniform trip count, so the ballot below sees every lane.
    for (int start = 0; start < n; start += kTopKThreads) {
      const int i = start + threadIdx.x;
      const uint32_t key = i < n ? OrderedKey(row[i]) : 0u;
      const bool take = i < n && i != exclude && (key & mask) == prefix;
      const uint32_t bin = (key >> shift) & 255u;
      const unsigned takers = __ballot_sync(0xffffffffu, take);
      if (take) {
        // One shared atomic per distinct bin in the warp (top bytes of logits are alike).
        const unsigned peers = __match_any_sync(takers, bin);
        if (lane == __ffs(peers) - 1) atomicAdd(&hist[bin], static_cast<uint32_t>(__popc(peers)));
      }
    }
    __syncthreads();
    if (warp == 0) {
      // Lane l owns bins 255 - 8l down to 248 - 8l; scan the counts from the top.
      uint32_t c[8], sum = 0;
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        c[t] = hist[255 - 8 * lane - t];
        sum += c[t];
      }
      uint32_t incl = sum;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
      }
      uint32_t above = incl - sum;
      if (above < remaining && remaining <= incl) {
#pragma unroll
        for (int t = 0; t < 8; ++t) {
          if (above < remaining && remaining <= above + c[t]) {
            s_prefix = prefix | (static_cast<uint32_t>(255 - 8 * lane - t) << shift);
            s_remaining = remaining - above;
          }
          above += c[t];
        }
      }
    }
    __syncthreads();
    prefix = s_prefix;
    remaining = s_remaining;
    mask |= 255u << shift;
  }
  const uint32_t threshold = prefix;

  // Collect: every key above the threshold (any order), then the first `remaining` keys equal
  // to it in index order (block-wide ordered ranks from ballots).
  if (threadIdx.x == 0) s_gt = 0;
  __syncthreads();
  const uint32_t eq_start = static_cast<uint32_t>(k) - remaining;
  uint32_t eq_base = 0;
  for (int start = 0; start < n; start += kTopKThreads) {
    const int i = start + threadIdx.x;
    bool gt = false, eq = false;
    float v = 0.0f;
    if (i < n && i != exclude) {
      v = row[i];
      const uint32_t key = OrderedKey(v);
      gt = key > threshold;
      eq = key == threshold;
    }
    if (gt) {
      const uint32_t pos = atomicAdd(&s_gt, 1u);
      s_val[pos] = v;
      s_id[pos] = i;
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) warp_counts[warp] = static_cast<uint32_t>(__popc(ballot));
    __syncthreads();
    uint32_t rank = eq_base + static_cast<uint32_t>(__popc(ballot & ((1u << lane) - 1u)));
    uint32_t total = 0;
#pragma unroll
    for (int w = 0; w < kTopKWarps; ++w) {
      if (w < warp) rank += warp_counts[w];
      total += warp_counts[w];
    }
    if (eq && rank < remaining) {
      s_val[eq_start + rank] = v;
      s_id[eq_start + rank] = i;
    }
    eq_base += total;
    __syncthreads();
  }

  // Rank the k winners: better = larger key, then lower index.
  for (int t = threadIdx.x; t < k; t += kTopKThreads) {
    const float v = s_val[t];
    const int32_t id = s_id[t];
    const uint32_t key = OrderedKey(v);
    int rank = 0;
    for (int j = 0; j < k; ++j) {
      const uint32_t kj = OrderedKey(s_val[j]);
      rank += kj > key || (kj == key && s_id[j] < id);
    }
    values[static_cast<int64_t>(blockIdx.x) * k + rank] = v;
    ids[static_cast<int64_t>(blockIdx.x) * k + rank] = id;
  }
}

}  // namespace

absl::Status TopK(Context& ctx, float* values, int32_t* ids, const float* x, int64_t rows, int n,
                  int k, int32_t exclude) {
  cudaStream_t stream = ctx.stream();
  const int eligible = n - (exclude >= 0 && exclude < n ? 1 : 0);
  if (rows < 0 || n < 0) return absl::InvalidArgumentError("cuda::TopK: negative size");
  if (k < 1 || k > kMaxTopK || k > eligible) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::TopK: k = ", k, " outside [1, min(",
                                                   kMaxTopK, ", ", eligible, ")]"));
  }
  if (rows == 0) return absl::OkStatus();
  if (rows > 0x7fffffff) return absl::InvalidArgumentError("cuda::TopK: too many rows");
  TopKKernel<<<static_cast<unsigned>(rows), kTopKThreads, 0, stream>>>(values, ids, x, n, k,
                                                                         exclude);
  return TNMT_CUDA_LAUNCH_CHECK();
}

}  // namespace tnmt::kernels::cuda
