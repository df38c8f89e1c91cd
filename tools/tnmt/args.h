// A small command-line parser for tnmt's subcommands and tools: each declares its flags
// (name, help, default) and gets `--help` text and precise errors for unknown flags and bad
// values. Accepts `--flag value` and `--flag=value`; booleans also as bare `--flag` and
// `--no-flag`.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tnmt::cli {

class Args {
 public:
  // program: what the user typed, e.g. "tnmt translate" (used in help and errors).
  Args(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}

  void AddString(const std::string& name, std::string def, std::string help);
  void AddInt(const std::string& name, int def, std::string help);
  void AddFloat(const std::string& name, float def, std::string help);
  void AddBool(const std::string& name, bool def, std::string help);

  // Parses argv[first..argc): an error names the bad flag or value; --help sets help_requested().
  absl::Status Parse(int argc, char** argv, int first);
  bool help_requested() const { return help_; }
  bool given(const std::string& name) const { return flags_.at(name).given; }
  std::string Help() const;

  std::string GetString(const std::string& name) const { return flags_.at(name).value; }
  int GetInt(const std::string& name) const;
  float GetFloat(const std::string& name) const;
  bool GetBool(const std::string& name) const { return flags_.at(name).value == "true"; }

 private:
  enum class Kind { kString, kInt, kFloat, kBool };
  struct Flag {
    Kind kind;
    std::string value;
    std::string help;
    bool given = false;
  };
  absl::Status Set(const std::string& name, const std::string& value);

  std::string program_, summary_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;
  bool help_ = false;
};

}  // namespace tnmt::cli
