// MPI collectives; see mpi_collective.h. Counts above INT_MAX are sent in chunks.
#include "trainer/collective/mpi_collective.h"

#include <mpi.h>

#include <climits>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace tnmt::train {

namespace {

absl::Status Check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return absl::InternalError(absl::StrCat(what, " failed: ", std::string(msg, len)));
}

class Mpi : public Collective {
 public:
  Mpi() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  absl::Status AllReduceSum(float* data, int64_t count) override { return Reduce(data, count, MPI_FLOAT); }
  absl::Status AllReduceSum(double* data, int64_t count) override { return Reduce(data, count, MPI_DOUBLE); }
  absl::Status Broadcast(float* data, int64_t count, int root) override {
    for (int64_t off = 0; off < count; off += INT_MAX) {
      const int n = static_cast<int>(std::min<int64_t>(INT_MAX, count - off));
      absl::Status s = Check(MPI_Bcast(data + off, n, MPI_FLOAT, root, MPI_COMM_WORLD), "MPI_Bcast");
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  template <typename T>
  absl::Status Reduce(T* data, int64_t count, MPI_Datatype type) {
    for (int64_t off = 0; off < count; off += INT_MAX) {
      const int n = static_cast<int>(std::min<int64_t>(INT_MAX, count - off));
      absl::Status s = Check(MPI_Allreduce(MPI_IN_PLACE, data + off, n, type, MPI_SUM, MPI_COMM_WORLD),
                             "MPI_Allreduce");
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  int rank_ = 0, size_ = 1;
};

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

bool LaunchedByMpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

absl::StatusOr<std::unique_ptr<Collective>> MakeMpiCollective(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    absl::Status s = Check(MPI_Init(argc, argv), "MPI_Init");
    if (!s.ok()) return s;
    std::atexit(FinalizeAtExit);
  }
  return std::unique_ptr<Collective>(new Mpi());
}

}  // namespace tnmt::train
