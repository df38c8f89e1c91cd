// `tnmt score`: the log-probability a model gives each (source, target) pair of two
// line-aligned files (forced decoding, engine/decode/score.h).
#pragma once

namespace tnmt::cli {

int ScoreCommand(int argc, char** argv);

}  // namespace tnmt::cli
