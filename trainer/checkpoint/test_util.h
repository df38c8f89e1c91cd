// Test helpers: random checkpoints of the golden tiny model (tests/golden/data/tiny), fresh
// temporary directories and bit-exact tensor comparison.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "trainer/checkpoint/checkpoint.h"

namespace tnmt::testing {

// Relative to the test's working directory (the runfiles root).
inline constexpr char kTinyModelDir[] = "tests/golden/data/tiny";

// The tiny model's config, parameter names and shapes with values drawn from `seed` (a few
// special values included: -0, a subnormal), moments likewise (v > 0), state.step = `step`
// and every other state field set to something that would catch a lossy round trip.
absl::StatusOr<Checkpoint> RandomTinyCheckpoint(int64_t step, uint32_t seed);

// An empty directory under ::testing::TempDir() named after the running test and `suffix`.
std::string FreshTestDir(const std::string& suffix = "");

// Same shape and identical bytes.
bool BitEqual(const Tensor& a, const Tensor& b);

// Overwrites `path` with `contents`.
void WriteFileForTest(const std::string& path, const std::string& contents);
std::string ReadFileForTest(const std::string& path);

}  // namespace tnmt::testing
