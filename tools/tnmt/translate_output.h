// What `tnmt translate` writes, one contract for local translation and --server: the output
// formats, per-line error reports and the progress bar.
//
// Output: one line per input line (the translation; with --scores, 'SCORE ||| TEXT'); with
// --n-best N > 1, up to N lines per input line as 'LINE ||| TEXT ||| SCORE', LINE counting input
// lines from 1 as error messages do. A blank input line and a failed line keep their place:
// an empty line, or with --n-best exactly one line ('LINE |||  ||| 0.000000' for a blank line,
// 'LINE |||  ||| error' for a failed one), so no two identical empty hypotheses are written.
// --n-best-format moses: the Moses n-best layout instead, for every N (1 included):
// 'ID ||| TEXT ||| F0= SCORE ||| SCORE', ID counting input lines from 0 as Moses does, one
// feature (F0, the model's score); a blank line gives one empty hypothesis scored 0, a failed
// line no line at all (the IDs keep the other lines' places).
// --token-scores / --alignments: every hypothesis in the n-best layout (for every N, 1
// included), followed by ' ||| PIECES' (the hypothesis' pieces, space-separated), then
// ' ||| TOKEN_SCORES' (each piece's log-probability, then </s>'s) and/or ' ||| ALIGNMENT'
// (Pharaoh 'S-T' pairs: target piece T aligns to source piece S, both from 0); a blank line's
// fields are empty, a failed line is 'LINE |||  ||| error'.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

namespace tnmt::cli {

struct OutputFormat {
  int n_best = 1;
  bool scores = false;  // with n_best == 1: 'SCORE ||| TEXT'
  bool moses = false;   // Moses n-best lines (see above)
  bool token_scores = false;  // ' ||| PIECES ||| TOKEN_SCORES' (see above)
  bool alignments = false;    // ' ||| PIECES ||| ALIGNMENT'
  bool details() const { return token_scores || alignments; }
};

struct OutputHypothesis {
  std::string text;
  float score = 0.0f;
  std::vector<std::string> pieces;
  std::vector<float> token_scores;
  std::vector<int32_t> alignments;  // per piece: a source piece index
};

// Writes the translation of input line `line_no` (counted from 1); `blank`: that line had
// nothing to translate.
void WriteTranslation(const OutputFormat& format, int64_t line_no, bool blank,
                      const std::vector<OutputHypothesis>& hypotheses, std::ostream& out);

// Writes the place holder of input line `line_no` that could not be translated.
void WriteFailedLine(const OutputFormat& format, int64_t line_no, std::ostream& out);

// Reads one input line without its line ending ("\n" or "\r\n"); false at the end.
bool ReadLine(std::istream& in, std::string* line);

// True if `line` has nothing to translate (empty or whitespace only).
bool IsBlankLine(const std::string& line);

// Reports failed lines on stderr: each as 'tnmt translate: input line N: MESSAGE', or with
// `quiet` only their number at the end (Finish).
class LineErrors {
 public:
  // command: the prefix of each message ("tnmt translate"); verb: what failed ("translated").
  explicit LineErrors(bool quiet, std::string command = "tnmt translate", std::string verb = "translated")
      : quiet_(quiet), command_(std::move(command)), verb_(std::move(verb)) {}
  void Report(int64_t line_no, const std::string& message);
  // Prints the count of failed lines; returns the exit status (0, or 1 if some lines failed).
  int Finish() const;

 private:
  bool quiet_;
  std::string command_, verb_;
  int64_t count_ = 0;
  int64_t first_line_ = 0;
};

// The progress bar on stderr: '[####    ] done/total', redrawn in place.
void DrawProgress(int done, int total);

}  // namespace tnmt::cli
