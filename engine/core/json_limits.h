// Limits on JSON text before it is parsed. nlohmann::json parses any depth, but printing,
// copying or converting a parsed value recurses once per level, so a small body nested tens of
// thousands of levels deep (`[[[[...]]]]`, 2 bytes a level) overflows the stack of whatever
// touches it next. Every JSON that comes from outside the process (API bodies, job specs,
// config files, model directories) is checked here first: one pass over the bytes that counts
// nesting outside strings and the total size, and an error that names the limit.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tnmt {

struct JsonLimits {
  // Deepest nesting of arrays and objects; a scalar at top level is depth 0, `[1]` depth 1.
  int max_depth = 64;
  // Largest text in bytes.
  size_t max_bytes = 64u << 20;
};

// OK when `text` is within `limits`; otherwise INVALID_ARGUMENT "<what> is 104857 bytes of JSON;
// the limit is ..." or "<what> nests JSON deeper than 64 levels (the limit)". `what` names the
// input for the message ("the request body", "config.json"). Malformed JSON is not an error
// here (the parser reports it), except a NUL byte, which the parser would take for the end of
// the text; brackets inside strings do not count.
absl::Status CheckJsonLimits(absl::string_view text, absl::string_view what, const JsonLimits& limits = {});

}  // namespace tnmt
