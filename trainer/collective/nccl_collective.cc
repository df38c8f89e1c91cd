// NCCL collectives; see nccl_collective.h.
#include "trainer/collective/nccl_collective.h"

#include <nccl.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace tnmt::train {

namespace {

absl::Status NcclStatus(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " failed: ", ncclGetErrorString(r)));
}

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " failed: ", cudaGetErrorString(e)));
}

class Nccl : public NcclCollective {
 public:
  Nccl(ncclComm_t comm, int rank, int size, int device, cudaStream_t stream)
      : comm_(comm), rank_(rank), size_(size), device_(device), stream_(stream) {}
  ~Nccl() override { ncclCommDestroy(comm_); }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  int device() const override { return device_; }
  absl::Status AllReduceSum(float* data, int64_t count) override {
    return Finish(AllReduceSumAsync(data, count, stream_));
  }
  absl::Status AllReduceSum(double* data, int64_t count) override {
    return Finish(AllReduceSumAsync(data, count, stream_));
  }
  absl::Status Broadcast(float* data, int64_t count, int root) override {
    if (root < 0 || root >= size_) return absl::InvalidArgumentError("broadcast root out of range");
    if (count < 0) return absl::InvalidArgumentError("broadcast: negative count");
    return Finish(NcclStatus(ncclBroadcast(data, data, static_cast<size_t>(count), ncclFloat32, root, comm_, stream_),
                             "ncclBroadcast"));
  }
  absl::Status AllReduceSumAsync(float* data, int64_t count, cudaStream_t stream) override {
    return Reduce(data, count, ncclFloat32, stream);
  }
  absl::Status AllReduceSumAsync(double* data, int64_t count, cudaStream_t stream) override {
    return Reduce(data, count, ncclFloat64, stream);
  }

 private:
  absl::Status Reduce(void* data, int64_t count, ncclDataType_t type, cudaStream_t stream) {
    if (count < 0) return absl::InvalidArgumentError("all-reduce: negative count");
    if (count == 0) return absl::OkStatus();
    return NcclStatus(ncclAllReduce(data, data, static_cast<size_t>(count), type, ncclSum, comm_, stream),
                      "ncclAllReduce");
  }
  absl::Status Finish(absl::Status queued) {
    if (!queued.ok()) return queued;
    return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  ncclComm_t comm_;
  int rank_, size_, device_;
  cudaStream_t stream_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCollective>> MakeNcclCollective(Collective* bootstrap, int device,
                                                                   cudaStream_t stream) {
  absl::Status s = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  // The 128-byte id travels one byte per float (small integers: exact through any bootstrap,
  // including ones that print or sum their floats). Rank 0 always takes part in the broadcast:
  // if it cannot make an id it sends -1, so the other ranks fail too instead of waiting.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  float bytes[sizeof(ncclUniqueId)] = {};
  if (bootstrap->rank() == 0) {
    if (s.ok()) s = NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const unsigned char* raw = reinterpret_cast<const unsigned char*>(&id);
    for (size_t i = 0; i < sizeof(id); ++i) bytes[i] = static_cast<float>(raw[i]);
    if (!s.ok()) bytes[0] = -1.0f;
  } else if (!s.ok()) {
    return s;
  }
  absl::Status sent = bootstrap->Broadcast(bytes, static_cast<int64_t>(sizeof(id)), 0);
  if (!s.ok()) return s;
  if (!sent.ok()) return sent;
  if (bytes[0] == -1.0f) {
    return absl::FailedPreconditionError("MakeNcclCollective: rank 0 could not set up NCCL (see its log)");
  }
  unsigned char* raw = reinterpret_cast<unsigned char*>(&id);
  for (size_t i = 0; i < sizeof(id); ++i) {
    if (!(bytes[i] >= 0.0f && bytes[i] <= 255.0f)) {
      return absl::InternalError("MakeNcclCollective: the bootstrap broadcast garbled the NCCL id");
    }
    raw[i] = static_cast<unsigned char>(bytes[i]);
  }
  ncclComm_t comm;
  s = NcclStatus(ncclCommInitRank(&comm, bootstrap->world_size(), id, bootstrap->rank()), "ncclCommInitRank");
  if (!s.ok()) return s;
  return std::unique_ptr<NcclCollective>(new Nccl(comm, bootstrap->rank(), bootstrap->world_size(), device, stream));
}

}  // namespace tnmt::train
