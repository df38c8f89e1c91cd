// Short names of the API's enum values for people: the CLI, the web pages and logs print
// "RUNNING" and "ready" where the proto says JOB_STATE_RUNNING and MODEL_STATE_READY.
#pragma once

#include <string>

#include "proto/tnmt/v1/training.pb.h"
#include "proto/tnmt/v1/translation.pb.h"

namespace tnmt::v1 {

// "QUEUED", "RUNNING", ... (the value's name without JOB_STATE_); "UNSPECIFIED" for 0.
std::string JobStateWord(JobState state);
// "RUNNING", "running" or "JOB_STATE_RUNNING" -> the value; false for anything else (and for
// UNSPECIFIED).
bool ParseJobStateWord(const std::string& word, JobState* state);
// "loading", "ready", "failed" ("unspecified" for 0).
std::string ModelStateWord(ModelState state);
// "SNAPSHOT", "STATE", ... (without KIND_).
std::string JobUpdateKindWord(JobUpdate::Kind kind);

}  // namespace tnmt::v1
