// QuoteForError; see quote.h.
#include "engine/core/quote.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tnmt {

std::string QuoteForError(absl::string_view s, size_t max_chars) {
  std::string out = "\"";
  size_t shown = 0;
  bool cut = false;
  for (unsigned char c : s) {
    std::string piece;
    if (c == '"' || c == '\\') {
      piece = absl::StrCat("\\", std::string(1, static_cast<char>(c)));
    } else if (c >= 0x20 && c < 0x7f) {
      piece = std::string(1, static_cast<char>(c));
    } else {
      piece = absl::StrFormat("\\x%02x", c);
    }
    if (shown + piece.size() > max_chars) {
      cut = true;
      break;
    }
    out += piece;
    shown += piece.size();
  }
  if (cut) return absl::StrCat(out, "...\" (", s.size(), " bytes)");
  return out + "\"";
}

}  // namespace tnmt
