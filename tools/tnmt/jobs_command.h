// `tnmt jobs submit|get|list|cancel|watch`: the training-job client (tnmt.v1.TrainingService),
// with a live one-line progress view when stdout is a terminal. `tnmt health`: one gRPC
// health check, exit 0 when SERVING (for container and script health checks).
#pragma once

namespace tnmt::cli {

int JobsCommand(int argc, char** argv);
int HealthCommand(int argc, char** argv);

}  // namespace tnmt::cli
