// The host side of the flat beam step (kernels/beam_step.h): the step's per-sentence and
// per-row arrays as host vectors, and where a step runs. A FlatBeamStepper runs the model's
// decoder step and then the selection; HostFlatBeamStepper does both over any StepModel with
// the selection on the host (the reference the CUDA stepper, engine/cuda/cuda_beam_stepper.h,
// is tested against), so the arrays below are exactly what a device step reads and writes.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/decode/step_model.h"
#include "kernels/beam_step.h"

namespace tnmt {

struct FlatBeamStep {
  // Constants of kernels::BeamStepArgs.
  int beam = 4;
  int k = 0;  // candidates per row asked of the model
  int eos_id = 2, pad_id = 1;
  int min_length = 0;
  bool want_lse = true;  // StepScores::want_lse for the model's step

  // Inputs per sentence [S] and per row [rows] (kernels::BeamStepArgs).
  std::vector<int32_t> row_begin, live, t, max_len, finished;
  std::vector<double> lp_t, lp_bound, best;
  std::vector<double> score;

  // Outputs: next_live, finished_out, best_out, best_row [S]; parent, token, next_score
  // [S, beam].
  std::vector<int32_t> next_live, parent, token, finished_out, best_row;
  std::vector<double> next_score, best_out;

  int sentences() const { return static_cast<int>(live.size()); }
  int rows() const { return static_cast<int>(score.size()); }
  // Sizes the outputs for sentences() and beam.
  void SizeOutputs();
  // The step's arguments over these vectors and the given per-row scores (all on the host).
  kernels::BeamStepArgs Args(const float* lse, const float* eos_logit, const float* top_logit,
                             const int32_t* top_id);
};

// The selection on the host: kernels::BeamStepSentence for every sentence of `a`.
void SelectOnHost(const kernels::BeamStepArgs& a);

// Where a flat beam decode's steps run.
class FlatBeamStepper {
 public:
  virtual ~FlatBeamStepper() = default;
  // One decoder step of `model` for its rows (ids: [model.rows()], step->k candidates per row,
  // rows as step's row_begin/live say) and the selection over `step`'s inputs; fills its
  // outputs (SizeOutputs done by the caller).
  virtual absl::Status Step(StepModel& model, const int32_t* ids, FlatBeamStep* step) = 0;
};

// StepModel::Step (scores to the host), then SelectOnHost. Any device's StepModel.
class HostFlatBeamStepper : public FlatBeamStepper {
 public:
  absl::Status Step(StepModel& model, const int32_t* ids, FlatBeamStep* step) override;

 private:
  StepScores scores_;
};

}  // namespace tnmt
