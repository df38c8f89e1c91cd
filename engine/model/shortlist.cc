// Shortlist tables and their file format; see shortlist.h.
#include "engine/model/shortlist.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tnmt {

namespace {

void SortDistinct(std::vector<int32_t>* ids) {
  std::sort(ids->begin(), ids->end());
  ids->erase(std::unique(ids->begin(), ids->end()), ids->end());
}

// Reads a file's lines, numbered from 1, for one error context.
class LineReader {
 public:
  LineReader(std::string path, std::istream& in) : path_(std::move(path)), in_(in) {}

  // The next line that is not a comment; false at the end of the file.
  bool Next(std::string* line) {
    while (std::getline(in_, *line)) {
      ++number_;
      if (line->empty() || (*line)[0] != '#') return true;
    }
    return false;
  }
  absl::Status Error(absl::string_view problem) const {
    return absl::InvalidArgumentError(absl::StrCat("shortlist ", path_, " line ", number_, ": ", problem));
  }
  absl::Status FileError(absl::string_view problem) const {
    return absl::InvalidArgumentError(absl::StrCat("shortlist ", path_, ": ", problem));
  }

 private:
  std::string path_;
  std::istream& in_;
  int64_t number_ = 0;
};

// The fields of a line, split at spaces and tabs.
std::vector<std::string> Fields(const std::string& line) {
  return absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
}

// A decimal id in [0, vocab) (vocab 0: any non-negative int).
absl::StatusOr<int32_t> ParseId(const LineReader& r, const std::string& text, int vocab, absl::string_view what) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v)) {
    return r.Error(absl::StrCat(what, " \"", text.substr(0, 32), "\" is not a number"));
  }
  if (v < 0 || (vocab > 0 && v >= vocab) || v > INT32_MAX) {
    return r.Error(absl::StrCat(what, " ", v, " is outside [0, ", vocab, ") (the vocabulary)"));
  }
  return static_cast<int32_t>(v);
}

// "KEYWORD N ID..." from fields[first]: the N ids, checked.
absl::StatusOr<std::vector<int32_t>> ParseList(const LineReader& r, const std::vector<std::string>& f, size_t first,
                                               int vocab) {
  if (f.size() <= first) return r.Error(absl::StrCat("\"", f[0], "\" without its count of ids"));
  int64_t n = 0;
  if (!absl::SimpleAtoi(f[first], &n) || n < 0) {
    return r.Error(absl::StrCat("count \"", f[first].substr(0, 32), "\" is not a non-negative number"));
  }
  const size_t have = f.size() - first - 1;
  if (static_cast<int64_t>(have) != n) {
    return r.Error(absl::StrCat("\"", f[0], "\" declares ", n, " ids but the line has ", have,
                                have < static_cast<size_t>(n) ? " (truncated?)" : ""));
  }
  std::vector<int32_t> ids;
  ids.reserve(have);
  for (size_t i = first + 1; i < f.size(); ++i) {
    absl::StatusOr<int32_t> id = ParseId(r, f[i], vocab, "target id");
    if (!id.ok()) return id.status();
    ids.push_back(*id);
  }
  return ids;
}

}  // namespace

Shortlist Shortlist::Empty(int vocab_size) {
  Shortlist s;
  s.vocab_size = vocab_size;
  s.offsets.assign(static_cast<size_t>(vocab_size) + 1, 0);
  return s;
}

absl::Status Shortlist::SetTargets(int32_t source, std::vector<int32_t> ids) {
  if (source < 0 || source >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("source id ", source, " is outside [0, ", vocab_size, ")"));
  }
  if (source <= last_source) {
    return absl::InvalidArgumentError(absl::StrCat("source id ", source, " set twice or out of order"));
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("target id ", id, " is outside [0, ", vocab_size, ")"));
    }
  }
  SortDistinct(&ids);
  // The sources skipped since last_source have no targets.
  for (int32_t s = last_source + 1; s <= source; ++s) offsets[s] = static_cast<int32_t>(targets.size());
  offsets[source + 1] = static_cast<int32_t>(targets.size() + ids.size());
  last_source = source;
  targets.insert(targets.end(), ids.begin(), ids.end());
  return absl::OkStatus();
}

