// The explicit CUDA execution context of tnmt's GPU kernels: one device, one stream, one
// cuBLASLt handle with its workspace, a caching device allocator, the cached GEMM plans
// (kernels/cuda/gemm.h) and the timeline of its device time (kernels/cuda/gpu_timeline.h).
// Everything queued through a Context runs in its stream's order.
// Calling convention: every kernels/cuda operation takes the Context it runs in as its first
// argument (outputs next, then inputs, then sizes and options) and returns a Status.
//
// Threading: a Context (and its allocator) is used by one host thread at a time; give each
// thread or model its own. Blocks returned to the allocator are reused by later work queued on
// the same stream, which stream order makes safe; never share one allocator across streams.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/gpu_timeline.h"

namespace tnmt::kernels::cuda {

class DeviceAllocator;

// A block from a DeviceAllocator, handed back when destroyed (move-only).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceAllocator* owner, void* ptr, size_t bytes)
      : owner_(owner), ptr_(ptr), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void Reset();
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  DeviceAllocator* owner_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Caching allocator over cudaMalloc. Requests are rounded up (512 B granules below 1 MiB,
// 2 MiB granules above); a freed block is kept and reused for a later request of at most its
// size and more than half of it (best fit). When cudaMalloc fails, the cache is released and
// the allocation tried once more; then the error is ResourceExhausted with the sizes.
class DeviceAllocator {
 public:
  struct Stats {
    int64_t in_use_bytes = 0;   // handed out, rounded sizes
    int64_t cached_bytes = 0;   // kept for reuse
    int64_t peak_bytes = 0;     // max of in_use + cached
    int64_t device_allocs = 0;  // cudaMalloc calls that succeeded
    int64_t reuses = 0;         // requests served from the cache
  };

  explicit DeviceAllocator(int device) : device_(device) {}
  ~DeviceAllocator();  // cudaFree()s every block, including ones still handed out
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  absl::StatusOr<void*> Allocate(size_t bytes);  // bytes == 0 gives a null pointer
  // Returns a block from Allocate to the cache; null is ignored; an unknown pointer is an error.
  absl::Status Free(void* ptr);
  absl::StatusOr<DeviceBuffer> Buffer(size_t bytes);
  // cudaFree()s every cached block.
  absl::Status ReleaseCache();
  Stats stats() const { return stats_; }
  static size_t RoundUp(size_t bytes);

 private:
  int device_;
  std::multimap<size_t, void*> cached_;    // rounded size -> block
  std::unordered_map<void*, size_t> used_;  // block -> rounded size
  Stats stats_;
};

class GemmPlanCache;  // kernels/cuda/gemm.cc

class Context {
 public:
  // cuBLASLt's recommended workspace on Hopper.
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  // Makes `device` current on the calling thread and creates the stream, the cuBLASLt handle
  // and the workspace. Fails with the CUDA error (e.g. no device, no driver) named.
  static absl::StatusOr<std::unique_ptr<Context>> Create(
      int device = 0, size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasLtHandle_t lt() const { return lt_; }
  void* workspace() const { return workspace_.get(); }
  size_t workspace_bytes() const { return workspace_.bytes(); }
  const cudaDeviceProp& props() const { return props_; }
  DeviceAllocator& allocator() { return *allocator_; }
  GemmPlanCache& gemm_plans();
  // Device time by category of the work timed on the stream (gpu_timeline.h); on at creation
  // when TNMT_GPU_TIMING asks for it.
  GpuTimeline& timeline() { return timeline_; }

  // cudaSetDevice(device()) on the calling thread (needed before use from another thread).
  absl::Status Activate() const;
  // Waits for everything queued on the stream; reports asynchronous kernel errors.
  absl::Status Synchronize() const;

 private:
  Context() = default;
  int device_ = 0;
  cudaDeviceProp props_{};
  std::unique_ptr<DeviceAllocator> allocator_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  DeviceBuffer workspace_;
  std::unique_ptr<GemmPlanCache, void (*)(GemmPlanCache*)> plans_{nullptr, nullptr};
  GpuTimeline timeline_;
};

}  // namespace tnmt::kernels::cuda
