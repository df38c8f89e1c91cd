// Quoting user-supplied strings inside error messages. An error that echoes its input whole can
// be larger than the input limits of whatever carries it (a 16,000-character model name in a
// gRPC status message overflows the client's metadata limit, which then reports
// RESOURCE_EXHAUSTED instead of the real error), and raw control bytes garble logs and terminals.
// QuoteForError keeps the start of the string, escapes what is not printable ASCII, and says
// how long the whole was when it cuts.
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace tnmt {

// "\"name\"" for short printable strings; longer ones keep their first `max_chars` characters
// (after escaping) and end with `..." (16000 bytes)`. Non-printable bytes and `"`/`\` are
// escaped C-style, so the result is always printable ASCII.
std::string QuoteForError(absl::string_view s, size_t max_chars = 64);

}  // namespace tnmt
