// `tnmt train` and `tnmt average`.
#pragma once

namespace tnmt::cli {

int TrainCommand(int argc, char** argv);
int AverageCommand(int argc, char** argv);

}  // namespace tnmt::cli
