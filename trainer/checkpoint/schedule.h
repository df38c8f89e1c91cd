// When to write a checkpoint: every N optimizer steps and/or every M minutes of training time.
// Time is the trainer's own elapsed training time (TrainerState::elapsed_seconds), so the
// schedule continues across a resume exactly as if the run had never stopped, and tests
// need no clock. Step-based saves fall on multiples of N (as fairseq's
// --save-interval-updates), so they land on the same steps after a resume.
#pragma once

#include <cstdint>

namespace tnmt {

struct CheckpointSchedule {
  int64_t every_steps = 0;    // save when step % every_steps == 0; 0: never by steps
  double every_minutes = 0;   // save when this much training time passed since the last save;
                              // 0: never by time
  int keep_last = 5;          // passed to SaveCheckpoint; <= 0 keeps all
};

// Tracks the last save and answers whether the current step is due.
class CheckpointTimer {
 public:
  // `last_step` / `last_seconds`: the state of the checkpoint resumed from (0, 0 when fresh).
  CheckpointTimer(const CheckpointSchedule& schedule, int64_t last_step, double last_seconds)
      : schedule_(schedule), last_step_(last_step), last_seconds_(last_seconds) {}

  // True when `step` (done at training time `elapsed_seconds`) should be saved; never twice
  // for one step, never for the step resumed from.
  bool Due(int64_t step, double elapsed_seconds) const;
  // Records that `step` was saved at `elapsed_seconds`.
  void Saved(int64_t step, double elapsed_seconds) {
    last_step_ = step;
    last_seconds_ = elapsed_seconds;
  }

 private:
  CheckpointSchedule schedule_;
  int64_t last_step_;
  double last_seconds_;
};

}  // namespace tnmt
