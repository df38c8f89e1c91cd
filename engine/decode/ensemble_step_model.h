// An ensemble of models as one StepModel: every member decodes the same rows in lockstep, and
// each step's distribution is the members' normalized geometric mean,
//   log p(v) = mean_m log p_m(v) - log sum_u exp(mean_m log p_m(u)),
// so beam search, scoring and every decoding option work on an ensemble unchanged. The
// members must share the vocabulary (the caller checks: CheckEnsembleMembers in
// engine/runtime/loaded_model.h); they may differ in size and architecture. Members need to
// return whole distributions (StepScores::want_logprobs), which the CPU engine does.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/decode/step_model.h"

namespace tnmt {

class EnsembleStepModel : public StepModel {
 public:
  // members: at least one; vocab_size and pad_id as the members' shared vocabulary has them.
  static absl::StatusOr<std::unique_ptr<EnsembleStepModel>> Create(
      std::vector<std::unique_ptr<StepModel>> members, int vocab_size, int pad_id, int eos_id);

  // Source ids are the first member's; the others' are mapped.
  absl::StatusOr<std::vector<int32_t>> AddSources(const int32_t* ids, const int32_t* lengths,
                                                  int batch, int src_max) override;
  absl::Status ReleaseSource(int32_t source) override;
  absl::Status Reorder(const std::vector<int32_t>& parents,
                       const std::vector<int32_t>& new_sources) override;
  int rows() const override { return members_[0]->rows(); }
  // Alignments, when asked for, are the first member's.
  absl::Status Step(const int32_t* ids, int k, StepScores* scores) override;

 private:
  EnsembleStepModel(std::vector<std::unique_ptr<StepModel>> members, int vocab_size, int pad_id,
                    int eos_id);
  std::vector<std::unique_ptr<StepModel>> members_;
  const int vocab_size_, pad_id_, eos_id_;
  // For each of the first member's live source ids, the other members' ids for that source.
  std::unordered_map<int32_t, std::vector<int32_t>> sources_;
  std::vector<StepScores> member_scores_;
  std::vector<float> mean_;  // [rows, vocab]
};

}  // namespace tnmt
