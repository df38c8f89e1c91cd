// StepScores; see step_model.h.
#include "engine/decode/step_model.h"

#include "absl/strings/str_cat.h"

namespace tnmt {

absl::Status StepScores::Reset(int n, int candidates, int vocab_size) {
  if (candidates < 1 || candidates >= vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("step candidates k=", candidates, " outside [1, ", vocab_size, ")"));
  }
  rows = n;
  k = candidates;
  lse.resize(n);
  eos_logit.resize(n);
  top_logit.resize(static_cast<size_t>(n) * candidates);
  top_id.resize(static_cast<size_t>(n) * candidates);
  return absl::OkStatus();
}

}  // namespace tnmt
