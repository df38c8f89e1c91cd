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

class Nccl : public Collective {
 public:
  Nccl(ncclComm_t comm, int rank, int size, cudaStream_t stream)
      : comm_(comm), rank_(rank), size_(size), stream_(stream) {}
  ~Nccl() override { ncclCommDestroy(comm_); }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  absl::Status AllReduceSum(float* data, int64_t count) override {
    return Finish(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce");
  }
  absl::Status AllReduceSum(double* data, int64_t count) override {
    return Finish(ncclAllReduce(data, data, count, ncclFloat64, ncclSum, comm_, stream_), "ncclAllReduce");
  }
  absl::Status Broadcast(float* data, int64_t count, int root) override {
    if (root < 0 || root >= size_) return absl::InvalidArgumentError("broadcast root out of range");
    return Finish(ncclBroadcast(data, data, count, ncclFloat32, root, comm_, stream_), "ncclBroadcast");
  }

 private:
  absl::Status Finish(ncclResult_t r, const char* what) {
    absl::Status s = NcclStatus(r, what);
    if (!s.ok()) return s;
    return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  ncclComm_t comm_;
  int rank_, size_;
  cudaStream_t stream_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> MakeNcclCollective(Collective* bootstrap, int device,
                                                               cudaStream_t stream) {
  absl::Status s = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  if (!s.ok()) return s;
  // The 128-byte id is carried bit for bit as floats over the bootstrap broadcast.
  ncclUniqueId id;
  constexpr int kWords = (sizeof(ncclUniqueId) + sizeof(float) - 1) / sizeof(float);
  float words[kWords] = {};
  if (bootstrap->rank() == 0) {
    s = NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (!s.ok()) return s;
    std::memcpy(words, &id, sizeof(id));
  }
  s = bootstrap->Broadcast(words, kWords, 0);
  if (!s.ok()) return s;
  std::memcpy(&id, words, sizeof(id));
  ncclComm_t comm;
  s = NcclStatus(ncclCommInitRank(&comm, bootstrap->world_size(), id, bootstrap->rank()), "ncclCommInitRank");
  if (!s.ok()) return s;
  return std::unique_ptr<Collective>(new Nccl(comm, bootstrap->rank(), bootstrap->world_size(), stream));
}

}  // namespace tnmt::train
