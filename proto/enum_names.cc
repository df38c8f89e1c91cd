// Short enum names; see enum_names.h.
#include "proto/enum_names.h"

#include <algorithm>
#include <cctype>

namespace tnmt::v1 {

namespace {

std::string Without(const std::string& name, const std::string& prefix) {
  return name.compare(0, prefix.size(), prefix) == 0 ? name.substr(prefix.size()) : name;
}

}  // namespace

std::string JobStateWord(JobState state) { return Without(JobState_Name(state), "JOB_STATE_"); }

bool ParseJobStateWord(const std::string& word, JobState* state) {
  std::string upper = word;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  if (upper.compare(0, 10, "JOB_STATE_") != 0) upper = "JOB_STATE_" + upper;
  return JobState_Parse(upper, state) && *state != JOB_STATE_UNSPECIFIED;
}

std::string ModelStateWord(ModelState state) {
  std::string word = Without(ModelState_Name(state), "MODEL_STATE_");
  std::transform(word.begin(), word.end(), word.begin(), [](unsigned char c) { return std::tolower(c); });
  return word;
}

std::string JobUpdateKindWord(JobUpdate::Kind kind) { return Without(JobUpdate::Kind_Name(kind), "KIND_"); }

}  // namespace tnmt::v1
