// JSON config files; see config_file.h.
#include "tools/tnmt/config_file.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/core/json_limits.h"

namespace tnmt::cli {

namespace {

using nlohmann::json;

// The description of a nlohmann parse error without its "[json.exception.parse_error.101]"
// tag and its own position, which is restated as LINE:COLUMN.
std::string Describe(const json::parse_error& e) {
  std::string what = e.what();
  const size_t tag = what.find("] ");
  if (tag != std::string::npos) what = what.substr(tag + 2);
  const size_t column = what.find("column ");
  if (what.rfind("parse error", 0) == 0 && column != std::string::npos) {
    const size_t colon = what.find(": ", column);
    if (colon != std::string::npos) what = what.substr(colon + 2);
  }
  return what;
}

}  // namespace

absl::StatusOr<json> ParseConfigJson(const std::string& text, const std::string& source, char separator,
                                     std::map<std::string, std::string>* written_out) {
  if (absl::Status s = CheckJsonLimits(text, source); !s.ok()) return s;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    // e.byte: 1-based offset of the byte where parsing failed (past the end for a truncated file).
    const size_t end = std::min(text.size(), e.byte > 0 ? e.byte - 1 : 0);
    size_t line = 1, column = 1;
    for (size_t i = 0; i < end; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(source, ":", line, ":", column, ": invalid JSON: ", Describe(e)));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": must be a JSON object ({\"key\": value, ...}), got ",
                                                   j.type_name()));
  }
  json out = json::object();
  std::map<std::string, std::string> written;  // normalized key -> the key as written
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string key = it.key();
    for (char& c : key) {
      if (c == '_' || c == '-') c = separator;
    }
    auto [seen, inserted] = written.emplace(key, it.key());
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": \"", seen->second, "\" and \"", it.key(), "\" both given (the same setting)"));
    }
    out[key] = it.value();
  }
  if (written_out != nullptr) *written_out = std::move(written);
  return out;
}

absl::StatusOr<json> ReadConfigFile(const std::string& path, char separator,
                                    std::map<std::string, std::string>* written) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the --config file"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseConfigJson(ss.str(), path, separator, written);
}

}  // namespace tnmt::cli
