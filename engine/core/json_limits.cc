// See json_limits.h.
#include "engine/core/json_limits.h"

#include "absl/strings/str_cat.h"

namespace tnmt {

absl::Status CheckJsonLimits(absl::string_view text, absl::string_view what, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", text.size(), " bytes of JSON; the limit is ",
                                                   limits.max_bytes, " bytes"));
  }
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\0') {
      // nlohmann::json stops at a NUL byte and ignores the rest; valid JSON never holds one.
      return absl::InvalidArgumentError(absl::StrCat(what, " holds a NUL byte at byte ", i, ", which JSON never has"));
    }
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is, cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > limits.max_depth) {
          return absl::InvalidArgumentError(absl::StrCat(what, " nests JSON arrays and objects deeper than ",
                                                         limits.max_depth, " levels (the limit), at byte ", i));
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace tnmt
