// Page-locked host memory for the engine's host<->device staging (cudaMallocHost), so copies
// are true DMA transfers that a stream orders. Grows on demand; the contents are not kept
// across growth. Invariant: a caller reuses or grows the buffer only after every copy that
// reads or writes it has completed (the engine synchronizes its stream before that).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"

namespace tnmt::cuda_engine {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
  }

  // At least `bytes` bytes (doubling, so repeated growth is amortized).
  absl::Status Ensure(size_t bytes) {
    if (bytes <= bytes_) return absl::OkStatus();
    size_t want = bytes_ * 2 > bytes ? bytes_ * 2 : bytes;
    if (ptr_ != nullptr) {
      absl::Status s = TNMT_CUDA_CHECK(cudaFreeHost(ptr_));
      ptr_ = nullptr;
      bytes_ = 0;
      if (!s.ok()) return s;
    }
    const cudaError_t e = cudaMallocHost(&ptr_, want);
    if (e != cudaSuccess) {
      cudaGetLastError();
      ptr_ = nullptr;
      const std::string what = absl::StrCat("cudaMallocHost(", want, " bytes) of pinned host memory: ",
                                            cudaGetErrorName(e));
      if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(what);
      return absl::InternalError(what);
    }
    bytes_ = want;
    return absl::OkStatus();
  }

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tnmt::cuda_engine
