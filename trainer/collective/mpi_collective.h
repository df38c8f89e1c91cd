// MPI collectives (Open MPI): one process per rank, launched by mpirun / an MPI operator.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "trainer/collective/collective.h"

namespace tnmt::train {

// Initializes MPI (once per process; finalized at exit) and returns a collective over
// MPI_COMM_WORLD. Errors if MPI cannot be initialized.
absl::StatusOr<std::unique_ptr<Collective>> MakeMpiCollective(int* argc, char*** argv);

// True when this process was started by an MPI launcher (OMPI_COMM_WORLD_SIZE or PMI_SIZE set).
bool LaunchedByMpi();

}  // namespace tnmt::train
