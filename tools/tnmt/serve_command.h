// `tnmt serve`: the batching gRPC translation server (see server/server.h).
#pragma once

namespace tnmt::cli {

int ServeCommand(int argc, char** argv);

}  // namespace tnmt::cli
