// Comparing a presented bearer token with the expected one in time that does not depend on
// where they differ, so a token cannot be guessed byte by byte from response times. Used by
// every API that takes a token (TranslationService, TrainingService, the HTTP jobs API).
#pragma once

#include <algorithm>
#include <cstddef>

#include "absl/strings/string_view.h"

namespace tnmt::server {

inline bool SameSecret(absl::string_view presented, absl::string_view expected) {
  unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  const size_t n = std::max(presented.size(), expected.size());
  for (size_t i = 0; i < n; ++i) {
    diff |= static_cast<unsigned char>((i < presented.size() ? presented[i] : 0) ^
                                       (i < expected.size() ? expected[i] : 0));
  }
  return diff == 0;
}

}  // namespace tnmt::server