std::vector<int32_t> Shortlist::Candidates(absl::Span<const int32_t> sources, int32_t eos_id, int32_t unk_id,
                                           int32_t pad_id, std::vector<uint8_t>* mark) const {
  std::vector<int32_t> out;
  auto add = [&](int32_t id) {
    if (id < 0 || id >= vocab_size || id == pad_id || (*mark)[id]) return;
    (*mark)[id] = 1;
    out.push_back(id);
  };
  mark->resize(vocab_size, 0);
  add(eos_id);
  add(unk_id);
  for (int32_t id : frequent) add(id);
  for (int32_t s : sources) {
    if (s < 0 || s >= vocab_size) continue;
    for (int32_t id : TargetsOf(s)) add(id);
  }
  for (int32_t id : out) (*mark)[id] = 0;
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<Shortlist> ReadShortlist(const std::string& path, int expected_vocab_size) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("shortlist ", path, ": cannot open the file"));
  LineReader r(path, in);
  std::string line;
  if (!r.Next(&line)) return r.FileError("empty file (not a tnmt shortlist)");
  std::vector<std::string> f = Fields(line);
  if (f.size() != 2 || f[0] != "tnmt-shortlist") {
    return r.Error("not a tnmt shortlist file (the first line must be \"tnmt-shortlist 1\")");
  }
  if (f[1] != absl::StrCat(kShortlistFormatVersion)) {
    return r.Error(absl::StrCat("format version \"", f[1].substr(0, 32), "\" is not supported (this tnmt reads ",
                                kShortlistFormatVersion, ")"));
  }
  if (!r.Next(&line)) return r.FileError("truncated after the first line (no vocab_size)");
  f = Fields(line);
  int64_t vocab = 0;
  if (f.size() != 2 || f[0] != "vocab_size" || !absl::SimpleAtoi(f[1], &vocab) || vocab < 1 || vocab > INT32_MAX - 1) {
    return r.Error("expected \"vocab_size V\" with V >= 1");
  }
  if (expected_vocab_size > 0 && vocab != expected_vocab_size) {
    return r.Error(absl::StrCat("built for a vocabulary of ", vocab, " pieces, but the model has ",
                                expected_vocab_size));
  }
  Shortlist s = Shortlist::Empty(static_cast<int>(vocab));
  bool have_frequent = false, ended = false;
  int32_t last_source = -1;
  while (r.Next(&line)) {
    if (ended) return r.Error("text after \"end\"");
    f = Fields(line);
    if (f.empty()) return r.Error("empty line");
    if (f[0] == "end" && f.size() == 1) {
      ended = true;
    } else if (f[0] == "frequent") {
      if (have_frequent) return r.Error("a second \"frequent\" line");
      if (last_source >= 0) return r.Error("\"frequent\" after a \"source\" line");
      absl::StatusOr<std::vector<int32_t>> ids = ParseList(r, f, 1, s.vocab_size);
      if (!ids.ok()) return ids.status();
      s.frequent = *std::move(ids);
      SortDistinct(&s.frequent);
      have_frequent = true;
    } else if (f[0] == "source") {
      if (f.size() < 2) return r.Error("\"source\" without its id");
      absl::StatusOr<int32_t> src = ParseId(r, f[1], s.vocab_size, "source id");
      if (!src.ok()) return src.status();
      if (*src <= last_source) {
        return r.Error(absl::StrCat("source id ", *src, " after source id ", last_source,
                                    " (each source once, in increasing order)"));
      }
      absl::StatusOr<std::vector<int32_t>> ids = ParseList(r, f, 2, s.vocab_size);
      if (!ids.ok()) return ids.status();
      if (absl::Status st = s.SetTargets(*src, *std::move(ids)); !st.ok()) return r.Error(st.message());
      last_source = *src;
    } else {
      return r.Error(absl::StrCat("unknown line \"", line.substr(0, 32),
                                  "\" (expected \"frequent\", \"source\" or \"end\")"));
    }
  }
  if (in.bad()) return r.FileError("read error");
  if (!ended) return r.FileError("truncated (no \"end\" line)");
  return s;
}

absl::Status WriteShortlist(const std::string& path, const Shortlist& s, const std::vector<std::string>& comment) {
  std::ostringstream out;
  out << "tnmt-shortlist " << kShortlistFormatVersion << "\n";
  for (const std::string& c : comment) out << "# " << c << "\n";
  out << "vocab_size " << s.vocab_size << "\n";
  out << "frequent " << s.frequent.size();
  for (int32_t id : s.frequent) out << ' ' << id;
  out << "\n";
  for (int32_t src = 0; src < s.vocab_size; ++src) {
    absl::Span<const int32_t> t = s.TargetsOf(src);
    if (t.empty()) continue;
    out << "source " << src << ' ' << t.size();
    for (int32_t id : t) out << ' ' << id;
    out << "\n";
  }
  out << "end\n";
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return absl::PermissionDeniedError(absl::StrCat("shortlist ", path, ": cannot create the file"));
  const std::string text = out.str();
  file.write(text.data(), static_cast<std::streamsize>(text.size()));
  file.close();
  if (!file) return absl::InternalError(absl::StrCat("shortlist ", path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace tnmt
