// Context and DeviceAllocator; see context.h.
#include "kernels/cuda/context.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"

namespace tnmt::kernels::cuda {

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    owner_ = o.owner_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.owner_ = nullptr;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (owner_ != nullptr && ptr_ != nullptr) (void)owner_->Free(ptr_);
  owner_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

size_t DeviceAllocator::RoundUp(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t{2} << 20;
  if (bytes < (size_t{1} << 20)) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

DeviceAllocator::~DeviceAllocator() {
  int previous = -1;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  for (auto& [size, p] : cached_) cudaFree(p);
  for (auto& [p, size] : used_) cudaFree(p);
  if (previous >= 0) cudaSetDevice(previous);
}

absl::StatusOr<void*> DeviceAllocator::Allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t size = RoundUp(bytes);
  auto it = cached_.lower_bound(size);
  if (it != cached_.end() && it->first / 2 < size) {
    void* p = it->second;
    const size_t got = it->first;
    cached_.erase(it);
    used_[p] = got;
    stats_.cached_bytes -= got;
    stats_.in_use_bytes += got;
    ++stats_.reuses;
    return p;
  }
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, size);
  if (e == cudaErrorMemoryAllocation && !cached_.empty()) {
    cudaGetLastError();  // clear the sticky-free error before retrying
    if (absl::Status s = ReleaseCache(); !s.ok()) return s;
    e = cudaMalloc(&p, size);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    const std::string what = absl::StrCat(
        "DeviceAllocator: cudaMalloc(", size, " bytes) on device ", device_, " failed: ",
        cudaGetErrorName(e), " (in use ", stats_.in_use_bytes, " bytes, cached ",
        stats_.cached_bytes, ")");
    if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(what);
    return absl::InternalError(what);
  }
  used_[p] = size;
  ++stats_.device_allocs;
  stats_.in_use_bytes += size;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.in_use_bytes + stats_.cached_bytes);
  return p;
}

absl::Status DeviceAllocator::Free(void* ptr) {
  if (ptr == nullptr) return absl::OkStatus();
  auto it = used_.find(ptr);
  if (it == used_.end()) {
    return absl::InvalidArgumentError("DeviceAllocator::Free: pointer not from this allocator");
  }
  cached_.emplace(it->second, ptr);
  stats_.in_use_bytes -= it->second;
  stats_.cached_bytes += it->second;
  used_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<DeviceBuffer> DeviceAllocator::Buffer(size_t bytes) {
  absl::StatusOr<void*> p = Allocate(bytes);
  if (!p.ok()) return p.status();
  return DeviceBuffer(this, *p, bytes);
}

absl::Status DeviceAllocator::ReleaseCache() {
  absl::Status status;
  for (auto& [size, p] : cached_) {
    status.Update(TNMT_CUDA_CHECK(cudaFree(p)));
    stats_.cached_bytes -= size;
  }
  cached_.clear();
  return status;
}

absl::StatusOr<std::unique_ptr<Context>> Context::Create(int device, size_t workspace_bytes) {
  std::unique_ptr<Context> c(new Context());
  c->device_ = device;
  c->timeline_.set_enabled(GpuTimeline::EnabledByEnvironment());
  if (absl::Status s = TNMT_CUDA_CHECK(cudaSetDevice(device)); !s.ok()) return s;
  if (absl::Status s = TNMT_CUDA_CHECK(cudaGetDeviceProperties(&c->props_, device)); !s.ok()) {
    return s;
  }
  c->allocator_ = std::make_unique<DeviceAllocator>(device);
  if (absl::Status s = TNMT_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking));
      !s.ok()) {
    return s;
  }
  if (const cublasStatus_t st = cublasLtCreate(&c->lt_); st != CUBLAS_STATUS_SUCCESS) {
    c->lt_ = nullptr;
    return absl::InternalError(absl::StrCat("cublasLtCreate: ", cublasLtGetStatusName(st)));
  }
  absl::StatusOr<DeviceBuffer> ws = c->allocator_->Buffer(workspace_bytes);
  if (!ws.ok()) return ws.status();
  c->workspace_ = std::move(*ws);
  return c;
}

Context::~Context() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  plans_.reset();
  workspace_.Reset();
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  allocator_.reset();
}

absl::Status Context::Activate() const { return TNMT_CUDA_CHECK(cudaSetDevice(device_)); }

absl::Status Context::Synchronize() const {
  return TNMT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace tnmt::kernels::cuda
