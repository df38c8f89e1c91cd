// Checkpoint timing; see schedule.h.
#include "trainer/checkpoint/schedule.h"

namespace tnmt {

bool CheckpointTimer::Due(int64_t step, double elapsed_seconds) const {
  if (step <= last_step_) return false;
  if (schedule_.every_steps > 0 && step % schedule_.every_steps == 0) return true;
  return schedule_.every_minutes > 0 &&
         elapsed_seconds - last_seconds_ >= schedule_.every_minutes * 60.0;
}

}  // namespace tnmt
