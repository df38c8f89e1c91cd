// Output formats, error reports and progress of `tnmt translate`; see translate_output.h.
#include "tools/tnmt/translate_output.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tnmt::cli {

void WriteTranslation(const OutputFormat& format, int64_t line_no, bool blank,
                      const std::vector<OutputHypothesis>& hypotheses, std::ostream& out) {
  if (format.moses) {
    for (const OutputHypothesis& h : hypotheses) {
      out << line_no - 1 << " ||| " << h.text << " ||| F0= " << absl::StrFormat("%.6f", h.score) << " ||| "
          << absl::StrFormat("%.6f", h.score) << "\n";
      if (blank) break;
    }
    if (hypotheses.empty()) out << line_no - 1 << " |||  ||| F0= 0.000000 ||| 0.000000\n";
    return;
  }
  if (format.details()) {
    const OutputHypothesis empty;
    for (size_t i = 0; i < std::max<size_t>(1, hypotheses.size()); ++i) {
      const OutputHypothesis& h = i < hypotheses.size() ? hypotheses[i] : empty;
      out << line_no << " ||| " << h.text << " ||| " << absl::StrFormat("%.6f", h.score) << " ||| "
          << absl::StrJoin(h.pieces, " ");
      if (format.token_scores) {
        out << " ||| " << absl::StrJoin(h.token_scores, " ", [](std::string* o, float x) {
          absl::StrAppend(o, absl::StrFormat("%.6f", x));
        });
      }
      if (format.alignments) {
        out << " |||";
        for (size_t t = 0; t < h.alignments.size(); ++t) out << " " << h.alignments[t] << "-" << t;
      }
      out << "\n";
      if (blank) break;
    }
    return;
  }
  if (format.n_best > 1) {
    for (const OutputHypothesis& h : hypotheses) {
      out << line_no << " ||| " << h.text << " ||| " << absl::StrFormat("%.6f", h.score) << "\n";
      if (blank) break;
    }
    if (hypotheses.empty()) out << line_no << " |||  ||| " << absl::StrFormat("%.6f", 0.0) << "\n";
    return;
  }
  const std::string text = hypotheses.empty() ? "" : hypotheses[0].text;
  const float score = hypotheses.empty() ? 0.0f : hypotheses[0].score;
  if (format.scores) out << absl::StrFormat("%.6f", score) << " ||| ";
  out << text << "\n";
}

void WriteFailedLine(const OutputFormat& format, int64_t line_no, std::ostream& out) {
  if (format.moses) return;
  if (format.n_best > 1 || format.details()) out << line_no << " |||  ||| error";
  out << "\n";
}

bool ReadLine(std::istream& in, std::string* line) {
  if (!std::getline(in, *line)) return false;
  if (!line->empty() && line->back() == '\r') line->pop_back();
  return true;
}

bool IsBlankLine(const std::string& line) { return absl::StripAsciiWhitespace(line).empty(); }

void LineErrors::Report(int64_t line_no, const std::string& message) {
  if (count_++ == 0) first_line_ = line_no;
  if (!quiet_) std::cerr << command_ << ": input line " << line_no << ": " << message << "\n";
}

int LineErrors::Finish() const {
  if (count_ == 0) return 0;
  std::cerr << command_ << ": " << count_ << " line(s) could not be " << verb_;
  if (quiet_) std::cerr << " (the first: input line " << first_line_ << ")";
  std::cerr << "\n";
  return 1;
}

void DrawProgress(int done, int total) {
  const int width = 40;
  const int filled = total > 0 ? width * done / total : width;
  std::fprintf(stderr, "\r[%s%s] %d/%d", std::string(filled, '#').c_str(),
               std::string(width - filled, ' ').c_str(), done, total);
  std::fflush(stderr);
}

}  // namespace tnmt::cli
