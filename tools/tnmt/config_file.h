// Reading the JSON --config files of `tnmt train` and `tnmt serve`. A file's top-level keys are
// setting names that may be spelled with '_' or '-' (max_steps, max-steps); the reader rewrites
// them to one spelling so that each command sees its own. Errors name the file, and for a
// syntax error the line and column (counted from 1, columns in bytes).
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace tnmt::cli {

// Parses `text` (`source` names it in errors) into a JSON object whose top-level keys have
// every '_' and '-' replaced by `separator`. Nested objects are kept as written. Errors: a
// syntax error ("SOURCE:LINE:COLUMN: invalid JSON: ..."), a value that is not an object, and
// two keys that differ only in spelling ("SOURCE: \"max_steps\" and \"max-steps\" both given").
// `written`, when given, maps each rewritten key to the key as the file spells it.
absl::StatusOr<nlohmann::json> ParseConfigJson(const std::string& text, const std::string& source,
                                               char separator,
                                               std::map<std::string, std::string>* written = nullptr);

// Reads the file at `path` and parses it as above (NotFound when it cannot be read).
absl::StatusOr<nlohmann::json> ReadConfigFile(const std::string& path, char separator,
                                              std::map<std::string, std::string>* written = nullptr);

}  // namespace tnmt::cli
