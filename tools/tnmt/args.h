// A small command-line parser for tnmt's subcommands and tools: each declares its flags
// (name, help, default) and gets `--help` text and precise errors for unknown flags and bad
// values. Accepts `--flag value` and `--flag=value`; booleans also as bare `--flag` and
// `--no-flag` (listed as `--[no-]flag`). Optional positional arguments (e.g. a job id) may
// stand anywhere among the flags.
//
// --help states exactly one default per flag: `shown_default` when given (for a flag whose
// stored default is only a "not given" marker, e.g. "the model's config, usually 4"), else the
// help text's own "(default ...)" when it has one, else the stored value ("none" for "", "on" /
// "off" for booleans).
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

  void AddString(const std::string& name, std::string def, std::string help, std::string shown_default = "");
  void AddInt(const std::string& name, int def, std::string help, std::string shown_default = "");
  void AddFloat(const std::string& name, float def, std::string help, std::string shown_default = "");
  void AddBool(const std::string& name, bool def, std::string help, std::string shown_default = "");
  // Replaces what --help states as the default of an added flag.
  void SetShownDefault(const std::string& name, std::string shown_default);

  // Accepts up to `max` arguments that are not flags; `what` names them in help and errors
  // (e.g. "ID"). Without this call any such argument is an error.
  void AllowPositionals(std::string what, int max);
  const std::vector<std::string>& positionals() const { return positionals_; }

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
    std::string shown_default;
    bool given = false;
  };
  void Add(const std::string& name, Kind kind, std::string value, std::string help, std::string shown_default);
  absl::Status Set(const std::string& name, const std::string& value);
  std::string DefaultText(const Flag& f) const;

  std::string program_, summary_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;
  std::string positional_what_;
  int max_positionals_ = 0;
  std::vector<std::string> positionals_;
  bool help_ = false;
};

}  // namespace tnmt::cli
