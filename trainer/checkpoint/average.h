// Checkpoint averaging (`tnmt average`): the element-wise mean of the parameters of several
// checkpoints (or model directories) of one architecture, written as a model directory.
// Invariants: every input has the same config.json (after parsing), the same tensor names and
// shapes and the same vocabulary files (spm.model, or the source.spm, target.spm and vocab.json
// that config.json names for separate vocabularies) byte for byte, or nothing is written and the error names the input;
// the mean is accumulated in double, in the order the inputs are given, then rounded once to
// float32 (and then to the stored dtype); the output directory appears atomically and complete.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/tensor.h"

namespace tnmt {

struct AverageOptions {
  // How model.safetensors stores the averaged weights: kFloat32, kFloat16 or kBFloat16.
  DType stored_dtype = DType::kFloat32;
  // Replace an existing non-empty output directory (otherwise AlreadyExists).
  bool overwrite = false;
  // Non-empty: the output's config.json names these languages (replacing the inputs').
  std::string source_language;
  std::string target_language;
};

// Writes `out_model_dir` (config.json, model.safetensors and the vocabulary files) from the
// mean of `dirs`.
// Memory: one double per parameter plus one input at a time.
absl::Status AverageCheckpoints(const std::vector<std::string>& dirs, const std::string& out_model_dir,
                                const AverageOptions& options = {});

// Averages the `last` newest checkpoints under `root` (ListCheckpoints). Errors: a missing
// `root` ("no such directory"), none or fewer than `last` checkpoints under it, `last` < 1.
absl::Status AverageLastCheckpoints(const std::string& root, int last,
                                    const std::string& out_model_dir,
                                    const AverageOptions& options = {});

}  // namespace tnmt
