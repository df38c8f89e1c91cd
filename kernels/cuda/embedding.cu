// Embedding kernels; see embedding.h. The backward sorts token indices by id with CUB and adds
// each id's rows in token order (no atomics).
#include "kernels/cuda/embedding.h"

#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_common.cuh"

namespace tnmt::kernels::cuda {

namespace {

using internal::CheckCount;
using internal::GridFor;
using internal::Scratch;

constexpr int kThreads = 256;         // grid-stride kernels
constexpr int kSegmentThreads = 128;  // SegmentAddKernel: one block per distinct id

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__global__ void EmbedKernel(float* out, const int32_t* ids, const int32_t* positions,
                            const T* table, const float* pos, int d, float scale) {
  const int64_t i = blockIdx.x;
  const T* e = table + static_cast<int64_t>(ids[i]) * d;
  float* o = out + i * d;
  const float* p = pos != nullptr ? pos + static_cast<int64_t>(positions[i]) * d : nullptr;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    // Rounded as the CPU's e * scale + p (no fused multiply-add).
    const float v = __fmul_rn(ToFloat(e[j]), scale);
    o[j] = p != nullptr ? __fadd_rn(v, p[j]) : v;
  }
}

__global__ void SinusoidalKernel(float* table, int d) {
  const int64_t p = blockIdx.x;
  for (int i = threadIdx.x; 2 * i < d; i += blockDim.x) {
    const double freq = pow(10000.0, -2.0 * i / d);
    table[p * d + 2 * i] = static_cast<float>(sin(p * freq));
    if (2 * i + 1 < d) table[p * d + 2 * i + 1] = static_cast<float>(cos(p * freq));
  }
}

__global__ void IotaKernel(int32_t* x, int count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = static_cast<int32_t>(i);
  }
}

// keys: [count] sorted (stable), order: [count] the token index of each sorted entry. The block
// at the first entry of each key adds, in token order, scale * dx[token] to table[key].
__global__ void __launch_bounds__(kSegmentThreads)
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

// Stable sort of token indices by key, then the per-key sums into table.
absl::Status SortedRowAdd(Context& ctx, float* table, const int32_t* keys, const float* dx,
                          int count, int d, float scale, int32_t* iota, int32_t* sorted_keys,
                          int32_t* order) {
  size_t temp_bytes = 0;
  TNMT_KERNEL_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, keys, sorted_keys, iota, order, count, 0, 32, ctx.stream())));
  absl::StatusOr<DeviceBuffer> temp = Scratch(ctx, temp_bytes);
  if (!temp.ok()) return temp.status();
  TNMT_KERNEL_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      temp->get(), temp_bytes, keys, sorted_keys, iota, order, count, 0, 32, ctx.stream())));
  SegmentAddKernel<<<static_cast<unsigned>(count), kSegmentThreads, 0, ctx.stream()>>>(
      table, sorted_keys, order, dx, count, d, scale);
  return TNMT_CUDA_LAUNCH_CHECK();
}

}  // namespace

absl::Status EmbedTokens(Context& ctx, float* out, const int32_t* ids, const int32_t* positions,
                         int64_t count, const void* table, DType table_type, const float* pos,
                         int d, float scale) {
  cudaStream_t stream = ctx.stream();
  if (count < 0 || d < 0) return absl::InvalidArgumentError("cuda::EmbedTokens: negative size");
  if (count == 0 || d == 0) return absl::OkStatus();
  if (count > 0x7fffffff) return absl::InvalidArgumentError("cuda::EmbedTokens: too many tokens");
  const unsigned blocks = static_cast<unsigned>(count);
  const int threads = std::min(256, (d + 31) / 32 * 32);
  switch (table_type) {
    case DType::kFloat16:
      EmbedKernel<<<blocks, threads, 0, stream>>>(out, ids, positions,
                                                  static_cast<const __half*>(table), pos, d, scale);
      break;
    case DType::kBFloat16:
      EmbedKernel<<<blocks, threads, 0, stream>>>(
          out, ids, positions, static_cast<const __nv_bfloat16*>(table), pos, d, scale);
      break;
    default:
      EmbedKernel<<<blocks, threads, 0, stream>>>(out, ids, positions,
                                                  static_cast<const float*>(table), pos, d, scale);
  }
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status SinusoidalPositions(Context& ctx, float* table, int rows, int d) {
  cudaStream_t stream = ctx.stream();
  if (rows < 0 || d < 0) return absl::InvalidArgumentError("cuda::SinusoidalPositions: negative size");
  if (rows == 0 || d == 0) return absl::OkStatus();
  SinusoidalKernel<<<rows, 128, 0, stream>>>(table, d);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status EmbeddingBackward(Context& ctx, float* dtable, float* dpos, const float* dx,
                               const int32_t* ids, const int32_t* positions, int64_t count, int d,
                               float scale) {
  TNMT_KERNEL_RETURN_IF_ERROR(CheckCount("EmbeddingBackward", count));
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
  TNMT_KERNEL_RETURN_IF_ERROR(TNMT_CUDA_LAUNCH_CHECK());
  TNMT_KERNEL_RETURN_IF_ERROR(SortedRowAdd(ctx, dtable, ids, dx, n, d, scale, iota, sorted_keys, order));
  if (dpos == nullptr) return absl::OkStatus();
  // Reuses sorted_keys and order: stream order puts this sort after the kernel reading them.
  return SortedRowAdd(ctx, dpos, positions, dx, n, d, 1.0f, iota, sorted_keys, order);
}

}  // namespace tnmt::kernels::cuda
