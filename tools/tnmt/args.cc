// Command-line parsing; see args.h.
#include "tools/tnmt/args.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tnmt::cli {

void Args::Add(const std::string& name, Kind kind, std::string value, std::string help, std::string shown_default) {
  if (!flags_.count(name)) order_.push_back(name);
  flags_[name] = {kind, std::move(value), std::move(help), std::move(shown_default)};
}
void Args::AddString(const std::string& name, std::string def, std::string help, std::string shown_default) {
  Add(name, Kind::kString, std::move(def), std::move(help), std::move(shown_default));
}
void Args::AddInt(const std::string& name, int def, std::string help, std::string shown_default) {
  Add(name, Kind::kInt, std::to_string(def), std::move(help), std::move(shown_default));
}
void Args::AddFloat(const std::string& name, float def, std::string help, std::string shown_default) {
  Add(name, Kind::kFloat, absl::StrCat(def), std::move(help), std::move(shown_default));
}
void Args::AddBool(const std::string& name, bool def, std::string help, std::string shown_default) {
  Add(name, Kind::kBool, def ? "true" : "false", std::move(help), std::move(shown_default));
}
void Args::SetShownDefault(const std::string& name, std::string shown_default) {
  flags_.at(name).shown_default = std::move(shown_default);
}

void Args::AllowPositionals(std::string what, int max) {
  positional_what_ = std::move(what);
  max_positionals_ = max;
}

absl::Status Args::Set(const std::string& name, const std::string& value) {
  Flag& f = flags_.at(name);
  int i;
  float x;
  switch (f.kind) {
    case Kind::kInt:
      if (!absl::SimpleAtoi(value, &i)) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " expects an integer, got \"", value, "\""));
      }
      break;
    case Kind::kFloat:
      if (!absl::SimpleAtof(value, &x)) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " expects a number, got \"", value, "\""));
      }
      break;
    case Kind::kBool:
      if (value != "true" && value != "false") {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " expects true or false, got \"", value, "\""));
      }
      break;
    case Kind::kString:
      break;
  }
  f.value = value;
  f.given = true;
  return absl::OkStatus();
}

absl::Status Args::Parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) {
      if (static_cast<int>(positionals_.size()) < max_positionals_) {
        positionals_.push_back(a);
        continue;
      }
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", a, "\" (see ",
                                                     program_, " --help)"));
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    bool negated = false;
    for (const std::string prefix : {"no-", "no"}) {
      const std::string base = name.substr(std::min(name.size(), prefix.size()));
      if (!negated && !flags_.count(name) && name.rfind(prefix, 0) == 0 && flags_.count(base) &&
          flags_[base].kind == Kind::kBool) {
        name = base;
        negated = true;
      }
    }
    auto it = flags_.find(name);
    if (it == flags_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see ", program_, " --help)"));
    }
    if (!has_value) {
      if (it->second.kind == Kind::kBool) {
        value = negated ? "false" : "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
    }
    absl::Status s = Set(name, value);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

int Args::GetInt(const std::string& name) const {
  int v = 0;
  (void)absl::SimpleAtoi(flags_.at(name).value, &v);
  return v;
}

float Args::GetFloat(const std::string& name) const {
  float v = 0;
  (void)absl::SimpleAtof(flags_.at(name).value, &v);
  return v;
}

std::string Args::DefaultText(const Flag& f) const {
  if (!f.shown_default.empty()) return f.shown_default;
  if (f.help.find("(default") != std::string::npos) return "";  // the help states it
  if (f.kind == Kind::kBool) return f.value == "true" ? "on" : "off";
  return f.value.empty() ? "none" : f.value;
}

std::string Args::Help() const {
  std::string out = absl::StrCat("usage: ", program_,
                                 positional_what_.empty() ? "" : absl::StrCat(" ", positional_what_),
                                 " [flags]\n\n", summary_, "\n\nflags:\n");
  auto flag_text = [this](const std::string& name) {
    return absl::StrCat("--", flags_.at(name).kind == Kind::kBool ? "[no-]" : "", name);
  };
  size_t width = 0;  // flag names in one column (a longer name pushes its own help along)
  for (const std::string& name : order_) width = std::max(width, std::min<size_t>(flag_text(name).size(), 24));
  for (const std::string& name : order_) {
    const Flag& f = flags_.at(name);
    const std::string flag = flag_text(name);
    const std::string def = DefaultText(f);
    absl::StrAppend(&out, "  ", flag, std::string(flag.size() < width ? width - flag.size() : 0, ' '), "  ", f.help,
                    def.empty() ? "" : absl::StrCat(" (default: ", def, ")"), "\n");
  }
  return out;
}

}  // namespace tnmt::cli
