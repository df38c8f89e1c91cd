// Corpus BLEU that agrees with sacreBLEU's default BLEU (tokenizer "13a", smoothing "exp",
// n-gram orders 1..4, cased, effective order off, one reference per segment), on the 0-100
// scale. Checked against sacreBLEU 2.6.0 by //trainer:bleu_test (trainer/testdata/).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tnmt::trainer {

// sacreBLEU's Tokenizer13a (mteval-v13a) on one UTF-8 line: drops "<skipped>", joins "-\n",
// turns "\n" into a space, unescapes &quot; &amp; &lt; &gt; (in that order, each over the whole
// line), splits off punctuation/symbols and periods/commas not inside numbers and dashes after
// digits, then splits on Unicode whitespace (Python's str.split()). Unlike BleuStats::Add it
// does not strip trailing whitespace first, exactly like Tokenizer13a.__call__.
// The input should be valid UTF-8 (sacreBLEU cannot read anything else); other bytes are passed
// through untouched.
std::vector<std::string> Tokenize13a(std::string_view line);

// Python's str.rstrip() with no argument: removes trailing Unicode whitespace code points.
std::string_view RStripUnicodeWhitespace(std::string_view s);

// Sufficient statistics of corpus BLEU, accumulated segment by segment.
class BleuStats {
 public:
  static constexpr int kMaxOrder = 4;

  // Adds one raw (detokenized) segment pair. Both sides are preprocessed the way sacreBLEU's
  // BLEU._preprocess_segment does: rstrip() of Unicode whitespace, then Tokenize13a.
  void Add(std::string_view hypothesis, std::string_view reference);
  // Adds one already tokenized segment pair (tokens must not contain whitespace).
  void AddTokens(const std::vector<std::string>& hypothesis,
                 const std::vector<std::string>& reference);
  // Adds the statistics of another accumulator (e.g. one per thread).
  void Merge(const BleuStats& other);

  // BLEU in [0, 100], computed like sacreBLEU's BLEU.compute_bleu with smooth_method="exp".
  double Score() const;
  // exp(1 - ref_len / sys_len) if sys_len < ref_len (0 if sys_len == 0), else 1.
  double BrevityPenalty() const;
  // Per-order precisions in percent, as sacreBLEU reports them (smoothed where there are no
  // matches; 0 from the first order with no hypothesis n-grams on, or if nothing matches).
  std::array<double, kMaxOrder> Precisions() const;

  // counts()[n-1]: clipped n-gram matches; totals()[n-1]: hypothesis n-grams.
  const std::array<int64_t, kMaxOrder>& counts() const { return counts_; }
  const std::array<int64_t, kMaxOrder>& totals() const { return totals_; }
  int64_t sys_len() const { return sys_len_; }  // hypothesis tokens
  int64_t ref_len() const { return ref_len_; }  // reference tokens
  int64_t num_segments() const { return num_segments_; }

 private:
  std::array<int64_t, kMaxOrder> counts_{};
  std::array<int64_t, kMaxOrder> totals_{};
  int64_t sys_len_ = 0;
  int64_t ref_len_ = 0;
  int64_t num_segments_ = 0;
};

// sacrebleu.corpus_bleu(hyps, [refs]).score. InvalidArgument if the sizes differ. An empty
// corpus scores 0 (sacreBLEU itself raises on an empty hypothesis list).
absl::StatusOr<double> CorpusBleu(const std::vector<std::string>& hyps,
                                  const std::vector<std::string>& refs);

// The sacreBLEU signature of the BLEU computed here (the one sacreBLEU 2.6.0 prints for its
// default BLEU, which this agrees with), followed by "|sentences:N": a score is comparable
// with another only when both parts are equal.
std::string BleuSignature(int64_t sentences);

}  // namespace tnmt::trainer
